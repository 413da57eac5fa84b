"""Benchmark: adding a second view to a running circuit vs computing that view once (W1; not a test).

    flock /tmp/dbsp-bench.lock python -m bench.change             # SF 3, 3 steps of history
    python -m bench.change --sf 0.2 --history 5
    python -m bench.change --smoke                                # SF 0.001, 2 steps of history

W1 (``bench/circuits/w1_tpch.yaml``, TPC-H Q3) is loaded and stepped through ``--history`` changes
on two data roots holding the same files. Then the circuit gets a second view over its join,
revenue per order date (``by_date``), and one more change arrives:

- ``apply``: `dbsp step --apply-change` on the first root: every operator of Q3 keeps its state and
  steps on the change; the new view is bootstrapped from the inputs' integrals the state keeps;
- ``refresh``: `dbsp step --full-refresh` of the edited circuit on the second root: every node
  rebuilt from all retained input files (the replay a change needed before);
- ``once``: a fresh circuit of the second view alone, loaded over the integrated inputs (the
  generator's current tables, one file each): computing that view once;
- ``step``: the first root's next plain incremental step of the edited circuit (the floor).

The figures are ``apply / once`` (the target: about 1) and ``apply / refresh``, from one run;
the new view of ``apply`` is checked against ``once``'s. Results: ``bench/results/change.{json,md}``
(``--smoke``: ``change-smoke``). Measured on a shared 2-core machine: seconds under other work.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

VIEW = """  by_date:
    op: aggregate
    input: joined
    group_by: [o_orderdate]
    aggregates: {revenue: "sum(volume)", orders: "count(*)"}
"""


def _log(msg: str) -> None:
    print(f"[bench.change {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _config(root: Path, rows: int):
    from dataclasses import replace

    from spark_jobs.config import load_config

    config = load_config(data_root=str(root))
    p = config.policy  # loads and bootstraps in this process (a local profile; see bench.recompute)
    p = replace(p, cost=replace(p.cost, recompute="never", arrow_rows=max(p.cost.arrow_rows, 4 * rows)),
                arrow=replace(p.arrow, max_change_rows=max(p.arrow.max_change_rows, 2 * rows)))
    return config.with_policy(p)


def _edited(text: str, only_new: bool) -> str:
    """W1 with the second view (``only_new``: the second view alone, Q3's output removed)."""
    out = text.replace("outputs:\n  q3: {}", VIEW + "outputs:\n" + ("" if only_new else "  q3: {}\n") + "  by_date: {}")
    if only_new:
        out = out.replace("name: bench_w1_tpch", "name: bench_w1_by_date")
    return out


def _copy(source: Path, roots: list[Path], batch: int) -> None:
    for table in os.listdir(source / "inbox"):
        src = source / "inbox" / table / f"b{batch:06d}.parquet"
        if src.exists():
            for root in roots:
                (root / "inbox" / table).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, root / "inbox" / table / src.name)


def _view(rt, view: str) -> dict:
    from spark_jobs.state.arrow_read import read_view

    table = read_view(rt.committed, view)
    rows = table.to_pylist() if table is not None else []
    return {str(r["o_orderdate"]): (round(r["revenue"], 6), r["orders"], r["_weight"]) for r in rows}


