"""Benchmark: the incremental while loop (``op: iterate``) vs from-scratch runs (not a test).

    python -m bench.iterate                                   # >= 100k weighted edges, every piece
    python -m bench.iterate --sizes 10 --spark-sizes ''       # one piece: the 10-edge steps in-process
    python -m bench.iterate --sizes '' --spark-sizes 1000     # one piece: the 1,000-edge step on Spark
    python -m bench.iterate --smoke                           # tiny sizes, to check that it runs

Each piece fits a 12-minute hold of the benchmark lock (``flock /work/bench.lock timeout 12m``);
every piece starts from the same graph (seeded), and the ratios it reports are measured within it.

``circuits/shortest_paths.yaml`` on a random weighted graph (``--nodes`` nodes, ``--edges``
edges, weights 1..9, one source). One committed step loads the graph; then batches of 10, 100 and
1,000 edge changes (half deletions of present edges, half insertions) are timed as steps
(``run_step``, default policy: small changes in-process), and each is compared, in the same run,
with (a) the engine's own from-scratch run: a fresh circuit whose first step reads the whole
current graph and runs the loop from ``init`` (what a recompute costs; the engine the policy
picks and the loop kernel's own seconds recorded), (b) networkx's Dijkstra,
(c) DuckDB (a keyed recursive CTE) and (d) Dijkstra in plain Python (heapq) on the same graph.
After every step the integrated view must equal the distances of all three (``matches``).
10-edge steps are repeated ``--small-repeats`` times (the target is about them: the median and the
worst ratio are reported), the others ``--repeats`` times. Each step also records where its time
went: the loop's own seconds (the incremental kernel), how many iterations it ran against the
loop's previous depth, the view rows it changed, how many deleted edges lay on a shortest path
(``tight``: dist[src] + w = dist[dst], the deletions that may lengthen paths) and the bytes of
state it read. Then ``--spark-sizes`` steps are forced onto Spark (``execution.engine: spark``, the
incremental loop over the same per-iteration state) against the engine's from-scratch run on
Spark, in the same run. Results: bench/results/runs/<date>-iterate-<pieces>.json and .md (``--out``
a folder; ``-smoke`` under --smoke), with the date, the commit and the load before and after. Timings depend on the machine and its load (recorded): on a shared 2-core machine they
are indicative only.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import heapq
import json
import os
import random
import shlex
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from statistics import median

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.executor.kernels import iterate as iterate_kernels
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step

CIRCUIT = str(PROJECT_ROOT / "circuits" / "shortest_paths.yaml")
RESULTS = PROJECT_ROOT / "bench" / "results"


def write(root: str, folder: str, name: str, columns: tuple[str, ...], rows: Counter) -> None:
    path = os.path.join(root, "inbox", folder)
    os.makedirs(path, exist_ok=True)
    data = {c: pa.array([r[i] for r in rows], pa.int64()) for i, c in enumerate(columns)}
    data["_weight"] = pa.array(list(rows.values()), pa.int64())
    pq.write_table(pa.table(data), os.path.join(path, name))


def dijkstra(edges: Counter, source: int | dict[int, int]) -> dict[int, int]:
    """Shortest distances over the edges (src, dst, w) of positive multiplicity, from ``source``
    (a node at 0, or node -> starting distance: a super-source with an edge of that weight to
    each); weights >= 0, parallel edges and multiplicities do not matter."""
    adj: dict[int, list[tuple[int, int]]] = {}
    for (s, d, w), n in edges.items():
        if n > 0:
            adj.setdefault(s, []).append((d, w))
    best: dict[int, int] = {}
    heap = [(d, node) for node, d in ({source: 0} if isinstance(source, int) else source).items()]
    heapq.heapify(heap)
    while heap:
        d, node = heapq.heappop(heap)
        if node in best:
            continue
        best[node] = d
        for nxt, w in adj.get(node, ()):
            if nxt not in best:
                heapq.heappush(heap, (d + w, nxt))
    return best


def integrate_view(rt, view: Counter) -> dict[int, int]:  # noqa: ANN001 - a CircuitRuntime
    """The view after the last step: its committed delta (read with pyarrow) added to ``view``."""
    entry = rt.store.manifest().outputs.get("dist")
    if entry is not None and entry.delta:
        for r in pq.read_table(rt.store.layout.abs(entry.delta)).to_pylist():
            view[(r["node"], r["d"])] += r["_weight"]
    for key in [key for key, n in view.items() if n == 0]:
        del view[key]
    return {node: d for (node, d), n in view.items() if n > 0}


DUCKDB_SHORTEST_PATHS = """
WITH RECURSIVE dist(node, d) USING KEY (node) AS (
  SELECT ?::BIGINT, 0::BIGINT
  UNION
  SELECT e.dst, min(p.d + e.w) FROM dist p JOIN edges e ON p.node = e.src
  LEFT JOIN recurring.dist r ON r.node = e.dst
  GROUP BY e.dst, r.d HAVING r.d IS NULL OR min(p.d + e.w) < r.d
) SELECT node, d FROM dist"""


def duckdb_distances(edges: Counter, source: int) -> tuple[dict[int, int], float]:
    """Shortest distances by DuckDB (a keyed recursive CTE: Bellman-Ford from the source, each
    round only over the nodes whose distance dropped), and the query's seconds (the table load
    not counted)."""
    import duckdb

    live = [e for e, n in edges.items() if n > 0]
    table = pa.table({c: pa.array([e[i] for e in live], pa.int64()) for i, c in enumerate(("src", "dst", "w"))})
    con = duckdb.connect()
    try:
        con.register("edges_arrow", table)
        con.execute("CREATE TABLE edges AS SELECT * FROM edges_arrow")
        t0 = time.perf_counter()
        rows = con.execute(DUCKDB_SHORTEST_PATHS, [source]).fetchall()
        return dict(rows), time.perf_counter() - t0
    finally:
        con.close()


def networkx_distances(edges: Counter, source: int) -> tuple[dict[int, int], float]:
    """Shortest distances by networkx (Dijkstra on a MultiDiGraph), and its seconds (the graph's
    construction not counted)."""
    import networkx as nx

    g = nx.MultiDiGraph()
    g.add_weighted_edges_from((e for e, n in edges.items() if n > 0), weight="w")
    g.add_node(source)
    t0 = time.perf_counter()
    found = nx.single_source_dijkstra_path_length(g, source, weight="w")
    return dict(found), time.perf_counter() - t0


class LoopProfile:
    """The loop kernel's seconds, iterations and previous depth in the steps it wraps (the
    kernel is wrapped, not changed: ``iterate_kernels.incremental``)."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self._real = iterate_kernels.incremental

    def __enter__(self) -> "LoopProfile":
        def timed(node, deltas, state, depth, *args, **kwargs):  # noqa: ANN001, ANN202 - the kernel's
            t0 = time.perf_counter()
            done = self._real(node, deltas, state, depth, *args, **kwargs)
            self.calls.append({"loop_s": round(time.perf_counter() - t0, 3), "iterations": done.iterations,
                               "previous_depth": depth})
            return done

        iterate_kernels.incremental = timed
        return self

    def __exit__(self, *exc: object) -> None:
        iterate_kernels.incremental = self._real


