"""The Spark path is lean: a small step forced onto Spark runs ONE Spark job (issue #25: at most 2).

What a cluster or Spark Connect profile pays per small step is mostly Spark's per-job cost (a
job is scheduled, its tasks shipped and its result brought back), so the count of jobs is the
figure that must not creep up again. A small change this process reaches is read, counted and
bag-checked in-process and handed to Spark as local relations (``SparkSteps.arrow_reads``); the
one job brings the view deltas, state updates and checked input changes back as Arrow
(``SparkSteps.settle``). The quality gate (built-in checks and a declared expectation), the bag
check and the writes then run on the driver without a job. (Where Spark reads the change, a
second job counts it and brings it to the driver: ``count_inputs``.)

Counted, not timed: every job the step causes runs under the step's own job group (broadcasts
and AQE stages inherit it), and ``statusTracker().getJobIdsForGroup`` lists them afterwards.
Data is tiny (TPC-H SF 0.0005: 75 customers), so the whole module takes seconds.
"""
from __future__ import annotations

import os
import time

import pytest

from bench.generators import IdentityGenerator, TpchGenerator
from bench.workloads.harness import job_details, job_group
from spark_jobs.config import PROJECT_ROOT
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from tests.policies import config
from tests.test_bag_check import CIRCUIT as BAG_CIRCUIT

MAX_JOBS = 1

# W1 (bench/circuits/w1_tpch.yaml) with a declared expectation on its view, so the gate has a
# Great Expectations suite to run as well as the built-in checks.
W1 = (PROJECT_ROOT / "bench" / "circuits" / "w1_tpch.yaml").read_text().replace(
    "outputs:\n  q3: {}",
    "outputs:\n  q3:\n    expectations:\n      - expect_column_values_to_be_between: {column: items, min_value: 1}")
assert "expect_column_values_to_be_between" in W1, "bench/circuits/w1_tpch.yaml's outputs changed"
IDENTITY = (PROJECT_ROOT / "bench" / "circuits" / "identity.yaml").read_text()


def _steps(spark, tmp_path, circuit: str, gen, rows: int, steps: int = 2, **policy) -> list[tuple[int, list]]:
    """Load, then ``steps`` small steps on Spark; each step's (job count, job call sites)."""
    path = tmp_path / "circuit.yaml"
    path.write_text(circuit)
    gen.initial()
    run_step(open_circuit(str(path), config(tmp_path)))  # the load, in-process: only small steps are counted
    rt = open_circuit(str(path), config(tmp_path, engine="spark", **policy))
    out = []
    for _ in range(steps):
        gen.change(rows)
        started = time.perf_counter()
        with job_group(rt.spark, "lean-step") as jobs:
            report = run_step(rt)
        print(f"step {report.timestep}: {jobs.count} jobs, {time.perf_counter() - started:.2f} s (under load)")
        assert report.engine == "spark" and report.quality, report
        assert rt.committed.manifest().meta["engine"] == "spark"
        out.append((jobs.count, [d.name for d in job_details(rt.spark, jobs.ids)]))
    return out


def test_small_w1_step_on_spark_runs_one_job(spark, tmp_path):
    gen = TpchGenerator(str(tmp_path), 0.0005)
    for count, sites in _steps(spark, tmp_path, W1, gen, rows=60, steps=1):  # a cold W1 step on Spark is slow
        assert count <= MAX_JOBS, f"a small W1 step on Spark ran {count} jobs: {sites}"


def test_identity_step_on_spark_runs_one_job(spark, tmp_path):
    for count, sites in _steps(spark, tmp_path, IDENTITY, IdentityGenerator(str(tmp_path), 1_000), rows=100):
        assert count <= MAX_JOBS, f"an identity step on Spark ran {count} jobs: {sites}"


