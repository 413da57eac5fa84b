"""GROUP BY aggregates on Arrow tables, as Spark's ``spark/aggregate.py`` computes them.

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
from decimal import Decimal, localcontext
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.executor.arrow.expressions import column_value
from spark_jobs.executor.arrow.extrema_columns import extrema_columns
from spark_jobs.executor.arrow.zsets import consolidate
from spark_jobs.executor.engine import NotLocal
from spark_jobs.state.float_keys import canonical_value
from spark_jobs.executor.totals import (EXACT, LIMB_BITS, LIMBS, LOWEST_EXP, MAX_ABS_EXP, MAX_SPLIT_SCALE, PARTS, ROWS,
                                        TOTAL_LIMIT_EXP, count_name,
                                        extremum_name, finish_float, finish_limbs, finish_sql, float_terms, is_split,
                                        split_terms, sum_prefix)
from spark_jobs.executor.totals import slots as linear_slots
from spark_jobs.ir.ops.aggregate import EXTREMA
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
    keys = _keys(positive, group_by)
    members: dict[tuple, list[int]] = {}
    for r, key in enumerate(keys):
        members.setdefault(key, []).append(r)
    return Groups(list(members), members, positive.column(WEIGHT).to_pylist(), args, types)


def _spark_key(v: Any) -> Any:
    """A float in Spark's order: NaN above every number, -0.0 equal to 0.0."""
    if isinstance(v, float):
        return (1, 0.0) if math.isnan(v) else (0, v + 0.0)
    return (0, v)


def _count(n: int) -> int:
    """A count (a sum of weights) within bigint; beyond, Spark's checked sum refuses the step."""
    if not -2**63 < n < 2**63:
        raise NotLocal(f"a count of {n} is outside bigint: Spark reports it")
    return n


def _value(func: str, distinct: bool, values: list[Any] | None, weights: list[int]) -> Any:
    if func == "count":
        if values is None:
            return _count(sum(weights))
        present = [(v, w) for v, w in zip(values, weights) if v is not None]
        if distinct:
            return len({_spark_key(v) for v, _ in present})
        return _count(sum(w for _, w in present))
    present = [v for v in values or () if v is not None]
    if func in ("min", "max"):
        return _pick(func, present)
    raise AssertionError(f"{func}: finished from exact totals (_summed, _distinct_values)")


def aggregate(table: pa.Table, group_by: Sequence[str], aggs: Sequence[Agg], schema: pa.Schema,
              timezone: str, node: str = "aggregate") -> pa.Table:
    """The full aggregate of a Z-set table with SQL semantics; weight 1 per group (a set).
    ``schema``: the input's schema (types of the group columns and of the arguments). Sums and
    averages are finished from exact totals (``_Sum``, ``totals.py``), as Spark's ``aggregate``
    finishes them, so a group gives the same bits on both engines whatever order its rows are in."""
    with localcontext(EXACT):
        return _aggregate(table, group_by, aggs, schema, timezone, node)


def _ordered_alike(dtype: pa.DataType) -> bool:
    """Do Arrow's min/max and Spark's agree on this type? Integers, strings (byte order), dates,
    timestamps and booleans; not floats (Spark puts NaN above every number and -0.0 = 0.0) nor
    decimals of differing scales (left to the exact path)."""
    t = pa.types
    return (t.is_integer(dtype) or t.is_string(dtype) or t.is_large_string(dtype) or t.is_date(dtype)
            or t.is_timestamp(dtype) or t.is_boolean(dtype))


# below this many rows the per-group path is faster: an Acero group-by costs ~1 ms however small its
# input, and an incremental step aggregates a few rows per iteration (profiled: 180 calls on
# tiny tables cost 70 ms of a 10-edge shortest-paths step under load)
VECTORIZED_ROWS = 1024


def _vectorized_extrema(table: pa.Table, group_by: Sequence[str], aggs: Sequence[Agg], schema: pa.Schema,
                        timezone: str) -> pa.Table | None:
    """A grouped aggregate of min/max only (not DISTINCT) over group keys and arguments whose order
    Arrow shares with Spark, as ONE Acero group-by over the positive rows; None for any other
    aggregate (the per-group path below). Why: a loop's first step aggregates whole values every
    iteration (shortest paths' ``min`` over 125k rows, 15k groups): per-group Python took 5 of 6 s
    of a from-scratch run on 100k edges, which is no fair measure of a recompute."""
    if table.num_rows < VECTORIZED_ROWS or not group_by or not aggs or any(
            func not in ("min", "max") or distinct or arg is None for _, func, arg, distinct in aggs):
        return None
    if not all(_ordered_alike(schema.field(c).type) for c in group_by):
        return None
    positive = consolidate(table)  # (at least VECTORIZED_ROWS rows here)
    positive = positive.filter(pc.greater(positive.column(WEIGHT), 0))
    columns = {f"__g{j}": positive.column(c) for j, c in enumerate(group_by)}
    types = []
    for i, (_, _, arg, _) in enumerate(aggs):
        value, dtype = column_value(positive, arg, timezone)
        if not _ordered_alike(dtype):
            return None
        columns[f"__a{i}"] = value if len(value) == positive.num_rows else pa.repeat(value[0], positive.num_rows)
        types.append(dtype)
    grouped = pa.table(columns).group_by(list(columns)[:len(group_by)], use_threads=False).aggregate(
        [(f"__a{i}", func) for i, (_, func, _, _) in enumerate(aggs)])
    names = [*group_by, *(out for out, *_ in aggs), WEIGHT]
    arrays = [grouped.column(f"__g{j}").cast(schema.field(c).type) for j, c in enumerate(group_by)]
    arrays += [grouped.column(f"__a{i}_{func}").cast(t) for i, ((_, func, _, _), t) in enumerate(zip(aggs, types))]
    arrays.append(pa.array([1] * grouped.num_rows, pa.int64()))
    fields = [pa.field(n, a.type) for n, a in zip(names, arrays)]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _aggregate(table: pa.Table, group_by: Sequence[str], aggs: Sequence[Agg], schema: pa.Schema,
               timezone: str, node: str) -> pa.Table:
    fast = _vectorized_extrema(table, group_by, aggs, schema, timezone)
    return fast if fast is not None else _per_group(table, group_by, aggs, schema, timezone, node)


