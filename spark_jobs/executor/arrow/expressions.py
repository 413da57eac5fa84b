"""Expressions of ``select`` and ``filter`` nodes evaluated on Arrow tables, as Spark evaluates them.

The compiler from a checked Spark SQL expression to Arrow compute is
``spark_jobs.executor.arrow_expr`` (its own module, tested against Spark on random data):
``compile_expression(text, schema)`` gives the value, the type Spark would give, and refuses
what it does not compute exactly as Spark (``NotCovered``: the step then runs on Spark, and
its summary gives the reason). Until that compiler is installed, only plain column references
are taken here (everything else is ``NotLocal``).
"""
from __future__ import annotations

from typing import Any, Sequence

import pyarrow as pa

from spark_jobs.executor.arrow.zsets import plain_column
from spark_jobs.executor.kernels import NotLocal
from spark_jobs.spec.model import WEIGHT

try:  # the expression compiler (branch arrow-expr)
    from spark_jobs.executor.arrow_expr import ExpressionFailed, NotCovered, compile_expression
except ImportError:  # pragma: no cover - depends on what is installed
    compile_expression = None  # type: ignore[assignment]
    NotCovered = ExpressionFailed = None  # type: ignore[assignment,misc]

TIMEZONE = "UTC"  # the profiles' spark.sql.session.timeZone


def _compiled(text: str, schema: pa.Schema) -> Any:
    """The compiled expression, or NotLocal with the compiler's reason."""
    if compile_expression is None:
        raise NotLocal(f"expression {text!r}: the Arrow expression compiler is not available")
    try:
        return compile_expression(text, schema, TIMEZONE)
    except NotCovered as exc:  # type: ignore[misc]
        raise NotLocal(f"expression {text!r}: {exc.reason}") from None


def _run(expr: Any, table: pa.Table, predicate: bool = False) -> pa.Array:
    """Evaluate; a row on which Spark raises (ANSI) hands the step to Spark, which then fails it
    with its own message."""
    try:
        return expr.predicate(table) if predicate else expr.evaluate(table)
    except ExpressionFailed as exc:  # type: ignore[misc]
        raise NotLocal(f"expression {expr.text!r} fails on a row ({exc}): Spark reports it") from None


def column_value(table: pa.Table, text: str) -> tuple[pa.Array | pa.ChunkedArray, pa.DataType]:
    """The value of expression ``text`` on every row of ``table``, and its (Spark's) type."""
    data = [c for c in table.column_names if c != WEIGHT]
    try:
        name = plain_column(text, data)
    except NotLocal:
        name = None
    if name is not None:
        column = table.column(name)
        return column, column.type
    expr = _compiled(text, table.select(data).schema)
    return _run(expr, table), expr.arrow_type


def apply_map(table: pa.Table, columns: Sequence[tuple[str, str]]) -> pa.Table:
    """``linear.map``: the computed columns and the weight, unchanged."""
    values, fields = [], []
    for out, text in columns:
        value, dtype = column_value(table, text)
        values.append(value)
        fields.append(pa.field(out, dtype))
    schema = pa.schema(fields + [pa.field(WEIGHT, pa.int64())])
    return pa.table(values + [table.column(WEIGHT)], schema=schema)


def apply_filter(table: pa.Table, where: str) -> pa.Table:
    """``linear.filter``: the rows whose predicate is TRUE (NULL drops the row)."""
    data = [c for c in table.column_names if c != WEIGHT]
    expr = _compiled(where, table.select(data).schema)
    if table.num_rows == 0:
        return table
    return table.filter(_run(expr, table, predicate=True))
