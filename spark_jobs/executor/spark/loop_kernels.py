"""``loop.LoopKernels`` on Spark DataFrames: the fixed-point loop with one Spark job per iteration.

Each iteration runs ONE Spark job that materializes what later iterations read and counts it
(``materialize``): small deltas (an incremental step's usual case) are collected into local
relations on the driver, large ones (a first step, a big batch) checkpointed on the executors.
The counts say which deltas are empty (so later terms are skipped, not planned) and which are
small enough to broadcast. When the back edges are quiet, one more small job asks the traces
whether a deeper row matches this timestep's changes (``deeper_match``).

Traces are read once per timestep into a cache sorted on their lookup key (the policy's
``recursion.lookup``), and every lookup first filters key ranges of the change (when it is held
on the driver), so an iteration reads the cached batches the change touches, not the whole trace.
"""
from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from functools import reduce
from typing import Any, Callable, Iterator, Sequence

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, IntegralType, StringType

from spark_jobs.executor import loop as L
from spark_jobs.executor.spark import zset
from spark_jobs.executor.loop import ITER, DEPTH, JoinSpec, Loop, ScopeStep, crossing, deeper_probes, trace_id
from spark_jobs.executor.spark import linear
from spark_jobs.executor.spark.join import join as join_frames
from spark_jobs.executor.spark.session import temporary_conf
from spark_jobs.executor.spark.zset import WEIGHT, checked_sum, col, data_columns, local_plus, restrict
from spark_jobs.ir.graph import Circuit, Node
from spark_jobs.ir.operator import operator
from spark_jobs.policy import RecursionPolicy

ReadState = Callable[[str], "DataFrame | None"]


def run(node: Node, body: Circuit, imports: Sequence[DataFrame], read: ReadState | None, spark: SparkSession,
        policy: RecursionPolicy, broadcast_imports: bool) -> ScopeStep:
    """One timestep of scope ``node`` on Spark (``read`` None: a fixed point from scratch)."""
    stored = {n.id: (read(trace_id(node.id, n.id)) if read else None) for n in body if n.op == "integrate_nested"}
    traces = _cached(body, stored, spark, policy)
    try:
        with temporary_conf(spark, {"spark.sql.inMemoryColumnarStorage.batchSize": str(policy.cache_batch_rows)}):
            rows, deepest, imports, on_driver = _read_state(traces, imports, read is not None, policy)
        # Broadcast lookups pay where a big trace must be scanned; with the changes on the driver
        # and sorted traces, lookups read few cached batches: one partition, one stage, no broadcast.
        big = rows > policy.big_state_rows and not (policy.lookup == "sorted" and on_driver)
        if not big:  # small state, small deltas: one partition each, so an iteration is one stage
            traces = {k: None if df is None else df.coalesce(1) for k, df in traces.items()}
            imports = [df.coalesce(1) for df in imports]
        k = SparkLoopKernels(spark, policy, single=not big, prune=policy.lookup == "sorted", local=read is not None,
                             broadcast=big)
        zero = L.zeros(body, imports, zset.empty_like, lambda n, args: L.typed(k, n, args))
        with _loop_settings(spark, broadcast=big, interpreted=read is not None and on_driver):
            return L.run_loop(node, body, k, imports, traces, zero, deepest, broadcast_imports)
    finally:
        for df in traces.values():
            if df is not None and policy.lookup != "scan":
                df.unpersist()


def body_map(node: Node, df: DataFrame, k: "SparkLoopKernels") -> DataFrame:
    return linear.map(df, node.param("columns"))


def body_filter(node: Node, df: DataFrame, k: "SparkLoopKernels") -> DataFrame:
    return linear.filter(df, node.param("where"))


def body_negate(node: Node, df: DataFrame, k: "SparkLoopKernels") -> DataFrame:
    return linear.negate(df)


def _cached(body: Circuit, traces: dict[str, DataFrame | None], spark: SparkSession,
            policy: RecursionPolicy) -> dict[str, DataFrame | None]:
    """The traces as every iteration reads them (``policy.lookup``): lazily cached, so the first
    job reading them (``_read_state``) stores them; with "sorted", each partition sorted on the
    trace's first key so a cached batch covers a narrow key range."""
    if policy.lookup == "scan":
        return traces
    # "sorted": one partition, so the cache itself is single-partitioned and lookups join it with
    # no shuffle (a coalesce on top does not survive: Spark pushes a semi-join below it)
    width = 1 if policy.lookup == "sorted" else max(1, spark.sparkContext.defaultParallelism)
    out: dict[str, DataFrame | None] = {}
    for t, df in traces.items():
        if df is not None:
            df = df.coalesce(width)
            keys = body[t].param("keys") or ()
            if policy.lookup == "sorted" and keys:
                df = df.sortWithinPartitions(col(keys[0]), col(ITER))
            df = df.persist(StorageLevel.MEMORY_AND_DISK)
        out[t] = df
    return out


