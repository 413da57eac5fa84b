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


# ``--chunk-rows``: every root's execution.arrow.chunk_rows (None: the profile's). A value past what
# the memory bound holds turns sub-steps off: a step past the bound runs on Spark, as before
# 2026-11-30 (the A of an A/B against ``runtime/chunks.py``)
CHUNK_ROWS: int | None = None


def _config(root: Path, mode: str, inprocess: bool, rows: int, recompute_inprocess: bool = False):
    """The profile's policy with ``mode``'s ``execution.cost.recompute``. ``inprocess``: every
    step in this process (thresholds raised); ``recompute_inprocess``: only a recompute's
    (``execution.cost.arrow_rows``), the incremental engine thresholds left as the profile has them
    (``max_change_rows``, ``max_memory_bytes``), so the sweep crosses them as a local profile does."""
    from spark_jobs.config import load_config

    config = load_config(data_root=str(root))
    policy = config.policy
    cost = replace(policy.cost, recompute=MODES[mode])
    if recompute_inprocess and not inprocess:
        cost = replace(cost, arrow_rows=max(cost.arrow_rows, 4 * rows))
    if inprocess:  # loads, large changes and recomputes in this process (see the docstring)
        cost = replace(cost, arrow_rows=max(cost.arrow_rows, 4 * rows))
        policy = replace(policy, arrow=replace(policy.arrow, max_change_rows=max(policy.arrow.max_change_rows, 2 * rows)))
    if CHUNK_ROWS is not None:
        policy = replace(policy, arrow=replace(policy.arrow, chunk_rows=CHUNK_ROWS))
    return config.with_policy(replace(policy, cost=cost))


def _copy_batch(source: Path, roots: dict[str, Path], batch: int) -> None:
    """The generator's files of one batch (``bNNNNNN.parquet``, or ``bNNNNNN-PPPP.parquet`` in
    parts) into every data root's inbox (copies: separate files); a file a root already holds is
    left alone (the load in halves copies batch 1 twice)."""
    for table in os.listdir(source / "inbox"):
        for root in roots.values():  # an empty folder too: it means "no changes", a missing one is refused
            (root / "inbox" / table).mkdir(parents=True, exist_ok=True)
        for name in sorted(os.listdir(source / "inbox" / table)):
            if name.startswith(f"b{batch:06d}") and name.endswith(".parquet"):
                for root in roots.values():
                    (root / "inbox" / table).mkdir(parents=True, exist_ok=True)
                    if not (root / "inbox" / table / name).exists():
                        shutil.copy2(source / "inbox" / table / name, root / "inbox" / table / name)


LOADED = "loaded"  # ``--keep DIR --load-only``: the loaded root every ``--reuse DIR`` piece restarts from


def _link_or_copy(src: str, dst: str) -> None:
    """A Parquet file hard-linked (the store never modifies one: traces, inbox files and view
    deltas are written once under new names), anything else copied (manifests, the lease)."""
    if src.endswith(".parquet"):
        os.link(src, dst)
    else:
        shutil.copy2(src, dst)


def _clone(source: Path, target: Path) -> None:
    """``target`` as a copy of the data root ``source`` (Parquet files hard-linked: an SF10 root
    in seconds and no extra disk; the page cache is shared, so no root reads colder than another)."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, copy_function=_link_or_copy)


def _restore(work: Path, modes: list[str]) -> None:
    """Before a ``--reuse`` piece: every root a fresh clone of the kept loaded root, and the
    generator's change files of earlier pieces removed (the generator replays the load and draws
    the same changes again, batch 2 on; DuckDB's check reads every file of ``source/inbox``)."""
    for mode in modes:
        _clone(work / LOADED, work / mode)
    inbox = work / "source" / "inbox"
    for table in os.listdir(inbox):
        for name in os.listdir(inbox / table):
            if name.endswith(".parquet") and not name.startswith("b000001"):
                os.remove(inbox / table / name)


