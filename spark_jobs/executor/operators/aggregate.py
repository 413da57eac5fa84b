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
from typing import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType

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


def q(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def _sql_str(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# Expressions below are SQL text: one JVM call per expression instead of dozens per Column tree
# (PySpark's Column API costs a round trip per node; on a step that is most of the driver's time).
W = q(WEIGHT)


@dataclass(frozen=True)
class _Acc:
    """One running-total column: the sum over rows of ``term`` (SQL, already weighted)."""

    name: str
    term: str
    type: str  # SQL type name


def _accumulators(aggs: Sequence[Agg], sum_types: dict[int, DataType]) -> list[_Acc]:
    """Accumulators of the linear aggregates: rows, and per agg non-null count and weighted sum."""
    accs = [_Acc(ROWS, W, "bigint")]
    for i, (_, func, arg, distinct) in enumerate(aggs):
        if func not in LINEAR_FUNCS or distinct or arg is None:
            continue
        accs.append(_Acc(f"__c{i}", f"CASE WHEN ({arg}) IS NOT NULL THEN {W} ELSE 0 END", "bigint"))
        if func in ("sum", "avg"):
            accs.append(_Acc(f"__s{i}", f"({arg}) * {W}", sum_types[i].simpleString()))
    return accs


def _summed(acc: _Acc, term: str | None = None, name: str | None = None) -> Column:
    """sum(term) of a group, 0 (not null) when nothing contributed, in the accumulator's type."""
    return F.expr(f"CAST(coalesce(sum({term or acc.term}), 0) AS {acc.type}) AS {q(name or acc.name)}")


def _finish(i: int, func: str, arg: str | None, prefix: str = "") -> str:
    """SQL of a linear aggregate's value from its group's totals (columns ``prefix + name``)."""
    if arg is None:
        return q(prefix + ROWS)
    count = q(f"{prefix}__c{i}")
    if func == "count":
        return count
    total = q(f"{prefix}__s{i}")
    if func == "sum":
        return f"CASE WHEN {count} > 0 THEN {total} END"  # SUM of no non-null value is NULL
    return f"CASE WHEN {count} > 0 THEN {total} / {count} END"  # AVG; also no ANSI division by 0


def aggregate(df: DataFrame, group_by: Sequence[str], aggs: Sequence[Agg]) -> DataFrame:
    """The full aggregate of a Z-set with SQL semantics; a set (weight 1 per group).

    A tuple counts with its multiplicity when its consolidated weight is positive, and not at
    all otherwise. Without ``group_by`` there is exactly one row, even on empty input.
    """
    target, sum_types = _types(df, group_by, aggs)
    accs = _accumulators(aggs, sum_types)
    nonlinear = {i: _native(func, arg, distinct) for i, (_, func, arg, distinct) in enumerate(aggs)
                 if not (func in LINEAR_FUNCS and not distinct)}
    positive = consolidate(df).where(f"{W} > 0")
    groups = positive.groupBy(*[col(g) for g in group_by]).agg(
        *[_summed(a) for a in accs], *[expr.alias(f"__v{i}") for i, expr in nonlinear.items()])
    outs = [f"CAST({q(f'__v{i}') if i in nonlinear else _finish(i, func, arg)} AS "
            f"{target[out].dataType.simpleString()}) AS {q(out)}" for i, (out, func, arg, _) in enumerate(aggs)]
    return groups.selectExpr(*[q(g) for g in group_by], *outs, f"CAST(1 AS bigint) AS {W}")


def aggregate_linear_step(delta: DataFrame, prev_totals: DataFrame | None, group_by: Sequence[str],
                          aggs: Sequence[Agg], first_step: bool, *,
                          broadcast_delta: bool = True) -> tuple[DataFrame, DataFrame]:
    """One step of a linear aggregate (count/sum/avg): ``(out_delta, totals_delta)``.

    ``prev_totals`` is the trace of earlier ``totals_delta``s (any number of rows per group; they
    add up). Only the groups in the delta are looked up. A group exists while its row count is
    positive (the integrated input is assumed positive, as relations are). The output change is
    -old row / +new row per touched group, nothing where they are equal; it is consolidated.
    Without ``group_by`` the single row always exists: it is emitted on the first step even for
    an empty delta, and on every later step there is an old row to retract. Whether it exists is
    known from ``first_step``, not from the totals: a compaction drops all-zero totals (the
    global row of an empty input), and the aggregate then emitted a second ``count = 0`` row
    beside the new one (issue 13: a count over a recursion whose base case emptied and refilled).
    """
    if not is_linear(aggs):
        raise ValueError("aggregate_linear_step supports count/sum/avg without DISTINCT only")
    target, sum_types = _types(delta, group_by, aggs)
    accs = _accumulators(aggs, sum_types)
    keys = [q(g) for g in group_by]
    acc_delta = delta.groupBy(*[col(g) for g in group_by]).agg(*[_summed(a) for a in accs])
    is_global = not group_by
    if not (is_global and first_step):
        acc_delta = acc_delta.where(" OR ".join(f"{q(a.name)} != 0" for a in accs))  # drop no-op groups
    totals_delta = acc_delta

    parts = [acc_delta.selectExpr(*keys, *[q(a.name) for a in accs], f"0 AS {_PREV}")]
    if prev_totals is not None:
        prev = prev_totals.selectExpr(*keys, *[q(a.name) for a in accs], f"1 AS {_PREV}")
        if not is_global:
            prev = restrict(prev, acc_delta, group_by, group_by, broadcast_delta)
        parts.append(prev)
    union = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    both = union.groupBy(*[col(g) for g in group_by]).agg(
        *[_summed(a, f"CASE WHEN {_PREV} = 1 THEN {q(a.name)} END", f"old{a.name}") for a in accs],
        *[_summed(a, q(a.name), f"new{a.name}") for a in accs])

    outs = [out for out, *_ in aggs]

    def row(prefix: str, weight: int, exists: str) -> str:
        """The output row computed from the old or new totals, as a struct to explode."""
        fields = [f"{_sql_str(out)}, CAST({_finish(i, func, arg, prefix)} AS {target[out].dataType.simpleString()})"
                  for i, (out, func, arg, _) in enumerate(aggs)]
        return (f"named_struct({', '.join([*fields, f'{_sql_str(WEIGHT)}, CAST({weight} AS bigint)'])}, "
                f"'__exists', {exists}) AS __{prefix}")

    if is_global:
        old_exists, new_exists = ("FALSE" if first_step else "TRUE"), "TRUE"
    else:
        old_exists, new_exists = f"{q('old' + ROWS)} > 0", f"{q('new' + ROWS)} > 0"
    pairs = both.selectExpr(*keys, row("old", -1, old_exists), row("new", 1, new_exists))
    # a group whose row did not change emits nothing (the pair would cancel)
    same = " AND ".join(["__old.__exists", "__new.__exists",
                         *[f"__old.{q(o)} <=> __new.{q(o)}" for o in outs]])
    emitted = (pairs.where(f"NOT ({same})")
               .selectExpr(*keys, "explode(array(__old, __new)) AS __row")
               .where("__row.__exists"))
    out_delta = emitted.selectExpr(*keys, *[f"__row.{q(o)} AS {q(o)}" for o in [*outs, WEIGHT]])
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
        marker = delta.select(F.lit(1).alias("__touched")).limit(1)
        marker = F.broadcast(marker) if broadcast_delta else marker
        new = aggregate(integral_after.join(marker, how="left_semi"), group_by, aggs).join(marker, how="left_semi")
        old = prev_output.join(marker, how="left_semi")
    data = [c for c in new.columns if c != WEIGHT]
    return consolidate(new.unionByName(old.select(*[col(c) for c in data], (-col(WEIGHT)).alias(WEIGHT))))