@contextmanager
def _loop_settings(spark: SparkSession, broadcast: bool, interpreted: bool) -> Iterator[None]:
    """Spark settings for the loop, restored afterwards.

    Adaptive execution runs every shuffle stage as a job of its own, and a broadcast is a job
    too; an iteration's deltas are small and re-planned every iteration anyway, so the loop runs
    with one job per iteration: AQE off, and broadcasts only where the state is big enough that
    scanning it beats a job (explicit hints; automatic broadcasts off).
    """
    wanted = {"spark.sql.adaptive.enabled": "false", "spark.sql.autoBroadcastJoinThreshold": "-1"}
    if not broadcast:  # small state: tiny plans, planned afresh each iteration; compiling costs more
        wanted["spark.sql.codegen.wholeStage"] = "false"
    if not broadcast and interpreted:
        # an incremental step's small deltas: no expression codegen either. The lookups' key-range
        # literals change every iteration, so each task compiled new predicates (measured: ~0.2 s
        # of a 0.4 s iteration job, 10k-edge graph). Not from scratch: whole relations, where
        # compiled expressions pay (interpreted, the 105k-edge closure took 65 s instead of 27 s)
        wanted["spark.sql.codegen.factoryMode"] = "NO_CODEGEN"
    with temporary_conf(spark, wanted):
        yield


def _read_state(traces: dict[str, DataFrame | None], imports: Sequence[DataFrame], local: bool,
                policy: RecursionPolicy) -> tuple[int, int, list[DataFrame], bool]:
    """Count the traces' rows and find their deepest iteration (beyond it no old fact can meet a
    change); with ``local``, also bring small imports to the driver. One job, which also fills
    the traces' caches. Returns the rows, the deepest iteration (-1: none), the imports, and
    whether they are held on the driver."""
    parts = [df.select(col(ITER).alias("_d"), F.lit(1).alias("_n")) for df in traces.values() if df is not None]
    summary = reduce(lambda a, b: a.unionByName(b), parts).agg(F.max("_d").alias("_d"), F.sum("_n").alias("_n")) \
        if parts else None
    frames = list(imports) + ([summary] if summary is not None else [])
    got = collect_together(frames, single=False, limit=policy.local_rows) if local and frames else None
    if got is not None:
        imports, summary = got[0][:len(imports)], (got[0][-1] if summary is not None else None)
    row = summary.first() if summary is not None else None
    if row is None:
        return 0, -1, list(imports), got is not None
    deepest = -1 if row["_d"] is None else int(row["_d"])
    return int(row["_n"] or 0), deepest, list(imports), got is not None


