"""Check a Spark SQL expression on its parse tree: what it may call, and which columns it reads.

An expression in a circuit (a ``select`` column, a ``filter``'s ``where``, an aggregate's
argument, an expectation's ``row_condition``) is parsed with sqlglot's Spark dialect, and the
tree is walked: every function call is judged by the allow-list of ``sql_functions.py``, every
construct by ``_SYNTAX`` (operators, CASE, CAST, literals, field access, lambdas); anything
else is refused with a reason. Column references come from the tree too, so a column named
``SELECT``, ``value`` or ``text`` is a column, never a keyword. Nothing here runs Spark.

**What Spark runs is what was checked.** Spark receives the author's text unchanged, not a text
regenerated from sqlglot's tree: sqlglot normalizes while it prints (``to_date(s,
'yyyy-MM-dd')`` loses its format, ``'a''b'`` becomes ``concat('a', 'b')``), which would change
results silently. Instead the two parsers are kept in agreement:

- here, the places where they are known to read a text differently are refused: comments
  (Spark continues a ``--`` comment past a backslash-newline), Spark's variable substitution
  ``${...}`` (it reads the environment and the configuration *before* parsing, inside string
  literals too), adjacent string literals, parameter markers, aliases (``a:b`` is an alias to
  sqlglot, a JSON path to Spark), qualified function names;
- before a step evaluates anything, Spark's own parser reads the same text on the driver (no
  job) and ``spark_jobs/executor/spark/parse_check.py`` applies the same catalog to its tree and
  compares the columns; a text the two parsers read differently is refused there.

``tests/test_sql_agreement.py`` runs both on the example circuits and on hostile texts.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError

from spark_jobs.errors import DbspError

from . import sql_functions as catalog
from .sql_limits import MAX_QUERY_CHARS, nesting_problem

# an expression of an accepted ``op: sql`` query (its WHERE, an IN list) must be accepted too
MAX_EXPRESSION_CHARS = MAX_QUERY_CHARS

SUBQUERY = ("a subquery (SELECT ...) reads other tables and files: an expression sees only the row of "
            "its node's input; combine relations with join, antijoin or union nodes")
OVER = ("OVER (...) makes a window function: it compares a row with other rows, which a row "
        "expression cannot see; use an 'aggregate' node for per-group results (and its 'window' for "
        "windows over time)")
QUALIFIED = ("a qualified function name (db.function) names a catalog function or UDF: only Spark's "
             "built-in functions are allowed")
PARAMETER = "parameter markers (?, :name, @name) are not allowed: write the value itself"
ALIAS = "an alias inside an expression: the output column's name is its key in 'columns'"
ADJACENT = ("two string literals side by side: Spark joins them ('a' 'b' is 'ab', 'a''b' is a'b); "
            "write one literal, with \\' for a quote")
SUBSTITUTION = ("'${' starts Spark's variable substitution, which reads the environment and the "
                "configuration into the text before it is parsed (even inside a string literal): "
                "it is not allowed; write the value itself")
COMMENT = "comments are not allowed inside an expression: write YAML comments (# ...) beside it"
AGG_FILTER = ("FILTER (WHERE ...) and WITHIN GROUP belong to aggregates, which a row expression "
              "cannot hold; filter rows with a 'filter' node")

# Constructs (not function calls) an expression may use.
_SYNTAX: tuple[type[exp.Expression], ...] = (
    exp.Column, exp.Identifier, exp.Literal, exp.Null, exp.Boolean, exp.HexString, exp.RawString,
    exp.Paren, exp.Neg, exp.Not, exp.And, exp.Or, exp.Xor, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT,
    exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Is, exp.In, exp.Between, exp.Like, exp.ILike,
    exp.Escape, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod, exp.BitwiseAnd,
    exp.BitwiseOr, exp.BitwiseXor, exp.BitwiseNot, exp.BitwiseLeftShift, exp.BitwiseRightShift,
    exp.DPipe, exp.Interval, exp.Var, exp.Bracket, exp.Dot, exp.Lambda, exp.PropertyEQ, exp.Kwarg,
    exp.Star, exp.AtTimeZone, exp.FromTimeZone, exp.JSONPath, exp.JSONPathKey, exp.JSONPathRoot,
    exp.JSONPathSubscript,
)

# Calls sqlglot parses with special rules, so its tree keeps no span of the name as written:
# class -> Spark's name for it.
_SPANLESS: dict[type[exp.Expression], str] = {
    exp.Cast: "cast", exp.TryCast: "cast", exp.Case: "case", exp.If: "if", exp.Ceil: "ceil",
    exp.Floor: "floor", exp.Chr: "chr", exp.Decode: "decode", exp.Extract: "extract",
    exp.Initcap: "initcap", exp.Overlay: "overlay", exp.StrPosition: "position",
    exp.Substring: "substring", exp.Transform: "transform", exp.Trim: "trim",
    exp.RegexpLike: "rlike", exp.Exists: "exists", exp.Any: "any",
    exp.ApproxQuantile: "percentile_approx", exp.GroupConcat: "listagg", exp.ArgMax: "max_by",
    exp.ArgMin: "min_by", exp.Quantile: "percentile",
    exp.CurrentTimestamp: "current_timestamp", exp.CurrentDate: "current_date",
    exp.CurrentTime: "current_time", exp.Localtimestamp: "localtimestamp",
    exp.CurrentUser: "current_user", exp.SessionUser: "session_user",
    exp.CurrentCatalog: "current_catalog", exp.CurrentSchema: "current_schema",
    exp.CurrentDatabase: "current_database", exp.CurrentTimezone: "current_timezone",
    # nodes sqlglot adds around what was written (year(d) is Year(TsOrDsToDate(d))):
    exp.Array: "array", exp.DecodeCase: "decode", exp.TimeStrToTime: "to_timestamp",
    exp.TsOrDsToDate: "to_date",
}

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_EMPTY_CALL = re.compile(r"\s*\(\s*\)")


class ExpressionError(DbspError, ValueError):
    """An expression that cannot be read (unterminated string, unbalanced parentheses, ...)."""


@dataclass(frozen=True)
class Checked:
    """What an expression reads and calls, and why it may not run (``refusals``; empty = allowed)."""

    text: str
    columns: tuple[str, ...]  # input columns, as written, in order of appearance
    functions: tuple[str, ...]  # Spark names of the functions called, lower-case
    refusals: tuple[str, ...] = ()

    @property
    def aggregates(self) -> tuple[str, ...]:
        return tuple(f for f in self.functions if f in catalog.SPARK_AGGREGATES)


def _dialect() -> Dialect:
    return Dialect.get_or_raise("spark")


def parse(text: str) -> tuple[exp.Expression, bool]:
    """The parse tree of one expression and whether the text holds comments; raises
    ``ExpressionError`` when it is not exactly one readable expression."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"the expression is {len(text):,} characters long; at most "
                              f"{MAX_EXPRESSION_CHARS:,} are allowed")
    if deep := nesting_problem(text):
        raise ExpressionError(deep[0])
    dialect = _dialect()
    try:
        tokens = dialect.tokenize(text)
        trees = [t for t in dialect.parser().parse(tokens, text) if t is not None]
    except TokenError:
        raise ExpressionError(_unterminated(text)) from None
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        where = f" at column {first['col']}" if first.get("col") else ""
        what = str(first.get("description") or exc).split(". Line")[0]
        raise ExpressionError(f"not a Spark SQL expression{where}: {what}") from None
    except RecursionError:
        raise ExpressionError("the expression is nested too deeply") from None
    if not trees:
        raise ExpressionError("the expression is empty")
    if len(trees) > 1:
        raise ExpressionError("one expression expected, found several separated by ';'")
    return trees[0], any(t.comments for t in tokens)


