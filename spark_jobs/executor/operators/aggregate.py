"""GROUP BY-aggregate on Z-sets (paper section 7.2-7.4): full, linear-incremental, touched-groups.

Weights enter the aggregates as in the paper: COUNT(*) = sum(w), SUM(x) = sum(x * w),
COUNT(x) = sum(w where x is not null), AVG = SUM / COUNT(x). These are linear, so their change
is computed from the delta alone, given per-group running totals (``aggregate_linear_step``).
MIN, MAX and DISTINCT aggregates are not; they are recomputed only for the groups that the delta
touches (``aggregate_touched_step``). Output types are what Spark's own ``groupBy().agg()``
gives for the input schema, so a view has the same schema however it was computed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, LongType, StructType

from spark_jobs.executor.zset import WEIGHT, col, consolidate, restrict

Agg = tuple[str, str, "str | None", bool]  # (out_name, func, arg_expr or None for count(*), distinct)

ROWS = "__rows"  # accumulator: number of rows (sum of weights) in the group
_PREV = "__prev"  # 1 on rows read from the previous totals, 0 on the delta's
_FUNCS = ("count", "sum", "avg", "min", "max")
LINEAR_FUNCS = frozenset({"count", "sum", "avg"})


def is_linear(aggs: Sequence[Agg]) -> bool:
    """Can every aggregate be maintained from deltas and running totals?"""
    return all(func in LINEAR_FUNCS and not distinct for _, func, _, distinct in aggs)


def _check(aggs: Sequence[Agg]) -> None:
    for out, func, arg, _ in aggs:
        if func not in _FUNCS:
            raise ValueError(f"aggregate {out!r}: unknown function {func!r} (expected one of {_FUNCS})")
        if arg is None and func != "count":
            raise ValueError(f"aggregate {out!r}: {func}(*) is not an aggregate; only count(*) is")


def _native(func: str, arg: str | None, distinct: bool) -> Column:
    """Spark's own aggregate (on plain rows): used for the output schema and for DISTINCT/min/max."""
    if arg is None:
        return F.count(F.lit(1))
    if distinct:
        return F.expr(f"{func}(DISTINCT {arg})")
    return getattr(F, func)(F.expr(arg))


_TYPES: dict[tuple, tuple[StructType, dict[int, DataType]]] = {}


def _types(df: DataFrame, group_by: Sequence[str], aggs: Sequence[Agg]) -> tuple[StructType, dict[int, DataType]]:
    """Native output schema, and the SUM type of each linear sum/avg argument (its running total).

    One analysis of Spark's own ``groupBy().agg()`` (no job), memoized per input schema, since
    every step of a circuit asks again for the same types.
    """
    _check(aggs)
    fields = [f for f in df.schema.fields if f.name != WEIGHT]
    key = (tuple((f.name, f.dataType.simpleString()) for f in fields), tuple(group_by), tuple(tuple(a) for a in aggs))
    if key not in _TYPES:
        plain = df.select(*[col(f.name) for f in fields])
        sums = [(i, arg) for i, (_, func, arg, distinct) in enumerate(aggs)
                if func in ("sum", "avg") and not distinct and arg is not None]
        exprs = [*[_native(func, arg, distinct).alias(out) for out, func, arg, distinct in aggs],
                 *[F.sum(F.expr(arg)).alias(f"__sum{i}") for i, arg in sums]]
        grouped = plain.groupBy(*[col(g) for g in group_by])
        native = grouped.agg(*exprs) if exprs else plain.select(*[col(g) for g in group_by])
        schema = native.schema
        outputs = StructType([schema[c] for c in [*group_by, *(out for out, *_ in aggs)]])
        if len(_TYPES) > 256:
            _TYPES.clear()
        _TYPES[key] = (outputs, {i: schema[f"__sum{i}"].dataType for i, _ in sums})
    return _TYPES[key]


def output_schema(df: DataFrame, group_by: Sequence[str], aggs: Sequence[Agg]) -> StructType:
    """The schema Spark's native ``groupBy(group_by).agg(...)`` gives (analysis only, no job)."""
    return _types(df, group_by, aggs)[0]


@dataclass(frozen=True)
class _Acc:
    """One running-total column: the sum over rows of ``term`` (already weighted)."""

    name: str
    term: Column
    type: DataType