@contextlib.contextmanager
def own_objects_frozen():  # noqa: ANN201 - a context manager
    """Time a step without the benchmark's own Python objects in the garbage collector's way.

    Why: this process holds the graph as Python tuples (1M edges in a Counter, their sorted
    list, the integrated view) for networkx, DuckDB and Dijkstra; a full collection walks all of
    them, 0.1-0.2 s each, and a 10-edge step on 1M edges triggered 2-3 (0.3-0.4 s of a 1.4 s
    step, measured with ``gc.callbacks``). A process running the engine (``dbsp step``, an
    Airflow task) holds none of them, so they are moved out of the collector's reach
    (``gc.freeze``) around each timed run: the step and the from-scratch run alike."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def bench_config(root: str, engine: str = "auto"):  # noqa: ANN201 - a Config
    config = load_config(data_root=root)
    return config if engine == "auto" else config.with_policy(replace(config.policy, engine=engine))


def tight_deletions(change: Counter, dist: dict[int, int]) -> int:
    """Deleted edges on a shortest path (dist[src] + w = dist[dst]): the ones that may lengthen paths."""
    return sum(1 for (s, d, w), n in change.items()
               if n < 0 and s in dist and d in dist and dist[s] + w == dist[d])


class ScratchProfile:
    """The seconds of the loop kernel run from ``init`` (``iterate_kernels.scratch``, wrapped):
    the from-scratch computation without reading the inputs or writing the state."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._real = iterate_kernels.scratch

    def __enter__(self) -> "ScratchProfile":
        def timed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - the kernel's
            t0 = time.perf_counter()
            done = self._real(*args, **kwargs)
            self.seconds.append(round(time.perf_counter() - t0, 3))
            return done

        iterate_kernels.scratch = timed
        return self

    def __exit__(self, *exc: object) -> None:
        iterate_kernels.scratch = self._real


