"""Benchmark: incremental transitive closure vs a from-scratch fixed point (not a test).

    python -m bench.recursion            # >= 100k edges (takes a while)
    python -m bench.recursion --smoke    # tiny sizes, to check that it runs

The graph is many small DAG components, so the closure stays bounded (it grows with the number of
components, not quadratically with the graph). One committed step (`run_step`, Parquet state)
builds the closure; then small batches of edge insertions and deletions are timed as steps, and
each is compared with computing the closure from scratch (the query circuit on the whole current
graph: semi-naive evaluation) on the same Spark session; the engine's integrated view after the
step must equal that closure (recorded per step as ``matches_scratch``). After the last step the
view is checked once more against the from-scratch closure and a Python fixed point of the
benchmark's own edge set (``correct``). Results go to bench/results/recursion.json and
recursion.md (``--out`` another folder, ``--name`` another file name; ``-smoke`` is appended
under --smoke).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.executor import loop as loop_module
from spark_jobs.executor.spark import loop_kernels as spark_loop
from spark_jobs.executor.loop import scope_body
from spark_jobs.policy import LOOKUPS, ExecutionPolicy
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

CIRCUIT = str(PROJECT_ROOT / "circuits" / "transitive_closure.yaml")
# how a step runs: "arrow" = the whole step in-process (execution.engine auto: Spark for a large
# change); "driver" = a Spark step whose loop runs in-process (recursion.driver_loop); the others
# = a Spark step and loop, with that trace lookup (recursion.lookup)
LOOPS = ("arrow", "driver") + LOOKUPS


def policy_for(loop: str) -> ExecutionPolicy:
    """The execution policy of ``loop`` (see LOOPS)."""
    base = ExecutionPolicy()
    if loop == "arrow":
        return base
    recursion = dataclasses.replace(base.recursion, driver_loop=loop == "driver",
                                    lookup=base.recursion.lookup if loop == "driver" else loop)
    return dataclasses.replace(base, engine="spark", recursion=recursion)


def use_loop(rt, loop: str) -> None:  # noqa: ANN001 - a CircuitRuntime
    """Run ``rt``'s next steps as ``loop`` says (see LOOPS)."""
    rt.config = rt.config.with_policy(policy_for(loop))
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


class Loops(logging.Handler):
    """Collects the per-iteration profile every fixed-point loop logs (``loop._Profile``)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.runs: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        profile = getattr(record, "profile", None)
        if profile is not None:
            self.runs.append(profile)


class Measured:
    """Seconds, Spark jobs (a job group per measurement) and loop profiles of one block."""

    def __init__(self, spark, loops: Loops, label: str) -> None:
        self.spark, self.loops, self.label = spark, loops, label

    def __enter__(self) -> "Measured":
        self.spark.sparkContext.setJobGroup(self.label, self.label)
        self.first = len(self.loops.runs)
        self.started = time.time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.time() - self.started
        self.jobs = len(self.spark.sparkContext.statusTracker().getJobIdsForGroup(self.label))
        self.runs = self.loops.runs[self.first:]

    def summary(self, prefix: str) -> dict:
        iters = sum(r["iterations"] for r in self.runs)
        loop_jobs = sum(r["jobs"] for r in self.runs)
        return {f"{prefix}_seconds": round(self.seconds, 2), f"{prefix}_jobs": self.jobs,
                f"{prefix}_iterations": iters,
                f"{prefix}_loop_jobs_per_iteration": round(loop_jobs / iters, 2) if iters else None,
                f"{prefix}_iteration_seconds": [round(s, 2) for r in self.runs for s in r["seconds"]]}


def from_scratch(rt, edges: set[tuple[int, int]], loops: Loops, label: str) -> tuple[Measured, int, "DataFrame"]:
    """The closure computed from the whole graph, no state: measurement, closure rows, and the
    closure (a consolidated Z-set built from checkpointed iterations: reading it again is cheap)."""
    spark = rt.spark
    df = spark.createDataFrame([(a, b, 1) for a, b in sorted(edges)], "src long, dst long, _weight long")
    df = df.localCheckpoint()  # the graph as input, not its Python conversion, is what we time
    scope = rt.compiled.query["closure"]
    with Measured(spark, loops, label) as m:
        done = spark_loop.run(scope, scope_body(scope), [df], None, spark, policy_for("sorted").recursion, False)
        rows = done.output.count()
    return m, rows, done.output


def differences(spark, view, scratch) -> int:
    """Rows (weights included) in one of the two consolidated closures and not in the other;
    0 exactly when the engine's view equals the from-scratch closure. Not timed (own job group)."""
    spark.sparkContext.setJobGroup("check", "correctness check")
    cols = ["src", "dst", "_weight"]
    s = scratch.select(*cols)
    if view is None:
        return s.count()
    v = view.select(*cols)
    return v.exceptAll(s).count() + s.exceptAll(v).count()