def _per_group(table: pa.Table, group_by: Sequence[str], aggs: Sequence[Agg], schema: pa.Schema,
               timezone: str, node: str) -> pa.Table:
    g = _groups(table if table.num_rows else schema.empty_table(), group_by, aggs, timezone)
    keys = g.keys if group_by or g.keys else [()]  # without group_by: one row even over no rows
    types = [schema.field(c).type for c in group_by]
    out_types = [output_type(func, g.arg_types.get(i), distinct) for i, (_, func, _, distinct) in enumerate(aggs)]
    summed = _summed(g, keys, aggs, timezone, node)
    for i, (out, func, arg, distinct) in enumerate(aggs):
        if distinct and func in ("sum", "avg"):
            for key, value in _summed(_distinct_values(g, i, func), keys, [(out, func, arg, False)], timezone,
                                      node).items():
                summed.setdefault(key, {})[i] = value[0]
    rows = []
    for key in keys:
        idx = g.members.get(key, [])
        weights = [g.weights[r] for r in idx]
        rows.append([*key, *[summed[key][i] if i in summed.get(key, ()) else
                             _value(func, distinct, [g.args[i][r] for r in idx] if i in g.args else None, weights)
                             for i, (_, func, _, distinct) in enumerate(aggs)], 1])
    names = [*group_by, *(out for out, *_ in aggs), WEIGHT]
    fields = [pa.field(n, t) for n, t in zip(names, [*types, *out_types, pa.int64()])]
    columns = list(zip(*rows)) if rows else [[] for _ in names]
    return pa.Table.from_arrays([pa.array(list(c), f.type) for c, f in zip(columns, fields)], schema=pa.schema(fields))


def _distinct_values(g: Groups, i: int, func: str) -> Groups:
    """``g`` reduced to aggregate ``i``'s argument, one row of weight 1 per distinct value of a
    group (Spark's order: one NaN, -0.0 = 0.0), as index 0: ``sum(DISTINCT x)`` is then the plain
    exact sum of those rows. Doubles run on Spark (its own sum of the distinct values is rounded in
    the order it adds them, which exact totals would not reproduce bit for bit); so does an integer
    ``avg`` whose total is past 2^53 (Spark adds those in double)."""
    if pa.types.is_floating(g.arg_types[i]):
        raise NotLocal(f"{func}(DISTINCT ...) of a double runs on Spark")
    members: dict[tuple, list[int]] = {}
    values: list[Any] = []
    for key, idx in g.members.items():
        seen: set = set()
        for r in idx:
            v = g.args[i][r]
            if v is None or _spark_key(v) in seen:
                continue
            seen.add(_spark_key(v))
            members.setdefault(key, []).append(len(values))
            values.append(v)
        if func == "avg" and pa.types.is_integer(g.arg_types[i]) \
                and abs(sum(values[r] for r in members.get(key, ()))) > 2 ** 53:
            raise NotLocal("avg(DISTINCT ...) with a total past 2^53 runs on Spark")
    return Groups(list(members), members, [1] * len(values), {0: values}, {0: g.arg_types[i]})


def _summed(g: Groups, keys: list[tuple], aggs: Sequence[Agg], timezone: str, node: str
            ) -> dict[tuple, dict[int, Any]]:
    """Each group's sum/avg values (aggregate index -> value), finished from exact totals of its
    positive rows (the layout ``linear_step`` keeps); {} when the aggregate has none."""
    linear = [i for i, (_, func, _, distinct) in enumerate(aggs) if func in ("sum", "avg") and not distinct]
    if not linear:
        return {}
    slots, sums, accs = _layout(aggs, g.arg_types, node)
    names = [n for n, _, _ in accs]
    totals: dict[tuple, dict[str, Any]] = {}
    for key in keys:
        acc = totals[key] = dict.fromkeys(names, 0)
        for r in g.members.get(key, []):
            _accumulate(acc, g.weights[r], [(j, g.args[j][r]) for j in sorted(set(slots.values()))], sums)
    _check_totals(totals, accs)
    finished = _finish(totals, slots, sums, _outs(aggs, g.arg_types), timezone, linear)
    return {k: {i: row[i] for i in linear} for k, row in finished.items()}


# ---- linear aggregates: exact running totals (``executor/totals.py``), as ``aggregate_linear_step`` ----

_INT64 = (-(2 ** 63), 2 ** 63 - 1)