def test_a_step_without_changes_on_spark_runs_no_job(spark, tmp_path):
    """Nothing new arrived: the step commits an empty timestep without asking Spark anything."""
    gen = IdentityGenerator(str(tmp_path), 100)
    path = tmp_path / "circuit.yaml"
    path.write_text(IDENTITY)
    rt = open_circuit(str(path), config(tmp_path, engine="spark"))
    gen.initial()
    run_step(rt)
    with job_group(rt.spark, "lean-empty") as jobs:
        run_step(rt)
    assert rt.committed.last_committed() == 2
    assert jobs.count == 0, [d.name for d in job_details(rt.spark, jobs.ids)]


# ---- a small change is read, counted and bag-checked in this process, then handed to Spark ------
BAG = BAG_CIRCUIT  # a distinct and a count over one input: what the bag check guards


def _lean_and_spark_reads(tmp_path, circuit: str) -> dict[str, object]:
    """The same circuit on two roots, both on Spark: ``lean`` (a small change read in-process and
    handed over) and ``spark-reads`` (``local_change_rows: 0``: every change read by Spark)."""
    out = {}
    for name, policy in (("lean", {}), ("spark-reads", {"local_change_rows": 0})):
        root = tmp_path / name
        root.mkdir()
        (root / "c.yaml").write_text(circuit)
        out[name] = open_circuit(str(root / "c.yaml"), config(root, engine="spark", **policy))
    return out


