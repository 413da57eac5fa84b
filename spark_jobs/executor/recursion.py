"""One timestep of a recursive scope: the fixed-point loop over the inner clock, on 2-D deltas.

Iteration i computes d[t][i] of every body node (``operators/nested.py`` has the rules), then
runs ONE Spark job that materializes (``localCheckpoint``) the deltas later iterations read and
counts them. The counts say which deltas are empty (so later terms are skipped, not planned) and
when to stop. A zero change at i is not the end by itself: old facts derived at deeper iterations
may still meet this timestep's changes (ARCHITECTURE.md, "IR and incrementalizer"). So when the back
edges carry nothing at i, one more small job asks the traces whether any row beyond i matches the
keys of this timestep's changes so far; if none does, every later iteration is provably zero and
the loop stops. A small change therefore runs as many iterations as its consequences need, not as
many as the deepest fixed point ever did.

Traces are read once per timestep into a cache sorted on their lookup key (``LOOKUP``), and every
lookup first filters key ranges of the change, so an iteration reads the cached batches the change
touches, not the whole trace.

An incremental step whose changes are small (held on the driver) does not use Spark for the loop
at all (``_run_on_driver``): every value is a pyarrow Table and each lookup reads only the Parquet
row groups of the trace files whose statistics admit the change's keys (``state.lookup``; traces
are compacted sorted on their key, so few groups). Same rules (``nested`` on ``arrow.Kernels``),
same stopping rule; an iteration then costs milliseconds instead of ~1 s of planning and jobs.
It hands over to the Spark loop (from the start) where it cannot serve.

The scope's outer delta is ∫ (the sum over i) of its output's d[t][i]. State, per join/distinct
input stream: one trace with an ``_iter`` column, appended with this timestep's d[t][i] tagged
``_iter = i``; plus the depth (the iteration the loop stopped at; shown by status, not needed to stop).

In a query circuit (no state: a fixed point from scratch) the same loop runs with empty traces:
at t = 1 the 2-D rules are semi-naive evaluation (eq. 5.1 of the paper).
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import reduce
from typing import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from spark_jobs.executor import zset
from spark_jobs.executor.operators import arrow, linear
from spark_jobs.executor.operators.join import join
from spark_jobs.executor.session import temporary_conf
from spark_jobs.executor.operators.nested import (ITER, SparkKernels, Stream, deeper_probes, distinct_nested, held,
                                                  join_nested, join_spec, total)
from spark_jobs.executor.zset import WEIGHT, col, consolidate, empty_like
from spark_jobs.ir.graph import Circuit, Node
from spark_jobs.ir.incrementalize import incrementalize_body
from spark_jobs.state.lookup import TraceFiles

BROADCAST_ROWS = 200_000  # a delta with at most this many rows is broadcast for lookups...
BIG_STATE_ROWS = 200_000  # ...when the traces hold more rows than this (else one job does all)
LOCAL_ROWS = 50_000  # an iteration's deltas up to this many rows are kept on the driver
DEPTH = "depth"
LOOKUPS = ("sorted", "cached", "scan")
# how iterations read the traces: "sorted" = cached once per timestep, sorted on the lookup key, and
# filtered on key ranges first (skips cached batches); "cached" = cached, unsorted, no range filter;
# "scan" = the Parquet files read by every lookup (a broadcast semi-join over the whole trace)
LOOKUP = "sorted"
CACHE_BATCH_ROWS = 1024  # rows per cached batch of a sorted trace (the unit a range filter skips)
log = logging.getLogger(__name__)

ReadState = Callable[[str], "DataFrame | None"]
ReadFiles = Callable[[str], "TraceFiles | None"]
# run an incremental step's loop on the driver (pyarrow) when its changes are small; False: Spark
DRIVER_LOOP = True
DRIVER_TRACE_ROWS = 5_000_000  # ...unless its lookups would decode more trace rows than this


class RecursionLimitExceeded(RuntimeError):
    """The fixed point was not reached within ``settings.max_iterations`` iterations."""


def trace_id(scope: str, node_id: str) -> str:
    """The state id of a scope's per-iteration trace (or of its ``depth``)."""
    return f"{scope}/{node_id}"


@dataclass
class ScopeStep:
    output: DataFrame  # consolidated: the change of the scope's value (its value, from scratch)
    # id -> (kind, df, keys, sort_by): sort_by orders the trace's compacted files (see ``_scope_step``)
    updates: dict[str, tuple[str, DataFrame, tuple[str, ...], tuple[str, ...]]] = field(default_factory=dict)
    iterations: int = 0


