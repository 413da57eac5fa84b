"""Expressions of ``select`` and ``filter`` nodes evaluated on Arrow tables, as Spark evaluates them.

The compiler from a checked Spark SQL expression to Arrow compute is
``spark_jobs.executor.arrow.compiler`` (its own module, tested against Spark on random data):
``compile_expression(text, schema)`` gives the value, the type Spark would give, and refuses
what it does not compute exactly as Spark (``NotCovered``: the step then runs on Spark, and
its summary gives the reason). A plain column reference is taken as is (no compiling).
"""
from __future__ import annotations

from typing import Any, Sequence

import pyarrow as pa

from spark_jobs.executor.arrow.zsets import plain_column
from spark_jobs.executor.engine import NotLocal
from spark_jobs.spec.model import WEIGHT

from spark_jobs.executor.arrow.compiler import ExpressionFailed, NotCovered, compile_expression

def _compiled(text: str, schema: pa.Schema, timezone: str) -> Any:
    """The compiled expression, or NotLocal with the compiler's reason."""
    try:
        return compile_expression(text, schema, timezone)
    except NotCovered as exc:
        raise NotLocal(f"expression {text!r}: {exc.reason}") from None


def _run(expr: Any, table: pa.Table, predicate: bool = False) -> pa.Array:
    """Evaluate; a row on which Spark raises (ANSI) hands the step to Spark, which then fails it
    with its own message."""
    try:
        return expr.predicate(table) if predicate else expr.evaluate(table)
    except ExpressionFailed as exc:
        raise NotLocal(f"expression {expr.text!r} fails on a row ({exc}): Spark reports it") from None


def column_value(table: pa.Table, text: str, timezone: str) -> tuple[pa.Array | pa.ChunkedArray, pa.DataType]:
    """The value of expression ``text`` on every row of ``table``, and its (Spark's) type;
    ``timezone``: the session time zone Spark would evaluate it in."""
    data = [c for c in table.column_names if c != WEIGHT]
    try:
        name = plain_column(text, data)
    except NotLocal:
        name = None
    if name is not None:
        column = table.column(name)
        return column, column.type
    expr = _compiled(text, table.select(data).schema, timezone)
    return _run(expr, table), expr.arrow_type


def apply_map(table: pa.Table, columns: Sequence[tuple[str, str]], timezone: str) -> pa.Table:
    """``linear.map``: the computed columns and the weight, unchanged."""
    values, fields = [], []
    for out, text in columns:
        value, dtype = column_value(table, text, timezone)
        values.append(value)
        fields.append(pa.field(out, dtype))
    schema = pa.schema(fields + [pa.field(WEIGHT, pa.int64())])
    return pa.table(values + [table.column(WEIGHT)], schema=schema)


def apply_filter(table: pa.Table, where: str, timezone: str) -> pa.Table:
    """``linear.filter``: the rows whose predicate is TRUE (NULL drops the row)."""
    data = [c for c in table.column_names if c != WEIGHT]
    expr = _compiled(where, table.select(data).schema, timezone)
    if table.num_rows == 0:
        return table
    return table.filter(_run(expr, table, predicate=True))
