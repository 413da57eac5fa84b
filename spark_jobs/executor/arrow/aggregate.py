"""GROUP BY aggregates on Arrow tables, as Spark's ``operators/aggregate.py`` computes them.

Same weights semantics (a tuple counts with its multiplicity when its consolidated weight is
positive), same SQL results (COUNT of nothing is 0, the other aggregates NULL; without group_by
exactly one row, even over no rows), same output types (what Spark's own ``groupBy().agg()``
gives: ``output_type``), and Spark's order for floats (NaN above every number; -0.0 = 0.0).
Arguments are Spark SQL expressions, evaluated by the expression compiler
(``arrow/expressions.py``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.executor.arrow.expressions import column_value
from spark_jobs.executor.arrow.zsets import consolidate
from spark_jobs.executor.kernels import NotLocal
from spark_jobs.spec.model import WEIGHT

Agg = tuple[str, str, "str | None", bool]  # (out, func, arg or None for count(*), distinct)


def output_type(func: str, arg_type: pa.DataType | None, distinct: bool) -> pa.DataType:
    """The type of Spark's ``func(arg)`` for an argument of ``arg_type`` (Arrow's form)."""
    if func == "count":
        return pa.int64()
    assert arg_type is not None
    if func in ("min", "max"):
        return arg_type
    if pa.types.is_decimal(arg_type):
        p, s = arg_type.precision, arg_type.scale
        return pa.decimal128(min(38, p + 10), s) if func == "sum" else pa.decimal128(min(38, p + 4), min(38, s + 4))
    if pa.types.is_integer(arg_type):
        return pa.int64() if func == "sum" else pa.float64()
    if pa.types.is_floating(arg_type):
        return pa.float64()
    raise NotLocal(f"{func} over {arg_type} runs on Spark")


@dataclass
class Groups:
    """The positive rows of a Z-set grouped: per group, its rows' argument values and weights."""

    keys: list[tuple]
    members: dict[tuple, list[int]]  # group -> row indexes into the positive table
    weights: list[int]
    args: dict[int, list[Any]]  # agg index -> argument value per positive row
    arg_types: dict[int, pa.DataType]


def _groups(table: pa.Table, group_by: Sequence[str], aggs: Sequence[Agg], timezone: str) -> Groups:
    positive = consolidate(table) if table.num_rows else table
    if positive.num_rows:
        positive = positive.filter(pc.greater(positive.column(WEIGHT), 0))
    args, types = {}, {}
    for i, (_, _, arg, _) in enumerate(aggs):
        if arg is not None:
            value, dtype = column_value(positive, arg, timezone)
            args[i], types[i] = value.to_pylist(), dtype
    keys = list(zip(*[positive.column(g).to_pylist() for g in group_by])) if group_by else [()] * positive.num_rows
    members: dict[tuple, list[int]] = {}
    for r, key in enumerate(keys):
        members.setdefault(key, []).append(r)
    return Groups(list(members), members, positive.column(WEIGHT).to_pylist(), args, types)


def _spark_key(v: Any) -> Any:
    """A float in Spark's order: NaN above every number, -0.0 equal to 0.0."""
    if isinstance(v, float):
        return (1, 0.0) if math.isnan(v) else (0, v + 0.0)
    return (0, v)


def _value(func: str, distinct: bool, values: list[Any] | None, weights: list[int]) -> Any:
    if func == "count":
        if values is None:
            return sum(weights)
        present = [(v, w) for v, w in zip(values, weights) if v is not None]
        if distinct:
            return len({_spark_key(v) for v, _ in present})
        return sum(w for _, w in present)
    present = [v for v in values or () if v is not None]
    if func in ("min", "max"):
        if not present:
            return None
        pick = min if func == "min" else max
        return pick(present, key=_spark_key)
    raise NotLocal(f"{func} in-process: exact running totals are not built on Arrow yet")


def aggregate(table: pa.Table, group_by: Sequence[str], aggs: Sequence[Agg], schema: pa.Schema,
              timezone: str) -> pa.Table:
    """The full aggregate of a Z-set table with SQL semantics; weight 1 per group (a set).
    ``schema``: the input's schema (types of the group columns and of the arguments)."""
    g = _groups(table if table.num_rows else schema.empty_table(), group_by, aggs, timezone)
    keys = g.keys if group_by or g.keys else [()]  # without group_by: one row even over no rows
    types = [schema.field(c).type for c in group_by]
    out_types = [output_type(func, g.arg_types.get(i), distinct) for i, (_, func, _, distinct) in enumerate(aggs)]
    rows = []
    for key in keys:
        idx = g.members.get(key, [])
        weights = [g.weights[r] for r in idx]
        rows.append([*key, *[_value(func, distinct, [g.args[i][r] for r in idx] if i in g.args else None, weights)
                             for i, (_, func, _, distinct) in enumerate(aggs)], 1])
    names = [*group_by, *(out for out, *_ in aggs), WEIGHT]
    fields = [pa.field(n, t) for n, t in zip(names, [*types, *out_types, pa.int64()])]
    columns = list(zip(*rows)) if rows else [[] for _ in names]
    return pa.Table.from_arrays([pa.array(list(c), f.type) for c, f in zip(columns, fields)], schema=pa.schema(fields))
