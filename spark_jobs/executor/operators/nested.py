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

The rules (``join_nested``, ``distinct_nested``, the stop rule's ``deeper_probes``) are written
over ``Kernels``, a handful of Z-set operations: ``SparkKernels`` here, and ``arrow.Kernels`` for
the loop that runs on the driver with pyarrow tables; one statement of the rules serves both.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

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


def iter_range(lo: int | None, hi: int | None) -> Column:
    """``lo <= _iter <= hi`` (None: unbounded on that side)."""
    if lo is not None and lo == hi:
        return col(ITER) == lo
    conds = ([col(ITER) >= lo] if lo is not None else []) + ([col(ITER) <= hi] if hi is not None else [])
    return conds[0] & conds[1] if len(conds) == 2 else (conds[0] if conds else F.lit(True))


@dataclass(frozen=True)
class JoinSpec:
    """The parameters of a body join (see ``operators.join.join``)."""

    left_keys: Sequence[str]
    right_keys: Sequence[str]
    null_safe: bool
    left_out: Sequence[tuple[str, str]]
    right_out: Sequence[tuple[str, str]]


def join_spec(n: Any) -> JoinSpec:
    """The ``JoinSpec`` of a ``join_nested`` IR node."""
    return JoinSpec(n.param("left_keys", ()), n.param("right_keys", ()), bool(n.param("null_safe", False)),
                    n.param("left_out", ()), n.param("right_out", ()))


class Kernels(Protocol):
    """The few Z-set operations the 2-D rules are written in, so one statement of the rules serves
    Spark DataFrames (``SparkKernels``) and the driver-side loop's Arrow tables (``arrow.Kernels``)."""

    def total(self, parts: list[Any]) -> Any:
        """The Z-set sum of ``parts`` (rows concatenated)."""

    def lookup(self, trace: Any, iters: tuple[int | None, int | None], probe: Any, trace_keys: Sequence[str],
               probe_keys: Sequence[str], small: bool) -> Any:
        """Trace rows with ``iters[0] <= _iter <= iters[1]`` (None: unbounded) whose keys match a
        row of ``probe``, with the ``_iter`` column."""

    def drop_iter(self, df: Any) -> Any:
        """``df`` without its ``_iter`` column."""

    def join(self, left: Any, right: Any, spec: JoinSpec, side: str, small: bool) -> Any:
        """The bilinear join; ``side`` names the smaller input (a broadcast hint for Spark)."""

    def columns(self, df: Any) -> list[str]:
        """The data columns (all but the weight)."""

    def project(self, df: Any, cols: Sequence[str]) -> Any:
        """Only ``cols`` (for lookup probes)."""

    def distinct_change(self, cur: Any, before: Any, old: Any, i: int, cols: Sequence[str]) -> Any:
        """Per touched tuple, the four sums of ``distinct_nested`` and their ``crossing``; an
        argument None is empty. ``old`` has the ``_iter`` column."""


@dataclass(frozen=True)
class SparkKernels:
    """``Kernels`` on DataFrames: ``single`` keeps one partition, ``prune`` filters key ranges."""

    single: bool = False
    prune: bool = False

    def total(self, parts: list[DataFrame]) -> DataFrame:
        return total(parts, self.single)

    def lookup(self, trace: DataFrame, iters: tuple[int | None, int | None], probe: DataFrame,
               trace_keys: Sequence[str], probe_keys: Sequence[str], small: bool) -> DataFrame:
        return lookup(trace.where(iter_range(*iters)), probe, trace_keys, probe_keys, small, self.prune)

    def drop_iter(self, df: DataFrame) -> DataFrame:
        return df.drop(ITER)

    def join(self, left: DataFrame, right: DataFrame, spec: JoinSpec, side: str, small: bool) -> DataFrame:
        return join(left, right, spec.left_keys, spec.right_keys, spec.null_safe, spec.left_out,
                    spec.right_out, broadcast=side if small else None)  # type: ignore[arg-type]

    def columns(self, df: DataFrame) -> list[str]:
        return data_columns(df)

    def project(self, df: DataFrame, cols: Sequence[str]) -> DataFrame:
        return df.select(*[col(k) for k in cols])

    def distinct_change(self, cur: DataFrame | None, before: DataFrame | None, old: DataFrame | None, i: int,
                        cols: Sequence[str]) -> DataFrame:
        zero = F.lit(0).cast("long")

        def tagged(df: DataFrame, o=zero, oi=zero, b=zero, c=zero) -> DataFrame:
            return df.select(*[col(k) for k in cols], o.alias(_O), oi.alias(_OI), b.alias(_B), c.alias(_C))

        w = col(WEIGHT).cast("long")
        rows = []
        if cur is not None:
            rows.append(tagged(cur, c=w))
        if before is not None:
            rows.append(tagged(before, b=w))
        if old is not None:
            rows.append(tagged(old, o=F.when(col(ITER) < i, w).otherwise(zero),
                               oi=F.when(col(ITER) == i, w).otherwise(zero)))
        sums = total(rows, self.single).groupBy(*[col(k) for k in cols]).agg(
            *[F.sum(c).alias(c) for c in (_O, _OI, _B, _C)])
        d = crossing(*(F.col(n) for n in (_O, _OI, _B, _C)), lambda v: F.when(v > 0, F.lit(1)).otherwise(F.lit(0)))
        return sums.select(*[col(k) for k in cols], d.cast("long").alias(WEIGHT)).where(col(WEIGHT) != 0)


def join_nested(a: Stream, b: Stream, i: int, spec: JoinSpec, kernels: Kernels | None = None) -> list[Any]:
    """The terms of d(A⋈B)[t][i]: Σ dA[t1][i1] ⋈ dB[t2][i2] over max(t1,t2)=t, max(i1,i2)=i.

    Splitting A's side by (this timestep or earlier) × (iteration i or earlier) gives four terms:
    A_cur⋈V_b[t][i] + A_before⋈(B_cur + B_old@i) + A_old@i⋈(B_cur + B_before) + V_a[t-1][i-1]⋈B_cur.
    At t = 1 (no traces) this is semi-naive evaluation: ΔR⋈E and R⋈ΔE. Empty terms are left out.
    """
    k = kernels or SparkKernels(a.single, a.prune)
    lk, rk = spec.left_keys, spec.right_keys

    def old(trace: Any, iters: tuple[int | None, int], probe: Any, trace_keys: Sequence[str],
            probe_keys: Sequence[str], small: bool) -> Any:
        return k.drop_iter(k.lookup(trace, iters, probe, trace_keys, probe_keys, small))

    terms: list[Any] = []
    if not a.cur_empty:
        parts = b.parts()
        if b.trace is not None:
            parts.append(old(b.trace, (None, i), a.cur, rk, lk, a.cur_small))
        if parts:
            terms.append(k.join(a.cur, k.total(parts), spec, "left", a.cur_small))
    if not a.before_empty:
        parts = [] if b.cur_empty else [b.cur]
        if b.trace is not None:
            parts.append(old(b.trace, (i, i), a.before, rk, lk, a.before_small))
        if parts:
            terms.append(k.join(a.before, k.total(parts), spec, "left", a.before_small))
    if a.trace is not None and b.parts():
        b_now = k.total(b.parts())
        small = b.cur_small and b.before_small
        terms.append(k.join(old(a.trace, (i, i), b_now, lk, rk, small), b_now, spec, "right", small))
    if a.trace is not None and not b.cur_empty and i >= 1:
        terms.append(k.join(old(a.trace, (None, i - 1), b.cur, lk, rk, b.cur_small), b.cur, spec, "right",
                            b.cur_small))
    return terms


_O, _OI, _B, _C = "__o", "__oi", "__b", "__c"  # old up to i-1, old at i, before, cur


def crossing(o: Any, oi: Any, b: Any, c: Any, pos: Callable[[Any], Any]) -> Any:
    """d(distinct V)[t][i] of one tuple from its four sums (Spark columns or numpy arrays alike):
    [V[t][i]] - [V[t-1][i]] - [V[t][i-1]] + [V[t-1][i-1]], with [v] = ``pos(v)`` = 1 if v > 0."""
    return pos(o + oi + b + c) - pos(o + oi) - pos(o + b) + pos(o)


def distinct_nested(x: Stream, i: int, kernels: Kernels | None = None) -> Any | None:
    """d(distinct V)[t][i] = [V[t][i]] - [V[t-1][i]] - [V[t][i-1]] + [V[t-1][i-1]], [v] = 1 if v > 0.

    Only tuples touched at this timestep (in ``cur`` or ``before``) can change; for those the four
    values come from the trace (restricted to them), ``before`` and ``cur``. None = known empty.
    """
    if x.cur_empty and (x.before_empty or x.trace is None):
        return None  # nothing new at i, and no old activity at i can meet an earlier change
    k = kernels or SparkKernels(x.single, x.prune)
    cols = k.columns(x.cur)
    old = None
    if x.trace is not None:
        keys = k.total([k.project(df, cols) for df in x.parts()])
        old = k.lookup(x.trace, (None, i), keys, cols, cols, x.cur_small and x.before_small)
    return k.distinct_change(None if x.cur_empty else x.cur, None if x.before_empty else x.before, old, i, cols)


def deeper_probes(body: Any, before: dict[str, Any], before_empty: set[str], before_small: set[str],
                  traces: dict[str, Any], i: int, kernels: Kernels) -> list[Any]:
    """The trace rows of iterations beyond i that match this timestep's changes so far (``before``),
    per join or distinct of ``body``: once the back edges are quiet at i, later iterations can only
    be non-zero if one of these is non-empty (see ``recursion._deeper_rows_match``)."""
    found: list[Any] = []

    def probe(trace: Any, changes: str, trace_keys: Sequence[str], keys: Sequence[str]) -> None:
        if trace is not None and changes not in before_empty:
            found.append(kernels.lookup(trace, (i + 1, None), before[changes], trace_keys, keys,
                                        changes in before_small))

    for n in body:
        if n.op == "join_nested":
            a, b, ta, tb = n.inputs
            lk, rk = n.param("left_keys", ()), n.param("right_keys", ())
            probe(traces[ta], b, lk, rk)
            probe(traces[tb], a, rk, lk)
        elif n.op == "distinct_nested":
            x, tx = n.inputs
            cols = kernels.columns(before[x])
            probe(traces[tx], x, cols, cols)
    return found