def _write_items(rt, name: str, rows: list[tuple]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = f"{rt.config.data_root}/inbox/items"
    os.makedirs(folder, exist_ok=True)
    pq.write_table(pa.table({"k": pa.array([r[0] for r in rows], pa.int64()), "v": [r[1] for r in rows],
                             "_weight": pa.array([r[2] for r in rows], pa.int64())}), f"{folder}/{name}")


def _outcome(rt):
    """A step's outcome, comparable across roots: the refusal's (file name, reason), or the views."""
    from spark_jobs.executor.sources import InputRefused
    from tests import oracle

    root = rt.config.data_root
    try:
        with job_group(rt.spark, "lean-diff") as jobs:
            report = run_step(rt)
    except InputRefused as exc:
        return ("refused", [(os.path.basename(p), r.replace(root, "<root>")) for p, r in exc.problems]), None
    views = {v: oracle.view_counter(rt, v) for v in ("uniq", "counts")}
    return ("committed", views, sorted(n.replace(root, "<root>") for n in report.notes)), jobs.count


@pytest.mark.parametrize("settings", ["", "settings: {on_negative: quarantine}"])
def test_a_change_read_in_process_on_spark_refuses_and_quarantines_as_spark_reads_do(spark, tmp_path, settings):
    """Ghost deletes, a weight out of range and valid steps: the lean Spark step (change read,
    counted and checked in-process) refuses the same files with the same reasons, quarantines the
    same rows and commits the same views as a Spark step that reads everything with Spark; its
    committed small steps run ONE Spark job (the results' collect)."""
    rts = _lean_and_spark_reads(tmp_path, BAG.format(settings=settings))
    steps = [[(1, "a", 2), (2, "b", 1), (None, "n", 1)],
             [(1, "a", -1), (2, "b", -2), (4, "ghost", -1), (None, "n", -1), (3, "c", 1)],
             [(5, "e", 10 ** 18)],
             [(1, "a", -1), (None, "n", 1), (6, "f", 3)]]
    for i, rows in enumerate(steps):
        outcomes = {}
        for name, rt in rts.items():
            _write_items(rt, f"{i:03d}.parquet", rows)
            outcomes[name] = _outcome(rt)
            if outcomes[name][0][0] == "refused":
                os.remove(f"{rt.config.data_root}/inbox/items/{i:03d}.parquet")
        assert outcomes["lean"][0] == outcomes["spark-reads"][0], (i, outcomes)
        if i == 0:
            continue  # the load
        lean_jobs = outcomes["lean"][1]
        if outcomes["lean"][0][0] == "committed" and not rts["lean"].store.manifest().meta.get("quarantined"):
            assert lean_jobs == 1, (i, lean_jobs)


LATE = """
name: lean_late
inputs:
  clicks:
    schema: {user_id: long, ts: timestamp, page: string}
    source: {kind: changes, path: inbox/clicks, format: parquet}
    time: {column: ts, lateness: "10 minutes"ON_LATE}
nodes:
  per_user: {op: aggregate, input: clicks, group_by: [user_id], aggregates: {n: "count(*)"}}
outputs:
  per_user: {}
"""


@pytest.mark.parametrize("on_late", ["", ", on_late: refuse"])
def test_late_rows_of_a_change_read_in_process_on_spark_are_left_out_or_refused_as_spark_reads_do(
        spark, tmp_path, on_late):
    import datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_jobs.executor.sources import InputRefused
    from tests import oracle

    t0 = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    batches = [[(1, 30)], [(1, 25), (2, 3), (1, 1)], [(2, 40), (3, 31)]]
    rts = _lean_and_spark_reads(tmp_path, LATE.replace("ON_LATE", on_late))
    for i, rows in enumerate(batches):
        outcomes = {}
        for name, rt in rts.items():
            folder = f"{rt.config.data_root}/inbox/clicks"
            os.makedirs(folder, exist_ok=True)
            path = f"{folder}/b{i}.parquet"
            pq.write_table(pa.table({
                "user_id": pa.array([u for u, _ in rows], pa.int64()),
                "ts": pa.array([t0 + datetime.timedelta(minutes=m) for _, m in rows], pa.timestamp("us", tz="UTC")),
                "page": ["p"] * len(rows), "_weight": pa.array([1] * len(rows), pa.int64())}), path)
            try:
                run_step(rt)
                meta = rt.store.manifest().inputs["clicks"]["event_time"]
                outcomes[name] = (oracle.view_counter(rt, "per_user"), meta)
            except InputRefused as exc:
                outcomes[name] = [(os.path.basename(p), r) for p, r in exc.problems]
                os.remove(path)
        assert outcomes["lean"] == outcomes["spark-reads"], (i, outcomes)


def test_projections_of_a_local_change_come_back_without_a_job_and_as_spark_gives_them(spark):
    """``held_table``: a filter and projection of a local relation is folded on the driver, so
    its rows come back with no job, with the values and types ``toArrow`` gives (NULLs, NaN,
    decimals, dates, non-ASCII); a plan the optimizer cannot fold (an aggregate, a union) or a
    timestamp column (naive local times in Python) is left to the one collect job."""
    import datetime
    import decimal

    import pyarrow as pa
    from pyspark.sql import functions as F

    from spark_jobs.executor.spark.local_relations import held_table
    from spark_jobs.state.arrow_trace import arrow_of

    table = pa.table({
        "a": pa.array([1, None, 3], pa.int64()), "s": ["x", None, "é"],
        "d": pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("-2.25")], pa.decimal128(10, 2)),
        "dt": pa.array([datetime.date(2024, 1, 1), None, datetime.date(1999, 12, 31)]),
        "f": [1.5, float("nan"), None], "_weight": pa.array([1, -1, 2], pa.int64())})
    df = spark.createDataFrame(table)
    picked = df.select("a", "s", "d", "dt", "f", (F.col("_weight") * 2).alias("_weight")).where("a IS NULL OR a > 1")
    with job_group(spark, "held") as jobs:
        held = held_table(picked, 100)
    assert jobs.count == 0 and held is not None
    expected = picked.toArrow().cast(arrow_of(picked.schema))
    assert held.schema == expected.schema and repr(held.to_pylist()) == repr(expected.to_pylist())
    assert held_table(picked, 1) is None  # more rows than asked for
    assert held_table(df.groupBy("a").count(), 100) is None
    assert held_table(df.unionByName(df), 100) is None
    assert held_table(df.withColumn("t", F.lit(datetime.datetime(2024, 1, 1))), 100) is None