@dataclass
class _Loop:
    """Per-iteration bookkeeping of one scope evaluation."""

    body: Circuit
    zero: dict[str, DataFrame]
    cur: dict[str, DataFrame] = field(default_factory=dict)
    empty: set[str] = field(default_factory=set)
    small: set[str] = field(default_factory=set)
    before: dict[str, DataFrame] = field(default_factory=dict)  # stream -> Σ_{i'<i} d[t][i']
    before_empty: set[str] = field(default_factory=set)
    before_small: set[str] = field(default_factory=set)
    history: dict[str, list[tuple[int, DataFrame]]] = field(default_factory=dict)
    local: bool = True  # keep this iteration's deltas on the driver (they are small)
    broadcast: bool = False  # broadcast small deltas for lookups (the state is big)
    prune: bool = False  # filter lookups on key ranges first (the traces are sorted on the key)

    def stream(self, node_id: str, trace: DataFrame | None) -> Stream:
        return Stream(self.cur[node_id], self.before[node_id], trace, node_id in self.empty,
                      node_id in self.before_empty, self.broadcast and node_id in self.small,
                      self.broadcast and node_id in self.before_small, single=not self.broadcast,
                      prune=self.prune)


def run_scope(node: Node, imports: Sequence[DataFrame], read: ReadState | None, *,
              broadcast_imports: bool, spark: SparkSession | None = None,
              files: ReadFiles | None = None) -> ScopeStep:
    """Evaluate one timestep of scope ``node`` on its imports' deltas (``read`` None: from scratch).

    With ``files`` (the state's Parquet files) and small driver-held changes, the loop runs on the
    driver (``_run_on_driver``); otherwise, or when it outgrows the driver, on Spark."""
    body: Circuit = node.body if node.param("incremental") else incrementalize_body(node.body)
    outputs = node.param("outputs") or ()
    if not outputs or outputs[0] not in body.outputs:
        raise ValueError(f"recursive scope {node.id!r}: its body defines no output {outputs[:1]}")
    spark = spark or _spark_of(imports)
    if read is not None and files is not None and DRIVER_LOOP:
        try:
            return _run_on_driver(node, body, imports, files, spark)
        except arrow.NotLocal as why:
            log.debug("scope %s: loop on Spark (%s)", node.id, why)
        except pa.ArrowException as why:  # a type Arrow cannot join or convert: Spark can
            log.info("scope %s: loop on Spark, Arrow refused: %s", node.id, why)
    stored = {n.id: (read(trace_id(node.id, n.id)) if read else None)
              for n in body if n.op == "integrate_nested"}
    traces = _cached(body, stored, spark)
    try:
        with temporary_conf(spark, {"spark.sql.inMemoryColumnarStorage.batchSize": str(CACHE_BATCH_ROWS)}):
            state, imports, on_driver = _read_state(traces, imports, local=read is not None)
        # Broadcast lookups pay where a big trace must be scanned; with the changes on the driver
        # and sorted traces, lookups read few cached batches: one partition, one stage, no broadcast.
        big = state.rows > BIG_STATE_ROWS and not (LOOKUP == "sorted" and on_driver)
        if not big:  # small state, small deltas: one partition each, so an iteration is one stage
            traces = {k: None if df is None else df.coalesce(1) for k, df in traces.items()}
            imports = [df.coalesce(1) for df in imports]
        with _loop_settings(spark, broadcast=big, interpreted=read is not None and on_driver):
            return _iterate(node, body, imports, traces, state, broadcast_imports, spark, broadcast=big,
                            local=read is not None)
    finally:
        for df in traces.values():
            if df is not None and LOOKUP != "scan":
                df.unpersist()


def _cached(body: Circuit, traces: dict[str, DataFrame | None], spark: SparkSession) -> dict[str, DataFrame | None]:
    """The traces as every iteration reads them (see LOOKUP): lazily cached, so the first job
    reading them (``_read_state``) stores them; with "sorted", each partition sorted on the
    trace's first key so a cached batch covers a narrow key range."""
    if LOOKUP == "scan":
        return traces
    # "sorted": one partition, so the cache itself is single-partitioned and lookups join it with
    # no shuffle (a coalesce on top does not survive: Spark pushes a semi-join below it)
    width = 1 if LOOKUP == "sorted" else max(1, spark.sparkContext.defaultParallelism)
    out: dict[str, DataFrame | None] = {}
    for t, df in traces.items():
        if df is not None:
            df = df.coalesce(width)
            keys = body[t].param("keys") or ()
            if LOOKUP == "sorted" and keys:
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


