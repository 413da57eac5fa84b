"""Row expressions of a query: splitting, finding what they read, rewriting them onto columns.

A bound expression is the parsed expression with every column reference replaced by the
backquoted name of the relation's column it resolved to, printed back as Spark SQL: the same
kind of string a YAML ``select``/``filter`` holds, checked by the same rules (``check_row_expression``).
"""
from __future__ import annotations

from typing import Callable, Iterator

from sqlglot import exp

from .errors import SqlError, describe

DIALECT = "spark"

AGGREGATES = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}

# Until the shared allow-list of deterministic functions (issue #13) lands, the SQL layer refuses
# what can never be incremental or safe: clocks, randomness, JVM reflection, generators.
_REFUSED_FUNCTIONS = {
    "rand": "random", "random": "random", "randn": "random", "uuid": "random", "shuffle": "random",
    "current_date": "a clock", "current_timestamp": "a clock", "now": "a clock", "localtimestamp": "a clock",
    "current_time": "a clock", "unix_timestamp": "a clock (without arguments)", "curdate": "a clock",
    "current_timezone": "session state", "current_user": "session state", "user": "session state",
    "session_user": "session state", "current_database": "session state", "current_catalog": "session state",
    "current_schema": "session state",
    "monotonically_increasing_id": "nondeterministic", "spark_partition_id": "nondeterministic",
    "input_file_name": "nondeterministic", "input_file_block_start": "nondeterministic",
    "input_file_block_length": "nondeterministic",
    "reflect": "a call into the JVM", "java_method": "a call into the JVM", "try_reflect": "a call into the JVM",
    "explode": "a generator", "explode_outer": "a generator", "posexplode": "a generator", "inline": "a generator",
    "posexplode_outer": "a generator", "inline_outer": "a generator", "stack": "a generator",
}


def function_name(node: exp.Func, text: str | None = None) -> str:
    """The function's name as written in ``text`` when sqlglot kept its position (it renames some:
    collect_list is its array_agg), else sqlglot's name."""
    meta = getattr(node, "_meta", None) or {}
    if text is not None and "start" in meta and "end" in meta:
        written = text[meta["start"]:meta["end"] + 1]
        if written.replace("_", "").isalnum():
            return written.lower()
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return node.sql_name().lower()


def check_row_expression(node: exp.Expression, where: str, text: str | None = None) -> None:
    """Refuse what a row expression (``where``: "WHERE", "the SELECT list", ...) may not hold.

    One entry point, so the shared checker of issue #13 replaces the body without touching callers.
    """
    for sub in walk(node):
        if isinstance(sub, exp.Window):
            raise SqlError(f"window function '{describe(sub)}' in {where}: window functions are supported "
                           f"only as top-k (ROW_NUMBER/RANK/DENSE_RANK OVER (...) filtered by <= k in an "
                           f"enclosing query)", sub)
        if isinstance(sub, exp.Func):
            name = function_name(sub, text)
            if name in _REFUSED_FUNCTIONS or (name == "unix_timestamp" and not sub.args.get("this")):
                kind = _REFUSED_FUNCTIONS.get(name, "a clock")
                raise SqlError(f"function '{name}' in {where} is {kind}: a view must be a deterministic "
                               f"function of its inputs, so it cannot be maintained incrementally", sub)


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
