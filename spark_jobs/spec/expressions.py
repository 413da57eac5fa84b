"""Just enough of Spark SQL expression syntax to catch unknown columns before Spark runs.

Expressions in a circuit (``where``, ``select`` values, aggregate arguments) are Spark SQL
strings that Spark itself parses later. A typo in a column name would only surface at the first
run, deep in a DAG; so we tokenize each expression and check every identifier that must be a
column. The rules, deliberately forgiving (a false alarm is worse than a miss Spark will catch):

- string literals ('...', "...", with backslash escapes; x'..', r'..' prefixes) are skipped;
- `backquoted` names are columns;
- an identifier followed by ``(`` is a function; one followed by ``->`` (or a parenthesized
  list of them) is a lambda parameter; one after ``.`` or ``:`` is a field/path, not a column;
- Spark SQL keywords and type names (``KEYWORDS``) are skipped, case-insensitively;
- anything else is a column of the node's input.

Aggregate strings ``func(arg)`` are parsed here too (``parse_aggregate``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .model import AGGREGATE_FUNCS, AggregateSpec

KEYWORDS = frozenset("""
    and or not null true false is in like ilike rlike regexp between case when then else end
    cast try_cast as interval distinct all any some exists escape div mod from for to at by
    year years month months week weeks day days hour hours minute minutes second seconds
    millisecond milliseconds microsecond microseconds quarter dayofweek dayofyear epoch
    both leading trailing position over partition order asc desc nulls first last rows range
    unbounded preceding following current row within group filter ignore respect
    current_date current_timestamp current_user current_timezone localtimestamp user session_user
    date timestamp timestamp_ntz timestamp_ltz boolean bool tinyint byte smallint short int
    integer bigint long float real double string varchar char character binary decimal dec
    numeric array map struct variant void
    nan infinity inf
