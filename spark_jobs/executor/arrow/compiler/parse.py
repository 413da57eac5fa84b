"""The parse the compiler reads: sqlglot's Spark dialect, with function calls kept as written.

The checker (``spark_jobs/spec/sql_check.py``) judges a text on sqlglot's Spark parse, which
rewrites calls into its own vocabulary while it parses: ``date_sub(d, 1)`` becomes
``TsOrDsAdd(d, 1 * -1)``, ``year(d)`` gains a ``to_date`` around ``d``, ``to_date(s, 'yyyy-MM-dd')``
loses its format, unit names are normalized. Compiling that tree would compile sqlglot's reading,
not Spark's. So the compiler parses the same text with the same tokenizer and grammar but an
empty table of function builders: every call stays ``Anonymous(name, args)`` with its arguments
as written. The special forms (``CAST``, ``EXTRACT``, ``TRIM(BOTH ...)``, ``SUBSTRING(... FROM
...)``, ``POSITION(... IN ...)``, ``CASE``, ``IF``) keep their own nodes. A typed numeric literal
(``1L``, ``1.5BD``, ``2D``) is a cast to sqlglot; it is marked here (``meta['literal']``), because
to Spark it is a literal, and literals are typed by their digits next to decimals.
"""
from __future__ import annotations

from functools import lru_cache

from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from .sql_types import NotCovered


def _dcolon(parser, this, to):
    """``x::type`` as sqlglot builds it, marked when the ``::`` came from a literal's suffix (the
    tokenizer emits a ``::`` token spanning the number itself for ``1L``)."""
    node = parser.build_cast(strict=parser.STRICT_CAST, this=this, to=to)
    i = parser._index - 1
    tokens = parser._tokens
    while i > 0 and tokens[i].token_type != TokenType.DCOLON:
        i -= 1
    if i > 0 and tokens[i].start == tokens[i - 1].start and tokens[i].end == tokens[i - 1].end:
        node.meta["literal"] = tokens[i + 1].text.upper() if i + 1 < len(tokens) else ""
    return node


class _Faithful(Spark):
    class Parser(Spark.Parser):
        FUNCTIONS: dict = {}
        COLUMN_OPERATORS = {**Spark.Parser.COLUMN_OPERATORS, TokenType.DCOLON: _dcolon}


@lru_cache(maxsize=4096)
def parse_faithful(text: str) -> exp.Expression:
    """The tree of one expression with calls as written; NotCovered if sqlglot cannot read it
    (the checker has already refused such texts, so this is a second line only)."""
    dialect = _Faithful()
    try:
        trees = [t for t in dialect.parser().parse(dialect.tokenize(text), text) if t is not None]
    except (ParseError, TokenError, RecursionError) as exc:
        raise NotCovered(f"cannot read the expression: {str(exc).splitlines()[0]}") from None
    if len(trees) != 1:
        raise NotCovered("not exactly one expression")
    return trees[0]


_TEXT_TYPES = {TokenType.CHAR, TokenType.VARCHAR, TokenType.NCHAR, TokenType.NVARCHAR}


def check_tokens(text: str) -> None:
    """Refuse what sqlglot reads differently from Spark at the token level: escapes inside
    string literals (Spark keeps ``\\%`` and ``\\_`` for LIKE, unescapes the rest its own way)
    and CHAR/VARCHAR types (sqlglot drops their length)."""
    for token in _Faithful().tokenize(text):
        if token.token_type in (TokenType.STRING, TokenType.RAW_STRING) and "\\" in text[token.start:token.end + 1]:
            raise NotCovered("a string literal with backslash escapes (Spark's unescaping is not reproduced)")
        if token.token_type in _TEXT_TYPES:
            raise NotCovered("CHAR/VARCHAR types are not covered")