def _iterate(node: Node, body: Circuit, imports: Sequence[DataFrame], traces: dict[str, DataFrame | None],
             state: "_State", broadcast_imports: bool, spark: SparkSession, *, broadcast: bool,
             local: bool) -> ScopeStep:
    """The loop proper (see the module docstring)."""
    limit = int(node.param("max_iterations"))
    streams = {body[t].inputs[0] for t in traces}
    sources = {n.param("source") for n in body if n.op == "feedback"}
    out = body.outputs[node.param("outputs")[0]]
    kept = sources | streams | {out}
    # an incremental step starts on small deltas (kept on the driver); from scratch, on whole relations
    loop = _Loop(body, _zeros(body, imports), local=local, broadcast=broadcast, prune=LOOKUP == "sorted")
    for s in streams:
        loop.before[s] = loop.zero[s]
        loop.before_empty.add(s)
        loop.before_small.add(s)
    loop.history = {k: [] for k in streams | {out}}
    profile = _Profile(spark)
    for i in range(limit):
        previous = _Previous(dict(loop.cur), set(loop.empty), set(loop.small))
        loop.cur, loop.empty, loop.small = {}, set(), set()
        for n in body:
            if n.op != "integrate_nested":
                _evaluate(loop, n, i, imports, previous, traces, broadcast_imports)
        _materialize(loop, kept, streams)
        for k in loop.history:
            if k not in loop.empty:
                loop.history[k].append((i, loop.cur[k]))
        done = sources <= loop.empty and (i >= state.deepest or not _deeper_rows_match(loop, traces, i))
        profile.lap()
        if done:
            profile.log(node.id)
            return _finish(node, body, loop, traces, out, i, spark)
    raise RecursionLimitExceeded(_limit_message(node.id, limit))


def _limit_message(scope: str, limit: int) -> str:
    return (f"recursive node {scope!r} did not reach a fixed point within {limit} iterations: its relations "
            f"still changed at iteration {limit}. The recursion may diverge (e.g. a value that grows without "
            f"bound, such as n + 1); if it only converges slowly, raise settings.max_iterations in the circuit "
            f"file. Nothing was committed for this timestep.")


def _spark_of(imports: Sequence[DataFrame]) -> SparkSession:
    return imports[0].sparkSession if imports else SparkSession.getActiveSession()  # type: ignore[return-value]


@dataclass
class _State:
    """What one small job learns of the stored state before the loop."""

    rows: int  # rows in the traces (big state: broadcast the small deltas for lookups)
    deepest: int  # the deepest iteration any trace holds rows of (-1: none)


def _read_state(traces: dict[str, DataFrame | None], imports: Sequence[DataFrame],
                local: bool) -> tuple[_State, list[DataFrame], bool]:
    """Count the traces' rows and find their deepest iteration (beyond it no old fact can meet a
    change); with ``local``, also bring small imports to the driver. One job, which also fills
    the traces' caches. Returns the state, the imports, and whether they are held on the driver."""
    parts = [df.select(col(ITER).alias("_d"), F.lit(1).alias("_n")) for df in traces.values() if df is not None]
    summary = reduce(lambda a, b: a.unionByName(b), parts).agg(F.max("_d").alias("_d"), F.sum("_n").alias("_n")) \
        if parts else None
    frames = list(imports) + ([summary] if summary is not None else [])
    got = collect_together(frames, single=False) if local and frames else None
    if got is not None:
        imports, summary = got[0][:len(imports)], (got[0][-1] if summary is not None else None)
    row = summary.first() if summary is not None else None
    if row is None:
        return _State(0, -1), list(imports), got is not None
    deepest = -1 if row["_d"] is None else int(row["_d"])
    return _State(int(row["_n"] or 0), deepest), list(imports), got is not None


