"""Benchmark: incremental vs recompute vs the policy's choice, per change size (W1, TPC-H Q3; not a test).

    flock /tmp/dbsp-bench.lock python -m bench.recompute                  # SF 0.2, 100 .. 300k rows
    python -m bench.recompute --sf 1 --sizes 100,1000,10000,100000,1000000
    python -m bench.recompute --smoke                                     # SF 0.001, three sizes

One generator (``bench.generators.TpchGenerator``) makes the W1 load and, per size of the sweep,
one change (new orders with their items, whole orders deleted, a few customers). The same files go
to three data roots of the same circuit (``bench/circuits/w1_tpch.yaml``), each stepping with
``dbsp step``'s ``run_step``:

- ``incremental``: ``execution.cost.recompute: never`` (Q^Δ on the change);
- ``recompute``: ``always`` (Q over the integrated inputs the state keeps, committed as its delta);
- ``policy``: ``auto``, the default: the cost model picks (``spark_jobs/runtime/cost.py``), fitting
  its rates to this root's own past steps (``meta.cost.history``).

All three hold the same state before every step, so their seconds (the step's commit time, as
`dbsp step` reports it) are comparable, one run each; the ratio ``policy / min(incremental,
recompute)`` is the "never much slower than recomputing" figure. After EVERY size, each root's
view is compared with DuckDB's Q3 over the generator's current tables (the honest benchmark: a
size counts only if its view is right afterwards). The machine's load average is recorded before
and after each size: on the shared 2-core machine other work inflates the seconds.

Engines: every step runs where the policy sends it; ``--inprocess`` (the default) raises
``execution.arrow.max_change_rows`` and ``execution.cost.arrow_rows`` so that loads, large changes
and recomputes all run in-process (a local profile; Spark's start-up and jobs would otherwise
dominate a small machine). Results: ``bench/results/recompute.{json,md}`` (``--smoke``:
``recompute-smoke``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

MODES = {"incremental": "never", "recompute": "always", "policy": "auto"}
DEFAULT_SIZES = (100, 1_000, 10_000, 50_000, 100_000, 300_000)
SMOKE_SIZES = (10, 100, 1_000)
KEYS = ("l_orderkey", "o_orderdate", "o_shippriority")


def _log(msg: str) -> None:
    print(f"[bench.recompute {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _config(root: Path, mode: str, inprocess: bool, rows: int):
    from spark_jobs.config import load_config

    config = load_config(data_root=str(root))
    policy = config.policy
    cost = replace(policy.cost, recompute=MODES[mode])
    if inprocess:  # loads, large changes and recomputes in this process (see the docstring)
        cost = replace(cost, arrow_rows=max(cost.arrow_rows, 4 * rows))
        policy = replace(policy, arrow=replace(policy.arrow, max_change_rows=max(policy.arrow.max_change_rows, 2 * rows)))
    return config.with_policy(replace(policy, cost=cost))


def _copy_batch(source: Path, roots: dict[str, Path], batch: int) -> None:
    """The generator's files of one batch (``bNNNNNN.parquet``, or ``bNNNNNN-PPPP.parquet`` in
    parts) into every data root's inbox (copies: separate files)."""
    for table in os.listdir(source / "inbox"):
        for name in sorted(os.listdir(source / "inbox" / table)):
            if name.startswith(f"b{batch:06d}") and name.endswith(".parquet"):
                for root in roots.values():
                    (root / "inbox" / table).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source / "inbox" / table / name, root / "inbox" / table / name)


def _reference(gen, folder: Path) -> Any:
    """DuckDB's Q3 over the generator's current tables (the integrated inputs), as a pandas frame."""
    import duckdb

    from bench.workloads.w1_tpch import duckdb_q3

    tables = gen.snapshot(str(folder))
    return duckdb.connect().execute(duckdb_q3(tables)).fetch_df()