def python_closure(edges: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """Every (a, b) with b reachable from a: a depth-first search from each node, no Spark."""
    succ: dict[int, list[int]] = {}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
    out: set[tuple[int, int]] = set()
    for a in succ:
        seen: set[int] = set()
        todo = list(succ[a])
        while todo:
            b = todo.pop()
            if b not in seen:
                seen.add(b)
                todo.extend(succ.get(b, ()))
        out.update((a, b) for b in seen)
    return out


def final_check(rt, edges: set[tuple[int, int]], loops: Loops) -> dict:
    """The integrated view after every step against the from-scratch closure and a Python fixed
    point of the current edges (untimed)."""
    _, rows, scratch = from_scratch(rt, edges, loops, "final-scratch")
    view = rt.store.read_view("closure")
    diff = differences(rt.spark, view, scratch)
    got = set() if view is None else {(r[0], r[1]) for r in view.select("src", "dst", "_weight").collect()
                                      if r[2] == 1}
    view_rows = 0 if view is None else view.count()
    want = python_closure(edges)
    check = {"view_rows": view_rows, "scratch_rows": rows, "python_rows": len(want),
             "scratch_differences": diff, "view_equals_scratch": diff == 0,
             "view_equals_python": got == want and view_rows == len(want)}
    check["ok"] = check["view_equals_scratch"] and check["view_equals_python"]
    return check


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: check that the benchmark runs")
    ap.add_argument("--components", type=int, default=5000, help="DAG components (edges = components x 21)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--loop", choices=LOOPS, default="arrow",
                    help="how a step runs: in-process (arrow), a Spark step with its loop in-process "
                         "(driver), or a Spark step and loop with a trace lookup (sorted, cached, scan)")
    ap.add_argument("--no-scratch", action="store_true", help="time the incremental steps only")
    ap.add_argument("--compare", nargs="*", default=["sorted"], choices=LOOPS,
                    help="other loops timed afterwards on every batch size (incremental steps only)")
    ap.add_argument("--out", default=str(RESULTS), help="results folder (default bench/results)")
    ap.add_argument("--name", default="recursion",
                    help="results file name: <out>/<name>.json/.md (<name>-smoke.* under --smoke)")
    args = ap.parse_args()
    comps, nodes, per = (40, 12, 14) if args.smoke else (args.components, 24, 21)
    batches = (2, 5) if args.smoke else (10, 100)
    rng = random.Random(42)
    edges: set[tuple[int, int]] = set()
    for c in range(comps):
        edges |= component_edges(rng, c * 1000, nodes, per)
    root = tempfile.mkdtemp(prefix="bench-recursion-")
    out = Path(args.out) / (args.name + ("-smoke" if args.smoke else ""))
    result: dict = {"smoke": args.smoke, "complete": False, "edges": len(edges), "components": comps,
                    "nodes_per_component": nodes, "batches": list(batches), "repeats": args.repeats,
                    "lookup": args.loop, "cores": os.cpu_count(), "steps": []}
    loops = Loops()
    logger = logging.getLogger(loop_module.__name__)
    logger.addHandler(loops)
    logger.setLevel(logging.DEBUG)
    try:
        rt = open_circuit(CIRCUIT, load_config(data_root=root))
        use_loop(rt, args.loop)
        write_batch(root, "b000000.parquet", {e: 1 for e in edges})
        with Measured(rt.spark, loops, "initial") as m:
            run_step(rt)
        result.update(m.summary("initial_step"))
        result["initial_load_average"] = round(os.getloadavg()[0], 2)
        status = rt.store.status()["traces"]
        result["closure_rows"] = status["view:closure"]["rows"]
        result["state_rows"] = sum(t["rows"] for k, t in status.items() if k.startswith("closure/"))
        save(result, out)
        print(f"{len(edges)} edges, closure {result['closure_rows']} rows, state {result['state_rows']} rows, "
              f"first step {result['initial_step_seconds']} s", flush=True)
        n = 1
        # the main loop on every batch size (with the from-scratch closure); then each other loop
        plan = [(size, args.loop, args.no_scratch) for size in batches for _ in range(args.repeats)]
        plan += [(size, other, True) for other in args.compare for size in batches]
        for size, lookup, no_scratch in plan:
            use_loop(rt, lookup)
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
                with Measured(rt.spark, loops, f"step{n}") as m:
                    report = run_step(rt)
                entry = {"kind": kind, "batch": size, "lookup": lookup, **m.summary("step"),
                         "view_changes": report.views.get("closure"),
                         "load_average": round(os.getloadavg()[0], 2)}
                if not no_scratch:
                    scratch, rows, closure = from_scratch(rt, edges, loops, f"scratch{n}")
                    entry.update(scratch.summary("from_scratch"))
                    entry["closure_rows"] = rows
                    entry["matches_scratch"] = differences(rt.spark, rt.store.read_view("closure"), closure) == 0
                result["steps"].append(entry)
                print({k: v for k, v in entry.items() if not k.endswith("iteration_seconds")}, flush=True)
                save(result, out)  # after every step: a long run leaves partial results
        result["correct"] = final_check(rt, edges, loops)
        result["complete"] = True
        print({"correct": result["correct"]}, flush=True)
    finally:
        logger.removeHandler(loops)
        shutil.rmtree(root, ignore_errors=True)
    save(result, out)
    print(markdown(result))


def save(result: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_name(out.name + ".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_name(out.name + ".md").write_text(markdown(result))


def markdown(result: dict) -> str:
    lines = [f"Transitive closure: {result['edges']} edges in {result['components']} DAG components, "
             f"{result.get('closure_rows')} closure rows, {result.get('state_rows')} rows of per-iteration "
             f"state; first (from-empty) step {result.get('initial_step_seconds')} s "
             f"({result.get('initial_step_iterations')} iterations). Loop: {result.get('lookup')}; "
             f"{result.get('cores')} cores.", "",
             "| change | edges | loop | incremental step (s) | of which loop (s) | iterations | loop jobs / iteration "
             "| step jobs | from scratch (s) | iterations | speed-up | view = scratch | load avg |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in result["steps"]:
        scratch = s.get("from_scratch_seconds")
        speed = f"{scratch / s['step_seconds']:.1f}x" if scratch and s["step_seconds"] else "-"
        loop = round(sum(s.get("step_iteration_seconds") or []), 2)
        lines.append(f"| {s['kind']} | {s['batch']} | {s.get('lookup', result.get('lookup'))} | "
                     f"{s['step_seconds']} | {loop} | {s.get('step_iterations')} | "
                     f"{s.get('step_loop_jobs_per_iteration')} | {s.get('step_jobs')} | {scratch or '-'} | "
                     f"{s.get('from_scratch_iterations', '-')} | {speed} | {_yes(s.get('matches_scratch'))} | "
                     f"{s.get('load_average')} |")
    check = result.get("correct")
    if check:
        lines += ["", f"Correct after the last step: {_yes(check['ok'])} (the view's {check['view_rows']} rows "
                      f"equal the from-scratch closure's {check['scratch_rows']}: {_yes(check['view_equals_scratch'])}; "
                      f"and a Python fixed point's {check['python_rows']}: {_yes(check['view_equals_python'])})."]
    return "\n".join(lines) + "\n"


def _yes(ok: bool | None) -> str:
    return "-" if ok is None else "yes" if ok else "NO"


if __name__ == "__main__":
    main()