@dataclass(frozen=True)
class _Sum:
    """The exact sum of one slot's argument: its family (``totals.PARTS``) and types."""

    slot: int
    family: str  # integer | decimal | split | float
    arg_type: pa.DataType
    sum_type: pa.DataType  # Spark's SUM type of the argument (what ``sum`` shows)
    label: str

    @property
    def parts(self) -> list[tuple[str, pa.DataType]]:
        """The stored columns, in the Spark kernel's order (``exact_sum.ExactSum.columns``)."""
        scale = self.arg_type.scale if pa.types.is_decimal(self.arg_type) else 0
        types = {"i": pa.decimal128(38, 0), "d": pa.decimal128(38, scale), "f": pa.decimal128(38, scale),
                 "nan": pa.int64(), "pinf": pa.int64(), "ninf": pa.int64()}
        return [(f"{sum_prefix(self.slot)}_{part}", types.get(part, pa.decimal128(38, 0)))
                for part in PARTS[self.family]]

    def terms(self, x: Any, w: int) -> tuple[Any, ...]:
        """What a row with argument ``x`` and weight ``w`` adds to each part (refusals: Spark's)."""
        if self.family == "float":
            terms = float_terms(x, w)
            if terms is None:
                raise NotLocal(f"{self.label}: {x!r} is too large for an exact sum of doubles: Spark reports it")
            return terms
        if x is None:
            return (0,) * len(PARTS[self.family])
        if self.family == "integer":
            return (x * w,)
        if self.family == "decimal":
            term = EXACT.multiply(x, w)
            _check(term, 38 - self.arg_type.scale, self.label)
            return (term,)
        whole, fraction = split_terms(x, w)
        _check(whole, 38, self.label)
        digits = 37 - self.arg_type.scale
        if digits < 19 and abs(w) != 1 and abs(w) >= 10 ** digits:
            raise NotLocal(f"{self.label}: weight {w} is too large for an exact sum: Spark reports it")
        return whole, fraction

    def value(self, t: dict[str, Any]) -> Any:
        """The sum in Spark's SUM type from the group's totals ``t`` (``ExactSum.value``)."""
        names = [n for n, _ in self.parts]
        if self.family == "float":
            limbs = [int(t[n]) for n in names[:LIMBS]]
            _check_limbs(limbs, self.label)
            return finish_float(limbs, *(t[n] for n in names[LIMBS:]))
        if self.family == "integer":
            total = int(t[names[0]])
            if not _INT64[0] <= total <= _INT64[1]:
                raise NotLocal(f"{self.label}: the sum overflows bigint: Spark reports it")
            return total
        s = self.arg_type.scale
        if self.family == "decimal":
            total = t[names[0]]
        else:
            whole, fraction = t[names[0]], t[names[1]]
            _check(whole, 37 - s, self.label)
            _check(fraction, 37 - s, self.label)
            total = EXACT.add(whole, fraction)
        _check(total, self.sum_type.precision - s, self.label)
        return total

    def avg_numerator(self, t: dict[str, Any]) -> float:
        """An integer sum as ``avg`` divides it: the exact total as a double (``finish_limbs``)."""
        total = int(t[self.parts[0][0]])
        _check_limbs([total, 0, 0], self.label)
        return finish_limbs([total, 0, 0], lowest_exp=0)


def _check(value: Decimal | int, digits: int, label: str) -> None:
    """A total must stay below 10^digits in magnitude (Spark refuses it otherwise)."""
    if abs(value) >= 10 ** digits:
        raise NotLocal(f"{label}: a running total exceeds {digits} digits: Spark reports it")


def _check_limbs(limbs: Sequence[int], label: str) -> None:
    if any(abs(x) >= 2 ** TOTAL_LIMIT_EXP for x in limbs):
        raise NotLocal(f"{label}: a running total exceeds 2^{TOTAL_LIMIT_EXP} units: Spark reports it")


def _family(arg_type: pa.DataType, func: str) -> str:
    if pa.types.is_floating(arg_type):
        return "float"
    if pa.types.is_integer(arg_type):
        return "integer"
    if pa.types.is_decimal(arg_type):
        if not is_split(arg_type.precision, arg_type.scale):
            return "decimal"
        if arg_type.scale > MAX_SPLIT_SCALE:
            raise NotLocal(f"{func} over {arg_type}: Spark refuses exact sums of this scale")
        return "split"
    raise NotLocal(f"{func} over {arg_type} runs on Spark")


def _layout(aggs: Sequence[Agg], types: dict[int, pa.DataType], node: str
            ) -> tuple[dict[int, int], dict[int, _Sum], list[tuple[str, pa.DataType, bool]]]:
    """Slots, exact sums per slot, and the accumulators (name, type, overflow-checked), in the
    stored order (``spark/aggregate._Totals``)."""
    slots = linear_slots(aggs)
    sums: dict[int, _Sum] = {}
    accs: list[tuple[str, pa.DataType, bool]] = [(ROWS, pa.int64(), True)]
    for j in sorted(set(slots.values())):
        accs.append((count_name(j), pa.int64(), True))
        summed = next((i for i, sl in slots.items() if sl == j and aggs[i][1] in ("sum", "avg")), None)
        if summed is None:
            continue
        out, func, arg, _ = aggs[summed]
        arg_type = types[summed]
        sums[j] = _Sum(j, _family(arg_type, func), arg_type, output_type("sum", arg_type, False),
                       f"aggregate {out!r} ({func}({arg})) of node {node!r}")
        accs.extend((n, t, sums[j].family != "float" or t == pa.int64()) for n, t in sums[j].parts)
    return slots, sums, accs


def _fits(value: Any, dtype: pa.DataType) -> bool:
    if pa.types.is_integer(dtype):
        return _INT64[0] <= value <= _INT64[1]
    return abs(value) < 10 ** (dtype.precision - dtype.scale)