def _view_ok(rt, want) -> dict[str, Any]:
    """Is the committed view (pyarrow, consolidated) the reference, rows matched on the group keys
    and revenue within 1e-9 relative (another summation order)? Every weight must be 1."""
    from spark_jobs.state.arrow_read import read_view

    table = read_view(rt.committed, "q3")
    got = table.to_pandas() if table is not None else None
    if got is None or got.empty:
        return {"ok": want.empty, "rows": 0, "differing": int(len(want))}
    bad_weights = int((got["_weight"] != 1).sum())
    a = got.set_index(list(KEYS)).sort_index()
    b = want.assign(o_orderdate=want["o_orderdate"].astype(str)).set_index(list(KEYS)).sort_index()
    a.index = a.index.set_levels(a.index.levels[1].astype(str), level=1)
    both = a.join(b, how="outer", lsuffix="_a", rsuffix="_b")
    missing = both["revenue_a"].isna() | both["revenue_b"].isna()
    scale = both[["revenue_a", "revenue_b"]].abs().max(axis=1).clip(lower=1.0)
    differ = ((both["revenue_a"] - both["revenue_b"]).abs() > 1e-9 * scale) | (both["items_a"] != both["items_b"])
    differing = int((missing | differ).sum()) + bad_weights
    return {"ok": differing == 0, "rows": int(len(got)), "differing": differing}


def _load(gen, source: Path, roots: dict[str, Path], rts: dict[str, Any], rows: int, lean: bool) -> dict[str, Any]:
    """The first step. Small scales: each root loads (the same files, its own step). ``lean``
    (SF10): the first root loads and the others start from copies of its data root (inbox and
    state: paths in the state are relative to it), so the slow load runs once."""
    from spark_jobs.runtime.step import run_step

    load: dict[str, Any] = {}
    first = next(iter(rts))
    _copy_batch(source, {first: roots[first]} if lean else roots, gen.batch)
    for mode, rt in rts.items():
        if lean and mode != first:
            shutil.rmtree(roots[mode], ignore_errors=True)
            shutil.copytree(roots[first], roots[mode], copy_function=shutil.copy2)
            load[mode] = {"seconds": None, "engine": f"copy of {first}"}
            continue
        report = run_step(rt)
        load[mode] = {"seconds": round(report.seconds, 3), "engine": report.engine}
        _log(f"load {mode}: {rows} rows in {report.seconds:.2f} s ({report.engine})")
    return load