def _deeper_rows_match(loop: _Loop, traces: dict[str, DataFrame | None], i: int) -> bool:
    """Can an iteration after i produce anything, now that the back edges carried nothing at i?

    From i + 1 on, every ``cur`` is zero, so the only non-zero terms of a join or distinct read a
    trace's rows of an iteration beyond i that match this timestep's changes so far (``before``,
    which then stays fixed). One job looks for any such row; none means every later iteration is
    zero. (Sums are not consolidated: a match may be spurious, which costs iterations, never facts.)
    """
    kernels = SparkKernels(single=not loop.broadcast, prune=loop.prune)
    probes = [p.select(F.lit(1).alias("_hit")) for p in deeper_probes(
        loop.body, loop.before, loop.before_empty, loop.before_small, traces, i, kernels)]
    # a count, not take(1): take runs a job per batch of partitions it tries
    return bool(probes) and reduce(lambda p, q: p.unionByName(q), probes).count() > 0


class _Profile:
    """Seconds and Spark jobs per iteration, logged at DEBUG for benchmarks (``extra["profile"]``)."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark, self.seconds = spark, []
        self.started, self.first_job = time.time(), _jobs_submitted(spark)

    def lap(self) -> None:
        now = time.time()
        self.seconds.append(now - self.started)
        self.started = now

    def log(self, scope: str, driver: bool = False) -> None:
        jobs = _jobs_submitted(self.spark) - self.first_job
        log.debug("scope %s: %d iterations, %.2f s, %d Spark jobs%s", scope, len(self.seconds), sum(self.seconds),
                  jobs, " (on the driver)" if driver else "",
                  extra={"profile": {"iterations": len(self.seconds), "seconds": self.seconds, "jobs": jobs,
                                     "driver": driver}})


def _jobs_submitted(spark: SparkSession) -> int:
    """Spark jobs submitted so far in this thread's job group (or without one): a profile figure."""
    sc = spark.sparkContext
    return len(sc.statusTracker().getJobIdsForGroup(sc.getLocalProperty("spark.jobGroup.id")))


def _zeros(body: Circuit, imports: Sequence[DataFrame]) -> dict[str, DataFrame]:
    """An empty, typed Z-set per body node (plans only, no Spark job).

    Back edges make the body cyclic, so types are found by passes until every node has one: a
    feedback node takes its source's type, a plus the type of whichever inputs are known.
    """
    zero: dict[str, DataFrame] = {}
    for _ in range(len(body.nodes) + 1):
        before = len(zero)
        for n in body:
            if n.id in zero:
                continue
            if n.op == "delta0":
                zero[n.id] = empty_like(imports[n.param("port")])
            elif n.op == "feedback":
                if n.param("source") in zero:
                    zero[n.id] = zero[n.param("source")]
            elif n.op == "plus":
                known = [zero[i] for i in n.inputs if i in zero]
                if known:
                    zero[n.id] = empty_like(linear.plus(*known))
            elif all(i in zero for i in n.inputs):
                args = [zero[i] for i in n.inputs]
                zero[n.id] = empty_like(_linear_or_whole(n, args)) if n.op != "integrate_nested" else args[0]
        if len(zero) == before:
            break
    missing = [n.id for n in body if n.id not in zero]
    if missing:
        raise ValueError(f"cannot type the body nodes {missing}: no path from an input reaches them")
    return zero


def _linear_or_whole(n: Node, args: list[DataFrame]) -> DataFrame:
    """The node's operator applied to whole Z-sets (used on empty ones, to learn result types)."""
    if n.op == "map":
        return linear.map(args[0], n.param("columns"))
    if n.op == "filter":
        return linear.filter(args[0], n.param("where"))
    if n.op == "negate":
        return linear.negate(args[0])
    if n.op == "join_nested":
        return join(args[0], args[1], n.param("left_keys", ()), n.param("right_keys", ()),
                    bool(n.param("null_safe", False)), n.param("left_out", ()), n.param("right_out", ()))
    if n.op == "distinct_nested":
        return args[0]
    raise ValueError(f"operator {n.op!r} (node {n.id!r}) cannot run inside a recursive scope")


@dataclass
class _Previous:
    """The deltas of iteration i-1 (what the back edges read at i)."""

    cur: dict[str, DataFrame]
    empty: set[str]
    small: set[str]