def _same(a: Any, b: Any) -> bool:
    """SQL ``<=>`` on output values (NaN equals NaN, as in Spark)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b if a is not None and b is not None else a is None and b is None


def linear_step(delta: pa.Table, prev: pa.Table | None, group_by: Sequence[str], aggs: Sequence[Agg],
                first_step: bool, timezone: str, node: str = "aggregate") -> tuple[pa.Table, pa.Table]:
    """One step of a linear aggregate: ``(out_delta, totals_delta)``, the same rows, types and
    totals (bit for bit) as ``spark/aggregate.aggregate_linear_step``. ``prev``: the trace
    rows of the groups the delta touches (all of them without group_by; None: no totals yet).
    Totals are exact (integers and decimals; doubles as integer limbs: ``executor/totals.py``), so
    either engine may read the totals the other wrote. A value or total Spark refuses hands the
    step to Spark (``NotLocal``), which reports it."""
    with localcontext(EXACT):  # decimal sums exact (the default context rounds to 28 digits)
        return _linear_step(delta, prev, group_by, aggs, first_step, timezone, node)


def _linear_step(delta: pa.Table, prev: pa.Table | None, group_by: Sequence[str], aggs: Sequence[Agg],
                 first_step: bool, timezone: str, node: str, vectorized: bool = True) -> tuple[pa.Table, pa.Table]:
    """``linear_step`` (``vectorized``: counts in Arrow compute when they can be; False: the
    reference path in Python, which the tests compare it with)."""
    if vectorized and group_by and all(func == "count" and not distinct for _, func, _, distinct in aggs):
        fast = _counts_step(delta, prev, group_by, aggs, timezone)
        if fast is not None:
            return fast
    fast_totals = _float_delta_totals(delta, group_by, aggs, timezone, node) if vectorized else None
    if fast_totals is not None:
        found, types = fast_totals
        slots, sums, accs = _layout(aggs, types, node)
        names = [n for n, _, _ in accs]
    else:
        args, types = _arguments(delta, aggs, timezone)
        slots, sums, accs = _layout(aggs, types, node)
        names = [n for n, _, _ in accs]
        found = _delta_totals(delta, group_by, args, slots, sums, names)
    changed = {k: a for k, a in found.items() if any(v != 0 for v in a.values())}  # no-op groups
    _check_totals(changed, accs)
    key_fields = [pa.field(g, delta.schema.field(g).type) for g in group_by]
    totals = _table(key_fields + [pa.field(n, t) for n, t, _ in accs],
                    [[*k, *(a[n] for n in names)] for k, a in changed.items()])

    old: dict[tuple, dict[str, Any]] = {}
    if prev is not None and prev.num_rows:
        prev_keys = _keys(prev, group_by)
        values = {n: prev.column(n).to_pylist() for n in names}
        for r, key in enumerate(prev_keys):
            if group_by and key not in changed:
                continue
            acc = old.setdefault(key, dict.fromkeys(names, 0))
            for n in names:
                acc[n] += values[n][r] if values[n][r] is not None else 0
    groups = [()] if not group_by else list(changed)  # a global aggregate's one row always exists
    zero = dict.fromkeys(names, 0)
    new = {k: {n: old.get(k, zero)[n] + changed.get(k, zero)[n] for n in names} for k in groups}
    _check_totals(old, accs)
    _check_totals(new, accs)
    outs = _outs(aggs, types)
    finished = {"new": _finish(new, slots, sums, outs, timezone), "old": _finish_old(old, groups, zero, slots, sums,
                                                                                   outs, timezone)}
    return _changes(key_fields, outs, groups, old, new, finished, first_step), totals


def _float_delta_totals(delta: pa.Table, group_by: Sequence[str], aggs: Sequence[Agg], timezone: str, node: str
                        ) -> tuple[dict[tuple, dict[str, Any]], dict[int, pa.DataType]] | None:
    """``_delta_totals`` (and the arguments' types) in numpy and Arrow compute for a grouped
    aggregate whose sums are all of doubles: each finite value's limbs (``totals.float_limbs``:
    ``rint(x·2^-(LOWEST_EXP + 50k))`` differences, exact in doubles as every difference is an
    integer below 2^50) times its weight, summed per group in int64. None (the caller takes the
    Python path, which also refuses what Spark refuses) for a float group column, a NaN, infinite
    or too large value, or sums that could leave int64. Why: per row in Python this was half of a
    recompute's aggregate at W1 SF10 (321k joined rows, 2026-11-30)."""
    import numpy as np

    if not group_by or delta.num_rows == 0 or any(pa.types.is_floating(delta.schema.field(g).type) for g in group_by):
        return None
    weights = delta.column(WEIGHT)
    if pc.max(pc.abs(weights)).as_py() >= 2 ** 12:
        return None
    values, types = {}, {}
    for i, (_, _, arg, _) in enumerate(aggs):
        if arg is not None:
            values[i], types[i] = column_value(delta, arg, timezone)
    slots, sums, accs = _layout(aggs, types, node)
    if not sums or any(s.family != "float" for s in sums.values()):
        return None
    w = weights.to_numpy().astype(np.int64)
    columns: dict[str, Any] = {ROWS: w}
    for j in sorted(set(slots.values())):
        value = values[j]
        present = pc.is_valid(value).to_numpy(zero_copy_only=False)
        columns[count_name(j)] = np.where(present, w, 0)
        if j not in sums:
            continue
        x = np.where(present, pc.fill_null(value, 0.0).to_numpy(zero_copy_only=False).astype(np.float64), 0.0)
        if not np.all(np.isfinite(x)) or np.any(np.abs(x) >= 2.0 ** MAX_ABS_EXP):
            return None
        scaled = [np.rint(x * 2.0 ** -(LOWEST_EXP + LIMB_BITS * k)) for k in range(LIMBS)]
        limbs = [scaled[k] - scaled[k + 1] * 2.0 ** LIMB_BITS for k in range(LIMBS - 1)] + [scaled[-1]]
        for (name, _), limb in zip(sums[j].parts, limbs):
            columns[name] = limb.astype(np.int64) * w
    keys = list(group_by)
    table = pa.table([delta.column(g) for g in keys] + [pa.array(c) for c in columns.values()],
                     names=keys + list(columns))
    grouped = table.group_by(keys, use_threads=False).aggregate([(n, "sum") for n in columns] + [(ROWS, "count")])
    largest = max(int(np.max(np.abs(c))) if len(c) else 0 for c in columns.values())
    if grouped.num_rows and largest * pc.max(grouped.column(f"{ROWS}_count")).as_py() >= 2 ** 63:
        return None
    found: dict[tuple, dict[str, Any]] = {}
    key_values = [grouped.column(g).to_pylist() for g in keys]
    sums_of = {n: grouped.column(f"{n}_sum").to_pylist() for n in columns}
    names = [n for n, _, _ in accs]
    for r, key in enumerate(zip(*[map(canonical_value, v) for v in key_values])):
        found[key] = {n: sums_of[n][r] if n in sums_of else 0 for n in names}
    return found, types