def test_a_dag_runs_stage_tasks_on_spark_read_a_small_change_in_process(spark, tmp_path):
    """Airflow's per-stage tasks on Spark: the input stage reads, counts and bag-checks a small
    change in-process and stages it without a Spark job (``RunValues.spark_steps``), as
    ``dbsp step`` does; the views, refusals and quarantines are those of the stage that reads
    the change with Spark (``local_change_rows: 0``: a count job and a collect job)."""
    from spark_jobs.executor.sources import InputRefused
    from spark_jobs.runtime import timestep
    from tests import oracle
    from tests.dag_tasks import run_stage_tasks

    rts = _lean_and_spark_reads(tmp_path, BAG.format(settings="settings: {on_negative: quarantine}"))
    for rt in rts.values():  # the load: a step
        _write_items(rt, "000.parquet", [(1, "a", 2), (2, "b", 1), (None, "n", 1)])
        run_step(rt)
    steps = [[(1, "a", -1), (None, "n", 1), (6, "f", 3)],  # valid: staged without a job
             [(1, "a", -1), (2, "b", -2), (4, "ghost", -1), (3, "c", 1)],  # quarantined
             [(5, "e", 10 ** 18)]]  # refused
    sc = spark.sparkContext
    for i, rows in enumerate(steps, start=1):
        outcomes, input_jobs = {}, {}
        for name, rt in rts.items():
            root = rt.config.data_root
            _write_items(rt, f"{i:03d}.parquet", rows)
            run_id = f"r{i}"
            timestep.plan(rt, run_id)
            before = set(sc.statusTracker().getJobIdsForGroup(f"dbsp-{rt.name}-items"))
            try:
                run_stage_tasks(rt, run_id, "per_stage")
            except InputRefused as exc:
                outcomes[name] = ("refused", [(os.path.basename(p), r.replace(root, "<root>")) for p, r in exc.problems])
                continue
            input_jobs[name] = len(set(sc.statusTracker().getJobIdsForGroup(f"dbsp-{rt.name}-items")) - before)
            timestep.check(rt, run_id)
            done = timestep.commit(rt, run_id)
            quarantined = {k: {f: v for f, v in q.items() if f != "path"}
                           for k, q in (rt.store.manifest().meta.get("quarantined") or {}).items()}
            outcomes[name] = ("committed", {v: oracle.view_counter(rt, v) for v in ("uniq", "counts")},
                              quarantined, sorted(n.replace(root, "<root>") for n in done.get("notes") or []))
        assert outcomes["lean"] == outcomes["spark-reads"], (i, outcomes)
        if i == 1:
            assert input_jobs["lean"] == 0 and input_jobs["spark-reads"] >= 1, input_jobs
    assert outcomes["lean"][0] == "refused"


def test_a_small_w1_step_on_spark_reads_no_state_through_spark_and_lazy_reads_have_spark_schemas(
        spark, tmp_path, monkeypatch):
    """Every state lookup of a small W1 step is narrowed on the driver and no integrator's value
    is read in the step, so Spark resolves none of the state's directories (``lazy.LazyFrame``);
    a lazy read's schema is the one Spark gives the same read, and it reads the same rows."""
    from spark_jobs.executor.spark.lazy import LazyFrame
    from spark_jobs.runtime.step_types import StoreReader
    from spark_jobs.state import store as store_module

    gen = TpchGenerator(str(tmp_path), 0.0005)
    path = tmp_path / "circuit.yaml"
    path.write_text(W1)
    gen.initial()
    run_step(open_circuit(str(path), config(tmp_path)))
    rt = open_circuit(str(path), config(tmp_path, engine="spark"))
    reads: list[list[str]] = []
    real = store_module.read_dirs
    monkeypatch.setattr(store_module, "read_dirs", lambda s, uris, schema: reads.append(list(uris)) or real(s, uris, schema))
    for _ in range(2):
        gen.change(60)
        report = run_step(rt)
        assert report.engine == "spark"
    assert reads == [], f"a small W1 step on Spark read state through Spark: {reads}"
    traces = rt.store.manifest().traces
    assert traces
    for trace in traces:
        lazy = StoreReader(rt.store).read(trace)
        eager = rt.store.read_trace(trace)
        if eager is None:
            continue
        assert isinstance(lazy, LazyFrame) and not lazy.materialized
        assert lazy.schema == eager.schema, trace
        assert sorted(lazy.collect()) == sorted(eager.collect()), trace
        assert lazy.materialized


