"""Benchmark: incremental transitive closure vs a from-scratch fixed point (not a test).

    python -m bench.recursion            # >= 100k edges (takes a while)
    python -m bench.recursion --smoke    # tiny sizes, to check that it runs

The graph is many small DAG components, so the closure stays bounded (it grows with the number of
components, not quadratically with the graph). One committed step (`run_step`, Parquet state)
builds the closure; then small batches of edge insertions and deletions are timed as steps, and
each is compared with computing the closure from scratch (the query circuit on the whole current
graph: semi-naive evaluation) on the same Spark session. Results go to bench/results/recursion.json
and recursion.md.
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

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.executor.recursion import run_scope
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step

CIRCUIT = str(PROJECT_ROOT / "circuits" / "transitive_closure.yaml")
RESULTS = Path(__file__).resolve().parent / "results"


def component_edges(rng: random.Random, base: int, nodes: int, edges: int) -> set[tuple[int, int]]:
    """A random DAG on ``nodes`` nodes (edges go from lower to higher id, mostly to near ids)."""
    found: set[tuple[int, int]] = set()
    while len(found) < edges:
        a = rng.randrange(nodes - 1)
        b = min(nodes - 1, a + 1 + int(rng.expovariate(0.5)))
        found.add((base + a, base + b))
    return found


def write_batch(root: str, name: str, rows: dict[tuple[int, int], int]) -> None:
    folder = os.path.join(root, "inbox", "edges")
    os.makedirs(folder, exist_ok=True)
    table = pa.table({"src": pa.array([r[0] for r in rows], pa.int64()),
                      "dst": pa.array([r[1] for r in rows], pa.int64()),
                      "_weight": pa.array(list(rows.values()), pa.int64())})
    pq.write_table(table, os.path.join(folder, name))


def from_scratch(rt, edges: set[tuple[int, int]]) -> tuple[float, int, int]:
    """Seconds, rows and iterations of the closure computed from the whole graph, no state."""
    spark = rt.spark
    df = spark.createDataFrame([(a, b, 1) for a, b in sorted(edges)], "src long, dst long, _weight long")
    df = df.localCheckpoint()  # the graph as input, not its Python conversion, is what we time
    scope = rt.compiled.query["closure"]
    started = time.time()
    done = run_scope(scope, [df], None, broadcast_imports=False, spark=spark)
    rows = done.output.count()
    return time.time() - started, rows, done.iterations


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: check that the benchmark runs")
    ap.add_argument("--components", type=int, default=5000, help="DAG components (edges = components x 21)")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    comps, nodes, per = (40, 12, 14) if args.smoke else (args.components, 24, 21)
    batches = (2, 5) if args.smoke else (10, 100)
    rng = random.Random(42)
    edges: set[tuple[int, int]] = set()
    for c in range(comps):
        edges |= component_edges(rng, c * 1000, nodes, per)
    root = tempfile.mkdtemp(prefix="bench-recursion-")
    result: dict = {"edges": len(edges), "components": comps, "nodes_per_component": nodes, "steps": []}
    try:
        rt = open_circuit(CIRCUIT, load_config(data_root=root))
        write_batch(root, "b000000.parquet", {e: 1 for e in edges})
        started = time.time()
        run_step(rt)
        result["initial_step_seconds"] = round(time.time() - started, 2)
        status = rt.store.status()["traces"]
        result["closure_rows"] = status["view:closure"]["rows"]
        result["state_rows"] = sum(t["rows"] for k, t in status.items() if k.startswith("closure/"))
        save(result, args.smoke)
        print(f"{len(edges)} edges, closure {result['closure_rows']} rows, state {result['state_rows']} rows, "
              f"first step {result['initial_step_seconds']} s", flush=True)
        n = 1
        for size in batches:
            for _ in range(args.repeats):
                for kind in ("insert", "delete"):
                    if kind == "insert":
                        change = {}
                        while len(change) < size:
                            c = rng.randrange(comps)
                            a = rng.randrange(nodes - 1)
                            e = (c * 1000 + a, c * 1000 + rng.randrange(a + 1, nodes))
                            if e not in edges:
                                change[e] = 1
                        edges |= set(change)
                    else:
                        change = {e: -1 for e in rng.sample(sorted(edges), size)}
                        edges -= set(change)
                    write_batch(root, f"b{n:06d}.parquet", change)
                    n += 1
                    started = time.time()
                    report = run_step(rt)
                    step_s = time.time() - started
                    scratch_s, rows, iterations = from_scratch(rt, edges)
                    entry = {"kind": kind, "batch": size, "step_seconds": round(step_s, 2),
                             "view_changes": report.views.get("closure"),
                             "from_scratch_seconds": round(scratch_s, 2), "closure_rows": rows,
                             "from_scratch_iterations": iterations}
                    result["steps"].append(entry)
                    print(entry, flush=True)
                    save(result, args.smoke)  # after every step: a long run leaves partial results
    finally:
        shutil.rmtree(root, ignore_errors=True)
    save(result, args.smoke)
    print(markdown(result))


def save(result: dict, smoke: bool) -> None:
    RESULTS.mkdir(exist_ok=True)
    suffix = "-smoke" if smoke else ""
    (RESULTS / f"recursion{suffix}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"recursion{suffix}.md").write_text(markdown(result))


def markdown(result: dict) -> str:
    lines = [f"Transitive closure: {result['edges']} edges in {result['components']} DAG components, "
             f"{result.get('closure_rows')} closure rows, {result.get('state_rows')} rows of per-iteration "
             f"state; first (from-empty) step {result.get('initial_step_seconds')} s.", "",
             "| change | edges | incremental step (s) | from scratch (s) | speed-up |", "|---|---|---|---|---|"]
    for s in result["steps"]:
        speed = s["from_scratch_seconds"] / s["step_seconds"] if s["step_seconds"] else 0
        lines.append(f"| {s['kind']} | {s['batch']} | {s['step_seconds']} | {s['from_scratch_seconds']} | "
                     f"{speed:.1f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