class MemoryGuard:
    """Stops the run (exit 4) when the machine's available memory falls below ``min_gib``: other
    agents' Spark tests share it, and the kernel's OOM killer would pick one of them, not us."""

    def __init__(self, min_gib: float) -> None:
        self.min = min_gib * 2**30
        self.lowest = float("inf")
        if min_gib > 0:
            import threading

            threading.Thread(target=self._watch, daemon=True).start()

    @staticmethod
    def available() -> float:
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024.0
        except OSError:
            pass
        return float("inf")

    def _watch(self) -> None:
        while True:
            now = self.available()
            self.lowest = min(self.lowest, now)
            if now < self.min:
                _log(f"STOPPED: the machine's available memory {now / 2**30:.2f} GiB < {self.min / 2**30:.1f} GiB")
                os._exit(4)
            time.sleep(0.5)


def rewrites(before: Any, after: Any) -> list[list]:
    """The traces a step compacted or merged (``[trace, rows written]``), from the manifests
    before and after it: a directory of the new manifest other than the one delta a step appends
    replaced older ones. A merge lands on whichever step fills a tier of deltas (the state store's
    amortized cost), so the benchmark names it beside the step's seconds."""
    out = []
    if before is None or after is None:
        return out
    for tid, entry in after.traces.items():
        old = before.traces.get(tid)
        if old is None:
            continue
        gone = set(old.dirs) - set(entry.dirs)
        if gone:
            new = [d for d in entry.dirs if d not in set(old.dirs)]
            rows = sum(entry.files[d].rows for d in new if d in entry.files)
            out.append([tid, int(rows)])
    return out


def big_rewrite(measured: dict[str, Any], point: dict[str, Any]) -> bool:
    """Did this step merge or compact at least as many trace rows as its change holds (a
    rewrite that weighs on its seconds, not a small view trace's)?"""
    return sum(rows for _, rows in measured.get("rewrites") or ()) >= point["change_rows"]


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


