"""Benchmark: the state an aggregate with min/max keeps over an append_only input (not a test).

    flock /tmp/dbsp-bench.lock python -m bench.append_only            # 20 steps of 2,000 rows
    python -m bench.append_only --smoke                               # 3 steps of 50 rows

The same stream of inserts (clicks: user, amount; a few dozen users) goes through one circuit
(GROUP BY user: count, sum, min, max) twice: once declared ``kind: append_only`` (the aggregate
is ``aggregate_insert_only``: one state row per group) and once ``kind: changes`` (deletes
possible, so ``aggregate_touched`` keeps the integral of its input to recompute touched groups).
Each timestep is a real ``run_step`` (Parquet state, compaction, the manifest); the state rows
are the rows of the circuit's state traces in the committed manifest (view histories excluded).
Results go to bench/results/append_only.{json,md} with the machine's load (``os.getloadavg``).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step

CIRCUIT = """\
name: clicks_{kind}
inputs:
  clicks:
    schema: {{user: long, amount: double}}
    source: {{kind: {kind}, path: inbox/clicks, format: parquet}}
nodes:
  per_user: {{op: aggregate, input: clicks, group_by: [user],
             aggregates: {{n: "count(*)", total: "sum(amount)", lo: "min(amount)", hi: "max(amount)"}}}}
outputs: [per_user]
"""


def run(kind: str, root: Path, batches: list[pa.Table]) -> list[dict]:
    """Every batch as one timestep of the circuit over a ``kind`` input: per step the seconds,
    the engine and the rows of each state trace."""
    path = root / f"{kind}.yaml"
    path.write_text(CIRCUIT.format(kind=kind))
    rt = open_circuit(str(path), load_config(data_root=str(root / kind)))
    state_ids = {n.id for n in rt.compiled.incremental}
    inbox = root / kind / "inbox" / "clicks"
    inbox.mkdir(parents=True)
    rows = []
    for t, batch in enumerate(batches, start=1):
        pq.write_table(batch, inbox / f"t{t:04d}.parquet")
        start = time.perf_counter()
        report = run_step(rt)
        seconds = time.perf_counter() - start
        traces = {tid: tr.rows for tid, tr in rt.store.manifest().traces.items() if tid in state_ids}
        rows.append({"step": t, "seconds": round(seconds, 3), "engine": report.engine,
                     "state_rows": sum(traces.values()), "traces": traces,
                     "input_rows": sum(b.num_rows for b in batches[:t])})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rows", type=int, default=2000, help="inserted rows per step")
    parser.add_argument("--users", type=int, default=50, help="groups")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default=str(PROJECT_ROOT / "bench" / "results"))
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.rows, args.users = 3, 50, 5
    rng = random.Random(1)
    batches = [pa.table({"user": pa.array([rng.randrange(args.users) for _ in range(args.rows)], pa.int64()),
                         "amount": [round(rng.uniform(0, 500), 2) for _ in range(args.rows)]})
               for _ in range(args.steps)]
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        results = {kind: run(kind, Path(tmp), batches) for kind in ("append_only", "changes")}
    load_after = os.getloadavg()
    report = {"steps": args.steps, "rows_per_step": args.rows, "groups": args.users,
              "loadavg_before": load_before, "loadavg_after": load_after, "cores": os.cpu_count(), **results}
    name = "append_only" + ("-smoke" if args.smoke else "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=1))
    lines = [f"State rows kept by GROUP BY user (count, sum, min, max): {args.steps} steps of {args.rows} "
             f"inserted rows, {args.users} users; load average {load_before[0]:.1f} before, "
             f"{load_after[0]:.1f} after, {os.cpu_count()} cores",
             "", "| step | input rows | append_only: state rows | s | changes: state rows | s |",
             "|---:|---:|---:|---:|---:|---:|"]
    for a, c in zip(results["append_only"], results["changes"]):
        lines.append(f"| {a['step']} | {a['input_rows']} | {a['state_rows']} | {a['seconds']} ({a['engine']}) | "
                     f"{c['state_rows']} | {c['seconds']} ({c['engine']}) |")
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
