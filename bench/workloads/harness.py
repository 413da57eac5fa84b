"""The measuring machinery every workload shares: one engine step, one full recompute, job counts.

An incremental step is measured end to end through the engine (``run_step``): input discovery
and read, evaluation, the quality gate, state and view-delta writes, compaction, the manifest.
The full recompute evaluates the *query* circuit (not Q^Δ) over the integrated inputs in the
same Spark session and writes its result, which is what a batch refresh of the view costs.
Spark jobs are counted without a SparkListener: each measured call runs under its own job
group and ``statusTracker().getJobIdsForGroup`` lists its jobs afterwards.
"""
from __future__ import annotations

import itertools
import os
import shutil
import statistics
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.executor.evaluate import evaluate_step
from spark_jobs.executor.spark.session import compiled_classes
from spark_jobs.executor.sources import spark_schema
from spark_jobs.runtime.circuit import CircuitRuntime
from spark_jobs.runtime.step import run_step
from spark_jobs.spec.model import WEIGHT
from spark_jobs.state.layout import timestep_of
from spark_jobs.state.manifest import Manifest
from spark_jobs.state.store import VIEW_TRACE_PREFIX

_GROUPS = itertools.count(1)


@dataclass
class Jobs:
    """The Spark jobs one measured call ran (ids in submission order)."""

    group: str
    ids: list[int] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.ids)


@contextmanager
def job_group(spark: SparkSession, label: str) -> Iterator[Jobs]:
    """Run the body under a fresh job group; the yielded ``Jobs`` is filled on exit.

    Broadcasts and AQE stages inherit the group (Spark copies local properties to the threads
    it submits them from), so the count covers every job the body caused.
    """
    sc = spark.sparkContext
    group = f"bench-{os.getpid()}-{next(_GROUPS)}-{label}"
    jobs = Jobs(group)
    sc.setJobGroup(group, label)
    try:
        yield jobs
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
        jobs.ids = sorted(sc.statusTracker().getJobIdsForGroup(group))


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


# ---- bytes of state, from manifests ---------------------------------------------------------

def _trace_bytes(m: Manifest, views: bool) -> int:
    """Bytes of the distinct directories a manifest's traces list: operator state, or (with
    ``views``) the view traces the quality gate looks the previous view up in."""
    seen: dict[str, int] = {}
    for tid, entry in m.traces.items():
        if tid.startswith(VIEW_TRACE_PREFIX) != views:
            continue
        for d in entry.dirs:
            stat = entry.files.get(d)
            seen[d] = stat.bytes if stat else 0
    return sum(seen.values())


def _written_bytes(m: Manifest) -> int:
    """Bytes of the directories a commit created (named for its timestep): state deltas,
    compacted bases and view deltas, each counted once."""
    seen: dict[str, int] = {}
    for entry in m.traces.values():
        for d in entry.dirs:
            if timestep_of(d) == m.timestep and d in entry.files:
                seen[d] = entry.files[d].bytes
    for o in m.outputs.values():
        if o.delta:
            seen[o.delta] = o.bytes
    return sum(seen.values())


def state_io(prev: Manifest | None, cur: Manifest) -> dict[str, int]:
    """Bytes a step wrote, and bytes of state it could read: every operator-trace file the
    previous manifest lists (``bytes_read``) and the view traces (``view_bytes_read``). A lookup
    may skip row groups, so reads are an upper bound of what Parquet actually scanned."""
    ops = {t: e for t, e in cur.traces.items() if not t.startswith(VIEW_TRACE_PREFIX)}
    compacted = sum(1 for e in cur.traces.values()
                    if any(timestep_of(d) == cur.timestep for d in e.base))
    return {"bytes_written": _written_bytes(cur),
            "bytes_read": _trace_bytes(prev, False) if prev else 0,
            "view_bytes_read": _trace_bytes(prev, True) if prev else 0,
            "state_bytes": sum(e.bytes for e in ops.values()),
            "state_rows": sum(e.rows for e in ops.values()),
            "compactions": compacted}


# ---- one incremental step -------------------------------------------------------------------


