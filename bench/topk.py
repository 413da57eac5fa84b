"""Benchmark: a small change to a top-k view costs in proportion to the groups it touches (not a test).

    python -m bench.topk            # 200k rows in 20k groups
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
from spark_jobs.executor.arrow.kernels import ArrowEngine
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from spark_jobs.state.lookup import TraceFiles

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


DECODED: dict[str, int] = {}  # trace id -> rows its in-process lookups decoded (this step)


def count_decoded_rows() -> None:
    """Count the rows each trace's lookups decode (a benchmark's instrument, not the engine's):
    how much of the top-k's state a step reads, apart from other traces (the input's own
    integral, which the bag check reads for deletes)."""
    original_lookup, original_all, original_trace = TraceFiles.lookup, TraceFiles.read_all, ArrowEngine.trace
    names: dict[int, str] = {}  # id(TraceFiles) -> trace id (a trace's files may sit in a batch file)

    def trace(self, trace_id: str):  # noqa: ANN001, ANN202
        files = original_trace(self, trace_id)
        if files is not None:
            names[id(files)] = trace_id
        return files

    def name(files: TraceFiles) -> str:
        return names.get(id(files), "?")

    def lookup(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        before = self.decoded_rows()
        out = original_lookup(self, *args, **kwargs)
        DECODED[name(self)] = DECODED.get(name(self), 0) + self.decoded_rows() - before
        return out

    def read_all(self):  # noqa: ANN001, ANN202
        out = original_all(self)
        DECODED[name(self)] = DECODED.get(name(self), 0) + out.num_rows
        return out

    TraceFiles.lookup, TraceFiles.read_all, ArrowEngine.trace = lookup, read_all, trace


def topk_state(rt, view: str) -> tuple[str, int, int]:  # noqa: ANN001 - a CircuitRuntime
    """(trace id, rows, bytes) of the integral the view's top-k reads."""
    m = rt.store.manifest()
    trace = next(t for t in m.traces if t.startswith(f"I({view}."))
    return trace, m.traces[trace].rows, m.traces[trace].bytes


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
        loaded = [(rng.randrange(groups), i, round(rng.uniform(1, 1000), 2)) for i in range(rows)]
        write(root, 1, [(*r, 1) for r in loaded])
        live: dict[int, list[tuple[int, int, float]]] = {}  # customer -> its orders
        for r in loaded:
            live.setdefault(r[0], []).append(r)
        started = time.time()
        run_step(rt)
        out = [{"view": view, "change": f"load {rows} rows", "groups touched": groups,
                "step s": round(time.time() - started, 2)}]
        next_id = rows
        # the load is one unsorted delta; a sorted trace is compacted into its sorted base at its 4th
        # delta (``needs_compaction``): three warm-up steps first, as a view in service has had
        for t, g in enumerate([1, 1, 1] + touched, start=2):
            custs = rng.sample(sorted(c for c, orders in live.items() if orders), g)
            change = []
            for c in custs:  # one order of each touched customer deleted, a new one inserted
                old = live[c].pop(rng.randrange(len(live[c])))
                new = (c, next_id, round(rng.uniform(1, 1000), 2))
                next_id += 1
                live[c].append(new)
                change += [(*old, -1), (*new, 1)]
            write(root, t, change)
            total_bytes, total_rows = state_bytes(rt)
            trace, topk_rows, _ = topk_state(rt, view)
            load = os.getloadavg()[0]
            DECODED.clear()
            started = time.time()
            report = run_step(rt)
            seconds = time.time() - started
            read = DECODED.get(trace, 0)
            label = f"{len(change)} rows" + (" (warm-up)" if t < 5 else "")
            out.append({"view": view, "change": label, "groups touched": g, "rows": total_rows,
                        "step s": round(seconds, 3), "engine": report.engine,
                        "state bytes read": report.bytes_read, "state bytes": total_bytes,
                        "read / state": (round(report.bytes_read / total_bytes, 4)
                                         if report.bytes_read is not None and total_bytes
                                         else None),
                        "top-k state rows read": read, "top-k state rows": topk_rows,
                        "top-k read / state": round(read / topk_rows, 4) if topk_rows else None,
                        "load avg": round(load, 2)})
            print(out[-1], flush=True)
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def markdown(results: list[dict]) -> str:
    cols = ["view", "change", "groups touched", "step s", "engine", "top-k state rows read", "top-k state rows",
            "top-k read / state", "state bytes read", "state bytes", "read / state", "load avg"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "-")) for c in cols) + " |" for r in results]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    rows, groups, touched = (2000, 200, [1, 10]) if args.smoke else (200_000, 20_000, [1, 10, 100, 1000])
    count_decoded_rows()
    results = []
    for view in VIEWS:
        results += run(view, rows, groups, touched, seed=7)
    name = "topk-smoke" if args.smoke else "topk"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=1))
    header = (f"Top-k views over {rows} orders in {groups} customers; each step inserts one order and deletes one "
              f"in each touched customer. 'top-k state rows read': rows the step decoded from the integral the "
              f"top-k reads (row groups admitted by the touched customers); 'top-k state rows': that integral. "
              f"'state bytes read': every Parquet byte the step read itself (its input file, the input's own "
              f"integral for the bag check, the top-k's lookups); 'state bytes': all state. {os.cpu_count()} "
              f"cores; 'load avg': 1-minute load before the step.\n\n")
    (RESULTS / f"{name}.md").write_text(header + markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
