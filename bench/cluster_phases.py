"""Where a large and a recomputed W1 step spend their time on the standalone cluster (not a test).

    python -m bench.cluster_phases [--sf 0.2] [--large 100000] [--root DIR] [--pyinstrument]

Starts a master and 2 workers on 127.0.0.1 as ``bench.cluster`` does (same profile, same scaled
thresholds), loads W1, runs one small step, then one ``--large``-row step through the policy and
one more recomputed (``cost.recompute: always``), each with ``bench.workloads.phases``' timers
and Spark job list, then the plain recompute of the query twice on the cluster: the ratios of the
two steps to it are the figures (``bench.cluster`` reports the same steps without the phases).
Prints to stdout; the cluster is stopped at the end.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from bench import cluster as bench_cluster
from bench.generators import TpchGenerator
from bench.workloads.harness import job_details, job_group, recompute, view_matches
from bench.workloads.phases import _patched, _Recorder
from bench.workloads.runner import with_fields
from bench.workloads.w1_tpch import WORKLOAD
from spark_jobs import services
from spark_jobs.config import load_config
from spark_jobs.runtime import step as step_module
from spark_jobs.runtime.circuit import open_circuit


def profiled(rt, label: str, pyinstrument: bool) -> None:
    """One step with phase timers; prints its phases and jobs."""
    spark = rt.spark
    prof = None
    if pyinstrument:
        from pyinstrument import Profiler
        prof = Profiler(interval=0.005)
        prof.start()
    with job_group(spark, label) as jobs:
        rec = _Recorder(spark.sparkContext.statusTracker(), jobs.group)
        with _patched(rec):
            started = time.perf_counter()
            report = step_module.run_step(rt)
            total = time.perf_counter() - started
    if prof is not None:
        prof.stop()
        print("\n".join(prof.output_text(unicode=False, color=False).splitlines()[:150]))
    phases = sorted(rec.phases.values(), key=lambda p: -p.seconds)
    print(f"== {label}: {total:.2f} s, engine {report.engine}, mode {report.mode}, {jobs.count} jobs: "
          f"{report.engine_reason}")
    for ph in phases:
        print(f"   {ph.seconds:8.2f} s  {len(ph.job_ids):3d} jobs  {ph.name}")
    print(f"   {total - sum(p.seconds for p in phases):8.2f} s  other")
    for d in sorted(job_details(spark, jobs.ids), key=lambda d: d.job_id):
        print(f"   job {d.job_id}: {d.ms / 1000:.2f} s, {d.tasks} tasks, {d.stages} stages, {d.name} | {d.description[:60]}")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cluster_phases", description=__doc__.split("\n\n")[0])
    p.add_argument("--sf", type=float, default=0.2)
    p.add_argument("--large", type=int, default=100_000)
    p.add_argument("--root", default=None, help="scratch data root (default: a temp folder, removed)")
    p.add_argument("--pyinstrument", action="store_true", help="also the call tree of the large step")
    args = p.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with tempfile.TemporaryDirectory(prefix="dbsp-bench-cluster-phases-") as run_dir:
        print(f"cluster: {services.start_cluster(2, run_dir=run_dir)}, load average {os.getloadavg()}", flush=True)
        root = args.root or os.path.join(run_dir, "w1")
        try:
            profile = bench_cluster.write_profile(argparse.Namespace(max_change_rows=50_000, arrow_rows=500_000), run_dir)
            shutil.rmtree(root, ignore_errors=True)
            os.makedirs(root)
            gen = TpchGenerator(root, args.sf)
            rt = open_circuit(WORKLOAD.circuit_path, load_config(profile).with_data_root(root))
            for label, rows in (("load", None), ("small", 1000)):
                gen.initial() if rows is None else gen.change(rows)
                started = time.perf_counter()
                report = step_module.run_step(rt)
                print(f"{label}: {time.perf_counter() - started:.2f} s on {report.engine}", flush=True)
            gen.change(args.large)
            profiled(rt, "large", args.pyinstrument)
            base = rt.config
            rt.config = rt.config.with_policy(with_fields(rt.config.policy, {"cost.recompute": "always"}))
            gen.change(args.large)
            profiled(rt, "recomputed step", False)
            rt.config = base
            tables = gen.snapshot(os.path.join(root, "snapshot"))
            out = os.path.join(root, "recompute")
            for _ in range(2):
                seconds, jobs, _rows = recompute(rt, tables, out)
                print(f"plain recompute on the cluster: {seconds:.2f} s, {jobs} jobs", flush=True)
            print(f"view == recompute: {view_matches(rt, out, WORKLOAD.view, WORKLOAD.float_cols).get('ok')}; "
                  f"load average {os.getloadavg()}", flush=True)
        finally:
            services.stop_cluster(run_dir=run_dir, check=False)
            if args.root is None:
                shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # SparkSession.stop() can hang in pyspark's shutdown (see bench/run.py)
