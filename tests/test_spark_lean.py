"""The Spark path is lean: a small step forced onto Spark runs at most 2 Spark jobs.

What a cluster or Spark Connect profile pays per small step is mostly Spark's per-job cost (a
job is scheduled, its tasks shipped and its result brought back), so the count of jobs is the
figure that must not creep up again. The two jobs are: the input changes counted and brought to
the driver (``count_inputs``), and the view deltas, state updates and checked input changes
brought back as Arrow in one job (``SparkSteps.settle``). The quality gate (built-in checks and a
declared expectation), the bag check and the writes then run on the driver without a job.

Counted, not timed: every job the step causes runs under the step's own job group (broadcasts
and AQE stages inherit it), and ``statusTracker().getJobIdsForGroup`` lists them afterwards.
Data is tiny (TPC-H SF 0.0005: 75 customers), so the whole module takes seconds.
"""
from __future__ import annotations

import time

from bench.generators import IdentityGenerator, TpchGenerator
from bench.workloads.harness import job_details, job_group
from spark_jobs.config import PROJECT_ROOT
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from tests.policies import config

MAX_JOBS = 2

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


def test_small_w1_step_on_spark_runs_at_most_two_jobs(spark, tmp_path):
    gen = TpchGenerator(str(tmp_path), 0.0005)
    for count, sites in _steps(spark, tmp_path, W1, gen, rows=60, steps=1):  # a cold W1 step on Spark is slow
        assert count <= MAX_JOBS, f"a small W1 step on Spark ran {count} jobs: {sites}"


def test_identity_step_on_spark_runs_at_most_two_jobs(spark, tmp_path):
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
