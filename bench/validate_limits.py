"""Benchmark: `dbsp validate` of hostile circuit files answers within seconds (not a test).

    python -m bench.validate_limits

Each file is validated in a fresh `dbsp validate` process (what a user or Airflow's DAG
processor runs), timed from start to exit, beside the same run on the repository's largest SQL
circuit (circuits/tpch_sql.yaml) as the baseline of one run on this machine: the ratio is what to
compare between runs. The hostile files: the issue's 120,000-value IN list (849 KB), 150 nested
subqueries, 400 UNION ALL branches, 1,500 ANDs, and two files at the bounds (three 20,000-char
queries; a 1 MiB file of 100 filters with 10,000-char IN lists). Results:
bench/results/validate_limits.md and validate_limits.json.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
HEAD = """name: hostile
inputs:
  t:
    schema: {k: long, v: long}
    source: {kind: changes, path: inbox/t, format: parquet}
nodes:
"""


def _sql(name: str, query: str) -> str:
    return f"  {name}:\n    op: sql\n    query: |\n      {query}\n"


def files() -> dict[str, str]:
    nested = "SELECT k FROM t"
    for i in range(150):
        nested = f"SELECT k FROM ({nested}) s{i}"
    in_list = "SELECT k FROM t WHERE v IN (" + ", ".join(str(i) for i in range(120_000)) + ")"
    union = " UNION ALL ".join(f"SELECT k FROM t WHERE v = {i}" for i in range(400))
    ands = "SELECT k FROM t WHERE " + " AND ".join(f"v <> {i}" for i in range(1_500))
    at_bound = "SELECT k, v FROM t WHERE " + " OR ".join(f"v = {i}" for i in range(2_000))
    at_bound = at_bound[:at_bound.rindex(" OR ", 0, 19_900)]
    where = "v IN (" + ", ".join(str(100_000 + i) for i in range(1_200)) + ")"
    return {
        "in_list_120000": HEAD + _sql("q", in_list) + "outputs: [q]\n",
        "nested_150": HEAD + _sql("q", nested) + "outputs: [q]\n",
        "union_all_400": HEAD + _sql("q", union) + "outputs: [q]\n",
        "and_chain_1500": HEAD + _sql("q", ands) + "outputs: [q]\n",
        "three_20k_queries": HEAD + "".join(_sql(f"q{i}", at_bound) for i in range(3)) + "outputs: [q0]\n",
        "100_filters_10k": HEAD + "".join(f'  f{i}: {{op: filter, input: t, where: "{where}"}}\n' for i in range(100))
        + "outputs: [f0]\n",
    }


def validate_seconds(path: str) -> tuple[float, int, int]:
    """(seconds, exit code, bytes of output) of one `dbsp validate` process."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "spark_jobs.cli.main", "validate", path], capture_output=True,
                          cwd=ROOT)
    return time.perf_counter() - started, done.returncode, len(done.stdout) + len(done.stderr)


def main() -> None:
    rows = []
    base, _, _ = validate_seconds(str(ROOT / "circuits" / "tpch_sql.yaml"))
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files().items():
            path = os.path.join(tmp, f"{name}.yaml")
            Path(path).write_text(text)
            seconds, code, out = validate_seconds(path)
            rows.append({"file": name, "bytes": len(text), "seconds": round(seconds, 2), "exit": code,
                         "output_bytes": out, "x_baseline": round(seconds / base, 2)})
            print(rows[-1], flush=True)
    load = os.getloadavg()[0]
    result = {"baseline_tpch_sql_seconds": round(base, 2), "load": round(load, 1), "files": rows}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "validate_limits.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# `dbsp validate` of hostile circuit files", "",
             f"One run; baseline `dbsp validate circuits/tpch_sql.yaml` {base:.2f} s; load {load:.1f} "
             "(2 cores). `python -m bench.validate_limits`.", "",
             "| file | bytes | seconds | x baseline | exit | output bytes |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['file']} | {r['bytes']:,} | {r['seconds']} | {r['x_baseline']} | {r['exit']} | {r['output_bytes']:,} |"
              for r in rows]
    (RESULTS / "validate_limits.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