def _finish_old(old: dict[tuple, dict[str, Any]], groups: list[tuple], zero: dict[str, Any], slots: dict[int, int],
                sums: dict[int, "_Sum"], outs: list[tuple[str, str, str | None, pa.DataType]], timezone: str
                ) -> dict[tuple, list[Any]]:
    """``_finish`` of each touched group's old totals, the groups without any (new groups: every
    group of a first step or a recompute) finished once as zero totals: finishing is Python per
    group (W1 SF10 recomputed: 121k groups, a third of the aggregate's time)."""
    finished = _finish({k: old[k] for k in groups if k in old}, slots, sums, outs, timezone)
    if len(finished) < len(groups):
        empty = _finish({None: zero}, slots, sums, outs, timezone)[None]
        for k in groups:
            if k not in finished:
                finished[k] = list(empty)
    return finished


def _counts_step(delta: pa.Table, prev: pa.Table | None, group_by: Sequence[str], aggs: Sequence[Agg],
                 timezone: str) -> tuple[pa.Table, pa.Table] | None:
    """``_linear_step`` of a grouped aggregate of counts only, in Arrow compute (no Python per
    row): the same rows, types and totals. Why: a windowed count (Nexmark q5, q7) touches 100k
    groups per step and reads the open window's totals; per-row Python cost seconds. The change's
    totals and the old totals of the touched groups come from one hash aggregate over both
    (NULL keys one group, floats as Spark groups them: ``zsets.group_sums``). None (the caller
    takes the exact Python path) when a sum could leave the weight range."""
    from spark_jobs.executor.arrow.zsets import _max_abs, group_sums, semi

    names = [ROWS]
    contrib = [delta.column(WEIGHT)]
    zero = pa.scalar(0, pa.int64())
    for j in sorted(set(linear_slots(aggs).values())):
        value, _ = column_value(delta, aggs[j][2], timezone)
        names.append(count_name(j))
        contrib.append(pc.if_else(pc.is_null(value), zero, delta.column(WEIGHT)))
    keys = list(group_by)
    mine = pa.table([delta.column(g) for g in keys] + contrib, names=keys + [f"__d{n}" for n in names])
    parts = [mine]
    if prev is not None and prev.num_rows:
        old = semi(prev.select([*keys, *names]).cast(pa.schema([delta.schema.field(g) for g in keys]
                                                               + [prev.schema.field(n) for n in names])),
                   delta, keys, keys)
        parts.append(pa.table([old.column(g) for g in keys] + [pc.fill_null(old.column(n), 0) for n in names],
                              names=keys + [f"__o{n}" for n in names]))
    columns = [f"__d{n}" for n in names] + [f"__o{n}" for n in names]
    filled = []
    for part in parts:
        for c in columns:
            if c not in part.column_names:
                part = part.append_column(c, pa.nulls(part.num_rows, pa.int64()).fill_null(0))
        filled.append(part.select(keys + columns))
    both = pa.concat_tables(filled)
    if both.num_rows * max((_max_abs(both.column(c)) for c in columns), default=0) > 2 ** 62:
        return None
    sums = group_sums(both, keys, columns)
    d = {n: sums.column(f"__d{n}_sum") for n in names}
    nonzero = pc.not_equal(d[ROWS], 0)
    for n in names[1:]:
        nonzero = pc.or_(nonzero, pc.not_equal(d[n], 0))
    sums = sums.filter(nonzero)
    key_fields = [pa.field(g, delta.schema.field(g).type) for g in group_by]
    key_cols = [sums.column(g).cast(f.type) for g, f in zip(keys, key_fields)]
    totals = pa.Table.from_arrays(key_cols + [sums.column(f"__d{n}_sum") for n in names],
                                  schema=pa.schema(key_fields + [pa.field(n, pa.int64()) for n in names]))
    old_t = pa.table([sums.column(f"__o{n}_sum") for n in names], names=names)
    new_t = pa.table([pc.add(sums.column(f"__o{n}_sum"), sums.column(f"__d{n}_sum")) for n in names], names=names)
    outs = _outs(aggs, {})
    slots = linear_slots(aggs)

    def finished(t: pa.Table) -> list[Any]:
        return [column_value(t, f"CAST({finish_sql(func, arg, slots.get(i), False)} AS bigint)", timezone)[0]
                for i, (_, func, arg, _) in enumerate(outs)]

    before, after = finished(old_t), finished(new_t)
    old_exists, new_exists = pc.greater(old_t.column(ROWS), 0), pc.greater(new_t.column(ROWS), 0)
    same = pa.array([True] * sums.num_rows, pa.bool_())
    for a, b in zip(before, after):
        same = pc.and_(same, pc.fill_null(pc.equal(a, b), False))
    differ = pc.invert(pc.and_(pc.and_(old_exists, new_exists), same))
    out_fields = key_fields + [pa.field(o, t) for o, _, _, t in outs] + [pa.field(WEIGHT, pa.int64())]
    schema = pa.schema(out_fields)
    sides = []
    for exists, values, w in ((old_exists, before, -1), (new_exists, after, 1)):
        keep = pc.and_(exists, differ)
        n = pc.sum(keep).as_py() or 0
        cols = [pc.filter(c, keep) for c in key_cols] + [pc.filter(v, keep) for v in values]
        sides.append(pa.Table.from_arrays(cols + [pa.array([w] * n, pa.int64())], schema=schema))
    return pa.concat_tables(sides), totals


