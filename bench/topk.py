"""Benchmark: a small change to a top-k view costs in proportion to the groups it touches (not a test).

    python -m bench.topk            # 300k rows in 30k groups
    python -m bench.topk --smoke    # tiny, to check that it runs

Two SQL views over one input ``orders(cust, id, price)``: ``top3`` keeps each customer's three
most expensive orders (``row_number() <= 3 PARTITION BY cust``), ``cheapest`` the ten cheapest
orders overall (``ORDER BY ... LIMIT 10``: one group). Each is its own circuit. One committed
step loads the rows; then each step inserts one order and deletes one order in each of g
customers (g = 1, 10, 100, 1000) and is timed as ``run_step`` (Parquet state, manifests). Per
step: the engine, the bytes of state row groups the step read against the bytes of the whole
state (the integral), and the machine's load. Results: bench/results/topk.md and topk.json.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.config import load_config
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step

RESULTS = Path(__file__).resolve().parent / "results"
INPUT = """
inputs:
  orders:
    schema: {cust: long, id: long, price: double}
    source: {kind: changes, path: inbox/orders, format: parquet}
"""
VIEWS = {
    "top3": ("SELECT cust, id, price, rn FROM (SELECT cust, id, price, row_number() OVER (PARTITION BY cust "
             "ORDER BY price DESC) AS rn FROM orders) t WHERE rn <= 3"),
    "cheapest": "SELECT cust, id, price FROM orders ORDER BY price, id LIMIT 10",
}


def write(root: str, t: int, rows: list[tuple[int, int, float, int]]) -> None:
    folder = os.path.join(root, "inbox", "orders")
    os.makedirs(folder, exist_ok=True)
    cols = list(zip(*rows))
    table = pa.table({"cust": pa.array(cols[0], pa.int64()), "id": pa.array(cols[1], pa.int64()),
                      "price": pa.array(cols[2], pa.float64()), "_weight": pa.array(cols[3], pa.int64())})
    pq.write_table(table, os.path.join(folder, f"t{t:04d}.parquet"))


def state_bytes(rt) -> tuple[int, int]:  # noqa: ANN001 - a CircuitRuntime
    """(bytes, rows) of every trace of the last committed timestep."""
    m = rt.store.manifest()
    traces = [e for name, e in m.traces.items() if not name.startswith("view")]
    return sum(e.bytes for e in traces), sum(e.rows for e in traces)


def run(view: str, rows: int, groups: int, touched: list[int], seed: int) -> list[dict]:
    root = tempfile.mkdtemp(prefix=f"bench-topk-{view}-")
    try:
        path = os.path.join(root, "circuit.yaml")
        with open(path, "w") as f:
            f.write(f"name: bench_topk_{view}\n{INPUT}nodes:\n  {view}:\n    op: sql\n    query: \"{VIEWS[view]}\"\n"
                    f"outputs: [{view}]\n")
        rt = open_circuit(path, load_config(data_root=root))
        rng = random.Random(seed)
        live = [(rng.randrange(groups), i, round(rng.uniform(1, 1000), 2)) for i in range(rows)]
        write(root, 1, [(*r, 1) for r in live])
        started = time.time()
        run_step(rt)
        out = [{"view": view, "change": "load", "groups touched": groups, "rows": rows, "step s": round(time.time() - started, 2)}]
        next_id = rows
        for t, g in enumerate(touched, start=2):
            custs = rng.sample(range(groups), g)
            change = []
            for c in custs:
                change.append((c, next_id, round(rng.uniform(1, 1000), 2), 1))
                next_id += 1
            by_cust = {r[0]: r for r in live}  # one live order of each touched customer, deleted
            change += [(*by_cust[c], -1) for c in custs if c in by_cust]
            write(root, t, change)
            total_bytes, total_rows = state_bytes(rt)
            load = os.getloadavg()[0]
            started = time.time()
            report = run_step(rt)
            seconds = time.time() - started
            out.append({"view": view, "change": f"{len(change)} rows", "groups touched": g, "rows": total_rows,
                        "step s": round(seconds, 3), "engine": report.engine,
                        "state bytes read": report.bytes_read, "state bytes": total_bytes,
                        "read / state": (round(report.bytes_read / total_bytes, 4)
                                         if report.bytes_read is not None and total_bytes else None),
                        "load avg": round(load, 2)})
            print(out[-1], flush=True)
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def markdown(results: list[dict]) -> str:
    cols = ["view", "change", "groups touched", "rows", "step s", "engine", "state bytes read", "state bytes",
            "read / state", "load avg"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "-")) for c in cols) + " |" for r in results]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    rows, groups, touched = (2000, 200, [1, 10]) if args.smoke else (300_000, 30_000, [1, 10, 100, 1000])
    results = []
    for view in VIEWS:
        results += run(view, rows, groups, touched, seed=7)
    name = "topk-smoke" if args.smoke else "topk"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=1))
    header = (f"Top-k views over {rows} orders in {groups} customers; each step inserts one order and deletes one "
              f"in each touched customer. 'state bytes read': Parquet row groups the step read (in-process "
              f"lookups); 'state bytes': the whole state. {os.cpu_count()} cores.\n\n")
    (RESULTS / f"{name}.md").write_text(header + markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
