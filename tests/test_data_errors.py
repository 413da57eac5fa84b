"""Data that only Spark can find bad ends as a message, not a Java stack trace (issue 13.6).

A Parquet file whose footer is fine but whose pages are corrupt is refused naming the file (exit
code 2, nothing committed); a value that overflows an expression ends the CLI with one line
naming the node (exit code 1).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.executor.sources import InputRefused
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step

CIRCUIT = """
name: numbers
inputs:
  n:
    schema: {k: long, x: long}
    source: {kind: changes, path: inbox/n, format: parquet}
nodes:
  scaled: {op: select, input: n, columns: {k: k, y: "x * 4"}}
  total:  {op: aggregate, input: scaled, group_by: [k], aggregates: {s: "sum(y)"}}
outputs:
  total: {}
"""


def _setup(tmp_path, x: list[int]) -> tuple[str, str]:
    circuit = tmp_path / "numbers.yaml"
    circuit.write_text(CIRCUIT)
    path = tmp_path / "inbox" / "n" / "a.parquet"
    os.makedirs(path.parent, exist_ok=True)
    pq.write_table(pa.table({"k": pa.array([i % 7 for i in range(len(x))], pa.int64()),
                             "x": pa.array(x, pa.int64())}), path, compression="snappy")
    return str(circuit), str(path)


def test_corrupt_pages_behind_a_valid_footer_are_refused(spark, tmp_path):
    circuit, path = _setup(tmp_path, list(range(2000)))
    data = bytearray(open(path, "rb").read())
    for i in range(8, len(data) // 2):  # the pages, not the footer at the end
        data[i] = (data[i] * 7 + 13) % 256
    open(path, "wb").write(bytes(data))
    pq.ParquetFile(path)  # the footer still reads
    rt = open_circuit(circuit, load_config(data_root=str(tmp_path)))
    with pytest.raises(InputRefused) as err:
        run_step(rt)
    [(named, reason)] = err.value.problems
    assert named == path and reason.startswith("cannot be read although its header or footer looked valid")
    assert rt.store.last_committed() == 0


def test_an_overflow_ends_the_cli_with_one_line_naming_the_node(tmp_path):
    circuit, _ = _setup(tmp_path, [2 ** 62])
    done = subprocess.run([sys.executable, "-m", "spark_jobs.cli.main", "step", circuit, "--data-root", str(tmp_path)],
                          capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=600)
    assert done.returncode == 1, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "in node 'scaled'" in errors[0] and "ARITHMETIC_OVERFLOW" in errors[0]
    assert "Traceback" not in done.stderr and "\tat org.apache" not in done.stderr, done.stderr[-3000:]