def _unterminated(text: str) -> str:
    """Why the tokenizer stopped: which string, name or comment is not closed."""
    i, n = 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                return "unterminated /* comment"
            i = end + 2
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text[i] in "'\"`":
            quote, j = text[i], i + 1
            while j < n and text[j] != quote:
                j += 2 if text[j] == "\\" and quote != "`" else 1
            if j >= n:
                kind = "backquoted name" if quote == "`" else "string literal"
                return f"unterminated {kind} starting {text[i:i + 20]!r}"
            i = j + 1
        else:
            i += 1
    return "cannot split the expression into tokens"


def function_name(node: exp.Expression, text: str) -> str | None:
    """Spark's name of the function ``node`` calls, as written where the tree keeps its span."""
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    start, end = node.meta.get("start"), node.meta.get("end")
    if isinstance(start, int) and isinstance(end, int) and _NAME.match(text[start:end + 1]):
        return text[start:end + 1].lower()
    return _SPANLESS.get(type(node))


def _empty_call(node: exp.Expression, text: str) -> bool:
    end = node.meta.get("end")
    return isinstance(end, int) and bool(_EMPTY_CALL.match(text, end + 1))


@dataclass
class TreeCheck:
    """A walk over one sqlglot tree: collects columns and function names, and the refusals.

    Calls are judged by the catalog, constructs by ``_SYNTAX``; a query inside a row expression
    is refused (``query``). A whole-query node (``op: sql``, issue #15) can reuse this walk by
    overriding ``query`` to descend into SELECT lists, WHERE and GROUP BY with the same rules and
    to resolve FROM against the circuit's relations.
    """

    text: str
    columns: list[str] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)

    def refuse(self, reason: str) -> None:
        if reason not in self.refusals:
            self.refusals.append(reason)

    def run(self, root: exp.Expression) -> None:
        stack: list[tuple[exp.Expression, frozenset[str]]] = [(root, frozenset())]
        while stack:
            node, bound = stack.pop()
            children = self.visit(node, bound)
            stack.extend((child, bound | extra) for child, extra in reversed(children))

    def visit(self, node: exp.Expression, bound: frozenset[str]) -> list[tuple[exp.Expression, frozenset[str]]]:
        """Judge one node; return the children to walk, with the lambda names they add."""
        if isinstance(node, exp.DataType):
            return []  # a type name: nothing runs
        if isinstance(node, (exp.Query, exp.Subquery, exp.Table, exp.From)):
            return self.query(node)
        if isinstance(node, exp.Window):
            self.refuse(OVER)
            return []
        if isinstance(node, (exp.Filter, exp.WithinGroup)):
            self.refuse(AGG_FILTER)
            return []
        if isinstance(node, (exp.Placeholder, exp.Parameter)):
            self.refuse(PARAMETER)
            return []
        if isinstance(node, exp.Alias):
            self.refuse(ALIAS)
            return [(node.this, frozenset())]
        if isinstance(node, exp.Column):
            self._column(node, bound)
            return []
        if isinstance(node, exp.Lambda):
            names = frozenset(p.name.lower() for p in node.expressions)
            return [(node.this, names)]
        if isinstance(node, exp.Dot) and isinstance(node.expression, (exp.Func, exp.Anonymous)):
            self.refuse(QUALIFIED)
            return []
        if isinstance(node, exp.Dot):
            return [(node.this, frozenset())]  # the right side is a field name, not a column
        if isinstance(node, (exp.Func, exp.Anonymous)) and not isinstance(node, _SYNTAX):
            return self._call(node)
        if isinstance(node, _SYNTAX):
            return [(child, frozenset()) for child in node.iter_expressions()]
        self.refuse(f"'{short_sql(node)}' is not an allowed expression form")
        return []

    def query(self, node: exp.Expression) -> list[tuple[exp.Expression, frozenset[str]]]:
        """A SELECT (or its parts) inside the tree: refused in a row expression."""
        self.refuse(SUBQUERY)
        return []

    def _column(self, node: exp.Column, bound: frozenset[str]) -> None:
        first = node.parts[0].name if node.parts else node.name
        if first.lower() not in bound:
            self.columns.append(first)

    def _call(self, node: exp.Expression) -> list[tuple[exp.Expression, frozenset[str]]]:
        if isinstance(node, exp.Concat) and "start" not in node.meta:
            self.refuse(ADJACENT)
        name = function_name(node, self.text)
        if name is None:
            self.refuse(f"'{short_sql(node)}' is not an allowed expression form")
            return []
        empty = _empty_call(node, self.text)
        verdict = catalog.verdict(name, 0 if empty else None)
        self.functions.append(verdict.name)
        if verdict.reason == catalog.AGGREGATE:
            self.refuse(f"aggregate function '{verdict.name}' in a row expression; use an aggregate node")
        elif verdict.reason:
            self.refuse(f"'{name}' {verdict.reason}")
        if empty:
            return []  # nothing was written inside; sqlglot may fill in defaults (unix_timestamp())
        return [(child, frozenset()) for child in node.iter_expressions()]


def short_sql(node: exp.Expression) -> str:
    """The Spark SQL of ``node`` for a message, at most 60 characters."""
    try:
        text = node.sql(dialect="spark")
    except Exception:  # noqa: BLE001 - only for a message
        text = node.key
    return text if len(text) <= 60 else text[:57] + "..."


@lru_cache(maxsize=4096)
def check(text: str) -> Checked:
    """Parse ``text`` and judge it as a row expression; raises ``ExpressionError`` if unreadable."""
    walk = TreeCheck(text)
    if "${" in text:
        walk.refuse(SUBSTITUTION)
    try:
        tree, has_comments = parse(text)
    except ExpressionError:
        if walk.refusals:  # Spark would substitute first: the reason is the substitution
            return Checked(text, (), (), tuple(walk.refusals))
        raise
    if has_comments:
        walk.refuse(COMMENT)
    walk.run(tree)
    return Checked(text, tuple(dict.fromkeys(walk.columns)), tuple(dict.fromkeys(walk.functions)),
                   tuple(walk.refusals))