@dataclass
class StepSample:
    change_rows: int
    seconds: float
    jobs: int
    bytes_written: int
    bytes_read: int
    view_bytes_read: int
    state_bytes: int
    state_rows: int
    compactions: int
    timestep: int
    compiled: int = 0  # classes Spark generated and compiled (Janino) during the step
    engine: str = "spark"  # which engine ran the step (the execution policy's choice)
    engine_reason: str = ""
    # bytes the step actually read: in-process, the input files and the Parquet row groups its
    # lookups decoded; on Spark, its stages' input bytes plus the driver's narrowing lookups
    bytes_actually_read: int = 0
    reference_s: float | None = None  # the hand-written step on the same change and state
    reference_jobs: int | None = None
    reference_view: str | None = None  # where the hand-written step wrote its view delta
    mode: str = ""  # incremental | recompute: what the cost model picked (the manifest's meta.cost)
    mode_reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["reference_view"]  # a scratch path, not a result
        return out


Reference = Callable[[CircuitRuntime], dict[str, Any]]


def measure_step(rt: CircuitRuntime, write_change: Callable[[], int], label: str = "step",
                 reference: Reference | None = None) -> StepSample:
    """Write one change (not timed), then run and commit one timestep through the engine.

    ``reference`` (a hand-written step) runs first on the same change files and the same
    committed state, timed on its own."""
    rows = write_change()
    ref = reference(rt) if reference is not None else {}
    prev = rt.store.manifest()
    compiled = compiled_classes(rt.spark)
    with job_group(rt.spark, label) as jobs:
        started = time.perf_counter()
        report = run_step(rt)
        seconds = time.perf_counter() - started
    cur = rt.store.manifest(report.timestep)
    assert cur is not None
    read = (report.bytes_read or 0) + (stage_input_bytes(rt.spark, jobs.ids) if report.engine == "spark" else 0)
    cost = (cur.meta or {}).get("cost") or {}
    return StepSample(rows, seconds, jobs.count, timestep=report.timestep,
                      mode=str(cost.get("mode") or ""), mode_reason=str(cost.get("reason") or ""),
                      compiled=compiled_classes(rt.spark) - compiled, reference_s=ref.get("seconds"),
                      reference_jobs=ref.get("jobs"), reference_view=ref.get("view_dir"), engine=report.engine,
                      engine_reason=report.engine_reason, bytes_actually_read=read, **state_io(prev, cur))


def stage_input_bytes(spark: SparkSession, ids: list[int]) -> int:
    """Bytes the stages of these Spark jobs read from files (Spark's ``inputBytes`` task metric,
    from the driver's status store; stages a job skipped read nothing)."""
    try:
        store = spark.sparkContext._jsc.sc().statusStore()  # type: ignore[union-attr]
    except Exception:
        return 0
    stages: set[int] = set()
    for j in ids:
        try:
            seq = store.job(j).stageIds()
        except Exception:
            continue
        stages.update(int(seq.apply(k)) for k in range(seq.size()))
    total = 0
    for sid in stages:
        try:
            total += int(store.lastStageAttempt(sid).inputBytes())
        except Exception:  # a skipped stage has no attempt
            continue
    return total


# ---- the full recompute ---------------------------------------------------------------------

class _NoState:
    """A StateReader with nothing committed: the query circuit is evaluated from scratch."""

    def read(self, node_id: str) -> DataFrame | None:
        return None


def full_inputs(spark: SparkSession, rt: CircuitRuntime, tables: dict[str, str]) -> dict[str, DataFrame]:
    """The integrated inputs as Z-sets: each current table (a Parquet file) with weight 1."""
    out = {}
    for name, path in tables.items():
        schema = spark_schema(rt.compiled.spec.inputs[name], with_weight=False)
        df = spark.read.schema(schema).parquet(path)
        out[name] = df.withColumn(WEIGHT, F.lit(1).cast("long"))
    return out