def _accumulators(aggs: Sequence[Agg], sum_types: dict[int, DataType]) -> list[_Acc]:
    """Accumulators of the linear aggregates: rows, and per agg non-null count and weighted sum."""
    w = col(WEIGHT)
    accs = [_Acc(ROWS, w, LongType())]
    for i, (_, func, arg, distinct) in enumerate(aggs):
        if func not in LINEAR_FUNCS or distinct or arg is None:
            continue
        x = F.expr(arg)
        accs.append(_Acc(f"__c{i}", F.when(x.isNotNull(), w).otherwise(F.lit(0)), LongType()))
        if func in ("sum", "avg"):
            accs.append(_Acc(f"__s{i}", x * w, sum_types[i]))
    return accs


def _summed(acc: _Acc) -> Column:
    """sum(term) of a group, 0 (not null) when nothing contributed, in the accumulator's type."""
    return F.coalesce(F.sum(acc.term), F.lit(0)).cast(acc.type).alias(acc.name)


def _finish(i: int, func: str, arg: str | None, acc: Callable[[str], Column]) -> Column:
    """A linear aggregate's value from its group's totals (``acc(name)`` reads a total)."""
    if arg is None:
        return acc(ROWS)
    count = acc(f"__c{i}")
    if func == "count":
        return count
    total = acc(f"__s{i}")
    if func == "sum":
        return F.when(count > 0, total)  # SUM of no non-null value is NULL
    return F.when(count > 0, total / count)  # AVG; the guard also avoids ANSI division by zero


def aggregate(df: DataFrame, group_by: Sequence[str], aggs: Sequence[Agg]) -> DataFrame:
    """The full aggregate of a Z-set with SQL semantics; a set (weight 1 per group).

    A tuple counts with its multiplicity when its consolidated weight is positive, and not at
    all otherwise. Without ``group_by`` there is exactly one row, even on empty input.
    """
    target, sum_types = _types(df, group_by, aggs)
    accs = _accumulators(aggs, sum_types)
    nonlinear = [(i, _native(func, arg, distinct)) for i, (_, func, arg, distinct) in enumerate(aggs)
                 if not (func in LINEAR_FUNCS and not distinct)]
    positive = consolidate(df).where(col(WEIGHT) > 0)
    groups = positive.groupBy(*[col(g) for g in group_by]).agg(
        *[_summed(a) for a in accs], *[expr.alias(f"__v{i}") for i, expr in nonlinear])
    native_ix = {i for i, _ in nonlinear}
    outs = []
    for i, (out, func, arg, _) in enumerate(aggs):
        value = F.col(f"__v{i}") if i in native_ix else _finish(i, func, arg, F.col)
        outs.append(value.cast(target[out].dataType).alias(out))
    return groups.select(*[col(g) for g in group_by], *outs, F.lit(1).cast("long").alias(WEIGHT))


def _has_change(accs: Sequence[_Acc]) -> Column:
    cond = F.lit(False)
    for a in accs:
        cond = cond | (F.col(a.name) != F.lit(0))
    return cond