def _evaluate(loop: _Loop, n: Node, i: int, imports: Sequence[DataFrame], previous: _Previous,
              traces: dict[str, DataFrame | None], broadcast_imports: bool) -> None:
    """d[t][i] of body node ``n``: known-empty values are the typed zero and skip all work.

    Smallness (may be broadcast) is known from the last count for back edges and propagated
    through operators whose inputs are all small; it is only a hint to the join planner.
    """
    value: DataFrame | None
    small = all(x in loop.small or x in loop.empty for x in n.inputs if loop.body[x].op != "integrate_nested")
    if n.op == "delta0":
        value = imports[n.param("port")] if i == 0 else None
        small = broadcast_imports
    elif n.op == "feedback":
        src = n.param("source")
        value = None if i == 0 or src in previous.empty else previous.cur[src]
        small = src in previous.small
    elif n.op == "plus":
        parts = [loop.cur[x] for x in n.inputs if x not in loop.empty]
        value = total(parts, not loop.broadcast) if parts else None
    elif n.op == "join_nested":
        a, b, ta, tb = n.inputs
        _hold(loop, [x for x, t in ((a, ta), (b, tb)) if traces[t] is not None])
        terms = join_nested(loop.stream(a, traces[ta]), loop.stream(b, traces[tb]), i, join_spec(n))
        value = total(terms, not loop.broadcast) if terms else None
    elif n.op == "distinct_nested":
        x, tx = n.inputs
        _hold(loop, [x] if traces[tx] is not None else [])
        value = distinct_nested(loop.stream(x, traces[tx]), i)
    else:
        value = None if n.inputs[0] in loop.empty else _linear_or_whole(n, [loop.cur[n.inputs[0]]])
    if n.op in ("join_nested", "distinct_nested"):
        small = small and all(x in loop.before_small for x in n.inputs if x in loop.before)
    if small:
        loop.small.add(n.id)
    if value is None:
        loop.cur[n.id] = loop.zero[n.id]
        loop.empty.add(n.id)
    else:
        loop.cur[n.id] = value


def _hold(loop: _Loop, streams: list[str]) -> None:
    """Bring the deltas a trace lookup is keyed by to the driver first, if they are computed in
    this iteration (one small job): a lookup by driver-held keys reads the few cached batches
    those keys fall in; by computed keys it would read and sort the whole trace."""
    todo = [x for x in streams if loop.prune and loop.local and x not in loop.empty and not held(loop.cur[x])]
    if not todo:
        return
    got = collect_together([loop.cur[x] for x in todo], not loop.broadcast)
    if got is None:  # too big for the driver: keep the plan, and stop trying for this step
        loop.local = False
        return
    for x, value, n in zip(todo, *got):
        loop.cur[x] = value
        if n == 0:
            loop.cur[x] = loop.zero[x]
            loop.empty.add(x)
        (loop.small.add if n <= BROADCAST_ROWS else loop.small.discard)(x)


def _materialize(loop: _Loop, kept: set[str], streams: set[str]) -> None:
    """Materialize what later iterations read (the kept deltas, the running sums) and count it.

    Small deltas (the usual case of an incremental step) are collected into local relations:
    one Spark job. Large ones (a first step, a big batch) are checkpointed on the executors.
    """
    single = not loop.broadcast
    pending: dict[tuple[str, str], DataFrame] = {}
    for k in sorted(kept - loop.empty):
        pending[("cur", k)] = loop.cur[k]
    for s in sorted(streams - loop.empty):  # Σ_{i'<=i}: rows concatenated, not consolidated
        parts = [loop.cur[s]] if s in loop.before_empty else [loop.before[s], loop.cur[s]]
        pending[("before", s)] = total(parts, single)
    if not pending:
        return
    frames = list(pending.values())
    result = collect_together(frames, single) if loop.local else None
    if result is None:
        result = checkpoint_together(frames, single)
    values, counts = result
    loop.local = sum(counts) <= LOCAL_ROWS // 2
    for key, value, n in zip(pending, values, counts):
        kind, k = key
        target, empty, small = ((loop.cur, loop.empty, loop.small) if kind == "cur" else
                                (loop.before, loop.before_empty, loop.before_small))
        target[k] = value
        (empty.add if n == 0 else empty.discard)(k)
        (small.add if n <= BROADCAST_ROWS else small.discard)(k)


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


def collect_together(frames: list[DataFrame], single: bool) -> tuple[list[DataFrame], list[int]] | None:
    """Compute several small DataFrames with one Spark job into a local relation on the driver
    (rows stay in the JVM); None when they hold more than LOCAL_ROWS rows (or under Spark Connect).

    A filter/projection of a local relation is folded by the optimizer into a local relation, so
    each frame and its row count come back without another job.
    """
    union = _packed(frames, single)
    jdf = getattr(union, "_jdf", None)
    if jdf is None:
        return None
    limited = union.limit(LOCAL_ROWS + 1).coalesce(1)._jdf  # a limit on top would collect in 2+ jobs
    rows = limited.collectAsList()
    if rows.size() > LOCAL_ROWS:
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