def recompute(rt: CircuitRuntime, tables: dict[str, str], out_dir: str) -> tuple[float, int, dict[str, int]]:
    """Evaluate the non-incremental query over the current tables and write every view.

    Returns (seconds, Spark jobs, rows per view). The rows are counted from the written
    Parquet footers, outside the timed region.
    """
    spark = rt.spark
    shutil.rmtree(out_dir, ignore_errors=True)
    with job_group(spark, "recompute") as jobs:
        started = time.perf_counter()
        inputs = full_inputs(spark, rt, tables)
        schemas = {n: spark_schema(i) for n, i in rt.compiled.spec.inputs.items()}
        result = evaluate_step(rt.compiled.query, inputs, _NoState(), first_step=True,
                               input_schemas=schemas, spark=spark)
        for view, df in result.outputs.items():
            df.write.mode("overwrite").parquet(os.path.join(out_dir, view))
        seconds = time.perf_counter() - started
    return seconds, jobs.count, {v: _parquet_rows(os.path.join(out_dir, v)) for v in result.outputs}


def _parquet_rows(folder: str) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(os.path.join(folder, f)).metadata.num_rows
               for f in os.listdir(folder) if f.endswith(".parquet"))


def view_matches(rt: CircuitRuntime, out_dir: str, view: str, float_cols: tuple[str, ...] = ()) -> dict[str, Any]:
    """Does the engine's integrated view equal the recompute's result? (Not timed.)

    Floating-point sums may differ in the last bits between the two (another summation
    order), so ``float_cols`` are compared with a relative tolerance of 1e-9 after matching
    rows on every other column.
    """
    spark = rt.spark
    mine = rt.store.read_view(view)
    theirs = spark.read.parquet(os.path.join(out_dir, view))
    if mine is None:
        return {"ok": theirs.isEmpty(), "engine_rows": 0, "differing_rows": theirs.count()}
    keys = [c for c in mine.columns if c not in float_cols]
    a = mine.select(*[F.col(c).alias(f"a_{c}") for c in mine.columns])
    b = theirs.select(*[F.col(c).alias(f"b_{c}") for c in mine.columns])
    cond = None
    for k in keys:
        term = F.col(f"a_{k}").eqNullSafe(F.col(f"b_{k}"))
        cond = term if cond is None else cond & term
    joined = a.join(b, on=cond, how="full_outer")
    bad = F.col(f"a_{keys[0]}").isNull() | F.col(f"b_{keys[0]}").isNull()
    for c in float_cols:
        x, y = F.col(f"a_{c}"), F.col(f"b_{c}")
        bad = bad | (F.abs(x - y) > F.lit(1e-9) * F.greatest(F.abs(x), F.abs(y), F.lit(1.0)))
    row = joined.agg(F.sum(F.when(bad, 1).otherwise(0)).alias("bad"), F.count(F.lit(1)).alias("n")).first()
    return {"ok": not row["bad"], "engine_rows": mine.count(), "differing_rows": int(row["bad"] or 0)}


@dataclass
class JobInfo:
    """One Spark job of a measured call: where it came from and how long it ran."""

    job_id: int
    ms: int
    name: str  # Spark's call site: the Python line that triggered the job
    description: str
    tasks: int
    stages: int
    start_ms: int = 0  # epoch milliseconds (jobs of one step overlap: AQE submits stages concurrently)
    end_ms: int = 0


def job_details(spark: SparkSession, ids: list[int]) -> list[JobInfo]:
    """Durations and call sites of finished jobs, from the driver's status store (local/cluster
    mode only: Spark Connect has no SparkContext). Empty if the store is not reachable."""
    try:
        store = spark.sparkContext._jsc.sc().statusStore()  # type: ignore[union-attr]
    except Exception:
        return []
    out = []
    for j in ids:
        try:
            d = store.job(j)
        except Exception:
            continue
        sub, comp = d.submissionTime(), d.completionTime()
        start = sub.get().getTime() if sub.isDefined() else 0
        end = comp.get().getTime() if comp.isDefined() else start
        desc = d.description().get() if d.description().isDefined() else ""
        out.append(JobInfo(j, int(end - start), str(d.name()), str(desc), int(d.numTasks()),
                           int(d.stageIds().size()), int(start), int(end)))
    return out


def busy_ms(jobs: list[JobInfo]) -> int:
    """Milliseconds during which at least one of the jobs ran (overlaps counted once)."""
    total, cur_start, cur_end = 0, None, None
    for j in sorted(jobs, key=lambda j: j.start_ms):
        if cur_end is None or j.start_ms > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = j.start_ms, j.end_ms
        else:
            cur_end = max(cur_end, j.end_ms)
    if cur_end is not None:
        total += cur_end - cur_start
    return int(total)
