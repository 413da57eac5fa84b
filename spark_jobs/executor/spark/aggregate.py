"""GROUP BY-aggregate on Z-sets (paper section 7.2-7.4): full, linear-incremental, touched-groups.

Weights enter the aggregates as in the paper: COUNT(*) = sum(w), SUM(x) = sum(x * w),
COUNT(x) = sum(w where x is not null), AVG = SUM / COUNT(x). These are linear, so their change
is computed from the delta alone, given per-group running totals (``aggregate_linear_step``).
MIN, MAX and DISTINCT aggregates are not; they are recomputed only for the groups that the delta
touches (``aggregate_touched_step``). Output types are what Spark's own ``groupBy().agg()``
gives for the input schema, so a view has the same schema however it was computed.

Running totals are exact (``exact_sum``: integers and decimals, floats cut into integer limbs):
a value finished from them does not depend on the order in which parts were added up, so the old
row an incremental step retracts is bit for bit the row an earlier step emitted.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType

from spark_jobs.executor.spark.exact_sum import ExactSum
from spark_jobs.executor.refusal import raise_sql, sql_string
from spark_jobs.executor.totals import ROWS, count_name, extremum_name, finish_sql, q, sum_prefix
from spark_jobs.executor.totals import slots as linear_slots
from spark_jobs.executor.spark.zset import (IN_LIST_MAX, WEIGHT, col, consolidate, group_agg, kept, restrict,
                                            select_sql)
from spark_jobs.ir.ops.aggregate import EXTREMA, monotone

Agg = tuple[str, str, "str | None", bool]  # (out_name, func, arg_expr or None for count(*), distinct)

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


_TYPES: dict[tuple, tuple[StructType, dict[int, tuple[DataType, DataType]]]] = {}


def _types(df: DataFrame, group_by: Sequence[str], aggs: Sequence[Agg]
           ) -> tuple[StructType, dict[int, tuple[DataType, DataType]]]:
    """Native output schema, and per linear sum/avg the (argument type, Spark's SUM type).

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
                 *[F.sum(F.expr(arg)).alias(f"__sum{i}") for i, arg in sums],
                 *[F.first(F.expr(arg)).alias(f"__arg{i}") for i, arg in sums]]
        grouped = plain.groupBy(*[col(g) for g in group_by])
        native = grouped.agg(*exprs) if exprs else plain.select(*[col(g) for g in group_by])
        schema = native.schema
        outputs = StructType([schema[c] for c in [*group_by, *(out for out, *_ in aggs)]])
        if len(_TYPES) > 256:
            _TYPES.clear()
        _TYPES[key] = (outputs, {i: (schema[f"__arg{i}"].dataType, schema[f"__sum{i}"].dataType) for i, _ in sums})
    return _TYPES[key]


def output_schema(df: DataFrame, group_by: Sequence[str], aggs: Sequence[Agg]) -> StructType:
    """The schema Spark's native ``groupBy(group_by).agg(...)`` gives (analysis only, no job)."""
    return _types(df, group_by, aggs)[0]


# Expressions below are SQL text: one JVM call per expression instead of dozens per Column tree
# (PySpark's Column API costs a round trip per node; on a step that is most of the driver's time).
W = q(WEIGHT)


@dataclass(frozen=True)
class _Acc:
    """One running-total column: the sum over rows of ``term`` (SQL, already weighted)."""

    name: str
    term: str
    type: str  # SQL type name
    label: str  # what it totals, for the refusal of an overflow
    checked: bool = True  # refuse an overflow of ``type`` (False: one cannot happen; see exact_sum)