def aggregate_linear_step(delta: DataFrame, prev_totals: DataFrame | None, group_by: Sequence[str],
                          aggs: Sequence[Agg], first_step: bool, *,
                          broadcast_delta: bool = True) -> tuple[DataFrame, DataFrame]:
    """One step of a linear aggregate (count/sum/avg): ``(out_delta, totals_delta)``.

    ``prev_totals`` is the trace of earlier ``totals_delta``s (any number of rows per group; they
    add up). Only the groups in the delta are looked up. A group exists while its row count is
    positive (the integrated input is assumed positive, as relations are). The output change is
    -old row / +new row per touched group, nothing where they are equal; it is consolidated.
    Without ``group_by`` the single row always exists; on the first step (or with no previous
    totals) it is emitted even for an empty delta, and ``totals_delta`` keeps a row so later steps
    know it was.
    """
    if not is_linear(aggs):
        raise ValueError("aggregate_linear_step supports count/sum/avg without DISTINCT only")
    target, sum_types = _types(delta, group_by, aggs)
    accs = _accumulators(aggs, sum_types)
    keys = [col(g) for g in group_by]
    acc_delta = delta.groupBy(*keys).agg(*[_summed(a) for a in accs])
    is_global = not group_by
    if not (is_global and (first_step or prev_totals is None)):
        acc_delta = acc_delta.where(_has_change(accs))
    totals_delta = acc_delta

    acc_names = [a.name for a in accs]
    parts = [acc_delta.withColumn(_PREV, F.lit(0))]
    if prev_totals is not None:
        prev = prev_totals.select(*keys, *[col(n) for n in acc_names])
        if not is_global:
            prev = restrict(prev, acc_delta, group_by, group_by, broadcast_delta)
        parts.append(prev.withColumn(_PREV, F.lit(1)))
    union = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    both = union.groupBy(*keys).agg(
        F.max(_PREV).alias("__had_prev"),
        *[F.coalesce(F.sum(F.when(F.col(_PREV) == 1, F.col(a.name))), F.lit(0)).cast(a.type).alias(f"old{a.name}")
          for a in accs],
        *[F.coalesce(F.sum(F.col(a.name)), F.lit(0)).cast(a.type).alias(f"new{a.name}") for a in accs])

    def row(prefix: str, weight: int, exists: Column) -> Column:
        """The output row computed from the old or new totals, as a struct to explode."""
        read = lambda name: F.col(f"{prefix}{name}")  # noqa: E731
        values = [_finish(i, func, arg, read).cast(target[out].dataType).alias(out)
                  for i, (out, func, arg, _) in enumerate(aggs)]
        return F.struct(*values, F.lit(weight).cast("long").alias(WEIGHT), exists.alias("__exists"))

    if is_global:
        old_exists, new_exists = F.coalesce(F.col("__had_prev"), F.lit(0)) == 1, F.lit(True)
    else:
        old_exists, new_exists = F.col(f"old{ROWS}") > 0, F.col(f"new{ROWS}") > 0
    pairs = both.select(*keys, row("old", -1, old_exists).alias("__old"), row("new", 1, new_exists).alias("__new"))
    outs = [out for out, *_ in aggs]
    same = F.col("__old.__exists") & F.col("__new.__exists")
    for out in outs:  # a group whose row did not change emits nothing (the pair would cancel)
        same = same & F.col("__old").getField(out).eqNullSafe(F.col("__new").getField(out))
    emitted = (pairs.where(~same)
               .select(*keys, F.explode(F.array("__old", "__new")).alias("__row"))
               .where(F.col("__row.__exists")))
    out_delta = emitted.select(*keys, *[F.col("__row").getField(o).alias(o) for o in [*outs, WEIGHT]])
    return out_delta, totals_delta


def aggregate_touched_step(delta: DataFrame, integral_after: DataFrame, prev_output: DataFrame | None,
                           group_by: Sequence[str], aggs: Sequence[Agg], first_step: bool, *,
                           broadcast_delta: bool = True) -> DataFrame:
    """One step of any aggregate by recomputing only the groups the delta touches.

    ``integral_after`` is the integrated input including ``delta``; ``prev_output`` is the
    integrated output so far (a Z-set, possibly several rows per group; None = nothing emitted
    yet, so every group is new). Returns -old +new rows of the touched groups, consolidated.
    Without ``group_by`` the whole input is one group, touched when the delta has any row or on
    the first step.
    """
    if prev_output is None:
        return aggregate(integral_after, group_by, aggs)  # a consolidated set: all groups are new
    if group_by:
        new = aggregate(restrict(integral_after, delta, group_by, group_by, broadcast_delta), group_by, aggs)
        old = restrict(prev_output, delta, group_by, group_by, broadcast_delta)
    elif first_step:
        new, old = aggregate(integral_after, group_by, aggs), prev_output
    else:
        # the single group is touched iff the delta has a row: a one-row marker, empty otherwise
        marker = F.broadcast(delta.select(F.lit(1).alias("__touched")).limit(1))
        new = aggregate(integral_after.join(marker, how="left_semi"), group_by, aggs).join(marker, how="left_semi")
        old = prev_output.join(marker, how="left_semi")
    data = [c for c in new.columns if c != WEIGHT]
    return consolidate(new.unionByName(old.select(*[col(c) for c in data], (-col(WEIGHT)).alias(WEIGHT))))