def from_scratch(edges: Counter, source: int, engine: str = "auto") -> tuple[float, float, dict]:
    """Seconds of the engine's first step over the whole graph, of Dijkstra, and what ran: the
    engine and the loop kernel's own seconds."""
    root = tempfile.mkdtemp(prefix="bench-iterate-scratch-")
    try:
        rt = open_circuit(CIRCUIT, bench_config(root, engine))
        write(root, "weighted_edges", "all.parquet", ("src", "dst", "w"), edges)
        write(root, "start", "s.parquet", ("node", "d"), Counter({(source, 0): 1}))
        with ScratchProfile() as loop, own_objects_frozen():
            t0 = time.perf_counter()
            report = run_step(rt)
            seconds = time.perf_counter() - t0
    finally:
        shutil.rmtree(root, ignore_errors=True)
    t0 = time.perf_counter()
    dijkstra(edges, source)
    return seconds, time.perf_counter() - t0, {"scratch_engine": report.engine,
                                               "scratch_loop_s": loop.seconds[-1] if loop.seconds else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: check that the benchmark runs")
    ap.add_argument("--nodes", type=int, default=25_000)
    ap.add_argument("--edges", type=int, default=100_000)
    ap.add_argument("--sizes", default="10,100,1000",
                    help="sizes of the in-process steps (comma-separated; '' none)")
    ap.add_argument("--repeats", type=int, default=2, help="steps of each size but 10 edges")
    ap.add_argument("--small-repeats", type=int, default=6, help="steps of 10 edge changes")
    ap.add_argument("--spark-sizes", default="1000",
                    help="sizes of the steps forced onto Spark after the in-process ones (comma-separated; '' none)")
    ap.add_argument("--out", default=str(RESULTS / "runs"), help="the folder of the results")
    args = ap.parse_args()
    nodes, n_edges = (200, 800) if args.smoke else (args.nodes, args.edges)
    batches = (10, 100) if args.smoke else tuple(int(x) for x in args.sizes.split(",") if x.strip())
    spark_sizes = [int(x) for x in args.spark_sizes.split(",") if x.strip()]
    small_repeats = min(args.small_repeats, 2) if args.smoke else args.small_repeats
    if args.smoke:  # a Spark step of the loop costs minutes even on the tiny graph (jobs per iteration)
        spark_sizes = []
    rng = random.Random(42)
    edges: Counter = Counter()
    while len(edges) < n_edges:
        edges[(rng.randrange(nodes), rng.randrange(nodes), rng.randint(1, 9))] = 1
    root = tempfile.mkdtemp(prefix="bench-iterate-")
    started = time.gmtime()
    pieces = "-".join([*(f"{b}" for b in batches), *(f"spark{b}" for b in spark_sizes)]) or "none"
    out = RESULTS / "iterate-smoke" if args.smoke else \
        Path(args.out) / (time.strftime("%Y-%m-%d-%H%M", started) + "-iterate-" + pieces)
    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", started), "commit": _commit(),
                    "command": "python -m bench.iterate " + " ".join(
                        f"{a} {shlex.quote(v)}" for a, v in (("--sizes", args.sizes), ("--repeats", str(args.repeats)),
                                                              ("--small-repeats", str(args.small_repeats)),
                                                              ("--spark-sizes", args.spark_sizes))),
                    "smoke": args.smoke, "edges": n_edges, "nodes": nodes, "batches": list(batches),
                    "repeats": args.repeats,
                    "small_repeats": small_repeats, "spark_sizes": spark_sizes, "cores": os.cpu_count(), "steps": [], "spark_steps": [],
                    "complete": False, "gc_frozen": True, "load_before": round(os.getloadavg()[0], 2)}
    try:
        rt = open_circuit(CIRCUIT, load_config(data_root=root))
        write(root, "weighted_edges", "b000000.parquet", ("src", "dst", "w"), edges)
        write(root, "start", "s.parquet", ("node", "d"), Counter({(0, 0): 1}))
        t0 = time.perf_counter()
        report = run_step(rt)
        result["initial_step_s"] = round(time.perf_counter() - t0, 3)
        result["initial_engine"] = report.engine
        integrated: Counter = Counter()
        view = integrate_view(rt, integrated)
        result["reachable"] = len(view)
        result["initial_matches"] = view == dijkstra(edges, 0)
        status = rt.store.status()["traces"]
        result["state_rows"] = sum(t["rows"] for k, t in status.items() if k.startswith("dist/"))
        result["depth_traces"] = sum(1 for k in status if k.startswith("dist/") and k.split("/")[1].isdigit())
        k = 1
        plan = [(size, "auto") for size in batches for _ in range(small_repeats if size == 10 else args.repeats)]
        plan += [(size, "spark") for size in spark_sizes]
        reps: Counter = Counter()
        for size, engine in plan:
            rep = reps[(size, engine)]
            reps[(size, engine)] += 1
            live = sorted(e for e, n in edges.items() if n > 0)
            change: Counter = Counter()
            for e in rng.sample(live, size // 2):
                change[e] -= 1
            while sum(1 for n in change.values() if n > 0) < size - size // 2:
                e = (rng.randrange(nodes), rng.randrange(nodes), rng.randint(1, 9))
                if edges[e] == 0 and change[e] == 0:
                    change[e] += 1
            tight = tight_deletions(change, view)
            edges.update(change)
            edges = Counter({e: n for e, n in edges.items() if n > 0})
            write(root, "weighted_edges", f"b{k:06d}.parquet", ("src", "dst", "w"), change)
            k += 1
            rt.config = bench_config(root, engine)
            if engine == "spark" and "spark_session_s" not in result:  # the JVM starts untimed
                t0 = time.perf_counter()
                rt.spark  # noqa: B018 - opens the session (and checks the circuit's expressions)
                result["spark_session_s"] = round(time.perf_counter() - t0, 3)
            group = f"bench-iterate-{k}"  # the Spark jobs of a step forced onto Spark
            if engine == "spark":
                rt.spark.sparkContext.setJobGroup(group, group)
            with LoopProfile() as profile, own_objects_frozen():
                t0 = time.perf_counter()
                try:
                    report = run_step(rt)
                except Exception as exc:  # noqa: BLE001 - a failed Spark step is a result too
                    if engine != "spark":
                        raise
                    result["spark_error"] = (f"the {size}-edge step forced onto Spark failed after "
                                             f"{time.perf_counter() - t0:.0f} s: {type(exc).__name__}: {str(exc)[:500]}")
                    save(out, result)
                    break
                step_s = time.perf_counter() - t0
            jobs = len(rt.spark.sparkContext.statusTracker().getJobIdsForGroup(group)) if engine == "spark" else 0
            view = integrate_view(rt, integrated)
            engine_s, python_s, scratch = from_scratch(edges, 0, engine)
            nx_view, nx_s = networkx_distances(edges, 0)
            duck_view, duck_s = duckdb_distances(edges, 0)
            want = dijkstra(edges, 0)
            loop = profile.calls[-1] if profile.calls else {}
            row = {
                "changed_edges": size, "repeat": rep, "forced": engine, "engine": report.engine, "mode": report.mode,
                "step_s": round(step_s, 3), **loop, "spark_jobs": jobs,
                "view_rows_changed": sum(report.views.get("dist", (0, 0))), "tight_deletions": tight,
                "bytes_read": report.bytes_read,
                "engine_scratch_s": round(engine_s, 3), **scratch, "python_dijkstra_s": round(python_s, 3),
                "networkx_s": round(nx_s, 3), "duckdb_s": round(duck_s, 3),
                "speedup_vs_engine_scratch": round(engine_s / step_s, 2),
                "speedup_vs_networkx": round(nx_s / step_s, 3), "speedup_vs_duckdb": round(duck_s / step_s, 3),
                "matches": view == want == nx_view == duck_view, "load_average": round(os.getloadavg()[0], 2)}
            result["spark_steps" if engine == "spark" else "steps"].append(row)
            print(json.dumps(row), flush=True)
            save(out, result)  # so far (a Spark step takes minutes)
        result["complete"] = True
    finally:
        result["load_after"] = round(os.getloadavg()[0], 2)
        shutil.rmtree(root, ignore_errors=True)
        save(out, result)
    print(f"wrote {out}.json and {out}.md")


def _commit() -> str:
    """The checkout's commit (and ``+dirty`` with uncommitted changes), for the results file."""
    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(PROJECT_ROOT), *a], capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def save(out: Path, result: dict) -> None:
    result["summary"] = summary(result["steps"])  # so far, if the run stops early
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(_markdown(result))


