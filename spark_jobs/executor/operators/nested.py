"""Join and distinct on 2-D deltas (timestep t × iteration i): the kernels of incremental recursion.

A body relation's value is V[t][i]; its 2-D delta is d[t][i] = V[t][i] - V[t-1][i] - V[t][i-1]
+ V[t-1][i-1], so V[t][i] = Σ_{t'<=t, i'<=i} d[t'][i']. Per stream the evaluator knows

- ``cur``    = d[t][i], this timestep's delta at this iteration;
- ``before`` = Σ_{i'<i} d[t][i'], this timestep's deltas at earlier iterations (consolidated);
- ``trace``  = rows (tuple, ``_iter`` = j, weight) holding Σ_{t'<t} d[t'][j]: so the old delta at
  exactly i is the rows with ``_iter = i`` and the old value V[t-1][i] those with ``_iter <= i``.

Lookups into the trace are restricted to the keys of the (small) current changes, as for the
one-dimensional join and distinct: a semi-join with the change's keys broadcast. When the change
is held on the driver (the usual incremental step), the semi-join is preceded by a filter on a few
ranges of its first key column; on a trace sorted by that column (recursion.py caches it so) the
filter skips whole cached batches (or Parquet row groups) without reading them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, IntegralType, StringType

from spark_jobs.executor.operators.join import join
from spark_jobs.executor.zset import WEIGHT, col, data_columns, local_plus, plus, restrict

ITER = "_iter"  # the iteration column of a per-iteration trace
MAX_RANGES = 128  # a key-range filter has at most this many ranges (split at the widest gaps)


@dataclass
class Stream:
    """What the 2-D rules need of one input stream at iteration i (see the module docstring)."""

    cur: DataFrame
    before: DataFrame
    trace: DataFrame | None
    cur_empty: bool
    before_empty: bool
    cur_small: bool = True  # small enough to broadcast for a lookup
    before_small: bool = True
    single: bool = False  # everything is small: keep one partition (no shuffle stage at all)
    prune: bool = False  # filter trace lookups on key ranges of driver-held changes first

    def parts(self) -> list[DataFrame]:
        """This timestep's deltas up to and including i (cur + before), the non-empty ones."""
        return [df for df, empty in ((self.cur, self.cur_empty), (self.before, self.before_empty)) if not empty]


def total(dfs: Sequence[DataFrame], single: bool) -> DataFrame:
    """Z-set sum; with ``single``, kept in one partition so joins and groupings need no shuffle."""
    out = local_plus(*dfs)
    return out.coalesce(1) if single and len(dfs) > 1 else out


def lookup(trace: DataFrame, probe: DataFrame, trace_keys: Sequence[str], probe_keys: Sequence[str],
           small: bool, prune: bool) -> DataFrame:
    """Rows of ``trace`` whose keys match a row of ``probe`` (a semi-join, see ``restrict``).

    With ``prune`` and a probe held on the driver (its keys read without a Spark job), a filter on
    ranges of the first key goes first: it lets a key-sorted trace skip the batches not touched.
    """
    values = driver_values(probe, probe_keys[0]) if prune and trace_keys else None
    if values is not None:
        ranges = key_ranges(trace, trace_keys[0], values)
        if ranges is not None:
            trace = trace.where(ranges)
    return restrict(trace, probe, trace_keys, probe_keys, small)


def driver_values(df: DataFrame, column: str) -> list | None:
    """The values of ``column`` in ``df`` if its rows are held on the driver, read without a
    Spark job; None otherwise. Held: local relations, also coalesced, unioned or renamed (the
    shapes the loop builds from its materialized deltas)."""
    parts = _local_parts(df, column)
    if parts is None:
        return None
    spark = df.sparkSession
    out: list = []
    for plan, name in parts:
        local = spark._jvm.org.apache.spark.sql.classic.Dataset.ofRows(spark._jsparkSession, plan)  # type: ignore[attr-defined]
        out.extend(r[0] for r in DataFrame(local, spark).select(col(name)).collect())
    return out


def held(df: DataFrame) -> bool:
    """Are ``df``'s rows held on the driver (see ``driver_values``)?"""
    return _local_parts(df, df.columns[0]) is not None


