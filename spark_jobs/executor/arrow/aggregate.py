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
from decimal import Decimal
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.executor.arrow.expressions import column_value
from spark_jobs.executor.arrow.zsets import consolidate
from spark_jobs.executor.kernels import NotLocal
from spark_jobs.executor.totals import ROWS, count_name, finish_sql, sum_name
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


# ---- linear aggregates: running totals (``executor/totals.py``), as ``aggregate_linear_step`` ----

_INT64 = (-(2 ** 63), 2 ** 63 - 1)


def sum_type(arg_type: pa.DataType) -> pa.DataType:
    """Spark's SUM type of an argument: the type of its running total."""
    if pa.types.is_floating(arg_type) and arg_type != pa.float64():
        raise NotLocal(f"sum over {arg_type} runs on Spark")  # Spark multiplies a float by the weight as float
    if pa.types.is_decimal(arg_type):
        p, s = arg_type.precision, arg_type.scale
        if p + 21 > 38 and 38 - (p + 21 - s) < s:  # (arg) * weight would lose digits in Spark
            raise NotLocal(f"sum over {arg_type}: Spark rounds the weighted term")
    return output_type("sum", arg_type, False)


def _spark_name(t: pa.DataType) -> str:
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    return {pa.int64(): "bigint", pa.float64(): "double"}[t]


def _accumulators(aggs: Sequence[Agg], arg_types: dict[int, pa.DataType]) -> list[tuple[str, int | None, pa.DataType]]:
    """(name, agg index or None for the row count, type), in the Spark kernel's column order."""
    accs: list[tuple[str, int | None, pa.DataType]] = [(ROWS, None, pa.int64())]
    for i, (_, func, arg, _) in enumerate(aggs):
        if arg is None:
            continue
        accs.append((count_name(i), i, pa.int64()))
        if func in ("sum", "avg"):
            accs.append((sum_name(i), i, sum_type(arg_types[i])))
    return accs


def _fits(value: Any, dtype: pa.DataType) -> bool:
    if pa.types.is_integer(dtype):
        return _INT64[0] <= value <= _INT64[1]
    if pa.types.is_decimal(dtype):
        return value.is_finite() and (not value or value.adjusted() < dtype.precision - dtype.scale)
    return True


def _same(a: Any, b: Any) -> bool:
    """SQL ``<=>`` on output values (NaN equals NaN, as in Spark)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b if a is not None and b is not None else a is None and b is None


def linear_step(delta: pa.Table, prev: pa.Table | None, group_by: Sequence[str], aggs: Sequence[Agg],
                first_step: bool, timezone: str) -> tuple[pa.Table, pa.Table]:
    """One step of a linear aggregate: ``(out_delta, totals_delta)``, the same rows and types as
    ``operators/aggregate.aggregate_linear_step``. ``prev``: the trace rows of the groups the delta
    touches (all of them without group_by; None: no totals yet). Exact arithmetic on integers and
    decimals (a total out of its type's range hands the step to Spark, which reports it); doubles
    summed in this process's order (Spark's order may differ in the last bits)."""
    args, types = {}, {}
    for i, (_, _, arg, _) in enumerate(aggs):
        if arg is not None:
            value, types[i] = column_value(delta, arg, timezone)
            args[i] = value.to_pylist()
    accs = _accumulators(aggs, types)
    keys = list(zip(*[delta.column(g).to_pylist() for g in group_by])) if group_by else [()] * delta.num_rows
    weights = delta.column(WEIGHT).to_pylist()
    zero = {name: (Decimal(0) if pa.types.is_decimal(t) else 0.0 if pa.types.is_floating(t) else 0)
            for name, _, t in accs}
    changed: dict[tuple, dict[str, Any]] = {}
    for r, key in enumerate(keys):
        acc = changed.setdefault(key, dict(zero))
        w = weights[r]
        acc[ROWS] += w
        for name, i, _ in accs[1:]:
            v = args[i][r]
            if v is not None:
                acc[name] += w if name == count_name(i) else v * w
    is_global = not group_by
    if is_global and not keys:
        changed[()] = dict(zero)
    if not (is_global and (first_step or prev is None)):
        changed = {k: a for k, a in changed.items() if any(v != 0 for v in a.values())}  # no-op groups
    for acc in changed.values():
        for name, _, t in accs:
            if not _fits(acc[name], t):
                raise NotLocal(f"a running total {acc[name]} does not fit {t}: Spark reports it")
    key_fields = [pa.field(g, delta.schema.field(g).type) for g in group_by]
    totals = _table(key_fields + [pa.field(n, t) for n, _, t in accs],
                    [[*k, *(a[n] for n, _, _ in accs)] for k, a in changed.items()])

    old: dict[tuple, dict[str, Any]] = {}
    if prev is not None and prev.num_rows:
        prev_keys = list(zip(*[prev.column(g).to_pylist() for g in group_by])) if group_by else [()] * prev.num_rows
        values = {n: prev.column(n).to_pylist() for n, _, _ in accs}
        for r, key in enumerate(prev_keys):
            if group_by and key not in changed:
                continue
            acc = old.setdefault(key, dict(zero))
            for n, _, _ in accs:
                acc[n] += values[n][r] if values[n][r] is not None else 0
    groups = list(changed) + [k for k in old if k not in changed]
    new = {k: {n: old.get(k, zero)[n] + changed.get(k, zero)[n] for n, _, _ in accs} for k in groups}
    outs = [(out, finish_sql(i, func, arg), output_type(func, types.get(i), False)) for i, (out, func, arg, _) in enumerate(aggs)]
    finished = {side: _finish(rows, accs, outs, timezone) for side, rows in (("old", old), ("new", new))}
    out_rows = []
    for k in groups:
        old_exists = (k in old) if is_global else old.get(k, zero)[ROWS] > 0
        new_exists = True if is_global else new[k][ROWS] > 0
        before, after = finished["old"].get(k), finished["new"][k]
        if old_exists and new_exists and all(_same(a, b) for a, b in zip(before, after)):
            continue
        if old_exists:
            out_rows.append([*k, *before, -1])
        if new_exists:
            out_rows.append([*k, *after, 1])
    out_fields = key_fields + [pa.field(o, t) for o, _, t in outs] + [pa.field(WEIGHT, pa.int64())]
    return _table(out_fields, out_rows), totals


def _table(fields: list[pa.Field], rows: list[list[Any]]) -> pa.Table:
    columns = list(zip(*rows)) if rows else [[] for _ in fields]
    return pa.Table.from_arrays([pa.array(list(c), f.type) for c, f in zip(columns, fields)], schema=pa.schema(fields))


def _finish(groups: dict[tuple, dict[str, Any]], accs: list[tuple[str, int | None, pa.DataType]],
            outs: list[tuple[str, str, pa.DataType]], timezone: str) -> dict[tuple, list[Any]]:
    """Each group's output values from its totals: the Spark kernel's SQL, compiled to Arrow."""
    if not groups:
        return {}
    table = _table([pa.field(n, t) for n, _, t in accs], [[a[n] for n, _, _ in accs] for a in groups.values()])
    values = [column_value(table, f"CAST({sql} AS {_spark_name(t)})", timezone)[0].to_pylist() for _, sql, t in outs]
    return {k: [v[r] for v in values] for r, k in enumerate(groups)}