def summary(steps: list[dict]) -> dict:
    """Per size: the median and the worst (lowest) speedup over the engine's from-scratch run."""
    out: dict = {}
    for size in sorted({s["changed_edges"] for s in steps}):
        ratios = [s["speedup_vs_engine_scratch"] for s in steps if s["changed_edges"] == size]
        out[str(size)] = {"steps": len(ratios), "median_speedup": round(median(ratios), 2),
                          "worst_speedup": min(ratios), "best_speedup": max(ratios)}
    return out


def _markdown(r: dict) -> str:
    lines = [f"# While loop (op: iterate): shortest paths, {r['edges']} edges, {r['nodes']} nodes"
             + (" (smoke)" if r["smoke"] else ""), "",
             f"`{r.get('command', 'python -m bench.iterate')}` at {r.get('date')}, commit {r.get('commit')}; "
             f"{r.get('cores')} cores; initial step {r.get('initial_step_s')} s "
             f"({r.get('initial_engine')}), {r.get('reachable')} reachable nodes, loop state "
             f"{r.get('state_rows')} rows in {r.get('depth_traces')} per-iteration traces. Timings depend on the "
             f"machine's load (column `load`); complete: {r['complete']}.", "",
             f"Load average (1 min) before the run {r.get('load_before')}, after {r.get('load_after')}.", "",
             "Speedups are the from-scratch time over the step's (below 1: the step is slower); networkx and "
             "DuckDB are timed without loading the graph. `loop` is the incremental loop's own seconds, "
             "`iterations` how many it ran (the loop's depth before the step in brackets), `tight` the deleted "
             "edges that lay on a shortest path. `from scratch` is the engine's first step over the whole graph "
             "(the engine that ran it; in brackets the loop kernel's own seconds, without reading the inputs and "
             "writing the state)." + (" Both timed runs hold the benchmark's own Python objects (the graph as tuples, "
                                      "for networkx, DuckDB and Dijkstra) out of the garbage collector's way "
                                      "(`gc.freeze`, as a process running only the engine would)."
                                      if r.get("gc_frozen") else ""), ""]
    if r.get("summary"):
        lines += ["| changed edges | steps | median speedup | worst | best |", "|---|---|---|---|---|"]
        lines += [f"| {size} | {v['steps']} | {v['median_speedup']}x | {v['worst_speedup']}x | {v['best_speedup']}x |"
                  for size, v in r["summary"].items()]
        lines.append("")
    for title, key in (("In-process (default policy)", "steps"), ("Forced onto Spark (execution.engine: spark; "
                                                                   "from scratch on Spark too)", "spark_steps")):
        if not r.get(key):
            continue
        lines += [f"## {title}", "",
                  "| changed edges | engine | step (s) | loop (s) | iterations | view rows | tight | "
                  "engine from scratch (s) | speedup | networkx (s) | vs networkx | DuckDB (s) | vs DuckDB | "
                  "Python Dijkstra (s) | view = all three | load | " + ("step's work |" if key == "spark_steps"
                                                                        else "state bytes read |"),
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for s in r[key]:
            lines.append(f"| {s['changed_edges']} | {s['engine']} | {s['step_s']} | {s.get('loop_s')} | "
                         f"{s.get('iterations')} ({s.get('previous_depth')}) | {s.get('view_rows_changed')} | "
                         f"{s.get('tight_deletions')} | {s['engine_scratch_s']} ({s.get('scratch_engine')}, "
                         f"{s.get('scratch_loop_s')}) | "
                         f"{s['speedup_vs_engine_scratch']}x | {s.get('networkx_s')} | {s.get('speedup_vs_networkx')}x | "
                         f"{s.get('duckdb_s')} | {s.get('speedup_vs_duckdb')}x | {s['python_dijkstra_s']} | "
                         f"{s['matches']} | {s['load_average']} |"
                         + (f" {s.get('spark_jobs')} Spark jobs, {s.get('bytes_read')} bytes read by the driver |"
                            if key == "spark_steps" else f" {s.get('bytes_read')} |"))
        lines.append("")
    if r.get("spark_error"):
        lines += ["## Forced onto Spark", "", f"Failed: {r['spark_error']}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