def _local_parts(df: DataFrame, column: str) -> list | None:
    """The local relations ``df`` is made of, with the name ``column`` has in each; None if
    ``df`` is not only local relations."""
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        return None
    out: list = []
    try:
        return out if _walk(jdf.queryExecution().optimizedPlan(), column, out) else None
    except Exception:  # py4j: a plan shape or Spark version this does not know
        return None


def _walk(plan, column: str, out: list) -> bool:
    kind = plan.getClass().getSimpleName()
    if kind == "LocalRelation":
        out.append((plan, column))
        return True
    if kind == "Repartition" and not plan.shuffle():
        return _walk(plan.child(), column, out)
    if kind == "Union":
        names = _names(plan.output())
        if column not in names:
            return False
        children = plan.children()
        return all(_walk(children.apply(k), _names(children.apply(k).output())[names.index(column)], out)
                   for k in range(children.size()))
    if kind == "Project":
        exprs = plan.projectList()
        for k in range(exprs.size()):
            e = exprs.apply(k)
            if e.name() != column:
                continue
            source = e.child() if e.getClass().getSimpleName() == "Alias" else e
            if source.getClass().getSimpleName() != "AttributeReference":
                return False
            return _walk(plan.child(), source.name(), out)
    return False


def _names(attributes) -> list[str]:
    return [attributes.apply(k).name() for k in range(attributes.size())]


def key_ranges(df: DataFrame, column: str, values: list) -> Column | None:
    """A filter keeping the rows of ``df`` whose ``column`` lies in one of at most MAX_RANGES
    ranges covering ``values`` (None: a type without a simple order, nothing filtered).

    Ranges are closed intervals split at the widest gaps between the sorted values, compared with
    literals, so Spark can test them against cached-batch / row-group min/max statistics. Built as
    one SQL string: one call into the JVM, not a handful per range.
    """
    dtype = df.schema[column].dataType
    if not isinstance(dtype, (IntegralType, StringType, DateType)):
        return None
    present = sorted({v for v in values if v is not None})
    if len(present) <= MAX_RANGES:
        cuts = list(range(1, len(present)))
    elif isinstance(dtype, IntegralType):
        widest = sorted(range(1, len(present)), key=lambda j: present[j] - present[j - 1], reverse=True)
        cuts = sorted(widest[:MAX_RANGES - 1])
    else:
        cuts = [len(present) * k // MAX_RANGES for k in range(1, MAX_RANGES)]
    name = "`" + column.replace("`", "``") + "`"
    parts = []
    for lo, hi in (zip([0, *cuts], [*cuts, len(present)]) if present else ()):
        first, last = _sql(present[lo]), _sql(present[hi - 1])
        parts.append(f"{name} = {first}" if first == last else f"({name} >= {first} AND {name} <= {last})")
    if len(present) < len(values):  # a null key (lookups match keys null-safely)
        parts.append(f"{name} IS NULL")
    return F.expr(" OR ".join(parts)) if parts else F.lit(False)


def _sql(value) -> str:
    """A literal for an integral, string or date value."""
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, int):
        return str(value)
    return f"DATE'{value.isoformat()}'"


def old_at(trace: DataFrame, i: int) -> DataFrame:
    """Σ_{t'<t} d[t'][i]: the stored deltas of iteration exactly i."""
    return trace.where(col(ITER) == i).drop(ITER)


def old_upto(trace: DataFrame, i: int) -> DataFrame:
    """V[t-1][i] = Σ_{t'<t, j<=i} d[t'][j] (not consolidated)."""
    return trace.where(col(ITER) <= i).drop(ITER)


