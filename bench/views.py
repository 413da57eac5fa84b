"""Benchmark: one circuit of many small SQL views over the same two inputs, a few rows a step (not a test).

    python -m bench.views            # 100 views, 2,000 + 1,000 rows loaded, 5 rows a step
    python -m bench.views --smoke    # 10 views, tiny, to check that it runs

Why: the sqllogictest runner puts up to 64 views in one circuit, and each step of such a chunk
took 30-170 s (issue #29); a circuit of many views must step in seconds. The views are ten
shapes (filter, grouped aggregate, join, distinct, NOT IN, correlated scalar subquery, HAVING,
ORDER BY ... LIMIT, EXISTS, top-k by an aggregate), each with ten constants. Inputs
``a(id, k, x, s)`` and ``b(k, y)``; one step loads them, then each step inserts 3 rows into each
input and deletes 2 live ones. Per step: seconds (and this process's CPU seconds) of ``run_step`` (Parquet state, manifests,
compaction, views published as Delta tables), the engine, the load. After the last step every
view is compared with DuckDB running its query (transpiled by sqlglot) over the integrated
inputs. Results: bench/results/views.{json,md}.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

INPUTS = """
inputs:
  a:
    schema: {id: long, k: long, x: long, s: string}
    source: {kind: changes, path: inbox/a, format: parquet}
  b:
    schema: {k: long, y: long}
    source: {kind: changes, path: inbox/b, format: parquet}
"""
SHAPES = [
    "SELECT id, k, x FROM a WHERE x > {c}",
    "SELECT k, count(*) AS n, sum(x) AS sx FROM a WHERE x <> {c} GROUP BY k",
    "SELECT a.id, a.k, b.y FROM a JOIN b ON a.k = b.k WHERE b.y = {c}",
    "SELECT DISTINCT s, k % {m} AS km FROM a",
    "SELECT k, y FROM b WHERE k NOT IN (SELECT k FROM a WHERE x = {c})",
    "SELECT id, (SELECT count(*) FROM b WHERE b.k = a.k AND b.y > {c}) AS nb FROM a WHERE x = {c}",
    "SELECT s, max(x) AS mx, min(id) AS mn FROM a GROUP BY s HAVING count(*) > {c}",
    "SELECT id, x FROM a ORDER BY x DESC, id LIMIT {m}",
    "SELECT k, count(*) AS n FROM b WHERE EXISTS (SELECT 1 FROM a WHERE a.k = b.k AND a.x > {c}) GROUP BY k",
    "SELECT k, sum(y) AS sy FROM b WHERE y <> {c} GROUP BY k ORDER BY sum(y) DESC, k LIMIT 3",
]
TYPES = {"a": (pa.int64(), pa.int64(), pa.int64(), pa.string()), "b": (pa.int64(), pa.int64())}
COLUMNS = {"a": ("id", "k", "x", "s"), "b": ("k", "y")}


def views(n: int) -> dict[str, str]:
    """``n`` views: shape i % 10 with constant i // 10 (so 100 views are every shape ten times)."""
    out = {}
    for i in range(n):
        c = i // len(SHAPES)
        out[f"v{i:03d}"] = SHAPES[i % len(SHAPES)].format(c=c, m=c + 2)
    return out


def circuit_text(queries: dict[str, str]) -> str:
    lines = ["name: bench_views", INPUTS.strip("\n"), "nodes:"]
    lines += [f"  {name}: {{op: sql, query: \"{q}\"}}" for name, q in queries.items()]
    lines.append(f"outputs: [{', '.join(queries)}]")
    return "\n".join(lines) + "\n"


def write(root: str, name: str, t: int, rows: Counter) -> None:
    folder = os.path.join(root, "inbox", name)
    os.makedirs(folder, exist_ok=True)
    cols = list(zip(*rows)) if rows else [() for _ in COLUMNS[name]]
    data = {c: pa.array(v, t_) for c, v, t_ in zip(COLUMNS[name], cols, TYPES[name])}
    data["_weight"] = pa.array(list(rows.values()), pa.int64())
    pq.write_table(pa.table(data), os.path.join(folder, f"t{t:04d}.parquet"))