def _load_split(gen, source: Path, root: Path, circuit: Path) -> dict[str, Any]:
    """``lean``: the load in this process as two steps (``LeanTpch.initial_split``, as
    ``bench.floor.load_split``: SF10 in ~8 GiB, about 3 minutes; on Spark it took 20 minutes
    under load), into ``root``; the sweep's roots are opened afterwards with their own policies."""
    from spark_jobs.runtime.circuit import open_circuit
    from spark_jobs.runtime.step import run_step

    rt, seconds, rows, engines = None, 0.0, 0, set()
    for part in gen.initial_split():
        rows += part.total
        _copy_batch(source, {"first": root}, gen.batch)
        if rt is None:  # sized for the larger half, the line items (about four per order)
            rt = open_circuit(str(circuit), _config(root, "incremental", True, 8 * part.total))
        report = run_step(rt)
        seconds += report.seconds
        engines.add(report.engine)
        _log(f"load step of {part.total:,} rows: {report.seconds:.1f} s on {report.engine}; memory {memory()}")
    return {"seconds": round(seconds, 2), "engine": "/".join(sorted(engines)) + " (2 steps)", "rows": rows}


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
        partial: Any = None, reuse: bool = False, warmup: int = 0, recompute_inprocess: bool = False,
        duckdb: bool = False, recompute_reps: int = 0, size_steps: dict[int, int] | None = None,
        recompute_root: bool = True, load_only: bool = False, min_available_gib: float = 0.0) -> dict[str, Any]:
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
    one unmeasured incremental step on every root before the sweep (0: none). ``recompute_inprocess``:
    see ``_config``. ``duckdb`` (``lean``): per size, DuckDB's Q3 over the integrated inputs (the
    load's and every change's files) timed once, for reference. ``recompute_reps``: the recompute
    root is measured in the first this many steps of a size only (0: all), stepping incrementally
    (not measured) in the others: at SF10 a recompute takes minutes, the other roots' steps
    seconds, whose medians need more than one step on a loaded machine.
    ``size_steps``: steps of a size other than ``reps`` (``--sizes 100*3,2000000``). ``recompute_root``
    False: no recompute root at all (its steps not run: at SF10 an in-process recompute peaks at
    ~15 GiB, more than a shared machine may give; the ratios are then against the incremental root).
    ``load_only`` (``lean``, a kept ``work``): load, keep the loaded root as ``work/loaded`` and stop;
    each later ``reuse`` of ``work`` restarts every root from it (``_restore``), so a sweep runs in
    pieces that each fit a benchmark lock's hold. ``min_available_gib``: ``MemoryGuard``.
    """
    recompute_reps = recompute_reps or max(reps, *(size_steps or {0: 0}).values())
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
    guard = MemoryGuard(min_available_gib)
    modes = [m for m in MODES if m != "recompute" or recompute_root]
    roots = {mode: work / mode for mode in modes}
    circuit = PROJECT_ROOT / "bench" / "circuits" / "w1_tpch.yaml"
    split = lean and not reuse  # lean: the load in this process, in two steps, then copied
    loaded_first = None
    if split:
        from bench.generators import Written

        loaded_first = _load_split(gen, source, roots["incremental"], circuit)
        loaded = Written(dict(gen.rows))
        if load_only:
            _clone(roots["incremental"], work / LOADED)
            rt = open_circuit(str(circuit), _config(work / LOADED, "incremental", inprocess, loaded.total))
            _log(f"kept the loaded root {work / LOADED}; its view: {view_check(rt, gen)}; memory {memory()}")
            return {"sf": sf, "load_rows": loaded.total, "load": {"incremental": loaded_first}, "reps": reps,
                    "points": [], "lean": lean, "recompute_reps": recompute_reps}
    else:
        if reuse and (work / LOADED).is_dir():
            _restore(work, modes)
            _log(f"every root restored from {work / LOADED}")
        loaded = gen.replay_initial() if reuse else gen.initial()
    _log(f"SF {sf:g}: {loaded.total:,} rows generated{' (replayed: reusing ' + str(work) + ')' if reuse else ''}")
    if reuse or split:  # the other roots: fresh copies of the loaded one (an earlier run may have stopped mid-copy)
        for mode in modes[1:]:
            _clone(roots["incremental"], roots[mode])
        _log(f"roots copied from the loaded one; memory {memory()}")
    rts = {mode: open_circuit(str(circuit), _config(root, mode, inprocess, loaded.total, recompute_inprocess))
           for mode, root in roots.items()}
    if reuse:
        loads = {rt.committed.last_committed() for rt in rts.values()}
        if len(loads) != 1 or not loads <= {1, 2}:
            raise SystemExit(f"--reuse {work}: every root must hold exactly the load (timestep 1, or 2 in halves)")
        load = {mode: {"seconds": None, "engine": "reused from an earlier run's load"} for mode in modes}
    elif split:
        load = {mode: loaded_first if mode == "incremental" else {"seconds": None, "engine": "copy of incremental"}
                for mode in modes}
    else:
        load = _load(gen, source, roots, rts, loaded.total, lean)

    def check(rt: Any, want: Any) -> dict[str, Any]:
        return view_check(rt, gen) if lean else _view_ok(rt, want)

    if lean:  # the load's view too
        for mode in (modes if reuse else ("incremental",)):
            _log(f"load's view ({mode}): {check(rts[mode], None)}")
    if warmup:  # one small incremental step per root, not measured: each root's first step after
        written = gen.change(warmup)  # the load paid cold costs (footers, imports) the others did not
        _copy_batch(source, roots, gen.batch)
        for mode in modes:
            run_step(open_circuit(str(circuit), _config(roots[mode], "incremental", inprocess, loaded.total)))
        _log(f"warm-up: {written.total} rows stepped incrementally on every root (not measured)")
    points = []
    for size in sizes:
        size_reps = size_steps.get(size, reps) if size_steps else reps
        before = os.getloadavg()
        point: dict[str, Any] = {"requested": size, "steps": [], "view_ok": []}
        for rep in range(size_reps):  # each rep: a new change of this size, the modes in a rotated order
            written = gen.change(size)
            _copy_batch(source, roots, gen.batch)
            # the two roots compared for noise in a rotated order, the recompute root last: a
            # recompute (~15 GiB at SF10) evicts the state from the page cache, and the step after
            # it read cold (the policy root at 95 rows: 0.72 s after it, 0.24-0.39 s otherwise)
            pair = [m for m in modes if m != "recompute"]
            order = pair[rep % len(pair):] + pair[:rep % len(pair)] + [m for m in modes if m == "recompute"]
            step: dict[str, Any] = {"change_rows": written.total}
            for mode in order:
                rt = rts[mode]
                skip = mode == "recompute" and ((recompute_sizes is not None and size not in recompute_sizes)
                                                or rep >= recompute_reps)
                if skip:  # the same state as the others, not measured
                    run_step(open_circuit(str(circuit), _config(roots[mode], "incremental", inprocess, loaded.total)))
                    step[mode] = None
                    continue
                if dog is not None:
                    dog.peak = 0  # this step's peak (the watchdog samples every second)
                previous = rt.committed.manifest()
                report = run_step(rt)
                meta = rt.committed.manifest().meta
                step[mode] = {"seconds": round(report.seconds, 3), "mode": report.mode, "engine": report.engine,
                              "reason": report.mode_reason, "engine_reason": report.engine_reason,
                              "estimate": (meta.get("cost") or {}).get("estimate"), "loadavg": os.getloadavg()[0],
                              "peak_gib": round(max(dog.peak, dog.rss()) / 2**30, 2) if dog is not None else None,
                              "rewrites": rewrites(previous, rt.committed.manifest())}
                _log(f"{written.total} rows, {mode}: {report.seconds:.2f} s ({report.mode}, {report.engine}); "
                     f"peak {step[mode]['peak_gib']} GiB; rewrites {step[mode]['rewrites']}; {report.engine_reason}")
            # after EVERY step: each root's view against DuckDB's Q3 over the integrated inputs
            want = None if lean else _reference(gen, work / "reference")
            point["view_ok"].append({mode: check(rt, want) for mode, rt in rts.items()})
            point["steps"].append(step)
            _log(f"  views: {point['view_ok'][-1]}")
        steps = point["steps"]
        point["change_rows"] = int(median([s["change_rows"] for s in steps]))
        point["input_rows"] = gen.input_rows() if lean else sum(gen.state_rows().values())
        for mode in MODES:
            if all(s.get(mode) is None for s in steps):
                point[mode] = {"seconds": None, "mode": "not measured", "engine": "-", "estimate": None, "reason": ""}
                continue
            measured = [s[mode] for s in steps if s.get(mode) is not None]
            point[mode] = {"seconds": round(median([m["seconds"] for m in measured]), 3),
                           "mode": "/".join(sorted({m["mode"] for m in measured})),
                           "engine": "/".join(sorted({m["engine"] for m in measured})),
                           "estimate": measured[-1]["estimate"], "reason": measured[-1]["reason"],
                           "steps_measured": len(measured),
                           "peak_gib": max((m.get("peak_gib") or 0 for m in measured), default=None) or None,
                           "each": [f"{m['seconds']}{'*' if big_rewrite(m, point) else ''}" for m in measured]}
        best = min(x for x in (point["incremental"]["seconds"], point["recompute"]["seconds"]) if x is not None)
        point["policy_over_best"] = round(point["policy"]["seconds"] / best, 2) if best else None
        # did the policy run the cheaper root's path (mode and engine)? Then policy / min compares
        # two runs of the same path: the machine's noise, not the policy's choice
        cheaper = min((m for m in ("incremental", "recompute") if point[m]["seconds"] is not None),
                      key=lambda m: point[m]["seconds"])
        point["same_path_as_cheaper"] = (point["policy"]["mode"], point["policy"]["engine"]) == (
            point[cheaper]["mode"], point[cheaper]["engine"])
        point["views_right"] = all(v["ok"] for check in point["view_ok"] for v in check.values())
        if lean and duckdb:  # DuckDB's Q3 over the integrated inputs now, once, for reference
            from bench.floor import duckdb_integrated

            point["duckdb_s"] = duckdb_integrated(gen)
            _log(f"  DuckDB recompute over the integrated inputs: {point['duckdb_s']} s")
        point["loadavg_before"], point["loadavg_after"] = before, os.getloadavg()
        point["memory"] = memory()
        if guard.lowest != float("inf"):
            point["memory"]["lowest_available_gib"] = round(guard.lowest / 2**30, 2)
        if dog is not None:
            point["memory"]["watchdog_peak_gib"] = round(max(dog.peak, dog.rss()) / 2**30, 2)
        if points:  # continuity: this size's policy step against the previous (smaller) size's
            prev = points[-1]
            point["policy_over_previous"] = round(point["policy"]["seconds"] / max(prev["policy"]["seconds"], 1e-9), 2)
            point["rows_over_previous"] = round(point["change_rows"] / max(prev["change_rows"], 1), 2)
        points.append(point)
        continuity(points)
        if partial is not None:
            partial({"sf": sf, "load_rows": loaded.total, "load": load, "reps": reps, "points": points,
                     "lean": lean, "partial": True, "recompute_reps": recompute_reps})
        _log(f"  {size}: policy / min = {point['policy_over_best']}; views right: {point['views_right']}; "
             f"memory {point['memory']}")
    return {"sf": sf, "load_rows": loaded.total, "load": load, "reps": reps, "points": points, "lean": lean,
            "recompute_reps": recompute_reps}


def inferred_worst(points: list[dict[str, Any]]) -> tuple[float, float] | None:
    """With the recompute measured at some sizes only (at SF10 it takes minutes): the worst
    policy / min(incremental, recompute) over every size, the unmeasured sizes' recompute taken
    as the lowest one measured in the run (it reads and evaluates the integrated inputs, which a
    sweep grows by a few percent, whatever the change). None: measured at every size, or none."""
    measured = [p["recompute"]["seconds"] for p in points if p["recompute"]["seconds"] is not None]
    missing = [p for p in points if p["recompute"]["seconds"] is None]
    if not measured or not missing:
        return None
    low = min(measured)
    ratios = [p["policy_over_best"] or 0 for p in points if p["recompute"]["seconds"] is not None]
    ratios += [p["policy"]["seconds"] / max(min(p["incremental"]["seconds"], low), 1e-9) for p in missing]
    return round(max(ratios), 2), low


def continuity(points: list[dict[str, Any]]) -> None:
    """Issue #25's "no change size costs more than 1.2x its neighbours", on the policy's (the
    chosen path's) steps, in place. Sizes 10x apart cannot be compared by seconds, so per changed
    row: ``us_per_row`` (seconds / change rows), and ``per_row_over_smaller`` its ratio to the next
    smaller size's: a cliff (an engine threshold, a memory limit) shows as a size costing more per
    row than the smaller one before it (per-row cost otherwise falls as the fixed part spreads).
    The other side, ``seconds_over_larger``: this size's seconds over the next larger size's (a
    smaller change must not take longer than a larger one). Both <= 1.2 meet the target."""
    for i, p in enumerate(points):
        secs = p["policy"]["seconds"]
        p["us_per_row"] = round(1e6 * secs / max(p["change_rows"], 1), 2) if secs is not None else None
    for i, p in enumerate(points):
        lower = points[i - 1] if i else None
        upper = points[i + 1] if i + 1 < len(points) else None
        p["per_row_over_smaller"] = (round(p["us_per_row"] / lower["us_per_row"], 2)
                                     if lower and lower["us_per_row"] and p["us_per_row"] is not None else None)
        p["seconds_over_larger"] = (round(p["policy"]["seconds"] / upper["policy"]["seconds"], 2)
                                    if upper and upper["policy"]["seconds"] and p["policy"]["seconds"] is not None else None)


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
    engines = ("in-process (--inprocess)" if meta["inprocess"] else
               "incremental steps as the profile sends them, recomputes in-process (--recompute-inprocess)"
               if meta.get("recompute_inprocess") else "as the policy sends them")
    lines = [f"# Incremental vs recompute vs the policy (W1 TPC-H Q3, SF {result['sf']})", "",
             f"{meta['when']}, commit {meta['commit']}, {meta['cores']} cores, engines: {engines}; "
             f"load average {meta['loadavg_before'][0]:.1f} before, {meta['loadavg_after'][0]:.1f} after. "
             "**Measured under load** (the machine is shared with other agents' work): one run; each "
             f"figure is the median of {result['reps']} steps of that size (xN after the change rows: N steps; each a new change, the three "
             "incremental and policy roots in a rotated order, the recompute root last"
             + (f"; the recompute root measured in the first {result['recompute_reps']} of them, stepping "
                "incrementally, unmeasured, in the others" if (result.get("recompute_reps") or result["reps"]) < result["reps"] else "")
             + "); the seconds are `dbsp step`'s (read, check, evaluate, commit).", "",
             *(["**Partial**: written after the last size below; the run was still going.", ""]
               if result.get("partial") else []),
             f"Load: {result['load_rows']:,} rows ("
             + ", ".join(f"{m} {v['seconds']} s on {v['engine']}" if v["seconds"] is not None else f"{m}: {v['engine']}"
                        for m, v in result["load"].items()) + ").", "",
             "| change rows | incremental s | recompute s | policy s (its choice, engine) | policy / min | "
             "policy us/row | per row / smaller size's | s / larger size's | DuckDB s | "
             "estimated incr / recompute s | views right | load avg | "
             "GiB: peak RSS / process tree RSS | GiB: peak during the incremental / policy steps | policy ran the cheaper's path | "
             "each step s, incremental; policy (*: it merged or compacted at least its change's rows of traces) |",
             "|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---|---|---|---|---|---|"]
    dash = lambda v: "-" if v is None else v  # noqa: E731
    for p in result["points"]:
        est = p["policy"].get("estimate") or {}
        guess = f"{est.get('incremental', '-')} / {est.get('recompute', '-')}" if est else "-"
        ok = p["views_right"]
        n = len(p["steps"])
        lines.append(f"| {p['change_rows']:,}{f' (x{n})' if n != result['reps'] else ''} | {p['incremental']['seconds']} | {p['recompute']['seconds'] if p['recompute']['seconds'] is not None else 'not measured'} | "
                     f"{p['policy']['seconds']} ({p['policy']['mode']}, {p['policy']['engine']}) | "
                     f"{p['policy_over_best']} | {dash(p.get('us_per_row'))} | {dash(p.get('per_row_over_smaller'))} | "
                     f"{dash(p.get('seconds_over_larger'))} | {dash(p.get('duckdb_s'))} | "
                     + f"{guess} | "
                     f"{'yes' if ok else 'NO: ' + json.dumps(p['view_ok'], default=str)} | "
                     f"{p['loadavg_before'][0]:.1f} -> {p['loadavg_after'][0]:.1f} | "
                     f"{(p.get('memory') or {}).get('peak_rss_gib', '-')} / {(p.get('memory') or {}).get('tree_rss_gib', '-')} | "
                     f"{dash(p['incremental'].get('peak_gib'))} / {dash(p['policy'].get('peak_gib'))} | "
                     f"{ {True: 'yes', False: 'no', None: '-'}[p.get('same_path_as_cheaper')] } | "
                     f"{' '.join(p['incremental'].get('each') or ['-'])}; {' '.join(p['policy'].get('each') or ['-'])} |")
    points = result["points"]
    worst = max((p["policy_over_best"] or 0 for p in points), default=0)
    unmeasured = [p["change_rows"] for p in points if p["recompute"]["seconds"] is None]
    lines += ["", f"Worst policy / min(incremental, recompute): **{worst}** over {len(points)} sizes"
              + (f" (at {', '.join(f'{n:,}' for n in unmeasured)} rows the recompute was not measured: the ratio "
                 "there is against the incremental step alone)." if unmeasured else "."),
              "Views right: after every step of every size, each of the three roots' view equals DuckDB's Q3 "
              "over the integrated inputs (revenue within 1e-9 relative).", "",
              "Continuity (issue #25: no size costs more than 1.2x its neighbours), on the policy's steps: "
              "sizes 10x apart compare per changed row, so *per row / smaller size's* is this size's "
              "seconds per changed row over the next smaller size's (a cliff past a threshold shows as a "
              "rise; the fixed part makes it fall otherwise), and *s / larger size's* is this size's "
              "seconds over the next larger size's (a smaller change must not take longer)."]
    up = [p["per_row_over_smaller"] for p in points if p.get("per_row_over_smaller") is not None]
    down = [p["seconds_over_larger"] for p in points if p.get("seconds_over_larger") is not None]
    if up or down:
        w_up, w_down = max(up, default=None), max(down, default=None)
        met = (not up or w_up <= 1.2) and (not down or w_down <= 1.2)
        inferred = inferred_worst(points)
        if inferred is None:
            first = (f"| every size's policy step <= 1.2x min(incremental, recompute) | worst {worst}"
                     + (f" ({len(unmeasured)} sizes without a recompute)" if unmeasured else "")
                     + f" | {'yes' if worst <= 1.2 and not unmeasured else 'no'} |")
        else:
            w, low = inferred
            first = (f"| every size's policy step <= 1.2x min(incremental, recompute) | worst {w} (at the "
                     f"{len(unmeasured)} sizes without a recompute against the lowest recompute measured in this run, "
                     f"{low} s: a recompute's cost follows the integrated inputs, not the change; inferred, not "
                     f"measured there) | {'yes, inferred at ' + str(len(unmeasured)) + ' sizes' if w <= 1.2 else 'no'} |")
        lines += ["", "| target (this run) | measured | met |", "|---|---|---|", first,
                  f"| no size costs more than 1.2x its neighbours (per row vs the smaller, seconds vs the larger) | "
                  f"worst {w_up} / {w_down} | {'yes' if met else 'no'} |"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.recompute", description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=0.2, help="TPC-H scale factor (default 0.2; keep <= 1 here)")
    parser.add_argument("--sizes", help="changed rows per step, comma-separated (default "
                                        + ",".join(map(str, DEFAULT_SIZES)) + "); N*R: R steps of N rows (else --reps)")
    parser.add_argument("--reps", type=int, default=3, help="steps per size (a new change each; median)")
    parser.add_argument("--smoke", action="store_true", help="SF 0.001, three small sizes, one step each")
    parser.add_argument("--no-inprocess", dest="inprocess", action="store_false",
                        help="leave the engine thresholds at the profile's (large steps on Spark)")
    parser.add_argument("--recompute-inprocess", action="store_true",
                        help="with --no-inprocess: recomputes in-process (execution.cost.arrow_rows raised), "
                             "incremental steps where the profile's thresholds send them")
    parser.add_argument("--duckdb", action="store_true",
                        help="--lean: time DuckDB's Q3 over the integrated inputs once per size (reference)")
    parser.add_argument("--lean", action="store_true",
                        help="bench.lean_tpch's data (SF10 fits in memory), loaded once and copied to the roots")
    parser.add_argument("--max-rss-gib", type=float, default=8.0,
                        help="--lean: stop above this resident memory, this process and its children (0: never)")
    parser.add_argument("--warmup", type=int, default=1000,
                        help="rows of one unmeasured incremental step on every root before the sweep (0: none)")
    parser.add_argument("--recompute-reps", type=int, default=0,
                        help="measure the recompute root in the first N steps of each size only (0: all)")
    parser.add_argument("--no-recompute-root", action="store_true",
                        help="no recompute root: only the incremental and policy roots step")
    parser.add_argument("--recompute-sizes", help="measure the recompute root only at these sizes (default: all)")
    parser.add_argument("--name", help="results file name (default recompute, recompute-smoke)")
    parser.add_argument("--reuse", help="--lean: a work folder holding an earlier run's files and loaded roots "
                                        "(source/, incremental/, ...): the sweep starts from them")
    parser.add_argument("--keep", help="--lean: the work folder, kept at the end (not a temp folder); with "
                                       "--load-only the load is kept there for later --reuse pieces")
    parser.add_argument("--load-only", action="store_true",
                        help="--lean --keep DIR: load, keep DIR/loaded (every --reuse DIR piece restarts from it), stop")
    parser.add_argument("--min-available-gib", type=float, default=3.0,
                        help="stop when the machine's available memory falls below this (0: never)")
    parser.add_argument("--out", help="results folder (default bench/results)")
    parser.add_argument("--work-dir", help="scratch data roots (default: a temp folder, removed at the end)")
    parser.add_argument("--chunk-rows", type=int, help="execution.arrow.chunk_rows of every root (past what "
                        "the memory bound holds: no sub-steps, a step past the bound on Spark)")
    args = parser.parse_args(argv)
    from bench.report import write_results

    global CHUNK_ROWS
    CHUNK_ROWS = args.chunk_rows

    given = [s.strip() for s in (args.sizes or "").split(",") if s.strip()]
    size_steps = {int(s.split("*")[0]): max(1, int(s.split("*")[1])) for s in given if "*" in s}
    sizes = list(SMOKE_SIZES) if args.smoke else [int(s.split("*")[0]) for s in given] or list(DEFAULT_SIZES)
    sf = 0.001 if args.smoke else args.sf
    before = os.getloadavg()
    flags = {"inprocess": args.inprocess, "recompute_inprocess": args.recompute_inprocess and not args.inprocess}
    if args.load_only and not (args.lean and args.keep):
        parser.error("--load-only needs --lean and --keep DIR")
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    kept = args.reuse or args.keep
    with (contextlib.nullcontext(kept) if kept else tempfile.TemporaryDirectory(dir=args.work_dir)) as tmp:
        name = args.name or ("recompute-smoke" if args.smoke else "recompute")

        def partial(so_far: dict[str, Any]) -> None:
            write_results(name, so_far, flags, before, args.out, markdown)

        result = run(sf, sizes, Path(tmp), args.inprocess, 1 if args.smoke else max(1, args.reps), args.lean,
                     args.max_rss_gib, [int(x) for x in args.recompute_sizes.split(",")] if args.recompute_sizes else None,
                     partial, reuse=bool(args.reuse), warmup=0 if args.smoke else max(0, args.warmup),
                     recompute_inprocess=args.recompute_inprocess, duckdb=args.duckdb,
                     recompute_reps=max(0, args.recompute_reps), size_steps=size_steps,
                     recompute_root=not args.no_recompute_root, load_only=args.load_only,
                     min_available_gib=args.min_available_gib)
        if args.load_only:
            _log(f"loaded into {tmp}; sweep it in pieces with --reuse {tmp}")
            return
    write_results(name, result, flags, before, args.out, markdown)

if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # a Spark session started by a load or a recompute would otherwise hold the exit
