"""Row expressions of a query: splitting, finding what they read, rewriting them onto columns.

A bound expression is the author's text of the expression with every column reference replaced
by the backquoted name of the relation's column it resolved to (``text.Source.splice``): the same
kind of string a YAML ``select``/``filter`` holds, checked by the same rules (``check_row_expression``
runs the circuit's expression check, ``spec/sql_check.py``).
"""
from __future__ import annotations

from typing import Callable, Iterator

from sqlglot import exp

from .. import sql_check
from .errors import SqlError, describe
from .parse import TIME_WINDOW_FUNCTION

DIALECT = "spark"

AGGREGATES = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}

def function_name(node: exp.Func, text: str | None = None) -> str:
    """The function's name as written in ``text`` (sqlglot renames some: collect_list is its
    array_agg), else sqlglot's name."""
    name = sql_check.function_name(node, text) if text is not None else None
    if name:
        return name
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return node.sql_name().lower()


class _RowCheck(sql_check.TreeCheck):
    """The circuit's expression check (``spec/sql_check.py``: the allow-list of deterministic
    built-ins) on a part of a query: subqueries, and the parts ``skip`` names (aggregates the
    plan computes, already checked), are the binder's to judge."""

    def __init__(self, text: str, skip: Callable[[exp.Expression], bool]) -> None:
        super().__init__(text)
        self.skip = skip

    def visit(self, node, bound):  # type: ignore[override]
        if self.skip(node):
            return []
        return super().visit(node, bound)

    def query(self, node):  # type: ignore[override]
        return []


def check_row_expression(node: exp.Expression, where: str, text: str | None = None,
                         skip: Callable[[exp.Expression], bool] = lambda n: False) -> None:
    """Refuse what a row expression (``where``: "WHERE", "the SELECT list", ...) may not hold:
    window functions (only top-k uses them), and whatever the circuit's expression check refuses."""
    for sub in walk(node):
        if isinstance(sub, exp.Window):
            raise SqlError(f"window function '{describe(sub)}' in {where}: window functions are supported "
                           f"only as top-k (ROW_NUMBER/RANK/DENSE_RANK OVER (...) filtered by <= k in an "
                           f"enclosing query), which is not supported yet", sub)
        if isinstance(sub, exp.Anonymous) and str(sub.name).lower() == TIME_WINDOW_FUNCTION:
            raise SqlError(f"window(...) over time in {where}: a time window is supported only as a GROUP BY "
                           f"item (GROUP BY window(ts, '1 hour'), user_id), whose window.start and window.end "
                           f"the SELECT list reads", sub)
    if text is None:
        return
    check = _RowCheck(text, skip)
    check.run(node)
    if check.refusals:
        reason = check.refusals[0]
        raise SqlError(f"'{describe(node)}' in {where} is refused: {reason}", _culprit(node, text) or node)


def _culprit(node: exp.Expression, text: str) -> exp.Expression | None:
    """The first call inside ``node`` the check refuses on its own (for the message's position)."""
    for sub in walk(node):
        if isinstance(sub, (exp.Func, exp.Anonymous)) and not isinstance(sub, exp.AggFunc):
            one = _RowCheck(text, lambda n: False)
            one.visit(sub, frozenset())  # the call alone, not its arguments
            if one.refusals:
                return sub
    return None


def walk(node: exp.Expression) -> Iterator[exp.Expression]:
    """Every node of an expression, not descending into subqueries (their own scope)."""
    stack = [node]
    while stack:
        sub = stack.pop()
        yield sub
        for child in sub.iter_expressions():
            if not isinstance(child, (exp.Subquery, exp.Select, exp.SetOperation)):
                stack.append(child)


def conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    """``a AND (b AND c)`` -> [a, b, c] (parentheses around ANDs dropped)."""
    if node is None:
        return []
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]


def and_all(parts: list[str]) -> str | None:
    if not parts:
        return None
    return " AND ".join(f"({p})" for p in parts) if len(parts) > 1 else parts[0]


def columns_of(node: exp.Expression) -> list[exp.Column]:
    """Column references of an expression (not ``*``, not inside subqueries)."""
    return [c for c in walk(node) if isinstance(c, exp.Column) and not isinstance(c.this, exp.Star)]


def subqueries_of(node: exp.Expression) -> list[exp.Expression]:
    """Subqueries directly inside an expression (scalar ones, IN/EXISTS operands)."""
    return [c for s in walk(node) for c in s.iter_expressions() if isinstance(c, (exp.Subquery, exp.Select,
                                                                                   exp.SetOperation))]


def aggregates_of(node: exp.Expression) -> list[exp.AggFunc]:
    """Aggregate calls in an expression, outermost first (not inside windows or subqueries)."""
    found: list[exp.AggFunc] = []
    stack = [node]
    while stack:
        sub = stack.pop(0)
        if isinstance(sub, exp.AggFunc):
            found.append(sub)
            continue
        if isinstance(sub, (exp.Window, exp.Subquery, exp.Select, exp.SetOperation)):
            continue
        stack.extend(sub.iter_expressions())
    return found


def is_star(item: exp.Expression) -> bool:
    """``*`` or ``t.*`` in a SELECT list."""
    return isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star))


def star_fields(scope, item: exp.Expression) -> list:
    """The fields a SELECT list's ``*`` or ``t.*`` expands to in ``scope`` (a ``Scope``), in
    order; ``* EXCEPT/REPLACE`` is refused. One expansion for plain and grouped queries."""
    if isinstance(item, exp.Star) and (item.args.get("except_") or item.args.get("replace")):
        raise SqlError("SELECT * EXCEPT/REPLACE is not supported: list the columns", item)
    qualifier = item.table if isinstance(item, exp.Column) else None
    return scope.star(qualifier or None, item)


def quoted(name: str) -> exp.Column:
    return exp.Column(this=exp.Identifier(this=name, quoted=True))


def render(node: exp.Expression) -> str:
    return node.sql(dialect=DIALECT)


def column_sql(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def rewrite(node: exp.Expression, replace: Callable[[exp.Expression], exp.Expression | None]) -> exp.Expression:
    """A copy of ``node`` where ``replace(sub)`` (when not None) stands for each outermost ``sub``
    (sqlglot copies keep their positions, so ``replace`` can still point at the query text)."""
    return node.transform(lambda sub: replace(sub) or sub)


def is_literal_int(node: exp.Expression) -> int | None:
    """The value of an integer literal (ordinals in GROUP BY / ORDER BY, k of LIMIT)."""
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return int(str(node.this))
        except ValueError:
            return None
    return None