def _finish(node: Node, body: Circuit, loop: _Loop, traces: dict[str, DataFrame | None], out: str,
            depth: int, spark: SparkSession) -> ScopeStep:
    """∫ of the output's deltas, and the state: per-iteration deltas of each stream, the depth."""
    parts = [df for _, df in loop.history[out]]
    output = consolidate(linear.plus(*parts)) if parts else loop.zero[out]
    tagged = {}
    for t in traces:
        rows = [df.withColumn(ITER, F.lit(i).cast("int")) for i, df in loop.history[body[t].inputs[0]]]
        if rows:
            cols = zset.data_columns(rows[0])
            tagged[t] = consolidate(linear.plus(*rows)).select(*[col(c) for c in cols], col(WEIGHT))
    return _scope_step(node, body, output, tagged, depth, spark)


def _scope_step(node: Node, body: Circuit, output: DataFrame, tagged: dict[str, DataFrame], depth: int,
                spark: SparkSession) -> ScopeStep:
    """The step's result: its output, and as state each trace's new rows (``tagged``: consolidated,
    with ``_iter``) and the depth. Traces are looked up by (key, ``_iter``), so compaction sorts
    them on that: their row groups then cover narrow key ranges (see ``state.lookup``)."""
    step = ScopeStep(output, iterations=depth + 1)
    for t, df in tagged.items():
        keys = tuple(body[t].param("keys") or ()) + (ITER,)
        step.updates[trace_id(node.id, t)] = ("append", df, keys, keys)
    depth_df = zset.from_tuples(spark, [(depth, 1)], f"{DEPTH} int, {WEIGHT} long")
    step.updates[trace_id(node.id, DEPTH)] = ("replace", depth_df, (), ())
    return step


_DRIVER_OPS = {"delta0", "feedback", "plus", "negate", "map", "join_nested", "distinct_nested", "integrate_nested"}


def _run_on_driver(node: Node, body: Circuit, imports: Sequence[DataFrame], files: ReadFiles,
                   spark: SparkSession) -> ScopeStep:
    """The loop of ``_iterate`` with every value a pyarrow Table on the driver, and trace lookups
    reading only the Parquet row groups the changes touch (``state.lookup``): no Spark job and no
    query planning per iteration, so an iteration costs what its changes cost. The same 2-D rules
    (``nested``, on ``arrow.Kernels``) and the same stopping rule; the result goes back to Spark
    as local relations. Raises ``arrow.NotLocal`` (nothing done that matters) where it cannot
    serve: an operator Arrow does not run, changes not held on the driver, or deltas or lookups
    growing beyond LOCAL_ROWS / DRIVER_TRACE_ROWS."""
    unsupported = sorted({n.op for n in body if n.op not in _DRIVER_OPS or (
        n.op == "join_nested" and (n.param("null_safe", False) or not n.param("left_keys", ())))})
    if unsupported:
        raise arrow.NotLocal(f"operators {unsupported}")
    spark_zero = _zeros(body, imports)
    zero = {k: to_arrow_schema(df.schema, timezone="UTC").empty_table() for k, df in spark_zero.items()}
    tables = [_to_arrow(df) for df in imports]
    traces = {n.id: files(trace_id(node.id, n.id)) for n in body if n.op == "integrate_nested"}
    limit = int(node.param("max_iterations"))
    streams = {body[t].inputs[0] for t in traces}
    sources = {n.param("source") for n in body if n.op == "feedback"}
    out = body.outputs[node.param("outputs")[0]]
    kernels = arrow.Kernels()
    deepest = max([-1] + [m for t in traces.values() if t is not None and (m := t.max_of(ITER)) is not None])
    before = {s: zero[s] for s in streams}
    history: dict[str, list[tuple[int, pa.Table]]] = {k: [] for k in streams | {out}}
    cur: dict[str, pa.Table] = {}
    profile = _Profile(spark)
    for i in range(limit):
        previous, cur = cur, {}
        for n in body:
            if n.op != "integrate_nested":
                value = _driver_value(n, i, tables, previous, cur, before, traces, kernels)
                cur[n.id] = zero[n.id] if value is None or value.num_rows == 0 else _conform(value, zero[n.id])
                if cur[n.id].num_rows > LOCAL_ROWS:
                    raise arrow.NotLocal(f"iteration {i}: {cur[n.id].num_rows} rows of {n.id!r}")
        for s in streams:
            if cur[s].num_rows:
                before[s] = pa.concat_tables([before[s], cur[s]])
        for k in history:
            if cur[k].num_rows:
                history[k].append((i, cur[k]))
        if sum(t.decoded_rows() for t in traces.values() if t is not None) > DRIVER_TRACE_ROWS:
            raise arrow.NotLocal(f"iteration {i}: trace lookups decoded over {DRIVER_TRACE_ROWS} rows")
        quiet = all(cur[s].num_rows == 0 for s in sources)
        profile.lap()
        if quiet and (i >= deepest or not any(p.num_rows for p in deeper_probes(
                body, before, {s for s in streams if before[s].num_rows == 0}, set(), traces, i, kernels))):
            profile.log(node.id, driver=True)
            return _driver_finish(node, body, history, spark_zero[out], traces, out, i, spark)
    raise RecursionLimitExceeded(_limit_message(node.id, limit))