@dataclass
class SparkLoopKernels:
    """``loop.LoopKernels`` on DataFrames: ``single`` keeps one partition (no shuffle stage at
    all), ``prune`` filters trace lookups on key ranges of driver-held changes, ``local`` keeps an
    iteration's deltas on the driver while they are small, ``broadcast`` hints small deltas."""

    spark: SparkSession
    policy: RecursionPolicy
    single: bool = False
    prune: bool = False
    local: bool = True
    broadcast: bool = False
    name: str = "spark"

    # ---- the 2-D rules' operations ----
    def total(self, parts: list[DataFrame]) -> DataFrame:
        return total(parts, self.single)

    def lookup(self, trace: DataFrame, iters: tuple[int | None, int | None], probe: DataFrame,
               trace_keys: Sequence[str], probe_keys: Sequence[str], small: bool) -> DataFrame:
        return lookup(trace.where(iter_range(*iters)), probe, trace_keys, probe_keys, small, self.prune,
                      self.policy.max_ranges)

    def drop_iter(self, value: DataFrame) -> DataFrame:
        return value.drop(ITER)

    def join(self, left: DataFrame, right: DataFrame, spec: JoinSpec, side: str, small: bool) -> DataFrame:
        return join_frames(left, right, spec.left_keys, spec.right_keys, spec.null_safe, spec.left_out,
                           spec.right_out, broadcast=side if small else None)  # type: ignore[arg-type]

    def columns(self, value: DataFrame) -> list[str]:
        return data_columns(value)

    def project(self, value: DataFrame, cols: Sequence[str]) -> DataFrame:
        return value.select(*[col(k) for k in cols])

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
            *[checked_sum(c, cols).alias(c) for c in (_O, _OI, _B, _C)])
        d = crossing(*(F.col(n) for n in (_O, _OI, _B, _C)), lambda v: F.when(v > 0, F.lit(1)).otherwise(F.lit(0)))
        return sums.select(*[col(k) for k in cols], d.cast("long").alias(WEIGHT)).where(col(WEIGHT) != 0)

    # ---- the loop's own ----
    def linear(self, node: Node, value: DataFrame) -> DataFrame:
        """A row-wise body operator: its ``loop.spark`` kernel (``body_map``, ...)."""
        fn = operator(node.op).kernel("loop.spark")
        if fn is None:
            raise ValueError(f"operator {node.op!r} (node {node.id!r}) cannot run inside a recursive scope")
        return fn(node, value, self)

    def is_empty(self, value: DataFrame) -> bool:
        return False  # known only from a count (``materialize``)

    def settle(self, node: Node, value: DataFrame, zero: DataFrame) -> DataFrame:
        return value

    def hold(self, loop: Loop, streams: list[str]) -> None:
        """Bring the deltas a trace lookup is keyed by to the driver first, if they are computed in
        this iteration (one small job): a lookup by driver-held keys reads the few cached batches
        those keys fall in; by computed keys it would read and sort the whole trace."""
        todo = [x for x in streams if self.prune and self.local and not loop.cur[x].empty
                and not held(loop.cur[x].value)]
        if not todo:
            return
        got = collect_together([loop.cur[x].value for x in todo], not self.broadcast, self.policy.local_rows)
        if got is None:  # too big for the driver: keep the plan, and stop trying for this step
            self.local = False
            return
        for x, value, n in zip(todo, *got):
            loop.cur[x] = loop.empty(x) if n == 0 else L.Delta(value, False, n <= self.policy.broadcast_rows)

    def materialize(self, loop: Loop, kept: set[str], streams: set[str]) -> None:
        """Materialize what later iterations read (the kept deltas, the running sums) and count it:
        one Spark job (a collect into local relations, or a checkpoint when they are big)."""
        pending: dict[tuple[str, str], DataFrame] = {}
        for k in sorted(x for x in kept if not loop.cur[x].empty):
            pending[("cur", k)] = loop.cur[k].value
        for s in sorted(x for x in streams if not loop.cur[x].empty):  # Σ_{i'<=i}: rows concatenated
            parts = [loop.cur[s].value] if loop.before[s].empty else [loop.before[s].value, loop.cur[s].value]
            pending[("before", s)] = total(parts, self.single)
        if not pending:
            return
        frames = list(pending.values())
        result = collect_together(frames, self.single, self.policy.local_rows) if self.local else None
        if result is None:
            result = checkpoint_together(frames, self.single)
        values, counts = result
        self.local = sum(counts) <= self.policy.local_rows // 2
        for (kind, k), value, n in zip(pending, values, counts):
            target = loop.cur if kind == "cur" else loop.before
            target[k] = loop.empty(k) if n == 0 else L.Delta(value, False, n <= self.policy.broadcast_rows)

    def deeper_match(self, loop: Loop, i: int) -> bool:
        """One job looks for any trace row beyond i matching this timestep's changes."""
        probes = [p.select(F.lit(1).alias("_hit")) for p in deeper_probes(loop, i)]
        # a count, not take(1): take runs a job per batch of partitions it tries
        return bool(probes) and reduce(lambda p, q: p.unionByName(q), probes).count() > 0

    def consolidate(self, value: DataFrame) -> DataFrame:
        return zset.consolidate(value)

    def with_iter(self, value: DataFrame, i: int) -> DataFrame:
        cols = data_columns(value)
        return value.select(*[col(c) for c in cols], F.lit(i).cast("int").alias(ITER), col(WEIGHT))

    def depth(self, depth: int) -> DataFrame:
        return zset.from_tuples(self.spark, [(depth, 1)], f"{DEPTH} int, {WEIGHT} long")

    def jobs(self) -> int:
        """Spark jobs submitted so far in this thread's job group (or without one)."""
        sc = self.spark.sparkContext
        return len(sc.statusTracker().getJobIdsForGroup(sc.getLocalProperty("spark.jobGroup.id")))


_O, _OI, _B, _C = "__o", "__oi", "__b", "__c"  # old up to i-1, old at i, before, cur


# ---- lookups and materialization on Spark ------------------------------------------------------

def total(dfs: Sequence[DataFrame], single: bool) -> DataFrame:
    """Z-set sum; with ``single``, kept in one partition so joins and groupings need no shuffle."""
    out = local_plus(*dfs)
    return out.coalesce(1) if single and len(dfs) > 1 else out


def lookup(trace: DataFrame, probe: DataFrame, trace_keys: Sequence[str], probe_keys: Sequence[str],
           small: bool, prune: bool, max_ranges: int) -> DataFrame:
    """Rows of ``trace`` whose keys match a row of ``probe`` (a semi-join, see ``restrict``).

    With ``prune`` and a probe held on the driver (its keys read without a Spark job), a filter on
    ranges of the first key goes first: it lets a key-sorted trace skip the batches not touched.
    """
    values = driver_values(probe, probe_keys[0]) if prune and trace_keys else None
    if values is not None:
        ranges = key_ranges(trace, trace_keys[0], values, max_ranges)
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