def join_nested(a: Stream, b: Stream, i: int, left_keys: Sequence[str], right_keys: Sequence[str],
                null_safe: bool, left_out: Sequence[tuple[str, str]],
                right_out: Sequence[tuple[str, str]]) -> list[DataFrame]:
    """The terms of d(A⋈B)[t][i]: Σ dA[t1][i1] ⋈ dB[t2][i2] over max(t1,t2)=t, max(i1,i2)=i.

    Splitting A's side by (this timestep or earlier) × (iteration i or earlier) gives four terms:
    A_cur⋈V_b[t][i] + A_before⋈(B_cur + B_old@i) + A_old@i⋈(B_cur + B_before) + V_a[t-1][i-1]⋈B_cur.
    At t = 1 (no traces) this is semi-naive evaluation: ΔR⋈E and R⋈ΔE. Empty terms are left out.
    """
    def term(left: DataFrame, right: DataFrame, side: str, small: bool) -> DataFrame:
        return join(left, right, left_keys, right_keys, null_safe, left_out, right_out,
                    broadcast=side if small else None)  # type: ignore[arg-type]

    terms: list[DataFrame] = []
    if not a.cur_empty:
        parts = b.parts()
        if b.trace is not None:
            parts.append(lookup(old_upto(b.trace, i), a.cur, right_keys, left_keys, a.cur_small, a.prune))
        if parts:
            terms.append(term(a.cur, total(parts, a.single), "left", a.cur_small))
    if not a.before_empty:
        parts = [] if b.cur_empty else [b.cur]
        if b.trace is not None:
            parts.append(lookup(old_at(b.trace, i), a.before, right_keys, left_keys, a.before_small, a.prune))
        if parts:
            terms.append(term(a.before, total(parts, a.single), "left", a.before_small))
    if a.trace is not None and b.parts():
        b_now = total(b.parts(), a.single)
        small = b.cur_small and b.before_small
        terms.append(term(lookup(old_at(a.trace, i), b_now, left_keys, right_keys, small, a.prune), b_now, "right", small))
    if a.trace is not None and not b.cur_empty and i >= 1:
        old = lookup(old_upto(a.trace, i - 1), b.cur, left_keys, right_keys, b.cur_small, a.prune)
        terms.append(term(old, b.cur, "right", b.cur_small))
    return terms


_O, _OI, _B, _C = "__o", "__oi", "__b", "__c"  # old up to i-1, old at i, before, cur


def distinct_nested(x: Stream, i: int) -> DataFrame | None:
    """d(distinct V)[t][i] = [V[t][i]] - [V[t-1][i]] - [V[t][i-1]] + [V[t-1][i-1]], [v] = 1 if v > 0.

    Only tuples touched at this timestep (in ``cur`` or ``before``) can change; for those the four
    values come from the trace (restricted to them), ``before`` and ``cur``. None = known empty.
    """
    if x.cur_empty and (x.before_empty or x.trace is None):
        return None  # nothing new at i, and no old activity at i can meet an earlier change
    cols = data_columns(x.cur)
    zero = F.lit(0).cast("long")

    def tagged(df: DataFrame, o=zero, oi=zero, b=zero, c=zero) -> DataFrame:
        return df.select(*[col(k) for k in cols], o.alias(_O), oi.alias(_OI), b.alias(_B), c.alias(_C))

    w = col(WEIGHT).cast("long")
    rows = []
    if not x.cur_empty:
        rows.append(tagged(x.cur, c=w))
    if not x.before_empty:
        rows.append(tagged(x.before, b=w))
    if x.trace is not None:
        keys = total([df.select(*[col(k) for k in cols]) for df in x.parts()], x.single)
        old = lookup(x.trace.where(col(ITER) <= i), keys, cols, cols, x.cur_small and x.before_small, x.prune)
        rows.append(tagged(old, o=F.when(col(ITER) < i, w).otherwise(zero), oi=F.when(col(ITER) == i, w).otherwise(zero)))
    sums = total(rows, x.single).groupBy(*[col(k) for k in cols]).agg(*[F.sum(c).alias(c) for c in (_O, _OI, _B, _C)])

    def pos(v):
        return F.when(v > 0, F.lit(1)).otherwise(F.lit(0))

    o, oi, b, c = (F.col(n) for n in (_O, _OI, _B, _C))
    d = pos(o + oi + b + c) - pos(o + oi) - pos(o + b) + pos(o)
    return sums.select(*[col(k) for k in cols], d.cast("long").alias(WEIGHT)).where(col(WEIGHT) != 0)
