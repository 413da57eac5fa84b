"""Benchmark: the in-process (Arrow) step's floor on W1 (TPC-H Q3) at SF1 and SF10 (not a test).

    flock /work/bench.lock python -m bench.floor --load inprocess    # SF 1 and 10; 100, 1,000, 100k rows
    python -m bench.floor --sf 1 --sizes 100,1000 --reps 5
    python -m bench.floor --smoke                                     # SF 0.002, seconds

Issue #25's "in-process floor" targets, measured in ONE run so they are ratios under one load:

- a 100-row change at SF10 from the policy's choice to the committed manifest (`dbsp step`'s
  ``seconds``: ``step.commit_path``) <= 0.15 s;
- the 1,000-row step grows at most 1.3x from SF1 to SF10 and beats DuckDB's full recompute at both;
- the bag check costs at most about the circuit's own evaluation, and a 100k-row change at SF10
  beats DuckDB's full recompute.

Data: ``bench.lean_tpch`` (every row a function of its key, so SF10 fits in memory). The load is
the first step, on the engine ``dbsp step`` picks (Spark, on a local profile; ``--load inprocess``
runs it in this process instead, as two steps: the customers and orders, then the line items,
which keeps SF10's load under ~8 GiB; one step over all three took more than 9 GiB). The measured steps are incremental
(``execution.cost.recompute: never``) and run where the policy sends them (in-process for these
sizes). Each step's time is split into the phases of the recipe by timers around the functions it
calls (inclusive; no engine code is edited), and its CPU seconds are kept beside its wall seconds:
on the shared 2-core machine the wall time waits for the CPU and the disk, the CPU time much less.
After EVERY step the view is compared with DuckDB's Q3 over the integrated inputs (all change
files, weights multiplied through the joins). DuckDB's full recompute is Q3 over the load's
tables, median of 3 after one warm-up, in the same run. A watchdog stops the run when this
process and its children (the Spark JVM) hold more than ``--max-rss-gib``.
Results: ``bench/results/floor.{json,md}`` (``--smoke``: ``floor-smoke``).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

DEFAULT_SF = (1.0, 10.0)
DEFAULT_SIZES = (100, 1_000, 100_000)
SMOKE_SF, SMOKE_SIZES = (0.002, 0.004), (20, 100, 1_000)


def _log(msg: str) -> None:
    print(f"[bench.floor {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _phases() -> list[tuple[str, Any, str]]:
    """(label, owner, attribute) of the functions an in-process step calls, timed inclusively
    (a phase nested in another is also counted in its own row: ``commit: ...`` rows are parts
    of ``commit``)."""
    from spark_jobs.executor import evaluate
    from spark_jobs.executor.arrow import inputs
    from spark_jobs.runtime import bag, quality_gate, recipe, step
    from spark_jobs.state.fs import LocalFileSystem
    from spark_jobs.state.store import StateStore, Transaction

    return [("choose path (policy)", step, "choose_path"),
            ("begin (recover leftovers)", StateStore, "begin"),
            ("read inputs", inputs, "read_input"),
            ("bag check", bag, "check_tables"),
            ("evaluate circuit", evaluate, "evaluate_step"),
            ("quality gate", quality_gate, "check_timestep_tables"),
            ("write traces and view deltas", Transaction, "append_table"),
            ("write traces and view deltas", Transaction, "replace_table"),
            ("write traces and view deltas", Transaction, "write_output_table"),
            ("commit", Transaction, "commit"),
            ("commit: compaction / merge", Transaction, "_rewrite_in_process"),
            ("commit: fsync", LocalFileSystem, "sync_trees"),
            ("commit: cleanup (GC)", StateStore, "_collect_garbage"),
            ("durable small files (manifest, report, lease)", LocalFileSystem, "publish_text"),
            ("after commit (publish, reports)", recipe, "after_commit")]


CPU = " (cpu)"  # a phase's CPU seconds (this process, all its threads) are kept under its label + CPU


@contextmanager
def timed_phases(into: dict[str, float]) -> Iterator[None]:
    """Add each phase's wall and CPU seconds to ``into`` while the block runs; the originals come
    back after. Under load the wall time mostly waits for a core or the disk; the CPU time is
    what the phase itself costs."""
    active: set[str] = set()

    def wrap(label: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            if label in active:
                return fn(*args, **kwargs)
            active.add(label)
            started, cpu = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                into[label] = into.get(label, 0.0) + time.perf_counter() - started
                into[label + CPU] = into.get(label + CPU, 0.0) + time.process_time() - cpu
                active.discard(label)
        return timed

    with ExitStack() as stack:
        for label, owner, attr in _phases():
            original = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
            setattr(owner, attr, wrap(label, original))
            stack.callback(setattr, owner, attr, original)
        yield


class Watchdog:
    """Stops the process when it and its children hold more than ``limit_gib`` resident."""

    def __init__(self, limit_gib: float) -> None:
        """``limit_gib`` 0: only measure the peak when asked (a test's process is not stopped)."""
        self.limit = limit_gib * 2**30
        self.peak = 0
        if limit_gib > 0:
            threading.Thread(target=self._watch, daemon=True).start()

    def rss(self) -> int:
        import psutil

        me = psutil.Process()
        total = me.memory_info().rss
        for child in me.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _watch(self) -> None:
        while True:
            now = self.rss()
            self.peak = max(self.peak, now)
            if now > self.limit:
                _log(f"STOPPED: {now / 2**30:.1f} GiB resident > {self.limit / 2**30:.1f} GiB")
                os._exit(3)
            time.sleep(1.0)


def _config(root: Path, load_inprocess: bool, rows: int):
    from bench.recompute import _config as recompute_config

    return recompute_config(root, "incremental", load_inprocess, rows)


def _duckdb():
    import duckdb

    return duckdb.connect(config={"threads": 2, "memory_limit": "3GB"})


def view_check(rt, gen) -> dict[str, Any]:
    """The committed view against DuckDB's Q3 over the integrated inputs: rows differing (missing
    on a side, revenue beyond 1e-9 relative, items) and weights other than 1."""
    from bench.lean_tpch import q3_integrated
    from spark_jobs.state.arrow_read import read_view

    got = read_view(rt.committed, "q3")
    con = _duckdb()
    con.execute(f"CREATE TEMP TABLE want AS {q3_integrated(gen)}")
    if got is None or got.num_rows == 0:
        missing = con.execute("SELECT count(*) FROM want").fetchone()[0]
        return {"ok": missing == 0, "rows": 0, "differing": int(missing)}
    con.register("got", got)
    bad_weights = con.execute("SELECT count(*) FROM got WHERE _weight <> 1").fetchone()[0]
    differing = con.execute("""
        SELECT count(*) FROM got FULL OUTER JOIN want USING (l_orderkey, o_orderdate, o_shippriority)
        WHERE got.revenue IS NULL OR want.revenue IS NULL OR got.items <> want.items
           OR abs(got.revenue - want.revenue) > 1e-9 * greatest(1.0, abs(want.revenue))""").fetchone()[0]
    return {"ok": differing + bad_weights == 0, "rows": got.num_rows, "differing": int(differing + bad_weights)}


def duckdb_recompute(gen, runs: int = 3) -> float:
    """Median seconds of DuckDB's Q3 over the load's tables (after one warm-up), into a table."""
    from bench.lean_tpch import q3_tables

    con = _duckdb()
    times = []
    for i in range(runs + 1):
        started = time.perf_counter()
        con.execute(f"CREATE OR REPLACE TEMP TABLE r AS {q3_tables(gen)}")
        if i:
            times.append(time.perf_counter() - started)
    return round(median(times), 3)


def duckdb_integrated(gen) -> float:
    """Seconds of one DuckDB Q3 over the integrated inputs (the load's and every change's files,
    weights multiplied through: what a recompute by DuckDB reads after these steps), into a table."""
    from bench.lean_tpch import q3_integrated

    con = _duckdb()
    started = time.perf_counter()
    con.execute(f"CREATE TEMP TABLE r AS {q3_integrated(gen)}")
    return round(time.perf_counter() - started, 3)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def row_groups(rt) -> dict[str, dict[str, Any]]:
    """Per trace of the committed state: rows, files, row groups and median rows per group (a
    lookup decodes whole groups, so this is what one probed key costs)."""
    import pyarrow.parquet as pq

    store, out = rt.committed, {}
    for tid, entry in sorted(store.manifest().traces.items()):
        sizes = []
        files = [f for d in entry.dirs for f, _ in store.fs.data_files(store.layout.abs(d))]
        for f in files:
            meta = pq.ParquetFile(f).metadata
            sizes += [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        out[tid] = {"rows": entry.rows, "files": len(files), "row_groups": len(sizes),
                    "median_group_rows": int(median(sizes)) if sizes else 0}
    return out


def step(rt, gen, rows: int, profile: bool = True) -> dict[str, Any]:
    """One change of about ``rows`` rows, stepped with the phase timers; the view checked after."""
    from spark_jobs.runtime.step import run_step

    written = gen.change(rows)
    phases: dict[str, float] = {}
    with timed_phases(phases):
        if PROFILE is not None and profile and rows == PROFILE_ROWS:
            PROFILE.enable()
        cpu, started = time.process_time(), time.perf_counter()
        report = run_step(rt)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        if PROFILE is not None:
            PROFILE.disable()
    return {"change_rows": written.total, "seconds": round(report.seconds, 4), "run_step_s": round(wall, 4),
            "cpu_s": round(cpu, 4), "engine": report.engine, "mode": report.mode,
            "phases": {k: round(v, 4) for k, v in phases.items()}, "view": view_check(rt, gen),
            "loadavg": os.getloadavg()[0]}


def _reused(gen, circuit: str, root: Path, kept: Path) -> tuple[Any, dict[str, Any]]:
    """The loaded root ``kept`` (``--keep``) cloned to ``root`` (Parquet files hard-linked: an SF10
    root in seconds) and the generator replayed to the load: the same state as a load, without
    its 82 s and 8.6 GiB at SF10."""
    from bench.recompute import _clone
    from spark_jobs.runtime.circuit import open_circuit

    _clone(kept, root)
    inbox = root / "inbox"
    for table in os.listdir(inbox):
        for name in os.listdir(inbox / table):
            if name.endswith(".parquet") and not name.startswith("b000001"):
                os.remove(inbox / table / name)
    loaded = gen.replay_initial()
    rt = open_circuit(circuit, _config(root, True, 8 * (loaded.rows["customer"] + loaded.rows["orders"])))  # as load_split
    if rt.committed.last_committed() not in (1, 2):
        raise SystemExit(f"--reuse {kept}: the kept root must hold exactly the load (timestep 1, or 2 in halves)")
    return rt, {"seconds": None, "engine": f"reused ({kept})", "steps": 0, "rows": loaded.total}


def run_sf(sf: float, sizes: list[int], reps: int, work: Path, load_inprocess: bool, dog: Watchdog,
           keep: Path | None = None) -> dict[str, Any]:
    """One scale factor: load (or, with ``keep`` holding an earlier run's load, reuse it; with
    ``keep`` empty, load and keep a copy there), then the measured steps."""
    from bench.lean_tpch import LeanTpch
    from spark_jobs.config import PROJECT_ROOT
    from spark_jobs.runtime.circuit import open_circuit
    from spark_jobs.runtime.step import run_step

    root = work / f"sf{sf:g}"
    gen = LeanTpch(str(root), sf)
    circuit = str(PROJECT_ROOT / "bench" / "circuits" / "w1_tpch.yaml")
    kept = keep / f"sf{sf:g}-loaded" if keep is not None else None
    if kept is not None and kept.is_dir():
        rt, load = _reused(gen, circuit, root, kept)
    elif load_inprocess:
        rt, load = load_split(gen, circuit, root, dog)
    else:
        started = time.perf_counter()
        loaded = gen.initial()
        _log(f"SF {sf:g}: {loaded.total:,} rows generated in {time.perf_counter() - started:.0f} s; loading")
        rt = open_circuit(circuit, _config(root, load_inprocess, loaded.total))
        report = run_step(rt)
        load = {"seconds": round(report.seconds, 2), "engine": report.engine, "steps": 1, "rows": loaded.total}
    if kept is not None and not kept.is_dir():
        from bench.recompute import _clone

        _clone(root, kept)
        _log(f"SF {sf:g}: the loaded root kept in {kept} (--keep: later runs reuse it)")
    out: dict[str, Any] = {"sf": sf, "input_rows": load["rows"], "load": load,
                           "state_bytes": _dir_bytes(Path(rt.committed.root))}
    out["row_groups"] = row_groups(rt)
    _log(f"SF {sf:g}: loaded in {load['seconds'] or 0:.1f} s on {load['engine']}; rss {dog.rss() / 2**30:.1f} GiB; "
         f"traces {out['row_groups']}")
    step(rt, gen, 1_000, profile=False)  # warm-up: footers read, imports done
    points = []
    for size in sizes:
        steps = [step(rt, gen, size) for _ in range(reps)]
        point = {"requested": size, "steps": steps,
                 "change_rows": int(median([s["change_rows"] for s in steps])),
                 "seconds": round(median([s["seconds"] for s in steps]), 4),
                 "cpu_s": round(median([s["cpu_s"] for s in steps]), 4),
                 "engines": sorted({s["engine"] for s in steps}), "modes": sorted({s["mode"] for s in steps}),
                 "phases": {k: round(median([s["phases"].get(k, 0.0) for s in steps]), 4)
                            for k in dict.fromkeys(k for s in steps for k in s["phases"])},
                 "views_right": all(s["view"]["ok"] for s in steps)}
        bag, ev = point["phases"].get("bag check", 0.0), point["phases"].get("evaluate circuit", 0.0)
        point["bag_over_eval"] = round(bag / ev, 2) if ev else None
        bag_cpu, ev_cpu = point["phases"].get("bag check" + CPU, 0.0), point["phases"].get("evaluate circuit" + CPU, 0.0)
        point["bag_over_eval_cpu"] = round(bag_cpu / ev_cpu, 2) if ev_cpu else None
        points.append(point)
        _log(f"SF {sf:g}, {point['change_rows']:,} rows: {point['seconds']} s (cpu {point['cpu_s']} s), "
             f"bag {bag:.3f} s / eval {ev:.3f} s (cpu {bag_cpu:.3f} / {ev_cpu:.3f}), views right {point['views_right']}")
    out["points"] = points
    out["duckdb_s"] = duckdb_recompute(gen)
    out["input_rows_after"] = gen.input_rows()
    _log(f"SF {sf:g}: DuckDB recompute {out['duckdb_s']} s")
    return out


PROFILE_ROWS = 1_000  # the change size ``--profile`` profiles (issue #25's growth target)
PROFILE: Any = None  # the cProfile of ``--profile``, enabled around each measured step only


@contextmanager
def _profiled(path: str | None) -> Iterator[None]:
    """With ``path``: the measured steps of the block profiled (not the load, not the checks), in
    CPU seconds of this process (all threads: a call's time includes pyarrow's pool's work)."""
    global PROFILE
    if not path:
        yield
        return
    import cProfile

    PROFILE = cProfile.Profile(time.process_time)  # CPU seconds: on the shared machine wall time is mostly waiting
    try:
        yield
    finally:
        PROFILE.dump_stats(path)
        PROFILE = None


def load_split(gen, circuit: str, root: Path, dog: Watchdog) -> tuple[Any, dict[str, Any]]:
    """The load in this process as two steps (``LeanTpch.initial_split``: customers and orders,
    then the line items): the same state as one step (the engine's own incremental steps), in
    about half the memory at SF10. Its peak resident memory is recorded."""
    from spark_jobs.runtime.circuit import open_circuit
    from spark_jobs.runtime.step import run_step

    rt, seconds, rows, engines = None, 0.0, 0, set()
    for part in gen.initial_split():
        rows += part.total
        if rt is None:  # sized for the larger half, the line items (about four per order)
            rt = open_circuit(circuit, _config(root, True, 8 * part.total))
        report = run_step(rt)
        seconds += report.seconds
        engines.add(report.engine)
        _log(f"load step of {part.total:,} rows: {report.seconds:.1f} s on {report.engine}; "
             f"rss {dog.rss() / 2**30:.1f} GiB")
    return rt, {"seconds": round(seconds, 2), "engine": "/".join(sorted(engines)), "steps": 2, "rows": rows,
                "peak_rss_gib": round(max(dog.peak, dog.rss()) / 2**30, 1)}


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue #25's in-process targets from the measured points (None: not measured)."""
    by = {(r["sf"], p["requested"]): p for r in result["runs"] for p in r.get("points", [])}
    duck = {r["sf"]: r.get("duckdb_s") for r in result["runs"]}
    sfs = sorted(duck)
    lo, hi = (sfs[0], sfs[-1]) if sfs else (None, None)
    out = []

    def add(name: str, value: Any, ok: bool | None) -> None:
        out.append({"target": name, "value": value, "met": ok})

    at = "" if hi == 10 else " (#25 sets it at SF10)"
    p = by.get((hi, 100))
    add(f"100-row step at SF{hi:g} <= 0.15 s{at}", p and p["seconds"], p and p["seconds"] <= 0.15)
    a, b = by.get((lo, 1_000)), by.get((hi, 1_000))
    growth = round(b["seconds"] / a["seconds"], 2) if a and b and lo != hi else None
    between = "" if (lo, hi) == (1, 10) else " (#25 sets it from SF1 to SF10)"
    add(f"1,000-row step SF{hi:g} / SF{lo:g} <= 1.3{between}", growth, growth is not None and growth <= 1.3)
    growth = round(b["cpu_s"] / a["cpu_s"], 2) if a and b and lo != hi and a["cpu_s"] else None
    add(f"the same in CPU seconds{between}", growth, growth is not None and growth <= 1.3)
    for sf in sfs:
        p = by.get((sf, 1_000))
        ratio = round(duck[sf] / p["seconds"], 2) if p and duck[sf] else None
        add(f"DuckDB recompute / 1,000-row step at SF{sf:g} > 1", ratio, ratio is not None and ratio > 1)
    p = by.get((hi, 100_000))
    ratio = round(duck[hi] / p["seconds"], 2) if p and duck.get(hi) else None
    add(f"DuckDB recompute / 100k-row step at SF{hi:g} > 1", ratio, ratio is not None and ratio > 1)
    worst = max((p["bag_over_eval"] or 0 for p in by.values()), default=None)
    add("bag check / circuit evaluation <= ~1, wall (worst point)", worst, worst is not None and worst <= 1.2)
    worst = max((p.get("bag_over_eval_cpu") or 0 for p in by.values()), default=None)
    add("bag check / circuit evaluation <= ~1, CPU (worst point)", worst, worst is not None and worst <= 1.2)
    return out


def markdown(result: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = ["# The in-process step's floor (W1, TPC-H Q3)", "",
             f"{meta['when']}, commit {meta['commit']}, {meta['cores']} cores; load average "
             f"{meta['loadavg_before'][0]:.1f} before, {meta['loadavg_after'][0]:.1f} after (per step in the JSON); "
             f"peak resident {result['peak_rss_gib']} GiB (this process and a Spark JVM, if the load started one). **One run on a machine "
             "shared with other agents**: compare the ratios, not the seconds. Step seconds are `dbsp step`'s (the "
             f"policy's choice to the committed manifest), median of {result['reps']} steps per size, each a new "
             "change; cpu s is the process's CPU time over the whole `run_step`.", ""]
    for r in result["runs"]:
        load = r["load"]
        how = (f" in {load['steps']} steps, peak resident {load['peak_rss_gib']} GiB"
               if load.get("peak_rss_gib") is not None else "")
        lines += [f"## SF {r['sf']:g}: {r['input_rows']:,} input rows, load {load['seconds']} s on "
                  f"{load['engine']}{how}, state {(r['state_bytes'] or 0) / 2**20:,.0f} MiB; DuckDB full recompute "
                  f"{r.get('duckdb_s')} s", "",
                  "| change rows | step s | cpu s | engine | bag check s (cpu) | evaluate s (cpu) | read inputs s | gate s | "
                  "writes s | commit s (fsync / GC / compaction) | after commit s | bag / eval (cpu) | DuckDB / step | views right |",
                  "|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|"]
        for p in r.get("points", []):
            ph = p["phases"]
            g = lambda k: f"{ph.get(k, 0.0):.3f}"  # noqa: E731
            duck = f"{r['duckdb_s'] / p['seconds']:.2f}x" if r.get("duckdb_s") and p["seconds"] else "-"
            lines.append(f"| {p['change_rows']:,} | {p['seconds']:.3f} | {p['cpu_s']:.3f} | {'/'.join(p['engines'])} | "
                         f"{g('bag check')} ({g('bag check' + CPU)}) | {g('evaluate circuit')} ({g('evaluate circuit' + CPU)}) | "
                         f"{g('read inputs')} | {g('quality gate')} | "
                         f"{g('write traces and view deltas')} | {g('commit')} ({g('commit: fsync')} / "
                         f"{g('commit: cleanup (GC)')} / {g('commit: compaction / merge')}) | "
                         f"{g('after commit (publish, reports)')} | {p['bag_over_eval']} ({p.get('bag_over_eval_cpu')}) | {duck} | "
                         f"{'yes' if p['views_right'] else 'NO'} |")
        lines.append("")
    lines += ["## Issue #25's in-process targets, from this run", "", "| target | measured | met |", "|---|---|---|"]
    for t in result["targets"]:
        lines.append(f"| {t['target']} | {t['value'] if t['value'] is not None else 'not measured'} | "
                     f"{'yes' if t['met'] else 'no'} |")
    lines += ["", "Views right: after every measured step the committed view equals DuckDB's Q3 over the "
              "integrated inputs (revenue within 1e-9 relative, items equal, every weight 1)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__.splitlines()[0])
    parser.add_argument("--sf", help="scale factors, comma-separated (default 1,10)")
    parser.add_argument("--sizes", help="changed rows per step (default 100,1000,100000)")
    parser.add_argument("--reps", type=int, default=3, help="steps per size (a new change each; median)")
    parser.add_argument("--load", choices=("policy", "inprocess"), default="policy",
                        help="where the load runs: where the policy sends it (Spark) or in this process")
    parser.add_argument("--max-rss-gib", type=float, default=6.0,
                        help="stop above this resident memory (0: never stop, a test's process)")
    parser.add_argument("--smoke", action="store_true", help="tiny SFs, in-process load, one step per size")
    parser.add_argument("--out", help="results folder (default bench/results)")
    parser.add_argument("--work-dir", help="scratch data roots (default: a temp folder, removed at the end)")
    parser.add_argument("--keep", help="a folder for the loaded roots: the first run loads and keeps each SF's "
                                       "root there (hard links), later runs reuse it instead of loading")
    parser.add_argument("--profile", help="write a cProfile of the measured steps of each SF to PREFIX-sfN.prof")
    args = parser.parse_args(argv)
    from bench.report import write_results

    sfs = list(SMOKE_SF) if args.smoke else [float(s) for s in (args.sf or "").split(",") if s] or list(DEFAULT_SF)
    sizes = list(SMOKE_SIZES) if args.smoke else [int(s) for s in (args.sizes or "").split(",") if s] or list(DEFAULT_SIZES)
    reps = 1 if args.smoke else max(1, args.reps)
    inprocess = args.smoke or args.load == "inprocess"
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    dog = Watchdog(args.max_rss_gib)
    before = os.getloadavg()
    result: dict[str, Any] = {"reps": reps, "load_engine": "inprocess" if inprocess else "policy", "runs": []}
    name = "floor-smoke" if args.smoke else "floor"
    for sf in sfs:
        with tempfile.TemporaryDirectory(dir=args.work_dir) as tmp:
            keep = Path(args.keep) if args.keep else None
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
            with _profiled(args.profile and f"{args.profile}-sf{sf:g}.prof"):
                result["runs"].append(run_sf(sf, sizes, reps, Path(tmp), inprocess, dog, keep))
        shutil.rmtree(Path(tmp), ignore_errors=True)
    result["peak_rss_gib"] = round(max(dog.peak, dog.rss()) / 2**30, 1)
    result["targets"] = targets(result)
    write_results(name, result, {}, before, args.out, markdown)
    return result


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # a Spark session started by the load would otherwise hold the exit (see bench.run)