def test_a_small_w1_step_on_spark_joins_its_deltas_by_hash_not_by_sort_merge(spark, tmp_path, monkeypatch):
    """A driver-held step joins two delta-sized values with a shuffled hash join: a sort-merge
    join adds a sort on each side, two more generated stages per join in the step's one job
    (W1: 21 stages with them, 13 without)."""
    from pyspark.sql.classic.dataframe import DataFrame

    plans: list[str] = []
    real = DataFrame.toArrow
    monkeypatch.setattr(DataFrame, "toArrow",
                        lambda self: plans.append(self._jdf.queryExecution().executedPlan().toString()) or real(self))
    gen = TpchGenerator(str(tmp_path), 0.0005)
    for count, sites in _steps(spark, tmp_path, W1, gen, rows=60, steps=1):
        assert count <= MAX_JOBS, f"a small W1 step on Spark ran {count} jobs: {sites}"
    assert plans and any("ShuffledHashJoin" in p for p in plans), plans
    assert not any("SortMergeJoin" in p for p in plans), [p for p in plans if "SortMergeJoin" in p]


def _w1_steps(spark, root, steps: int, rows: int) -> tuple[list, list[str]]:
    """W1 loaded in-process, then ``steps`` random small steps on Spark (TPC-H SF 0.0005, seed 1:
    the same changes in every root): each timestep's view and every trace's rows, and the plans
    of the steps' collects."""
    from pyspark.sql.classic.dataframe import DataFrame

    from tests.oracle import view_counter

    root.mkdir()
    path = root / "circuit.yaml"
    path.write_text(W1)
    gen = TpchGenerator(str(root), 0.0005)
    gen.initial()
    run_step(open_circuit(str(path), config(root)))
    rt = open_circuit(str(path), config(root, engine="spark"))
    plans: list[str] = []
    real = DataFrame.toArrow

    def to_arrow(self):
        plans.append(self._jdf.queryExecution().executedPlan().toString())
        return real(self)

    DataFrame.toArrow = to_arrow  # type: ignore[method-assign]
    try:
        seen = []
        for _ in range(steps):
            gen.change(rows)
            report = run_step(rt)
            assert report.engine == "spark", report
            traces = {t: sorted(map(tuple, rt.store.read_trace(t).collect()))
                      for t in sorted(rt.store.manifest().traces) if rt.store.read_trace(t) is not None}
            seen.append((view_counter(rt, "q3"), traces))
    finally:
        DataFrame.toArrow = real  # type: ignore[method-assign]
    return seen, plans


def test_a_small_step_of_local_relations_collects_in_one_partition_with_the_same_views_and_state(
        spark, tmp_path, monkeypatch):
    """A driver-held step whose plan scans no trace (``SparkSteps._all_local``) computes the
    union it collects in one task (``collect_arrow(gather=True)``): no shuffle of every row under
    the collect's limit (``CollectLimitExec`` over several partitions). Random W1 steps give the
    same views and state, timestep by timestep, as the same steps collected without it."""
    from spark_jobs.runtime.step_engines import SparkSteps

    gathered, plans = _w1_steps(spark, tmp_path / "gathered", steps=4, rows=60)
    collects = [p for p in plans if p.startswith("CollectLimit")]  # (else: optimized to an empty relation)
    assert collects and all(p.split("\n", 2)[1] == "+- Coalesce 1" for p in collects), [p[:300] for p in plans]
    monkeypatch.setattr(SparkSteps, "_all_local", lambda self: False)
    spread, plans = _w1_steps(spark, tmp_path / "spread", steps=4, rows=60)
    assert plans and not any("Coalesce 1" in p for p in plans)
    assert gathered == spread
