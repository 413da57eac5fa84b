"""Benchmark entry point: ``python -m bench.run [--smoke] [--workload W1,W2] [--sizes ...]``.

Runs every selected workload in ONE Spark session (so step, recompute and floor are measured
under the same conditions), then writes results.json, results.csv, results.md and
step_vs_recompute.png to ``bench/results/`` (``--smoke``: ``bench/results/smoke/``, so a quick
run never overwrites real results). See bench/README.md for what each figure means.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench import report
from bench.workloads import WORKLOADS, Size, Workload
from bench.workloads.runner import Plan, describe, run_size, slope

RESULTS = Path(__file__).resolve().parent / "results"
ORDER = ("identity", "w1", "w1q10", "w2", "w4")  # the floor first: it is what the others are read against

# Smoke: every code path once, on tiny data, so CI can afford it (the sweep and the profile
# only on the cheap identity circuit).
SMOKE_PLAN = Plan(change_rows=100, warmup=0, steps=1, recompute_runs=1, recompute_warmup=False,
                  sweep_changes=(300,), sweep_steps=1, profile=True, duckdb=True, only=("identity",))


def _log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes and one step each (a harness check for CI); writes bench/results/smoke/")
    p.add_argument("--workload", help=f"comma-separated workloads among {', '.join(ORDER)} "
                                      "(default: all; with --smoke, all but w1q10 and w4)")
    p.add_argument("--sizes", action="append", default=[],
                   help="sizes per workload, e.g. 'w1=0.01,0.05' 'w2=50000,200000'; a bare list applies "
                        "to every selected workload. W1: TPC-H scale factor; W2: events; identity: rows")
    p.add_argument("--scale", help="W1 scale factors (same as --sizes w1=...): SF 1 = 150k customers, "
                                   "1.5M orders, ~6M line items")
    p.add_argument("--change-rows", type=int, help="rows per change of the measured steps (default 1000)")
    p.add_argument("--warmup", type=int, help="warm-up steps per size (default 1)")
    p.add_argument("--steps", type=int, help="measured steps per size (default 5)")
    p.add_argument("--recompute-runs", type=int, help="measured full recomputes per size (default 2)")
    p.add_argument("--sweep", help="extra change sizes at the largest state, e.g. 10000,100000 ('' = none)")
    p.add_argument("--sweep-steps", type=int, help="steps per sweep point (default 1)")
    p.add_argument("--sweep-alt", action="append", default=[], metavar="KEY=VALUE",
                   help="policy fields of a second step at each sweep point, after the policy's own "
                        "(e.g. cost.recompute=always: the other path on the same state)")
    p.add_argument("--no-profile", action="store_true", help="skip the per-phase profile of one step")
    p.add_argument("--ab", action="append", default=[], metavar="KEY=VALUE",
                   help="A/B an execution policy field (engine, narrow.enabled, ...) or a runtime Spark "
                        "SQL conf (spark.sql....) at the largest size: steps alternate between the "
                        "base settings and these (default: engine=spark, every step on Spark against "
                        "the policy's own choice)")
    p.add_argument("--no-ab", action="store_true", help="skip the A/B")
    p.add_argument("--ab-rounds", type=int, help="(base, variant) step pairs of the A/B (default 2)")
    p.add_argument("--extras-only", help="workloads that get the sweep, profile and A/B (default: identity,w1,w2)")
    p.add_argument("--no-duckdb", action="store_true", help="skip the DuckDB reference")
    p.add_argument("--out", help="results folder (default bench/results, or bench/results/smoke)")
    p.add_argument("--work-dir", help="scratch data roots (default: a temp folder, removed at the end)")
    p.add_argument("--keep-data", action="store_true", help="keep the generated data roots")
    p.add_argument("--config", help="config profile or file (default config/local.yaml)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark conf for an A/B run, e.g. spark.sql.adaptive.enabled=false")
    return p.parse_args(argv)


def make_plan(args: argparse.Namespace) -> Plan:
    plan = SMOKE_PLAN if args.smoke else Plan()
    changes: dict[str, Any] = {}
    for field, value in (("change_rows", args.change_rows), ("warmup", args.warmup), ("steps", args.steps),
                         ("recompute_runs", args.recompute_runs), ("sweep_steps", args.sweep_steps),
                         ("ab_rounds", args.ab_rounds)):
        if value is not None:
            changes[field] = value
    if args.sweep is not None:
        changes["sweep_changes"] = tuple(int(x) for x in args.sweep.split(",") if x.strip())
    if args.sweep_alt:
        changes["sweep_alt"] = tuple(tuple(kv.split("=", 1)) for kv in args.sweep_alt)
    if args.ab:
        changes["ab_conf"] = tuple(tuple(kv.split("=", 1)) for kv in args.ab)
    if args.no_ab:
        changes["ab_conf"] = ()
    if args.extras_only is not None:
        changes["only"] = tuple(k.strip().lower() for k in args.extras_only.split(",") if k.strip())
    if args.no_profile:
        changes["profile"] = False
    if args.no_duckdb:
        changes["duckdb"] = False
    plan = dataclasses.replace(plan, **changes)
    if plan.steps < 1:
        raise SystemExit("--steps must be at least 1")
    return plan


def select_workloads(text: str) -> list[Workload]:
    keys = [k.strip().lower() for k in text.split(",") if k.strip()]
    unknown = [k for k in keys if k not in WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown}; choose among {', '.join(ORDER)}")
    return [WORKLOADS[k] for k in ORDER if k in keys]


def select_sizes(args: argparse.Namespace, workloads: list[Workload]) -> dict[str, list[Size]]:
    chosen = {w.key: list(w.smoke_sizes if args.smoke else w.sizes) for w in workloads}
    items = list(args.sizes) + ([f"w1={args.scale}"] if args.scale else [])
    for item in items:
        key, _, values = item.rpartition("=")
        targets = [key.strip().lower()] if key else list(chosen)
        for k in targets:
            if k not in chosen:
                raise SystemExit(f"--sizes {item!r}: workload {k!r} is not selected")
            chosen[k] = [WORKLOADS[k].size(v.strip()) for v in values.split(",") if v.strip()]
    return chosen


def spark_config(args: argparse.Namespace):
    from spark_jobs.config import load_config

    cfg = load_config(args.config)
    extra = dict(kv.split("=", 1) for kv in args.conf)
    if extra:
        cfg = dataclasses.replace(cfg, spark=dataclasses.replace(cfg.spark, conf={**cfg.spark.conf, **extra}))
    return cfg, extra


def _git_commit() -> str | None:
    """The commit the run measured (None outside a git checkout)."""
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    return out.stdout.strip() or None


def environment(spark, extra_conf: dict[str, str]) -> dict[str, Any]:
    import pyspark

    conf = spark.sparkContext.getConf()
    keys = ("spark.master", "spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled",
            "spark.driver.memory", "spark.default.parallelism")
    return {"python": platform.python_version(), "pyspark": pyspark.__version__,
            "cpus": os.cpu_count(), "platform": platform.platform(), "commit": _git_commit(),
            "spark_conf": {k: conf.get(k, None) for k in keys}, "extra_conf": extra_conf}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    plan = make_plan(args)
    default = [k for k in ORDER if WORKLOADS[k].in_smoke or not args.smoke]
    workloads = select_workloads(args.workload or ",".join(default))
    sizes = select_sizes(args, workloads)
    out = Path(args.out) if args.out else (RESULTS / "smoke" if args.smoke else RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="dbsp-bench-")
    os.makedirs(work_dir, exist_ok=True)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    started = time.time()
    load_start = os.getloadavg()
    cfg, extra = spark_config(args)
    from spark_jobs.executor.spark.session import get_spark

    _log(f"starting Spark ({cfg.spark.master}); results -> {out}")
    t0 = time.perf_counter()
    spark = get_spark(cfg)
    session_s = time.perf_counter() - t0
    results: dict[str, Any] = {
        "meta": {"started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 "smoke": args.smoke, "argv": sys.argv[1:] if argv is None else argv,
                 "session_start_s": round(session_s, 2), "loadavg_start": list(load_start),
                 **environment(spark, extra)},
        "plan": dataclasses.asdict(plan),
        "workloads": {},
    }
    try:
        for wl in workloads:
            _log(f"{wl.title}: sizes {[s.label for s in sizes[wl.key]]}")
            runs = []
            for i, size in enumerate(sizes[wl.key]):
                last = i == len(sizes[wl.key]) - 1
                try:
                    runs.append(run_size(wl, size, cfg, plan, work_dir, _log, last=last, keep=args.keep_data))
                except Exception as exc:  # record and go on: one broken size must not lose the others
                    runs.append({"workload": wl.key, "size": size.label, "size_param": size.param,
                                 "error": describe(exc)})
                    _log(f"  {wl.key} {size.label} FAILED: {runs[-1]['error']}")
                results["workloads"][wl.key] = {"title": wl.title, "circuit": f"bench/circuits/{wl.circuit}",
                                                "size_help": wl.size_help, "view": wl.view, "sizes": runs,
                                                "slope": slope([r for r in runs if "step_median_s" in r])}
                _write(results, out, started)  # partial results survive a crash
    finally:
        if not args.work_dir and not args.keep_data:
            shutil.rmtree(work_dir, ignore_errors=True)
    _write(results, out, started, final=True)
    _log(f"done in {time.time() - started:.0f} s: {out / 'results.md'}")
    return results


def _write(results: dict[str, Any], out: Path, started: float, final: bool = False) -> None:
    results["meta"]["duration_s"] = round(time.time() - started, 1)
    results["meta"]["loadavg_end"] = list(os.getloadavg())
    results["meta"]["complete"] = final
    report.write_all(results, out, plots=final)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    # SparkSession.stop() can hang in pyspark's shutdown (see tests/conftest.py): exit directly.
    os._exit(0)
