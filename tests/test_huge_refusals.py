"""Hostile shapes of input files get one short refusal naming the file (exit code 2), never a
traceback or a megabyte of message: a JSON line nested 100,000 deep (json.loads in the diagnosis
raised RecursionError), a CSV header of 100,002 columns (one reason per column: 6.5 MB), a
header longer than the part of the file read for it (it was cut mid-name, and the cut name was
reported as a duplicate column), and a JSON line with 20,000 unexpected keys."""
from __future__ import annotations

import json

import pytest

from spark_jobs.cli.main import main
from spark_jobs.executor.sources.schema_check import json_depth

CIRCUIT = """\
name: huge
inputs:
  t:
    schema: {k: long, v: string}
    source: {kind: changes, path: inbox/t, format: FMT}
nodes:
  f: {op: filter, input: t, where: "true"}
outputs: [f]
"""
LIMIT = 2_000  # characters of a whole refusal message


def _step(tmp_path, fmt: str, capsys) -> str:  # noqa: ANN001
    f = tmp_path / "c.yaml"
    f.write_text(CIRCUIT.replace("FMT", fmt))
    capsys.readouterr()
    code = main(["step", str(f), "--data-root", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert code == 2, err[-3000:]
    assert "Traceback" not in err and "input refused" in err
    assert not list((tmp_path / "data" / "_dbsp").rglob("manifests/*.json"))
    return err[err.index("error: input refused"):]


def _inbox(tmp_path):  # noqa: ANN001, ANN202
    folder = tmp_path / "data" / "inbox" / "t"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_json_depth_needs_no_recursion():
    assert json_depth('{"a": [1, {"b": "[[[{{"}]}') == 3
    assert json_depth("[" * 100_000 + "]" * 100_000) == 100_000


def test_a_json_line_nested_100000_deep(spark, tmp_path, capsys):
    (_inbox(tmp_path) / "deep.jsonl").write_text('{"k": 1, "v": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    (_inbox(tmp_path) / "ok.jsonl").write_text('{"k": 2, "v": "x"}\n')
    message = _step(tmp_path, "jsonl", capsys)
    assert "deep.jsonl: a line nests JSON arrays or objects 100,001 levels deep" in message
    assert len(message) < LIMIT, len(message)


@pytest.mark.parametrize("width, why", [
    (100_000, "100,000 unexpected columns: c0, c1, c2, c3, c4, c5, c6, c7, c8, c9 and 99,990 more"),
    (200_000, "its header line is longer than 1 MiB"),
])
def test_a_csv_header_of_100002_columns(spark, tmp_path, capsys, width, why):
    header = ["k", "v"] + [f"c{i}" for i in range(width)]
    (_inbox(tmp_path) / "wide.csv").write_text(",".join(header) + "\n" + ",".join(["1", "x"] + ["0"] * width) + "\n")
    (_inbox(tmp_path) / "ok.csv").write_text("k,v\n1,x\n")
    message = _step(tmp_path, "csv", capsys)
    assert f"wide.csv: {why}" in message and "duplicate" not in message
    assert len(message) < LIMIT, len(message)


def test_a_json_line_with_20000_unexpected_keys(spark, tmp_path, capsys):
    line = {"k": 1, "v": "x", **{f"extra{i}": i for i in range(20_000)}}
    (_inbox(tmp_path) / "keys.jsonl").write_text(json.dumps(line) + "\n")
    message = _step(tmp_path, "jsonl", capsys)
    assert "keys.jsonl: unexpected column(s) extra0, extra1, " in message and "and 19,990 more" in message
    assert len(message) < LIMIT, len(message)


def test_a_parquet_file_of_100002_columns(spark, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {"k": pa.array([1], pa.int64()), "v": pa.array(["x"])}
    columns.update({f"c{i}": pa.array([0], pa.int8()) for i in range(100_000)})
    pq.write_table(pa.table(columns), _inbox(tmp_path) / "wide.parquet")
    message = _step(tmp_path, "parquet", capsys)
    assert "wide.parquet: 100,000 unexpected columns: c0, c1," in message
    assert len(message) < LIMIT, len(message)