def run(sf: float, history: int, size: int, work: Path) -> dict[str, Any]:
    from bench.generators import TpchGenerator
    from spark_jobs.config import PROJECT_ROOT
    from spark_jobs.runtime.circuit import open_circuit
    from spark_jobs.runtime.step import run_step

    text = (PROJECT_ROOT / "bench" / "circuits" / "w1_tpch.yaml").read_text()
    source = work / "source"
    gen = TpchGenerator(str(source), sf)
    loaded = gen.initial()
    roots = [work / "apply", work / "refresh"]
    paths = [work / "circuits" / name / "w1.yaml" for name in ("apply", "refresh")]
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    cfgs = [_config(r, loaded.total) for r in roots]
    _copy(source, roots, gen.batch)
    for t in range(history + 1):
        if t:
            gen.change(size)
            _copy(source, roots, gen.batch)
        for p, cfg in zip(paths, cfgs):
            run_step(open_circuit(str(p), cfg))
    _log(f"SF {sf}: loaded {loaded.total:,} rows and stepped {history} changes of {size:,} rows")
    gen.change(size)
    _copy(source, roots, gen.batch)
    for p in paths:
        p.write_text(_edited(text, only_new=False))
    out: dict[str, Any] = {"sf": sf, "load_rows": loaded.total, "history": history, "change_rows": size,
                           "input_rows": sum(gen.state_rows().values())}
    apply_rt = open_circuit(str(paths[0]), cfgs[0])
    report = run_step(apply_rt, apply_change=True)
    out["apply"] = {"seconds": round(report.seconds, 3), "engine": report.engine, "mode": report.mode}
    _log(f"apply: {report.seconds:.2f} s ({report.engine}, {report.mode})")
    refresh_rt = open_circuit(str(paths[1]), cfgs[1])
    report = run_step(refresh_rt, full_refresh=True)
    out["refresh"] = {"seconds": round(report.seconds, 3), "engine": report.engine, "mode": report.mode}
    _log(f"refresh: {report.seconds:.2f} s ({report.engine})")
    once_root = work / "once"
    tables = gen.snapshot(str(work / "tables"))
    for name, path in tables.items():
        (once_root / "inbox" / name).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, once_root / "inbox" / name / "b000001.parquet")
    once_path = work / "circuits" / "once" / "w1.yaml"
    once_path.parent.mkdir(parents=True)
    once_path.write_text(_edited(text, only_new=True))
    once_rt = open_circuit(str(once_path), _config(once_root, out["input_rows"]))
    report = run_step(once_rt)
    out["once"] = {"seconds": round(report.seconds, 3), "engine": report.engine}
    _log(f"once: {report.seconds:.2f} s ({report.engine})")
    out["view_right"] = _view(apply_rt, "by_date") == _view(once_rt, "by_date") == _view(refresh_rt, "by_date")
    gen.change(size)
    _copy(source, roots[:1], gen.batch)
    report = run_step(apply_rt)
    out["step"] = {"seconds": round(report.seconds, 3), "engine": report.engine, "mode": report.mode}
    out["apply_over_once"] = round(out["apply"]["seconds"] / out["once"]["seconds"], 2)
    out["apply_over_refresh"] = round(out["apply"]["seconds"] / out["refresh"]["seconds"], 2)
    return out


def markdown(r: dict[str, Any], meta: dict[str, Any]) -> str:
    return "\n".join([
        f"# Adding a second view to W1 (TPC-H Q3, SF {r['sf']}) with history", "",
        f"{meta['when']}, commit {meta['commit']}, {meta['cores']} cores; load average "
        f"{meta['loadavg_before'][0]:.1f} before, {meta['loadavg_after'][0]:.1f} after. **Measured under load**, "
        "one run: the seconds are `dbsp step`'s.", "",
        f"Load {r['load_rows']:,} rows, then {r['history']} changes of {r['change_rows']:,} rows; the edit adds "
        f"`by_date` (revenue per order date over Q3's join) and one more change arrives "
        f"({r['input_rows']:,} input rows integrated).", "",
        "| apply the change s | full refresh s | the new view once s | next incremental step s | "
        "apply / once | apply / refresh | new view right |",
        "|---:|---:|---:|---:|---:|---:|---|",
        f"| {r['apply']['seconds']} ({r['apply']['engine']}) | {r['refresh']['seconds']} ({r['refresh']['engine']}) | "
        f"{r['once']['seconds']} ({r['once']['engine']}) | {r['step']['seconds']} | **{r['apply_over_once']}** | "
        f"**{r['apply_over_refresh']}** | {'yes' if r['view_right'] else 'NO'} |", ""])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.change", description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=3.0, help="TPC-H scale factor (default 3)")
    parser.add_argument("--history", type=int, default=3, help="changes stepped before the edit")
    parser.add_argument("--size", type=int, default=10_000, help="rows per change")
    parser.add_argument("--smoke", action="store_true", help="SF 0.001, 2 changes of 100 rows")
    parser.add_argument("--out", help="results folder (default bench/results)")
    parser.add_argument("--work-dir", help="scratch data roots (default: a temp folder, removed at the end)")
    args = parser.parse_args(argv)
    from bench.report import write_results

    before = os.getloadavg()
    with tempfile.TemporaryDirectory(dir=args.work_dir) as tmp:
        if args.smoke:
            result = run(0.001, 2, 100, Path(tmp))
        else:
            result = run(args.sf, args.history, args.size, Path(tmp))
    write_results("change-smoke" if args.smoke else "change", result, {}, before, args.out, markdown)

if __name__ == "__main__":
    main()