def _arguments(delta: pa.Table, aggs: Sequence[Agg], timezone: str
               ) -> tuple[dict[int, list[Any]], dict[int, pa.DataType]]:
    """Each aggregate's argument per row of ``delta`` (as Python values), and its type."""
    args, types = {}, {}
    for i, (_, _, arg, _) in enumerate(aggs):
        if arg is not None:
            value, types[i] = column_value(delta, arg, timezone)
            args[i] = value.to_pylist()
    return args, types


def _keys(table: pa.Table, group_by: Sequence[str]) -> list[tuple]:
    """The group of each row, floats as Spark groups them (``float_keys``: one NaN, one zero)."""
    if not group_by:
        return [()] * table.num_rows
    return list(zip(*[map(canonical_value, table.column(g).to_pylist()) for g in group_by]))


def _outs(aggs: Sequence[Agg], types: dict[int, pa.DataType]) -> list[tuple[str, str, str | None, pa.DataType]]:
    return [(out, func, arg, output_type(func, types.get(i), False)) for i, (out, func, arg, _) in enumerate(aggs)]


def _delta_totals(delta: pa.Table, group_by: Sequence[str], args: dict[int, list[Any]], slots: dict[int, int],
                  sums: dict[int, _Sum], names: list[str]) -> dict[tuple, dict[str, Any]]:
    """The running totals each group of ``delta`` adds (``totals`` layout), by group."""
    weights = delta.column(WEIGHT).to_pylist()
    changed: dict[tuple, dict[str, Any]] = {}
    for r, key in enumerate(_keys(delta, group_by)):
        acc = changed.setdefault(key, dict.fromkeys(names, 0))
        _accumulate(acc, weights[r], [(j, args[j][r]) for j in sorted(set(slots.values()))], sums)
    return changed


def _changes(key_fields: list[pa.Field], outs: list[tuple[str, str, str | None, pa.DataType]], groups: list[tuple],
             old: dict[tuple, dict[str, Any]], new: dict[tuple, dict[str, Any]],
             finished: dict[str, dict[tuple, list[Any]]], first_step: bool) -> pa.Table:
    """-old row / +new row of each touched group, nothing where they are equal (a group exists
    while its row count is positive; without group_by the one row always exists)."""
    is_global = not key_fields
    out_rows = []
    for k in groups:
        old_exists = not first_step if is_global else old.get(k, {ROWS: 0})[ROWS] > 0
        new_exists = True if is_global else new[k][ROWS] > 0
        before, after = finished["old"][k], finished["new"][k]
        if old_exists and new_exists and all(_same(a, b) for a, b in zip(before, after)):
            continue
        if old_exists:
            out_rows.append([*k, *before, -1])
        if new_exists:
            out_rows.append([*k, *after, 1])
    out_fields = key_fields + [pa.field(o, t) for o, _, _, t in outs] + [pa.field(WEIGHT, pa.int64())]
    return _table(out_fields, out_rows)


# ---- min/max over a positive input: the extrema kept, as ``aggregate_touched`` emits them ----