@dataclass(frozen=True)
class _Totals:
    """The running totals of an aggregate's linear parts, and how each value is finished.

    Aggregates over the same argument share one slot (``sum(x)`` and ``avg(x)`` keep one count
    and one exact sum of ``x``). A slot's argument is projected once, as column ``__x<slot>``
    (``prepare``), before the accumulators sum their terms over it.
    """

    slots: dict[int, int]  # linear agg index -> its slot (the first agg index with that argument)
    aggs_funcs: dict[int, str]  # linear agg index -> its function
    args: dict[int, str]  # slot -> argument SQL
    sums: dict[int, ExactSum]  # slot -> exact sum of the argument (slots read by sum/avg)
    accs: tuple[_Acc, ...]

    @classmethod
    def of(cls, aggs: Sequence[Agg], types: dict[int, tuple[DataType, DataType]], node: str) -> "_Totals":
        slots = linear_slots(aggs)
        args = {j: aggs[j][2] for j in set(slots.values())}
        accs = [_Acc(ROWS, W, "bigint", f"count(*) of node {node!r}")]
        sums: dict[int, ExactSum] = {}
        for j in sorted(args):
            out, func, arg, _ = aggs[j]
            label = f"aggregate {out!r} ({func}({arg})) of node {node!r}"
            accs.append(_Acc(count_name(j), f"CASE WHEN __x{j} IS NOT NULL THEN {W} ELSE 0 END", "bigint", label))
            summed = next((i for i, s in slots.items() if s == j and aggs[i][1] in ("sum", "avg")), None)
            if summed is not None:
                arg_type, sum_type = types[summed]
                sums[j] = ExactSum(sum_prefix(j), f"__x{j}", arg_type, sum_type, label, W)
                accs.extend(_Acc(c.name, c.term, c.type, label, c.can_overflow) for c in sums[j].columns())
        return cls(slots, {i: aggs[i][1] for i in slots}, args, sums, tuple(accs))

    def prepare(self, df: DataFrame) -> DataFrame:
        """``df`` with each slot's argument as a column ``__x<slot>`` (evaluated once per row)."""
        if not self.args:
            return df
        return select_sql(df, "*", *[f"({arg}) AS __x{j}" for j, arg in sorted(self.args.items())])

    def _values(self, prefix: str) -> dict[str, str]:
        """Column -> SQL of each slot's finished sum (``v``) and, for integers under ``avg``, the
        sum as a double (``m``): computed once per group, read by every aggregate of the slot."""
        out = {}
        for i, j in self.slots.items():
            if j not in self.sums:
                continue
            integer_avg = self.aggs_funcs[i] == "avg" and self.sums[j].family == "integer"
            kind, sql = ("m", self.sums[j].avg_numerator) if integer_avg else ("v", self.sums[j].value)
            out.setdefault(f"{prefix}__{kind}{j}", sql(prefix))
        return out

    def finished(self, df: DataFrame, *prefixes: str) -> DataFrame:
        """``df`` (one row of totals per group) with the finished sums that ``finish`` reads."""
        values = {name: sql for p in (prefixes or ("",)) for name, sql in self._values(p).items()}
        return select_sql(df, "*", *[f"{sql} AS {q(name)}" for name, sql in values.items()]) if values else df

    def finish(self, i: int, func: str, arg: str | None, prefix: str = "") -> str:
        """SQL of a linear aggregate's value from its group's totals and finished sums (columns
        ``prefix + name``, see ``finished``)."""
        j = self.slots.get(i)
        integer = j in self.sums and self.sums[j].family == "integer"
        return finish_sql(func, arg, j, integer, prefix)


def _totals(df: DataFrame, group_by: Sequence[str], aggs: Sequence[Agg], node: str) -> tuple[StructType, _Totals]:
    target, types = _types(df, group_by, aggs)
    return target, _Totals.of(aggs, types, node)


def _summed(group_by: Sequence[str], acc: _Acc, term: str | None = None, name: str | None = None) -> Column:
    """sum(term) of a group (``term`` never NULL), 0 when the group has no row, in the
    accumulator's type; an overflow of that type is refused (``try_sum`` gives NULL then),
    naming the group (its ``group_by`` columns) as the example row. Kept per argument
    (``zset.kept``): the same at every step of the same node."""
    return kept(("summed", tuple(group_by), acc.name, acc.term, acc.type, acc.label, acc.checked, term, name),
                lambda: _summed_column(group_by, acc, term, name))


def _summed_column(group_by: Sequence[str], acc: _Acc, term: str | None, name: str | None) -> Column:
    term = term or acc.term
    if not acc.checked:
        return F.expr(f"CAST(coalesce(sum({term}), 0) AS {acc.type}) AS {q(name or acc.name)}")
    row = f"to_json(struct({', '.join(q(g) for g in group_by)}))" if group_by else "'{}'"
    overflow = raise_sql(f"{acc.label}: the running total is outside the range of {acc.type} "
                         f"(a count: outside the weight range); example row: ", acc.type, row)
    return F.expr(f"CAST(CASE WHEN count(1) = 0 THEN 0 ELSE coalesce(try_sum({term}), {overflow}) END "
                  f"AS {acc.type}) AS {q(name or acc.name)}")


