"""Expressions of a circuit: their columns and functions, and aggregate strings.

Expressions (``where``, ``select`` values, aggregate arguments) are Spark SQL strings. They are
parsed and judged by ``sql_check.py`` (sqlglot's Spark dialect and the allow-list of
``sql_functions.py``); this module keeps the small API the rest of the spec uses: ``analyze``
(the columns and functions of an expression, found on its parse tree) and ``parse_aggregate``
(``"sum(amount)"``, ``"count(*)"``, ``"count(distinct x)"`` into an ``AggregateSpec``).
"""
from __future__ import annotations

import re

from .model import AGGREGATE_FUNCS, AggregateSpec
from .sql_check import Checked, ExpressionError, check, parse

__all__ = ["AGGREGATE_FORM", "Checked", "ExpressionError", "analyze", "parse_aggregate", "unknown_columns"]


def analyze(expr: str) -> Checked:
    """Columns and functions ``expr`` refers to (and why it may not run); raises
    ``ExpressionError`` when it cannot be read."""
    return check(expr)


def unknown_columns(expr: str, available: tuple[str, ...]) -> list[str]:
    """Columns ``expr`` uses that are not in ``available`` (Spark matches names case-insensitively)."""
    known = {c.lower() for c in available}
    return [c for c in analyze(expr).columns if c.lower() not in known]


_AGG = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*$", re.DOTALL)
_DISTINCT = re.compile(r"^distinct\b\s*", re.IGNORECASE)
AGGREGATE_FORM = "func(arg) with func one of " + ", ".join(AGGREGATE_FUNCS) + ", count(*) or count(distinct arg)"


def parse_aggregate(name: str, text: str) -> AggregateSpec:
    """Parse "sum(amount)", "count(*)", "count(distinct x)" into an ``AggregateSpec``.

    The argument is kept as written (the executor hands it to Spark) and must be one expression;
    what it may call is judged with the node's other expressions (``validate.py``).
    """
    m = _AGG.match(text)
    if not m:
        raise ExpressionError(f"'{text}' is not an aggregate: expected {AGGREGATE_FORM}")
    func, arg = m.group(1).lower(), m.group(2).strip()
    if func not in AGGREGATE_FUNCS:
        raise ExpressionError(f"unsupported aggregate function '{m.group(1)}' in '{text}': "
                              f"expected one of {', '.join(AGGREGATE_FUNCS)}")
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
    try:
        found = analyze(arg)
    except ExpressionError as exc:
        if _readable(text):  # e.g. sum(x) + sum(y): the text is fine, but not one aggregate
            raise ExpressionError(f"'{text}' is not a single aggregate: expected {AGGREGATE_FORM}") from None
        raise ExpressionError(f"cannot read '{text}': {exc}") from None
    if found.aggregates:
        raise ExpressionError(f"'{text}' nests aggregate '{found.aggregates[0]}': use a second aggregate node")
    return AggregateSpec(name=name, func=func, arg=arg, distinct=distinct, text=text)


def _readable(text: str) -> bool:
    try:
        parse(text)
    except ExpressionError:
        return False
    return True