def extrema_step(delta: pa.Table, old: pa.Table, group_by: Sequence[str], aggs: Sequence[Agg],
                 schema: pa.Schema, timezone: str) -> tuple[pa.Table, pa.Table | None]:
    """The new output rows (``schema``: the aggregate's, weight 1) of the groups ``delta``
    touches that the old rows decide, and the groups they do not (their group columns; None if
    none). ``old``: the current output rows of the touched groups (min/max only, none DISTINCT).

    Why a group is decided: the input is a bag (weights >= 0), so a row at the group's extremum
    stays unless the change deletes a row whose value equals it; a deleted row strictly inside
    every extremum leaves them all, and the group, in place; inserts only move an extremum out
    (extremum(old, inserted values)). Undecided: a deletion at an extremum (ties too: whether a
    peer is left is in the integral), a deletion when an extremum is NULL (was it the group's
    last row?), a deletion in a group with no row. Except: a deletion at an extremum is decided
    when the change also inserts a (non-NULL) value at or beyond that extremum (a min's ``<=``):
    every row left is at or inside the old extremum, so the new one is the inserted one (a
    shortest path that gets shorter retracts its old distance and inserts the new one in one
    change; the loop of ``iterate`` saw this in every iteration, each reading the integral)."""
    d = consolidate(delta)
    values = {i: column_value(d, arg, timezone)[0] for i, (_, _, arg, _) in enumerate(aggs)}
    fast = extrema_columns(d, values, old, group_by, aggs, schema)
    if fast is not None:
        return fast
    args = {i: v.to_pylist() for i, v in values.items()}
    weights = d.column(WEIGHT).to_pylist()
    outs = [out for out, *_ in aggs]
    before: dict[tuple, list[Any]] = {}
    if old.num_rows:
        values = [old.column(o).to_pylist() for o in outs]
        for r, key in enumerate(_keys(old, group_by)):
            before[key] = [v[r] for v in values]
    keys = _keys(d, group_by)
    inserted: dict[tuple, list[list[Any]]] = {}
    for r, key in enumerate(keys):
        if weights[r] > 0:
            found = inserted.setdefault(key, [[] for _ in aggs])
            for i in range(len(aggs)):
                found[i].append(args[i][r])
    undecided: dict[tuple, int] = {}  # group -> a row of d that holds its key values
    for r, key in enumerate(keys):
        if weights[r] > 0 or key in undecided:
            continue
        ext = before.get(key)
        if ext is None or any(_deletes_at(aggs[i][1], args[i][r], e, inserted.get(key), i) for i, e in enumerate(ext)):
            undecided[key] = r
    rows = []
    for key in set(before) | set(inserted):
        if key in undecided:
            continue
        ext = before.get(key, [None] * len(aggs))
        found = inserted.get(key, [[] for _ in aggs])
        rows.append([*key, *[_pick(func, [ext[i], *found[i]]) for i, (_, func, _, _) in enumerate(aggs)], 1])
    new = _table(list(schema), rows)
    if not undecided:
        return new, None
    return new, d.take(pa.array(sorted(undecided.values()), pa.int64())).select(list(group_by))


def _deletes_at(func: str, value: Any, extremum: Any, inserted: list[list[Any]] | None, i: int) -> bool:
    """Does deleting a row of argument ``value`` leave aggregate ``i``'s new extremum unknown
    without the integral? Yes when the extremum is NULL (was it the last row?) or ``value`` is
    not strictly inside it, unless an ``inserted`` value of the group is at or beyond it."""
    if extremum is None:
        return True
    if value is None or _inside(func, value, extremum):
        return False
    return not any(v is not None and not _inside(func, v, extremum) for v in (inserted[i] if inserted else ()))


def _inside(func: str, value: Any, extremum: Any) -> bool:
    """Is ``value`` strictly inside ``extremum`` (below a max, above a min) in Spark's order?"""
    a, b = _spark_key(value), _spark_key(extremum)
    return a < b if func == "max" else a > b


# ---- min/max over an insert-only input: totals and extrema, as ``aggregate_insert_only_step`` ----

def insert_only_step(delta: pa.Table, prev: pa.Table | None, group_by: Sequence[str], aggs: Sequence[Agg],
                     first_step: bool, timezone: str, node: str = "aggregate") -> tuple[pa.Table, pa.Table]:
    """One step of an aggregate with min/max over an insert-only input: ``(out_delta,
    state_delta)``, the same rows, types and state as ``spark/aggregate.
    aggregate_insert_only_step``. ``prev``: this node's state rows of the groups the delta
    touches (all of them without group_by; None: none yet). A negative weight hands the step to
    Spark, which refuses it."""
    with localcontext(EXACT):
        return _insert_only_step(delta, prev, group_by, aggs, first_step, timezone, node)