def run(sf: float, sizes: list[int], work: Path, inprocess: bool, reps: int = 3, lean: bool = False,
        max_rss_gib: float = 0.0, recompute_sizes: list[int] | None = None,
        partial: Any = None, reuse: bool = False, warmup: int = 0) -> dict[str, Any]:
    """The sweep (module docstring). ``lean``: ``bench.lean_tpch``'s data (rows are functions of
    their keys: SF10 fits in memory), loaded once and copied, each view checked by DuckDB over
    the change files (``bench.floor.view_check``); a watchdog stops the run above ``max_rss_gib``.
    ``recompute_sizes``: the sizes at which the recompute root is measured (None: all); at the
    others it steps incrementally (its state stays the others', its seconds are not reported):
    at SF10 a recompute rewrites every trace, minutes a step on this machine. ``partial``: called
    with the result so far after every size (a long run leaves its results if stopped).
    ``reuse`` (``lean``): ``work`` holds an earlier run's generated files and loaded roots (the
    SF10 load takes tens of minutes on a loaded machine): the generator replays its load and the
    sweep starts from the roots as they are, each root's view checked first. ``warmup``: rows of
    one unmeasured incremental step on every root before the sweep (0: none)."""
    from spark_jobs.config import PROJECT_ROOT
    from spark_jobs.runtime.circuit import open_circuit
    from spark_jobs.runtime.step import run_step

    source = work / "source"
    if lean:
        from bench.floor import Watchdog, view_check
        from bench.lean_tpch import LeanTpch

        gen: Any = LeanTpch(str(source), sf)
        dog = Watchdog(max_rss_gib)
    else:
        from bench.generators import TpchGenerator

        gen, dog = TpchGenerator(str(source), sf), None
    loaded = gen.replay_initial() if reuse else gen.initial()
    _log(f"SF {sf:g}: {loaded.total:,} rows generated{' (replayed: reusing ' + str(work) + ')' if reuse else ''}")
    roots = {mode: work / mode for mode in MODES}
    circuit = PROJECT_ROOT / "bench" / "circuits" / "w1_tpch.yaml"
    if reuse:  # the other roots: fresh copies of the loaded one (an earlier run may have stopped mid-copy)
        for mode in ("recompute", "policy"):
            shutil.rmtree(roots[mode], ignore_errors=True)
            shutil.copytree(roots["incremental"], roots[mode], copy_function=shutil.copy2)
    rts = {mode: open_circuit(str(circuit), _config(root, mode, inprocess, loaded.total)) for mode, root in roots.items()}
    if reuse:
        if any(rt.committed.last_committed() != 1 for rt in rts.values()):
            raise SystemExit(f"--reuse {work}: every root must hold exactly the load (timestep 1)")
        load = {mode: {"seconds": None, "engine": "reused from an earlier run's load"} for mode in MODES}
    else:
        load = _load(gen, source, roots, rts, loaded.total, lean)

    def check(rt: Any, want: Any) -> dict[str, Any]:
        return view_check(rt, gen) if lean else _view_ok(rt, want)

    if lean:  # the load's view too
        for mode in (MODES if reuse else ("incremental",)):
            _log(f"load's view ({mode}): {check(rts[mode], None)}")
    if warmup:  # one small incremental step per root, not measured: each root's first step after
        written = gen.change(warmup)  # the load paid cold costs (footers, imports) the others did not
        _copy_batch(source, roots, gen.batch)
        for mode in MODES:
            run_step(open_circuit(str(circuit), _config(roots[mode], "incremental", inprocess, loaded.total)))
        _log(f"warm-up: {written.total} rows stepped incrementally on every root (not measured)")
    points = []
    for size in sizes:
        before = os.getloadavg()
        point: dict[str, Any] = {"requested": size, "steps": [], "view_ok": []}
        for rep in range(reps):  # each rep: a new change of this size, the modes in a rotated order
            written = gen.change(size)
            _copy_batch(source, roots, gen.batch)
            order = list(MODES)[rep % len(MODES):] + list(MODES)[:rep % len(MODES)]
            step: dict[str, Any] = {"change_rows": written.total}
            for mode in order:
                rt = rts[mode]
                skip = mode == "recompute" and recompute_sizes is not None and size not in recompute_sizes
                if skip:  # the same state as the others, not measured
                    run_step(open_circuit(str(circuit), _config(roots[mode], "incremental", inprocess, loaded.total)))
                    step[mode] = None
                    continue
                report = run_step(rt)
                meta = rt.committed.manifest().meta
                step[mode] = {"seconds": round(report.seconds, 3), "mode": report.mode, "engine": report.engine,
                              "reason": report.mode_reason, "engine_reason": report.engine_reason,
                              "estimate": (meta.get("cost") or {}).get("estimate"), "loadavg": os.getloadavg()[0]}
                _log(f"{written.total} rows, {mode}: {report.seconds:.2f} s ({report.mode}, {report.engine})")
            # after EVERY step: each root's view against DuckDB's Q3 over the integrated inputs
            want = None if lean else _reference(gen, work / "reference")
            point["view_ok"].append({mode: check(rt, want) for mode, rt in rts.items()})
            point["steps"].append(step)
            _log(f"  views: {point['view_ok'][-1]}")
        steps = point["steps"]
        point["change_rows"] = int(median([s["change_rows"] for s in steps]))
        point["input_rows"] = gen.input_rows() if lean else sum(gen.state_rows().values())
        for mode in MODES:
            if any(s[mode] is None for s in steps):
                point[mode] = {"seconds": None, "mode": "not measured", "engine": "-", "estimate": None, "reason": ""}
                continue
            point[mode] = {"seconds": round(median([s[mode]["seconds"] for s in steps]), 3),
                           "mode": "/".join(sorted({s[mode]["mode"] for s in steps})),
                           "engine": "/".join(sorted({s[mode]["engine"] for s in steps})),
                           "estimate": steps[-1][mode]["estimate"], "reason": steps[-1][mode]["reason"]}
        best = min(x for x in (point["incremental"]["seconds"], point["recompute"]["seconds"]) if x is not None)
        point["policy_over_best"] = round(point["policy"]["seconds"] / best, 2) if best else None
        # did the policy run the cheaper root's path (mode and engine)? Then policy / min compares
        # two runs of the same path: the machine's noise, not the policy's choice
        cheaper = min((m for m in ("incremental", "recompute") if point[m]["seconds"] is not None),
                      key=lambda m: point[m]["seconds"])
        point["same_path_as_cheaper"] = (point["policy"]["mode"], point["policy"]["engine"]) == (
            point[cheaper]["mode"], point[cheaper]["engine"])
        point["views_right"] = all(v["ok"] for check in point["view_ok"] for v in check.values())
        point["loadavg_before"], point["loadavg_after"] = before, os.getloadavg()
        point["memory"] = memory()
        if dog is not None:
            point["memory"]["watchdog_peak_gib"] = round(max(dog.peak, dog.rss()) / 2**30, 2)
        if points:  # continuity: this size's policy step against the previous (smaller) size's
            prev = points[-1]
            point["policy_over_previous"] = round(point["policy"]["seconds"] / max(prev["policy"]["seconds"], 1e-9), 2)
            point["rows_over_previous"] = round(point["change_rows"] / max(prev["change_rows"], 1), 2)
        points.append(point)
        if partial is not None:
            partial({"sf": sf, "load_rows": loaded.total, "load": load, "reps": reps, "points": points,
                     "lean": lean, "partial": True})
        _log(f"  {size}: policy / min = {point['policy_over_best']}; views right: {point['views_right']}; "
             f"memory {point['memory']}")
    return {"sf": sf, "load_rows": loaded.total, "load": load, "reps": reps, "points": points, "lean": lean}