def _driver_value(n: Node, i: int, imports: list[pa.Table], previous: dict[str, pa.Table],
                  cur: dict[str, pa.Table], before: dict[str, pa.Table], traces: dict[str, "TraceFiles | None"],
                  kernels: arrow.Kernels) -> pa.Table | None:
    """d[t][i] of body node ``n`` as a table (None: empty); see ``_evaluate`` for the Spark form."""
    def stream(x: str, trace: "TraceFiles | None") -> Stream:
        return Stream(cur[x], before[x], trace, cur[x].num_rows == 0, before[x].num_rows == 0)

    if n.op == "delta0":
        return imports[n.param("port")] if i == 0 else None
    if n.op == "feedback":
        return previous.get(n.param("source"))
    if n.op == "plus":
        parts = [cur[x] for x in n.inputs if cur[x].num_rows]
        return kernels.total(parts) if parts else None
    if n.op == "join_nested":
        a, b, ta, tb = n.inputs
        terms = [t for t in join_nested(stream(a, traces[ta]), stream(b, traces[tb]), i, join_spec(n), kernels)
                 if t.num_rows]
        return kernels.total(terms) if terms else None
    if n.op == "distinct_nested":
        x, tx = n.inputs
        return distinct_nested(stream(x, traces[tx]), i, kernels)
    value = cur[n.inputs[0]]
    if value.num_rows == 0:
        return None
    return arrow.negate(value) if n.op == "negate" else arrow.select(value, n.param("columns"))


def _driver_finish(node: Node, body: Circuit, history: dict[str, list[tuple[int, pa.Table]]],
                   zero_out: DataFrame, traces: dict[str, "TraceFiles | None"], out: str, depth: int,
                   spark: SparkSession) -> ScopeStep:
    """``_finish`` for the driver loop: sums computed in Arrow, handed to Spark as local relations."""
    parts = [t for _, t in history[out]]
    output = _to_spark(spark, arrow.consolidate(pa.concat_tables(parts))) if parts else zero_out
    tagged = {}
    for t in traces:
        rows = [tb.append_column(pa.field(ITER, pa.int32(), False), pa.array(np.full(tb.num_rows, i, np.int32)))
                for i, tb in history[body[t].inputs[0]]]
        if rows:
            table = arrow.consolidate(pa.concat_tables(rows))
            cols = [c for c in table.column_names if c != WEIGHT]
            tagged[t] = _to_spark(spark, table.select(cols + [WEIGHT]))
    return _scope_step(node, body, output, tagged, depth, spark)


def _to_arrow(df: DataFrame) -> pa.Table:
    """A driver-held input change as a table (``arrow.local_table``)."""
    return arrow.local_table(df, LOCAL_ROWS)


def _conform(table: pa.Table, zero: pa.Table) -> pa.Table:
    """``table`` with the columns, order and types of the node's typed zero."""
    return table.select(zero.column_names).cast(zero.schema)


def _to_spark(spark: SparkSession, table: pa.Table) -> DataFrame:
    """A table as a Spark local relation (no job: the optimizer sees a LocalRelation)."""
    return spark.createDataFrame(table)