def aggregate(df: DataFrame, group_by: Sequence[str], aggs: Sequence[Agg], *, node: str = "aggregate") -> DataFrame:
    """The full aggregate of a Z-set with SQL semantics; a set (weight 1 per group).

    A tuple counts with its multiplicity when its consolidated weight is positive, and not at
    all otherwise. Without ``group_by`` there is exactly one row, even on empty input. Sums and
    averages are finished from exact totals (``exact_sum``): the same group always gives the same
    bits, whatever the order of its rows. ``node`` names the aggregate in refusals.
    """
    target, totals = _totals(df, group_by, aggs, node)
    nonlinear = {i: _native(func, arg, distinct) for i, (_, func, arg, distinct) in enumerate(aggs)
                 if not (func in LINEAR_FUNCS and not distinct)}
    positive = totals.prepare(consolidate(df).where(f"{W} > 0"))
    groups = totals.finished(positive.groupBy(*[col(g) for g in group_by]).agg(
        *[_summed(group_by, a) for a in totals.accs], *[expr.alias(f"__native{i}") for i, expr in nonlinear.items()]))
    outs = [f"CAST({q(f'__native{i}') if i in nonlinear else totals.finish(i, func, arg)} AS "
            f"{target[out].dataType.simpleString()}) AS {q(out)}" for i, (out, func, arg, _) in enumerate(aggs)]
    return select_sql(groups, *[q(g) for g in group_by], *outs, f"CAST(1 AS bigint) AS {W}")


def aggregate_linear_step(delta: DataFrame, prev_totals: DataFrame | None, group_by: Sequence[str],
                          aggs: Sequence[Agg], first_step: bool, *, broadcast_delta: bool = True,
                          node: str = "aggregate", in_list_max: int = IN_LIST_MAX,
                          prev_narrowed: bool = False) -> tuple[DataFrame, DataFrame]:
    """One step of a linear aggregate (count/sum/avg): ``(out_delta, totals_delta)``.

    ``prev_totals`` is the trace of earlier ``totals_delta``s (any number of rows per group; they
    add up, exactly: every total is an integer or a decimal, see ``exact_sum``). Only the groups
    in the delta are looked up. A group exists while its row count is positive (the integrated
    input is assumed positive, as relations are). The output change is -old row / +new row per
    touched group, nothing where they are equal; it is consolidated. The old row is finished from
    the old totals as the new row of an earlier step was, so it is that row, bit for bit.

    Without ``group_by`` the single row always exists: it is emitted on the first step (even for
    an empty delta), and on every later step its old row is the one the view holds. That does not
    depend on a row in ``prev_totals``: totals that add up to zero (every input row deleted) are
    dropped by compaction, and ``prev_totals`` may then be None.

    ``prev_narrowed``: ``prev_totals`` holds only rows of groups the delta may touch (narrowed
    on the driver, ``executor.spark.narrow``), so it is not restricted again to the delta's
    groups: a group the delta does not touch has equal old and new totals and emits nothing.
    Why: the restriction joined the whole delta's plan a third time into the step's one plan
    (besides the output and the totals written), and Spark optimized and planned each copy.
    """
    if not is_linear(aggs):
        raise ValueError("aggregate_linear_step supports count/sum/avg without DISTINCT only")
    target, totals = _totals(delta, group_by, aggs, node)
    accs = totals.accs
    keys = [q(g) for g in group_by]
    acc_key = (tuple(group_by), tuple((a.name, a.term, a.type, a.label, a.checked) for a in accs))
    acc_delta = (group_agg(totals.prepare(delta), group_by, ("linear", *acc_key),
                           lambda: [_summed(group_by, a) for a in accs])
                 .where(" OR ".join(f"{q(a.name)} != 0" for a in accs)))  # drop no-op groups
    is_global = not group_by

    parts = [select_sql(acc_delta, *keys, *[q(a.name) for a in accs], f"0 AS {_PREV}")]
    if prev_totals is not None:
        prev = select_sql(prev_totals, *keys, *[q(a.name) for a in accs], f"1 AS {_PREV}")
        if not is_global and not prev_narrowed:
            prev = restrict(prev, acc_delta, group_by, group_by, broadcast_delta, in_list_max)
        parts.append(prev)
    union = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    # a global groupBy gives its one row even over no rows: old and new totals are then zeros
    both = totals.finished(group_agg(union, group_by, ("linear-old-new", *acc_key), lambda: [
        *[_summed(group_by, a, f"CASE WHEN {_PREV} = 1 THEN {q(a.name)} ELSE 0 END", f"old{a.name}") for a in accs],
        *[_summed(group_by, a, q(a.name), f"new{a.name}") for a in accs]]), "old", "new")

    out_delta = _changes(both, group_by, aggs, target, first_step,
                         lambda i, func, arg, prefix: totals.finish(i, func, arg, prefix))
    return out_delta, acc_delta


