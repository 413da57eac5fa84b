"""Benchmark: a small step over text inputs, from Enter to the answer (not a test).

    python -m bench.text_inputs [--steps 3] [--rows 5] [--out bench/results] [--name text_inputs]

The README's example circuit (``circuits/examples/my_view.yaml``: orders filtered, joined with a
customers snapshot, revenue per region) with its inputs as a new user writes them, in four
variants: orders as CSV changes, as JSON lines changes, as Debezium-style cdc records (JSON
lines, a sequence column), and a variant whose only change each step is a new customers snapshot
(CSV, D against the last one). For each variant, each step is ``dbsp step`` in a new process
(``python -m spark_jobs.cli.main step``), timed from its launch to its exit: what a user waits
after pressing Enter. The first step (a load) runs on Spark either way and is not counted; then
``--steps`` steps of ``--rows`` changed rows each, twice over the same files in one run:

- ``in-process``: the default profile (``execution.engine: auto``): the text inputs are read by
  the in-process readers and the step starts no JVM;
- ``spark``: the same profile with ``execution.engine: spark``: every step on Spark, which is what
  a step with a CSV, JSON lines, snapshots or cdc input did before the in-process readers (the
  policy said "input 'orders' is a changes source in csv: read by Spark").

Each measured step's views are checked: the published view of both runs must be equal after
every step. Results: ``<out>/<name>.json`` and ``<out>/<name>.md``, with the load average.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.state.arrow_read import read_view

RESULTS = Path(__file__).resolve().parent / "results"
EXAMPLE = (PROJECT_ROOT / "circuits" / "examples" / "my_view.yaml").read_text()
ORDERS_PARQUET = "source: {kind: changes, path: my_view/inbox/orders, format: parquet}"
ORDERS_SCHEMA = "schema: {order_id: long, customer_id: long, amount: double, status: string}"


def _replaced(text: str, old: str, new: str) -> str:
    """``text`` with ``old`` replaced, refusing a no-op: an edited README example must fail loudly
    here rather than silently benchmark Parquet inputs under a CSV label."""
    if old not in text:
        raise SystemExit(f"bench.text_inputs: circuits/examples/my_view.yaml no longer contains {old!r}")
    return text.replace(old, new)


VARIANTS = {
    "csv changes": _replaced(EXAMPLE, ORDERS_PARQUET, "source: {kind: changes, path: my_view/inbox/orders, format: csv}"),
    "json lines changes": _replaced(EXAMPLE, ORDERS_PARQUET,
                                    "source: {kind: changes, path: my_view/inbox/orders, format: jsonl}"),
    "cdc records (json lines)": _replaced(_replaced(
        EXAMPLE, ORDERS_SCHEMA,
        "schema: {order_id: long, customer_id: long, amount: double, status: string, op: string, seq: long}\n"
        "    key: [order_id]"),
        ORDERS_PARQUET, "source: {kind: cdc, path: my_view/inbox/orders, format: jsonl, sequence: seq}"),
    "csv snapshots": _replaced(EXAMPLE, ORDERS_PARQUET,
                               "source: {kind: changes, path: my_view/inbox/orders, format: csv}"),
}
REGIONS = ("north", "south", "east", "west")
CUSTOMERS = 50


class Data:
    """The variant's input files, step by step (the same files for both runs)."""

    def __init__(self, variant: str, rows: int, seed: int = 1) -> None:
        self.variant, self.rows, self.rng = variant, rows, random.Random(seed)
        self.orders: dict[int, tuple] = {}
        self.next_id, self.seq, self.t = 1, 0, 0
        self.regions = {c: self.rng.choice(REGIONS) for c in range(1, CUSTOMERS + 1)}

    def _customers(self, root: Path) -> None:
        folder = root / "my_view" / "snapshots" / "customers"
        folder.mkdir(parents=True, exist_ok=True)
        lines = ["customer_id,name,region"] + [f"{c},c{c},{r}" for c, r in sorted(self.regions.items())]
        (folder / f"s{self.t:05d}.csv").write_text("\n".join(lines) + "\n")

    def _order(self) -> tuple:
        oid = self.next_id
        self.next_id += 1
        return oid, self.rng.randint(1, CUSTOMERS), round(self.rng.uniform(1, 500), 2), self.rng.choice(["paid", "open"])

    def step(self, roots: list[Path], load: bool = False) -> None:
        """Write timestep ``t``'s files under every root: the load (200 orders, the first customers
        snapshot), then ``rows`` changed rows: orders inserted, updated and deleted, or customers
        moved to another region (a new snapshot)."""
        self.t += 1
        n = 200 if load else self.rows
        if self.variant == "csv snapshots" and not load:
            for c in self.rng.sample(sorted(self.regions), n):
                self.regions[c] = self.rng.choice([r for r in REGIONS if r != self.regions[c]])
            for root in roots:
                self._customers(root)
            return
        new = [self._order() for _ in range(n if load else n - 1)]
        gone = [] if load else [self.rng.choice(sorted(self.orders))]
        for root in roots:
            if load:
                self._customers(root)
            self._orders(root, new, gone)
        self.orders.update({o[0]: o for o in new})
        for oid in gone:
            self.orders.pop(oid)

    def _orders(self, root: Path, new: list[tuple], gone: list[int]) -> None:
        folder = root / "my_view" / "inbox" / "orders"
        folder.mkdir(parents=True, exist_ok=True)
        cols = ("order_id", "customer_id", "amount", "status")
        if self.variant == "json lines changes":
            lines = [json.dumps(dict(zip(cols, o))) for o in new]
            lines += [json.dumps({**dict(zip(cols, self.orders[i])), "_weight": -1}) for i in gone]
            (folder / f"t{self.t:05d}.jsonl").write_text("\n".join(lines) + "\n")
        elif self.variant.startswith("cdc"):
            recs = []
            for o in new:
                self.seq += 1
                recs.append({**dict(zip(cols, o)), "op": "c", "seq": self.seq})
            for i in gone:
                self.seq += 1
                recs.append({"order_id": i, "op": "d", "seq": self.seq})
            (folder / f"t{self.t:05d}.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
        else:
            lines = [",".join(cols) + ",_weight"] + [",".join(map(str, o)) + ",1" for o in new]
            lines += [",".join(map(str, self.orders[i])) + ",-1" for i in gone]
            (folder / f"t{self.t:05d}.csv").write_text("\n".join(lines) + "\n")


def _profile(folder: Path, engine: str) -> Path:
    """The local profile with ``execution.engine`` set."""
    text = (PROJECT_ROOT / "config" / "local.yaml").read_text().replace("engine: auto", f"engine: {engine}")
    path = folder / f"{engine}.yaml"
    path.write_text(text.replace("circuits_dir: circuits", f"circuits_dir: {PROJECT_ROOT / 'circuits'}"))
    return path


def _dbsp_step(circuit: Path, profile: Path, root: Path) -> tuple[float, str]:
    """``dbsp step`` in a new process: (seconds from launch to exit, its output)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "spark_jobs.cli.main", "step", str(circuit), "--config", str(profile),
                           "--data-root", str(root)], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=900)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"dbsp step failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def _engine(circuit: Path, root: Path) -> tuple[str, str]:
    rt = open_circuit(str(circuit), load_config(data_root=str(root)))
    meta = rt.store.manifest().meta or {}
    return str(meta.get("engine")), str(meta.get("engine_reason"))


def _view(circuit: Path, root: Path) -> Counter:
    rt = open_circuit(str(circuit), load_config(data_root=str(root)))
    table = read_view(rt.committed, "by_region")
    cols = [c for c in table.column_names if c != "_weight"]
    return Counter({tuple(round(v, 6) if isinstance(v, float) else v for v in r[:-1]): r[-1]
                    for r in zip(*[table.column(c).to_pylist() for c in cols + ["_weight"]])})


def run_variant(variant: str, work: Path, steps: int, rows: int) -> dict:
    modes = ("in-process", "spark")
    circuit = work / "my_view.yaml"
    circuit.write_text(VARIANTS[variant])
    profiles = {"in-process": _profile(work, "auto"), "spark": _profile(work, "spark")}
    roots = {m: work / m.replace("-", "_") for m in modes}
    data = Data(variant, rows)
    data.step(list(roots.values()), load=True)
    for m in modes:
        _dbsp_step(circuit, profiles[m], roots[m])
    out: dict = {m: {"seconds": [], "engines": [], "reasons": []} for m in modes}
    for t in range(steps):
        data.step(list(roots.values()))
        for m in modes:
            seconds, _ = _dbsp_step(circuit, profiles[m], roots[m])
            engine, reason = _engine(circuit, roots[m])
            out[m]["seconds"].append(round(seconds, 2))
            out[m]["engines"].append(engine)
            out[m]["reasons"].append(reason)
        assert _view(circuit, roots["in-process"]) == _view(circuit, roots["spark"]), f"{variant}: views differ at step {t + 2}"
    for m in modes:
        out[m]["median"] = round(statistics.median(out[m]["seconds"]), 2)
    out["speedup"] = round(out["spark"]["median"] / out["in-process"]["median"], 1)
    out["views_equal"] = True
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rows", type=int, default=5)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--name", default="text_inputs")
    args = parser.parse_args()
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="bench-text-"))
    report: dict = {"steps": args.steps, "rows": args.rows, "load_before": [round(x, 2) for x in load_before],
                    "python": sys.version.split()[0], "variants": {}}
    try:
        for variant in args.variants.split(","):
            folder = work / variant.replace(" ", "_").replace("(", "").replace(")", "")
            folder.mkdir()
            report["variants"][variant] = run_variant(variant, folder, args.steps, args.rows)
            print(variant, json.dumps(report["variants"][variant]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(report, indent=1))
    lines = [f"# A {args.rows}-row step over text inputs, `dbsp step` from launch to exit", "",
             f"README example circuit variants; {args.steps} measured steps after the load, median; "
             f"load average {report['load_before'][0]} before, {report['load_after'][0]} after.", "",
             "| orders / customers input | in-process (default) | every step on Spark (before) | ratio | engine |",
             "|---|---|---|---|---|"]
    for variant, r in report["variants"].items():
        engines = ", ".join(sorted(set(r["in-process"]["engines"])))
        lines.append(f"| {variant} | {r['in-process']['median']} s | {r['spark']['median']} s | "
                     f"{r['speedup']}x | {engines} |")
    (out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