class Inputs:
    """The two inputs' live rows (bags) and the changes that keep them so."""

    def __init__(self, rows: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.next_id = 0
        self.live: dict[str, Counter] = {"a": Counter(), "b": Counter()}
        self.groups = max(10, rows // 10)
        self.load = {"a": Counter(self._new("a") for _ in range(rows)),
                     "b": Counter(self._new("b") for _ in range(rows // 2))}
        for name, rows_ in self.load.items():
            self.live[name].update(rows_)

    def _new(self, name: str) -> tuple:
        r = self.rng
        if name == "a":
            self.next_id += 1
            return (self.next_id, r.randrange(self.groups), r.randrange(10), r.choice("pqrs"))
        return (r.randrange(self.groups), r.randrange(10))

    def change(self, name: str, inserts: int, deletes: int) -> Counter:
        out: Counter = Counter()
        for row in self.rng.sample(sorted(self.live[name]), deletes):
            out[row] -= 1
        for _ in range(inserts):
            out[self._new(name)] += 1
        self.live[name].update(out)
        self.live[name] = +self.live[name]
        return out


def check(rt: Any, queries: dict[str, str], live: dict[str, Counter]) -> list[str]:
    """The views that differ from DuckDB's answer over the integrated inputs."""
    import duckdb
    import sqlglot

    from spark_jobs.state.arrow_read import read_view

    con = duckdb.connect(config={"threads": 1, "memory_limit": "1GB"})
    for name, rows in live.items():
        cols = list(zip(*[r for r, w in rows.items() for _ in range(w)]))
        con.register(name, pa.table({c: pa.array(v, t) for c, v, t in zip(COLUMNS[name], cols, TYPES[name])}))
    bad = []
    for view, q in queries.items():
        want = Counter(tuple(r) for r in con.execute(sqlglot.transpile(q, read="spark", write="duckdb")[0]).fetchall())
        table = read_view(rt.committed, view)
        got: Counter = Counter()
        if table is not None:
            data = table.to_pylist()
            for row in data:
                got[tuple(v for c, v in row.items() if c != "_weight")] += row["_weight"]
        if +got != want or any(w < 0 for w in got.values()):
            bad.append(view)
    return bad


def run(n_views: int, rows: int, steps: int, warmup: int, seed: int) -> dict[str, Any]:
    from spark_jobs.config import load_config
    from spark_jobs.runtime.circuit import open_circuit
    from spark_jobs.runtime.step import run_step

    root = tempfile.mkdtemp(prefix="bench-views-")
    try:
        queries = views(n_views)
        path = os.path.join(root, "circuit.yaml")
        with open(path, "w") as f:
            f.write(circuit_text(queries))
        started = time.time()
        rt = open_circuit(path, load_config(data_root=root))
        compile_s = time.time() - started
        inputs = Inputs(rows, seed)
        out: dict[str, Any] = {"views": n_views, "rows loaded": {k: sum(v.values()) for k, v in inputs.load.items()},
                               "compile s": round(compile_s, 2), "steps": []}
        for name, rows_ in inputs.load.items():
            write(root, name, 1, rows_)
        for t in range(1, steps + warmup + 2):
            if t > 1:
                for name in ("a", "b"):
                    write(root, name, t, inputs.change(name, 3, 2))
            load = os.getloadavg()[0]
            started, cpu = time.time(), time.process_time()
            report = run_step(rt)
            seconds, cpu = time.time() - started, time.process_time() - cpu
            kind = "load" if t == 1 else "warm-up" if t <= warmup + 1 else "measured"
            out["steps"].append({"t": t, "kind": kind, "rows": sum(sum(v.values()) for v in inputs.load.values()) if t == 1 else 10, "step s": round(seconds, 3),
                                 "cpu s": round(cpu, 3), "engine": report.engine, "load avg": round(load, 2)})
            print(out["steps"][-1], flush=True)
        measured = [s["step s"] for s in out["steps"] if s["kind"] == "measured"]
        out["median step s"] = round(statistics.median(measured), 3)
        out["median cpu s"] = round(statistics.median(s["cpu s"] for s in out["steps"] if s["kind"] == "measured"), 3)
        out["wrong views"] = check(rt, queries, inputs.live)
        out["correct"] = not out["wrong views"]
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def markdown(result: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = [f"# {result['views']} SQL views over two inputs, a few rows a step", "",
             f"{meta['when']}, commit {meta['commit']}, {meta['cores']} cores, 1-minute load {meta['loadavg_before'][0]:.1f} "
             f"before and {meta['loadavg_after'][0]:.1f} after (a machine shared with other jobs: "
             f"the seconds are an upper bound, not a quiet measurement).", "",
             f"Inputs loaded: {result['rows loaded']}; circuit compiled (open_circuit) in {result['compile s']} s. "
             f"Each later step: 3 inserts and 2 deletes in each input. Median of the measured steps: "
             f"**{result['median step s']} s** ({result['median cpu s']} s of this process's CPU, all threads). Every view equal to DuckDB over the integrated inputs after the "
             f"last step: **{result['correct']}**" + (f" (wrong: {result['wrong views']})" if result['wrong views'] else "")
             + ".", "",
             "| step | kind | rows changed | step s | CPU s | engine | load avg |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {s['t']} | {s['kind']} | {s['rows']} | {s['step s']} | {s['cpu s']} | {s['engine']} | {s['load avg']} |"
              for s in result["steps"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--views", type=int, default=100)
    parser.add_argument("--rows", type=int, default=2000, help="rows of input a loaded (b: half)")
    parser.add_argument("--steps", type=int, default=5, help="measured steps (after 2 warm-up steps)")
    parser.add_argument("--out", help="results folder (default bench/results)")
    args = parser.parse_args()
    from bench.report import write_results

    before = os.getloadavg()
    n, rows, steps = (10, 100, 2) if args.smoke else (args.views, args.rows, args.steps)
    result = run(n, rows, steps, warmup=2, seed=29)
    write_results("views-smoke" if args.smoke else "views", result, {}, before, args.out, markdown)


if __name__ == "__main__":
    main()
