"""Spark's equality of floating-point values, for Arrow tables and Python values.

Why: Spark SQL groups, joins and compares ``-0.0`` equal to ``0.0`` and every NaN equal to every
other NaN (whatever its payload bits), and its GROUP BY returns ``0.0`` and the one canonical NaN
(``NormalizeFloatingNumbers``). Arrow's hash kernels (``group_by``, ``join``, ``is_in``) compare
bits, and Python's NaN is not equal to itself, so an in-process step would keep ``(1, -0.0)`` and
a delete of ``(1, 0.0)`` apart: the view would hold +1 and -1 of one row and the quality gate
would fail every later step. Every Arrow kernel that groups, joins or looks up by value makes its
float columns canonical first with these functions, as Spark does, so both engines agree.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

NAN = float("nan")  # the one NaN object: Python compares tuples and dict keys by identity first


def canonical(column: "pa.ChunkedArray | pa.Array") -> "pa.ChunkedArray | pa.Array":
    """A float column with ``-0.0`` as ``0.0`` and every NaN as the canonical NaN (as Spark
    groups it); other types as they are."""
    if not pa.types.is_floating(column.type):
        return column
    zeroed = pc.if_else(pc.equal(column, 0), pa.scalar(0.0, column.type), column)
    return pc.if_else(pc.is_nan(zeroed), pa.scalar(NAN, column.type), zeroed)


def has_floats(table: pa.Table, columns: Iterable[str]) -> bool:
    return any(pa.types.is_floating(table.schema.field(c).type) for c in columns)


def canonical_columns(table: pa.Table, columns: Sequence[str] | None = None) -> pa.Table:
    """``table`` with its float ``columns`` (default: all) ``canonical``."""
    names = table.column_names if columns is None else list(columns)
    if not has_floats(table, names):
        return table
    for c in names:
        if pa.types.is_floating(table.schema.field(c).type):
            table = table.set_column(table.schema.get_field_index(c), table.schema.field(c), canonical(table.column(c)))
    return table


def canonical_value(value: Any) -> Any:
    """A Python value as a key that Spark's equality decides: ``-0.0`` -> ``0.0``, NaN -> ``NAN``."""
    if isinstance(value, float):
        return NAN if value != value else value + 0.0
    return value


def member(column: "pa.ChunkedArray | pa.Array", values: "pa.Array") -> "pa.ChunkedArray | pa.Array":
    """``is_in(column, values)`` with NULL matching NULL and Spark's float equality."""
    return pc.is_in(canonical(column), value_set=canonical(values), skip_nulls=False)