def _changes(both: DataFrame, group_by: Sequence[str], aggs: Sequence[Agg], target: StructType, first_step: bool,
             value: "Callable[[int, str, str | None, str], str]") -> DataFrame:
    """The output change from one row per touched group holding its old and new state (columns
    ``old...`` / ``new...``; ``value(i, func, arg, prefix)`` is the SQL of aggregate ``i`` from
    them): -old row / +new row, nothing where they are equal; consolidated. A group exists while
    its row count is positive; without ``group_by`` the one row always exists (emitted on the
    first step, even for an empty delta)."""
    keys = [q(g) for g in group_by]
    outs = [out for out, *_ in aggs]

    def row(prefix: str, weight: int, exists: str) -> str:
        """The output row computed from the old or new state, as a struct to explode."""
        fields = [f"{sql_string(out)}, CAST({value(i, func, arg, prefix)} AS "
                  f"{target[out].dataType.simpleString()})" for i, (out, func, arg, _) in enumerate(aggs)]
        return (f"named_struct({', '.join([*fields, f'{sql_string(WEIGHT)}, CAST({weight} AS bigint)'])}, "
                f"'__exists', {exists}) AS __{prefix}")

    if not group_by:
        old_exists, new_exists = ("FALSE" if first_step else "TRUE"), "TRUE"
    else:
        old_exists, new_exists = f"{q('old' + ROWS)} > 0", f"{q('new' + ROWS)} > 0"
    pairs = select_sql(both, *keys, row("old", -1, old_exists), row("new", 1, new_exists))
    # a group whose row did not change emits nothing (the pair would cancel)
    same = " AND ".join(["__old.__exists", "__new.__exists",
                         *[f"__old.{q(o)} <=> __new.{q(o)}" for o in outs]])
    emitted = (pairs.where(f"NOT ({same})")
               .selectExpr(*keys, "explode(array(__old, __new)) AS __row")
               .where("__row.__exists"))
    return select_sql(emitted, *keys, *[f"__row.{q(o)} AS {q(o)}" for o in [*outs, WEIGHT]])


def aggregate_insert_only_step(delta: DataFrame, prev_state: DataFrame | None, group_by: Sequence[str],
                               aggs: Sequence[Agg], first_step: bool, *, broadcast_delta: bool = True,
                               node: str = "aggregate", in_list_max: int = IN_LIST_MAX,
                               prev_narrowed: bool = False) -> tuple[DataFrame, DataFrame]:
    """One step of an aggregate with min/max (and count/sum/avg) over an insert-only input:
    ``(out_delta, state_delta)``, O(groups) state instead of the input's integral.

    Rows are only ever inserted, so a group's min only falls and its max only rises: the new
    extremum is the extremum of the old one and of the delta's (NULLs ignored, NaN above every
    number: Spark's own min/max). ``prev_state`` is this node's trace: per group, its running
    totals (``aggregate_linear_step``'s layout) and extrema (``totals.extremum_name``), kept as
    -old +new rows (compaction leaves one row per group). Old totals are the signed sum of a
    group's rows (they telescope); old extrema the extremum over its rows (monotone: the last
    one is the extremum of all). A negative weight in ``delta`` fails the step (refused: the
    IR proved the input insert-only, so one is a broken promise, never a silent wrong answer).
    ``prev_narrowed``: as in ``aggregate_linear_step`` (an untouched group's rows count and
    extrema do not change: no output, no state row).
    """
    if not monotone(aggs):
        raise ValueError("aggregate_insert_only_step supports count/sum/avg/min/max without DISTINCT only")
    target, totals = _totals(delta, group_by, aggs, node)
    accs = totals.accs
    ext = {i: func for i, (_, func, _, _) in enumerate(aggs) if func in EXTREMA}
    names = [*[a.name for a in accs], *[extremum_name(i) for i in ext]]
    refuse = raise_sql(f"aggregate {node!r}: a change deletes rows (negative _weight) but its input is "
                       "insert-only (append_only)", "bigint")
    data = [q(c) for c in delta.columns if c != WEIGHT]
    guarded = delta.selectExpr(*data, f"CASE WHEN {W} < 0 THEN {refuse} ELSE {W} END AS {W}")
    prepared = totals.prepare(guarded).selectExpr("*", *[f"({aggs[i][2]}) AS __a{i}" for i in ext])
    part = (prepared.groupBy(*[col(g) for g in group_by])
            .agg(*[_summed(group_by, a) for a in accs],
                 *[F.expr(f"{f}(CASE WHEN {W} > 0 THEN __a{i} END) AS {q(extremum_name(i))}") for i, f in ext.items()])
            .where(f"{q(ROWS)} != 0"))  # a group whose rows all have weight 0 does not change
    keys = [q(g) for g in group_by]
    parts = [part.selectExpr(*keys, *[q(n) for n in names], f"0 AS {_PREV}")]
    if prev_state is not None:
        prev = (restrict(prev_state, part, group_by, group_by, broadcast_delta, in_list_max)
                if group_by and not prev_narrowed else prev_state)
        signed = [f"CASE WHEN {W} < 0 THEN -{q(a.name)} ELSE {q(a.name)} END AS {q(a.name)}" for a in accs]
        parts.append(prev.selectExpr(*keys, *signed, *[q(extremum_name(i)) for i in ext], f"1 AS {_PREV}"))
    union = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    both = totals.finished(union.groupBy(*[col(g) for g in group_by]).agg(
        *[_summed(group_by, a, f"CASE WHEN {_PREV} = 1 THEN {q(a.name)} ELSE 0 END", f"old{a.name}") for a in accs],
        *[_summed(group_by, a, q(a.name), f"new{a.name}") for a in accs],
        *[F.expr(f"{f}(CASE WHEN {_PREV} = 1 THEN {q(extremum_name(i))} END) AS {q('old' + extremum_name(i))}")
          for i, f in ext.items()],
        *[F.expr(f"{f}({q(extremum_name(i))}) AS {q('new' + extremum_name(i))}") for i, f in ext.items()]),
        "old", "new")

    def value(i: int, func: str, arg: str | None, prefix: str) -> str:
        return q(prefix + extremum_name(i)) if i in ext else totals.finish(i, func, arg, prefix)

    out_delta = _changes(both, group_by, aggs, target, first_step, value)
    # the state: -old +new row of every group whose row count changed (each touched group)
    state = (both.where(f"{q('old' + ROWS)} != {q('new' + ROWS)}")
             .selectExpr(*keys, *[f"array({_state_row(names, 'old', -1)}, {_state_row(names, 'new', 1)}) AS __r"])
             .selectExpr(*keys, "explode(__r) AS __row").where(f"__row.{q(ROWS)} > 0")
             .selectExpr(*keys, *[f"__row.{q(n)} AS {q(n)}" for n in [*names, WEIGHT]]))
    return out_delta, state