""".split())

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[A-Za-z]*")
_OPERATORS = ("->", "=>", "::", "<=>", "<=", ">=", "<>", "!=", "==", "||", "<<", ">>")
_STRING_PREFIXES = frozenset({"x", "r", "b"})


class ExpressionError(ValueError):
    """An expression we cannot read (unterminated string, unbalanced parentheses, bad aggregate)."""


@dataclass(frozen=True)
class Token:
    kind: str  # ident | column (backquoted) | string | number | op
    text: str
    pos: int


def tokenize(expr: str) -> list[Token]:
    """Split a Spark SQL expression into tokens; comments and whitespace are dropped."""
    tokens: list[Token] = []
    i, n = 0, len(expr)
    while i < n:
        ch = expr[i]
        if ch.isspace():
            i += 1
        elif expr.startswith("--", i):
            end = expr.find("\n", i)
            i = n if end < 0 else end
        elif expr.startswith("/*", i):
            end = expr.find("*/", i + 2)
            if end < 0:
                raise ExpressionError("unterminated /* comment")
            i = end + 2
        elif ch in "'\"":
            end = _string_end(expr, i)
            tokens.append(Token("string", expr[i:end], i))
            i = end
        elif ch == "`":
            end = i + 1
            while True:
                end = expr.find("`", end)
                if end < 0:
                    raise ExpressionError(f"unterminated backquoted name at {expr[i:i + 20]!r}")
                if expr.startswith("``", end):
                    end += 2
                    continue
                break
            tokens.append(Token("column", expr[i + 1:end].replace("``", "`"), i))
            i = end + 1
        elif m := _IDENT.match(expr, i):
            word = m.group()
            if word.lower() in _STRING_PREFIXES and m.end() < n and expr[m.end()] in "'\"":
                end = _string_end(expr, m.end())
                tokens.append(Token("string", expr[i:end], i))
                i = end
            else:
                tokens.append(Token("ident", word, i))
                i = m.end()
        elif ch.isdigit() or (ch == "." and i + 1 < n and expr[i + 1].isdigit()):
            m = _NUMBER.match(expr, i)
            assert m is not None
            tokens.append(Token("number", m.group(), i))
            i = m.end()
        else:
            op = next((o for o in _OPERATORS if expr.startswith(o, i)), ch)
            tokens.append(Token("op", op, i))
            i += len(op)
    return tokens


def _string_end(expr: str, start: int) -> int:
    """Index just past the string literal that opens at ``start``."""
    quote, i = expr[start], start + 1
    while i < len(expr):
        if expr[i] == "\\":
            i += 2
        elif expr[i] == quote:
            return i + 1
        else:
            i += 1
    raise ExpressionError(f"unterminated string literal starting {expr[start:start + 20]!r}")


def check_parentheses(tokens: list[Token]) -> None:
    """Raise when parentheses do not balance (a common slip that Spark reports obscurely)."""
    depth = 0
    for tok in tokens:
        if tok.kind == "op" and tok.text == "(":
            depth += 1
        elif tok.kind == "op" and tok.text == ")":
            depth -= 1
            if depth < 0:
                raise ExpressionError("unbalanced parentheses: ')' without '('")
    if depth:
        raise ExpressionError("unbalanced parentheses: '(' without ')'")


def _lambda_params(tokens: list[Token]) -> set[str]:
    """Names bound by ``x -> ...`` or ``(x, y) -> ...`` anywhere in the expression."""
    params: set[str] = set()
    for k, tok in enumerate(tokens):
        if tok.kind != "op" or tok.text != "->" or k == 0:
            continue
        prev = tokens[k - 1]
        if prev.kind == "ident":
            params.add(prev.text.lower())
        elif prev.text == ")":
            j = k - 2
            while j >= 0 and tokens[j].text != "(":
                if tokens[j].kind == "ident":
                    params.add(tokens[j].text.lower())
                j -= 1
    return params


@dataclass(frozen=True)
class Analysis:
    """What an expression refers to: columns (as written) and functions called (lower-case)."""

    columns: tuple[str, ...]
    functions: tuple[str, ...]


def analyze(expr: str) -> Analysis:
    """Columns and functions an expression refers to; raises ``ExpressionError`` if unreadable."""
    tokens = tokenize(expr)
    check_parentheses(tokens)
    params = _lambda_params(tokens)
    columns: list[str] = []
    functions: list[str] = []
    for k, tok in enumerate(tokens):
        prev = tokens[k - 1].text if k else ""
        nxt = tokens[k + 1].text if k + 1 < len(tokens) else ""
        if tok.kind == "column":
            if prev != ".":
                columns.append(tok.text)
        elif tok.kind == "ident":
            low = tok.text.lower()
            if nxt == "(":
                functions.append(low)
            elif prev in (".", ":", "::") or nxt in ("->", "=>") or low in params:
                continue
            elif prev.lower() == "as":
                continue  # an alias (x AS y) or a cast target type
            elif low not in KEYWORDS:
                columns.append(tok.text)
    return Analysis(tuple(dict.fromkeys(columns)), tuple(dict.fromkeys(functions)))


def unknown_columns(expr: str, available: tuple[str, ...]) -> list[str]:
    """Columns ``expr`` uses that are not in ``available`` (Spark matches names case-insensitively)."""
    known = {c.lower() for c in available}
    return [c for c in analyze(expr).columns if c.lower() not in known]


_AGG = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*$", re.DOTALL)
_DISTINCT = re.compile(r"^distinct\b\s*", re.IGNORECASE)
AGGREGATE_FORM = "func(arg) with func one of " + ", ".join(AGGREGATE_FUNCS) + ", count(*) or count(distinct arg)"


def parse_aggregate(name: str, text: str) -> AggregateSpec:
    """Parse "sum(amount)", "count(*)", "count(distinct x)" into an ``AggregateSpec``."""
    m = _AGG.match(text)
    if not m:
        raise ExpressionError(f"'{text}' is not an aggregate: expected {AGGREGATE_FORM}")
    func, arg = m.group(1).lower(), m.group(2).strip()
    if func not in AGGREGATE_FUNCS:
        raise ExpressionError(f"unsupported aggregate function '{m.group(1)}' in '{text}': "
                              f"expected one of {', '.join(AGGREGATE_FUNCS)}")
    try:
        check_parentheses(tokenize(arg))
    except ExpressionError:
        raise ExpressionError(f"'{text}' is not a single aggregate: expected {AGGREGATE_FORM}") from None
    distinct = False
    if d := _DISTINCT.match(arg):
        distinct, arg = True, arg[d.end():].strip()
        if func != "count":
            raise ExpressionError(f"'{text}': only count supports distinct (count(distinct arg))")
    if arg == "*":
        if func != "count" or distinct:
            raise ExpressionError(f"'{text}': only count(*) takes '*'; {func} needs an expression")
        return AggregateSpec(name=name, func=func, arg=None, distinct=False, text=text)
    if not arg:
        raise ExpressionError(f"'{text}' has no argument: expected {func}(expression)")
    nested = [f for f in analyze(arg).functions if f in AGGREGATE_FUNCS]
    if nested:
        raise ExpressionError(f"'{text}' nests aggregate '{nested[0]}': use a second aggregate node")
    return AggregateSpec(name=name, func=func, arg=arg, distinct=distinct, text=text)