def memory() -> dict[str, float]:
    """GiB: this process's peak RSS so far, and the current RSS of it and its descendants (the
    Spark JVM) from /proc (Linux; {} elsewhere). SF10 is large: the run reports what it held."""
    import resource

    out = {"peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}
    try:
        children: dict[int, list[int]] = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(pid))
        todo, rss = [os.getpid()], 0
        while todo:
            pid = todo.pop()
            todo += children.get(pid, [])
            try:
                rss += int(open(f"/proc/{pid}/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            except (OSError, IndexError, ValueError):
                pass
        out["tree_rss_gib"] = round(rss / 2**30, 2)
    except OSError:
        pass
    return out


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def markdown(result: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = [f"# Incremental vs recompute vs the policy (W1 TPC-H Q3, SF {result['sf']})", "",
             f"{meta['when']}, commit {meta['commit']}, {meta['cores']} cores, engines: "
             f"{'in-process (--inprocess)' if meta['inprocess'] else 'as the policy sends them'}; "
             f"load average {meta['loadavg_before'][0]:.1f} before, {meta['loadavg_after'][0]:.1f} after. "
             "**Measured under load** (the machine is shared with other agents' work): one run; each "
             f"figure is the median of {result['reps']} steps of that size (each a new change, the three "
             "modes in a rotated order); the seconds are `dbsp step`'s (read, check, evaluate, commit).", "",
             *(["**Partial**: written after the last size below; the run was still going.", ""]
               if result.get("partial") else []),
             f"Load: {result['load_rows']:,} rows ("
             + ", ".join(f"{m} {v['seconds']} s on {v['engine']}" if v["seconds"] is not None else f"{m}: {v['engine']}"
                        for m, v in result["load"].items()) + ").", "",
             "| change rows | incremental s | recompute s | policy s (its choice, engine) | policy / min | "
             "policy s / previous size's (rows x) | estimated incr / recompute s | views right | load avg | "
             "GiB: peak RSS / process tree RSS | policy ran the cheaper's path |",
             "|---:|---:|---:|---|---:|---|---|---|---|---|---|"]
    for p in result["points"]:
        est = p["policy"].get("estimate") or {}
        guess = f"{est.get('incremental', '-')} / {est.get('recompute', '-')}" if est else "-"
        ok = p["views_right"]
        lines.append(f"| {p['change_rows']:,} | {p['incremental']['seconds']} | {p['recompute']['seconds'] if p['recompute']['seconds'] is not None else 'not measured'} | "
                     f"{p['policy']['seconds']} ({p['policy']['mode']}, {p['policy']['engine']}) | "
                     f"{p['policy_over_best']} | "
                     + (f"{p['policy_over_previous']} ({p['rows_over_previous']}x) | " if "policy_over_previous" in p
                        else "- | ")
                     + f"{guess} | "
                     f"{'yes' if ok else 'NO: ' + json.dumps(p['view_ok'], default=str)} | "
                     f"{p['loadavg_before'][0]:.1f} -> {p['loadavg_after'][0]:.1f} | "
                     f"{(p.get('memory') or {}).get('peak_rss_gib', '-')} / {(p.get('memory') or {}).get('tree_rss_gib', '-')} | "
                     f"{ {True: 'yes', False: 'no', None: '-'}[p.get('same_path_as_cheaper')] } |")
    worst = max((p["policy_over_best"] or 0 for p in result["points"]), default=0)
    unmeasured = [p["change_rows"] for p in result["points"] if p["recompute"]["seconds"] is None]
    lines += ["", f"Worst policy / min(incremental, recompute): **{worst}** over {len(result['points'])} sizes"
              + (f" (at {', '.join(f'{n:,}' for n in unmeasured)} rows the recompute was not measured: the ratio "
                 "there is against the incremental step alone)." if unmeasured else "."),
              "Views right: after every step of every size, each of the three roots' view equals DuckDB's Q3 "
              "over the integrated inputs (revenue within 1e-9 relative)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.recompute", description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=0.2, help="TPC-H scale factor (default 0.2; keep <= 1 here)")
    parser.add_argument("--sizes", help="changed rows per step, comma-separated (default "
                                        + ",".join(map(str, DEFAULT_SIZES)) + ")")
    parser.add_argument("--reps", type=int, default=3, help="steps per size (a new change each; median)")
    parser.add_argument("--smoke", action="store_true", help="SF 0.001, three small sizes, one step each")
    parser.add_argument("--no-inprocess", dest="inprocess", action="store_false",
                        help="leave the engine thresholds at the profile's (large steps on Spark)")
    parser.add_argument("--lean", action="store_true",
                        help="bench.lean_tpch's data (SF10 fits in memory), loaded once and copied to the roots")
    parser.add_argument("--max-rss-gib", type=float, default=8.0,
                        help="--lean: stop above this resident memory, this process and its children (0: never)")
    parser.add_argument("--warmup", type=int, default=1000,
                        help="rows of one unmeasured incremental step on every root before the sweep (0: none)")
    parser.add_argument("--recompute-sizes", help="measure the recompute root only at these sizes (default: all)")
    parser.add_argument("--name", help="results file name (default recompute, recompute-smoke)")
    parser.add_argument("--reuse", help="--lean: a work folder holding an earlier run's files and loaded roots "
                                        "(source/, incremental/, ...): the sweep starts from them")
    parser.add_argument("--out", help="results folder (default bench/results)")
    parser.add_argument("--work-dir", help="scratch data roots (default: a temp folder, removed at the end)")
    args = parser.parse_args(argv)
    from bench.report import write_results

    sizes = list(SMOKE_SIZES) if args.smoke else [int(s) for s in (args.sizes or "").split(",") if s] or list(DEFAULT_SIZES)
    sf = 0.001 if args.smoke else args.sf
    before = os.getloadavg()
    with (contextlib.nullcontext(args.reuse) if args.reuse else tempfile.TemporaryDirectory(dir=args.work_dir)) as tmp:
        name = args.name or ("recompute-smoke" if args.smoke else "recompute")

        def partial(so_far: dict[str, Any]) -> None:
            write_results(name, so_far, {"inprocess": args.inprocess}, before, args.out, markdown)

        result = run(sf, sizes, Path(tmp), args.inprocess, 1 if args.smoke else max(1, args.reps), args.lean,
                     args.max_rss_gib, [int(x) for x in args.recompute_sizes.split(",")] if args.recompute_sizes else None,
                     partial, reuse=bool(args.reuse), warmup=0 if args.smoke else max(0, args.warmup))
    write_results(name, result, {"inprocess": args.inprocess}, before, args.out, markdown)

if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # a Spark session started by a load or a recompute would otherwise hold the exit
