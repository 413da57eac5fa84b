"""Run timesteps in their own process against a profile (used by test_cluster).

    python -m tests.cluster_driver PROFILE DATA_ROOT STEPS     the paper example, STEPS batches
    python -m tests.cluster_driver w1 PROFILE DATA_ROOT        W1 (TPC-H Q3): a load, a small and a large
                                                               change, a large change recomputed
    python -m tests.cluster_driver spark PROFILE DATA_ROOT CIRCUIT   one step on Spark per line read

Writes one batch of changes before each step, runs the step, prints one line per commit (W1:
also the engine and mode the policy chose). ``spark`` writes nothing: the caller writes each
step's change files, then sends a line; every step is forced onto the profile's Spark
(``execution.engine: spark``), so through a Spark Connect profile the server computes it.
"""
from __future__ import annotations

import sys
from typing import Sequence

from spark_jobs.config import PROJECT_ROOT, Config, load_config
from spark_jobs.examples.generators import PaperExampleGenerator
from spark_jobs.policy import ExecutionPolicy
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step

W1_CIRCUIT = str(PROJECT_ROOT / "bench" / "circuits" / "w1_tpch.yaml")
W1_SF = 0.0005  # 75 customers, 750 orders, ~3,000 line items
# changed rows of W1's steps after the load: one small, one large for W1_POLICY's thresholds
# (the policy's choice), and a large one recomputed (the path the policy may not take)
W1_CHANGES = (40, 600, 600)
W1_FORCED = {3: "recompute"}  # index into (load, *W1_CHANGES) -> the mode that step is pinned to
# The default policy with its size thresholds scaled to this data: a change of more than 200 rows
# is "large" (Spark, here the cluster), and so is a recompute over more than 2,000 integrated
# rows; the cost model may recompute a change from 100 rows on; past 100 rows Spark reads and
# counts the change (`local_change_rows`), as it does a 100k-row change under the benchmark's
# profile (bench.cluster), so the large step takes that path. `max_memory_bytes: 0` keeps the row
# threshold a hard one on the local run too (a local profile otherwise keeps a larger change in its
# own process while its memory estimate fits, which a cluster profile never does), so the local
# run's choices are the cluster's. Everything else is the profile's.
W1_POLICY = {"arrow": {"max_change_rows": 200, "max_memory_bytes": 0},
             "cost": {"arrow_rows": 2_000, "min_change_rows": 100}, "local_change_rows": 100}


def w1_config(profile: str | None, data_root: str, recompute: str = "auto", engine: str = "auto") -> Config:
    from tests.policies import policy

    cost = {**W1_POLICY["cost"], "recompute": recompute}
    if engine == "arrow":  # every step in-process, a recompute too
        cost["arrow_rows"] = ExecutionPolicy().cost.arrow_rows
    sections = {**W1_POLICY, "cost": cost, "engine": engine}
    return load_config(profile, data_root=data_root).with_policy(policy(**sections))


def paper(profile: str, data_root: str, steps: int) -> int:
    rt = open_circuit(str(PROJECT_ROOT / "circuits" / "paper_example.yaml"), load_config(profile, data_root=data_root))
    gen = PaperExampleGenerator(data_root)
    for _ in range(steps):
        gen.write_batch(inserts=40, deletes=10)
        report = run_step(rt)
        print(f"committed {report.timestep}", flush=True)
    return 0


def w1(profile: str | None, data_root: str, modes: Sequence[str] | None = None,
       engine: str = "auto") -> list[tuple[int, str, str, str]]:
    """W1's load, then a small and a large change through the profile's policy, and a large
    change recomputed; returns (timestep, engine, mode, engine reason) per step. ``modes``
    ("incremental"/"recompute" per step) pins the cost model's choice: it weighs past steps'
    measured seconds, which differ between a cluster and a local run, so a comparison of the two
    pins the cluster's choices. ``engine``: the policy's ``execution.engine``."""
    from bench.generators import TpchGenerator

    gen = TpchGenerator(data_root, W1_SF)
    gen.initial()
    out = []
    for i, rows in enumerate((None, *W1_CHANGES)):
        if rows is not None:
            gen.change(rows)
        mode = modes[i] if modes is not None else W1_FORCED.get(i)
        recompute = "auto" if mode is None else {"incremental": "never", "recompute": "always"}[mode]
        rt = open_circuit(W1_CIRCUIT, w1_config(profile, data_root, recompute, engine))
        report = run_step(rt)
        out.append((report.timestep, report.engine, report.mode, report.engine_reason))
        print(f"committed {report.timestep} {report.engine} {report.mode}: {report.engine_reason}", flush=True)
    return out


def on_spark(profile: str, data_root: str, circuit: str) -> int:
    """One step forced onto the profile's Spark per line of stdin; prints "committed T ENGINE"."""
    from tests.policies import policy

    rt = open_circuit(circuit, load_config(profile, data_root=data_root).with_policy(policy(engine="spark")))
    for _ in sys.stdin:
        report = run_step(rt)
        print(f"committed {report.timestep} {report.engine}", flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "spark":
        sys.exit(on_spark(*sys.argv[2:5]))
    if sys.argv[1] == "w1":
        w1(sys.argv[2], sys.argv[3])
        sys.exit(0)
    sys.exit(paper(sys.argv[1], sys.argv[2], int(sys.argv[3])))