def _state_row(names: Sequence[str], prefix: str, weight: int) -> str:
    """The old or new state row of a group (its totals and extrema, then the weight), as a struct."""
    fields = [f"{sql_string(n)}, {q(prefix + n)}" for n in names]
    return f"named_struct({', '.join([*fields, f'{sql_string(WEIGHT)}, CAST({weight} AS bigint)'])})"


def aggregate_touched_step(delta: DataFrame, integral_after: DataFrame, prev_output: DataFrame | None,
                           group_by: Sequence[str], aggs: Sequence[Agg], first_step: bool, *,
                           broadcast_delta: bool = True, node: str = "aggregate",
                           in_list_max: int = IN_LIST_MAX) -> DataFrame:
    """One step of any aggregate by recomputing only the groups the delta touches.

    ``integral_after`` is the integrated input including ``delta``; ``prev_output`` is the
    integrated output so far (a Z-set, possibly several rows per group; None = nothing emitted
    yet, so every group is new). Returns -old +new rows of the touched groups, consolidated.
    Without ``group_by`` the whole input is one group, touched when the delta has any row or on
    the first step. The old rows are the stored ones, and a recomputed group gives the same bits
    for the same rows (``aggregate`` sums exactly), so nothing depends on float rounding.
    """
    if prev_output is None:
        return aggregate(integral_after, group_by, aggs, node=node)  # a consolidated set: all groups are new
    if group_by:
        new = aggregate(restrict(integral_after, delta, group_by, group_by, broadcast_delta, in_list_max), group_by, aggs,
                        node=node)
        old = restrict(prev_output, delta, group_by, group_by, broadcast_delta, in_list_max)
    elif first_step:
        new, old = aggregate(integral_after, group_by, aggs, node=node), prev_output
    else:
        # the single group is touched iff the delta has a row: a one-row marker, empty otherwise
        marker = delta.select(F.lit(1).alias("__touched")).limit(1)
        marker = F.broadcast(marker) if broadcast_delta else marker
        new = aggregate(integral_after.join(marker, how="left_semi"), group_by, aggs, node=node).join(
            marker, how="left_semi")
        old = prev_output.join(marker, how="left_semi")
    data = [c for c in new.columns if c != WEIGHT]
    return consolidate(new.unionByName(old.select(*[col(c) for c in data], (-col(WEIGHT)).alias(WEIGHT))))