def _walk(plan: Any, column: str, out: list) -> bool:
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


def _names(attributes: Any) -> list[str]:
    return [attributes.apply(k).name() for k in range(attributes.size())]


def key_ranges(df: DataFrame, column: str, values: list, max_ranges: int) -> Column | None:
    """A filter keeping the rows of ``df`` whose ``column`` lies in one of at most ``max_ranges``
    ranges covering ``values`` (None: a type without a simple order, nothing filtered).

    Ranges are closed intervals split at the widest gaps between the sorted values, compared with
    literals, so Spark can test them against cached-batch / row-group min/max statistics. Built as
    one SQL string: one call into the JVM, not a handful per range.
    """
    dtype = df.schema[column].dataType
    if not isinstance(dtype, (IntegralType, StringType, DateType)):
        return None
    present = sorted({v for v in values if v is not None})
    if len(present) <= max_ranges:
        cuts = list(range(1, len(present)))
    elif isinstance(dtype, IntegralType):
        widest = sorted(range(1, len(present)), key=lambda j: present[j] - present[j - 1], reverse=True)
        cuts = sorted(widest[:max_ranges - 1])
    else:
        cuts = [len(present) * k // max_ranges for k in range(1, max_ranges)]
    name = "`" + column.replace("`", "``") + "`"
    parts = []
    for lo, hi in (zip([0, *cuts], [*cuts, len(present)]) if present else ()):
        first, last = _sql(present[lo]), _sql(present[hi - 1])
        parts.append(f"{name} = {first}" if first == last else f"({name} >= {first} AND {name} <= {last})")
    if len(present) < len(values):  # a null key (lookups match keys null-safely)
        parts.append(f"{name} IS NULL")
    return F.expr(" OR ".join(parts)) if parts else F.lit(False)


def _sql(value: Any) -> str:
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


def _packed(frames: list[DataFrame], single: bool) -> DataFrame:
    """One union of several Z-sets of different schemas: row tag ``_k``, frame j in struct ``_s<j>``."""
    structs = [F.struct(*[col(c) for c in df.columns]) for df in frames]
    types = [df.select(s).schema[0].dataType for df, s in zip(frames, structs)]
    packed = []
    for j, df in enumerate(frames):
        cells = [structs[j].alias(f"_s{j}") if m == j else F.lit(None).cast(types[m]).alias(f"_s{m}")
                 for m in range(len(frames))]
        packed.append(df.select(F.lit(j).alias("_k"), *cells))
    union = reduce(lambda a, b: a.unionByName(b), packed)
    # a union has the partitions of all its parts: without this, tasks multiply every iteration
    width = 1 if single else int(union.sparkSession.conf.get("spark.sql.shuffle.partitions") or 1)
    return union.coalesce(max(1, width))


def _unpacked(stored: DataFrame, n: int) -> list[DataFrame]:
    return [stored.where(F.col("_k") == j).select(f"_s{j}.*") for j in range(n)]


def collect_together(frames: list[DataFrame], single: bool, limit: int) -> tuple[list[DataFrame], list[int]] | None:
    """Compute several small DataFrames with one Spark job into a local relation on the driver
    (rows stay in the JVM); None when they hold more than ``limit`` rows (or under Spark Connect).

    A filter/projection of a local relation is folded by the optimizer into a local relation, so
    each frame and its row count come back without another job.
    """
    union = _packed(frames, single)
    jdf = getattr(union, "_jdf", None)
    if jdf is None:
        return None
    limited = union.limit(limit + 1).coalesce(1)._jdf  # a limit on top would collect in 2+ jobs
    rows = limited.collectAsList()
    if rows.size() > limit:
        return None
    spark = union.sparkSession
    local = DataFrame(spark._jsparkSession.createDataFrame(rows, limited.schema()), spark)  # type: ignore[attr-defined]
    tags = Counter(r[0] for r in local.select("_k").collect())
    values = _unpacked(local, len(frames))
    return [v.coalesce(1) for v in values] if single else values, [tags.get(j, 0) for j in range(len(frames))]


def checkpoint_together(frames: list[DataFrame], single: bool) -> tuple[list[DataFrame], list[int]]:
    """Materialize several DataFrames on the executors with one Spark job; return them (lineage
    cut) and their row counts. The union is checkpointed lazily and counted: the count job
    computes and stores it; every frame is then a filter of the stored rows."""
    stored = _packed(frames, single).localCheckpoint(eager=False)
    found = {r["_k"]: r["count"] for r in stored.groupBy("_k").count().collect()}
    return _unpacked(stored, len(frames)), [int(found.get(j, 0)) for j in range(len(frames))]