def _pick(func: str, values: Sequence[Any]) -> Any:
    """Spark's min/max of ``values`` (NULLs ignored; NaN above every number); None if none."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return (min if func == "min" else max)(present, key=_spark_key)


def _insert_only_step(delta: pa.Table, prev: pa.Table | None, group_by: Sequence[str], aggs: Sequence[Agg],
                      first_step: bool, timezone: str, node: str) -> tuple[pa.Table, pa.Table]:
    if delta.num_rows and pc.min(delta.column(WEIGHT)).as_py() < 0:
        raise NotLocal(f"aggregate {node!r}: a change deletes rows but its input is insert-only: Spark reports it")
    args, types = _arguments(delta, aggs, timezone)
    slots, sums, accs = _layout(aggs, types, node)
    names = [n for n, _, _ in accs]
    ext = {i: func for i, (_, func, _, _) in enumerate(aggs) if func in EXTREMA}
    changed = {k: a for k, a in _delta_totals(delta, group_by, args, slots, sums, names).items() if a[ROWS] != 0}
    weights = delta.column(WEIGHT).to_pylist()
    found: dict[tuple, dict[int, list[Any]]] = {k: {i: [] for i in ext} for k in changed}
    for r, key in enumerate(_keys(delta, group_by)):
        if weights[r] > 0 and key in found:
            for i in ext:
                found[key][i].append(args[i][r])

    zero = dict.fromkeys(names, 0)
    old: dict[tuple, dict[str, Any]] = {}
    old_found: dict[tuple, dict[int, list[Any]]] = {}
    if prev is not None and prev.num_rows:
        values = {n: prev.column(n).to_pylist() for n in [*names, *map(extremum_name, ext), WEIGHT]}
        for r, key in enumerate(_keys(prev, group_by)):
            if group_by and key not in changed:
                continue
            sign = -1 if values[WEIGHT][r] < 0 else 1  # -old +new rows: the totals telescope
            acc = old.setdefault(key, dict(zero))
            for n in names:
                acc[n] += sign * (values[n][r] or 0)
            for i in ext:  # monotone: the extremum over every row is the last one
                old_found.setdefault(key, {j: [] for j in ext})[i].append(values[extremum_name(i)][r])
    groups = [()] if not group_by else list(changed)
    new = {k: {n: old.get(k, zero)[n] + changed.get(k, zero)[n] for n in names} for k in groups}
    _check_totals(changed, accs)
    _check_totals(new, accs)
    outs = _outs(aggs, types)
    linear = [i for i in range(len(aggs)) if i not in ext]
    extrema = {"old": {k: {i: _pick(f, old_found.get(k, {}).get(i, [])) for i, f in ext.items()} for k in groups}}
    extrema["new"] = {k: {i: _pick(f, [extrema["old"][k][i], *found.get(k, {}).get(i, [])]) for i, f in ext.items()}
                      for k in groups}
    finished = {}
    for side, rows in (("old", old), ("new", new)):
        values = _finish({k: rows.get(k, zero) for k in groups}, slots, sums, outs, timezone, linear)
        finished[side] = {k: [extrema[side][k][i] if i in ext else v for i, v in enumerate(row)]
                          for k, row in values.items()}
    key_fields = [pa.field(g, delta.schema.field(g).type) for g in group_by]
    out = _changes(key_fields, outs, groups, old, new, finished, first_step)
    state_rows = []
    for k in groups:
        sides = (("old", old.get(k, zero), -1), ("new", new[k], 1))
        if old.get(k, zero)[ROWS] != new[k][ROWS]:
            state_rows += [[*k, *(t[n] for n in names), *extrema[side][k].values(), w]
                           for side, t, w in sides if t[ROWS] > 0]
    state_fields = (key_fields + [pa.field(n, t) for n, t, _ in accs]
                    + [pa.field(extremum_name(i), types[i]) for i in ext] + [pa.field(WEIGHT, pa.int64())])
    return out, _table(state_fields, state_rows)


def _check_totals(groups: dict[tuple, dict[str, Any]], accs: list[tuple[str, pa.DataType, bool]]) -> None:
    """An overflow-checked total out of its type hands the step to Spark (which refuses it)."""
    for acc in groups.values():
        for name, dtype, checked in accs:
            if checked and not _fits(acc[name], dtype):
                raise NotLocal(f"a running total {acc[name]} does not fit {dtype}: Spark reports it")


def _table(fields: list[pa.Field], rows: list[list[Any]]) -> pa.Table:
    columns = list(zip(*rows)) if rows else [[] for _ in fields]
    return pa.Table.from_arrays([pa.array(list(c), f.type) for c, f in zip(columns, fields)], schema=pa.schema(fields))


def _spark_name(t: pa.DataType) -> str:
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    return {pa.int64(): "bigint", pa.float64(): "double"}[t]


def _finish(groups: dict[tuple, dict[str, Any]], slots: dict[int, int], sums: dict[int, _Sum],
            outs: list[tuple[str, str, str | None, pa.DataType]], timezone: str,
            only: Sequence[int] | None = None) -> dict[tuple, list[Any]]:
    """Each group's output values from its totals: the finished sums (``_Sum.value``, in
    Python), then the Spark kernel's finishing SQL (``totals.finish_sql``) compiled to Arrow.
    ``only``: the aggregates to finish (the others are None: min/max, kept apart)."""
    if not groups:
        return {}
    columns: dict[str, tuple[pa.DataType, list[Any]]] = {ROWS: (pa.int64(), [t[ROWS] for t in groups.values()])}
    for j in sorted(set(slots.values())):
        columns[count_name(j)] = (pa.int64(), [t[count_name(j)] for t in groups.values()])
    for i, (_, func, _, _) in enumerate(outs):
        j = slots.get(i)
        if j not in sums:
            continue
        integer_avg = func == "avg" and sums[j].family == "integer"
        name = f"__m{j}" if integer_avg else f"__v{j}"
        if name not in columns:
            finish = sums[j].avg_numerator if integer_avg else sums[j].value
            dtype = pa.float64() if integer_avg else sums[j].sum_type
            columns[name] = (dtype, [finish(t) for t in groups.values()])
    table = pa.Table.from_arrays([pa.array(v, t) for t, v in columns.values()], names=list(columns))
    values = []
    for i, (_, func, arg, dtype) in enumerate(outs):
        if only is not None and i not in only:
            values.append([None] * len(groups))
            continue
        j = slots.get(i)
        sql = finish_sql(func, arg, j, j in sums and sums[j].family == "integer")
        values.append(column_value(table, f"CAST({sql} AS {_spark_name(dtype)})", timezone)[0].to_pylist())
    return {k: [v[r] for v in values] for r, k in enumerate(groups)}


def _accumulate(acc: dict[str, Any], w: int, values: list[tuple[int, Any]], sums: dict[int, Any]) -> None:
    """Add one row of weight ``w`` to a group's running totals: its row count, then per argument
    slot ``j`` (``values``: (j, the row's value)) the count of non-NULL values and the exact sum's
    parts. One place, so a group's totals and a change's totals are built alike."""
    acc[ROWS] += w
    for j, x in values:
        if x is None:
            continue
        acc[count_name(j)] += w
        if j in sums:
            for (n, _), term in zip(sums[j].parts, sums[j].terms(x, w)):
                acc[n] += term
