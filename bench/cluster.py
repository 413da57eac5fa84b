"""Cluster row of ``make bench``: W1 on a Spark standalone cluster, a small and a large change
through the policy, against the cluster's own recompute.

    python -m bench.cluster [--sf 0.2] [--change-rows 1000] [--large 100000] [--out bench/results/cluster]

Starts a standalone master and 2 workers on 127.0.0.1 (``scripts/spark_cluster.sh``, as
``tests/test_cluster.py`` does; the ``cluster`` profile's fixed ports, so nothing else may hold
them), then runs ``bench.run``'s W1 measurement under ``config/cluster.yaml``: the driver is this
process and every Spark job runs on the cluster's executors. What it reports, in
``<out>/results.{json,md}`` (``bench.run``'s tables):

- **step s** at ``--change-rows`` (the small change), median of the measured steps: the engine
  the policy picked (a small change runs in this process when it reaches the state, which it
  does on one machine) and the Spark jobs it ran;
- the **sweep** point at ``--large`` rows: one step through the same policy (the cost model may
  recompute it); it runs on the cluster, because the profile's size thresholds are scaled to
  this data as ``tests/test_cluster.py`` does: ``execution.arrow.max_change_rows``
  (``--max-change-rows``, 50,000) and ``execution.cost.arrow_rows`` (``--arrow-rows``, 500,000)
  instead of the defaults (1M, 5M), under which SF 0.2 (~1.5M input rows) and its 100k-row
  change would run in this process, recompute or not;
- the **A/B** of the small change: steps alternating the policy's choice and ``engine: spark``
  (the step on the cluster's executors, its Spark jobs counted);
- **recompute s**: the query over the integrated inputs on the cluster, the ratio each step is
  measured against; and DuckDB's in this process, for scale;
- at the large change, a second step with ``--other-path``'s policy fields (default
  ``cost.recompute=always``: a recomputed *step*, which also rewrites every trace of the state,
  committed as the view's delta): the path the policy did not take, so that its choice is judged
  against what the alternative costs as a step, not against the view-only query.

Timings on a loaded machine are not figures to quote: the results record the load average.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "cluster"


def write_profile(args: argparse.Namespace, folder: str) -> str:
    """config/cluster.yaml with the policy's size thresholds scaled to this data (see above)."""
    from spark_jobs.config import PROJECT_ROOT

    text = (PROJECT_ROOT / "config" / "cluster.yaml").read_text()
    text += (f"\nexecution:\n  arrow: {{max_change_rows: {args.max_change_rows}}}\n"
             f"  cost: {{arrow_rows: {args.arrow_rows}}}\n")
    path = os.path.join(folder, "cluster.yaml")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


def run_args(args: argparse.Namespace, profile: str = "cluster") -> list[str]:
    """``bench.run``'s arguments for the cluster's W1 measurement."""
    return ["--config", profile, "--workload", "w1", "--sizes", f"w1={args.sf:g}",
            "--change-rows", str(args.change_rows), "--sweep", str(args.large), "--steps", str(args.steps),
            "--warmup", "1", "--recompute-runs", str(args.recompute_runs), "--ab", "engine=spark", "--ab-rounds",
            str(args.ab_rounds), "--out", str(args.out)] + (["--sweep-alt", args.other_path] if args.other_path else [])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.split("\n\n")[0])
    p.add_argument("--sf", type=float, default=0.2, help="W1 scale factor (default 0.2)")
    p.add_argument("--change-rows", type=int, default=1000, help="rows of the small change (default 1000)")
    p.add_argument("--large", type=int, default=100_000, help="rows of the large change (default 100000)")
    p.add_argument("--max-change-rows", type=int, default=50_000,
                   help="the profile's execution.arrow.max_change_rows: larger changes run on the cluster")
    p.add_argument("--arrow-rows", type=int, default=500_000,
                   help="the profile's execution.cost.arrow_rows: a recompute over more runs on the cluster")
    p.add_argument("--steps", type=int, default=3, help="measured small steps (default 3)")
    p.add_argument("--recompute-runs", type=int, default=2)
    p.add_argument("--ab-rounds", type=int, default=2,
                   help="(policy, engine: spark) step pairs of the small change: the step on the cluster itself")
    p.add_argument("--other-path", default="cost.recompute=always",
                   help="policy fields of a second step at the large change, after the policy's own: the "
                        "path it did not take, on the same state ('' = none; default: a recomputed step)")
    p.add_argument("--out", default=str(RESULTS))
    args = p.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from bench import run
    from spark_jobs import services

    with tempfile.TemporaryDirectory(prefix="dbsp-bench-cluster-") as run_dir:
        print(f"[bench.cluster] starting a standalone cluster (2 workers): {services.start_cluster(2, run_dir=run_dir)}",
              file=sys.stderr, flush=True)
        try:
            run.main(run_args(args, write_profile(args, run_dir)))
        finally:
            services.stop_cluster(run_dir=run_dir, check=False)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # SparkSession.stop() can hang in pyspark's shutdown (see bench/run.py)
