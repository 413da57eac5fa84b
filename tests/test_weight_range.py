"""Checked arithmetic on weights (``executor/weights.py``), on both engines: a join's or product's
weight product, a sum of weights (consolidation, distinct, an aggregate's count and sum) outside
-(2^63-1)..2^63-1 refuses the step with exit code 2, naming the node and an example row, and
commits nothing; just inside the range the exact weight is committed. Input weights are at most
2^31-1, so it takes three of them multiplied, or a few products added up, to leave the range."""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.errors import EXIT_REFUSED, DbspError
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from tests.engines import output_delta
from tests.policies import config, make_input_folders

W = 2**31 - 1  # the largest input weight (docs/reference/inputs.md)

CIRCUIT = """\
name: weights
inputs:
  a: {schema: {k: long, v: long}, source: {kind: changes, path: inbox/a, format: parquet}}
  b: {schema: {k: long}, source: {kind: changes, path: inbox/b, format: parquet}}
  c: {schema: {k: long}, source: {kind: changes, path: inbox/c, format: parquet}}
nodes:
%s
outputs: [%s]
"""

NODES = {
    # three weights multiplied
    "join3": ("ab: {op: join, left: a, right: b, on: [k]}\n  out: {op: join, left: ab, right: c, on: [k]}", "out"),
    "product3": ("bc: {op: product, left: b, right: c}\n  out: {op: product, left: a, right: bc}", "out"),
    # products of two weights added up: a's rows (k, v) times b's (k)
    "count": ("ab: {op: join, left: a, right: b, on: [k]}\n"
              "  out: {op: aggregate, input: ab, group_by: [k], aggregates: {n: \"count(*)\", s: \"sum(v)\"}}", "out"),
    "distinct": ("ab: {op: join, left: a, right: b, on: [k]}\n  keys: {op: select, input: ab, columns: [k]}\n"
                 "  out: {op: distinct, input: keys}", "out"),
    "consolidate": ("ab: {op: join, left: a, right: b, on: [k]}\n  out: {op: select, input: ab, columns: [k]}", "out"),
}


def _write(root: str, name: str, rows: list[dict], weight: int) -> None:
    folder = os.path.join(root, "inbox", name)
    os.makedirs(folder, exist_ok=True)
    cols = {c: pa.array([r[c] for r in rows], pa.int64()) for c in rows[0]}
    cols["_weight"] = pa.array([weight] * len(rows), pa.int64())
    pq.write_table(pa.table(cols), os.path.join(folder, "x.parquet"))


def _step(tmp_path, engine: str, kind: str, a_rows: int):  # noqa: ANN202
    nodes, view = NODES[kind]
    path = tmp_path / "c.yaml"
    path.write_text(CIRCUIT % ("  " + nodes, view))
    root = str(tmp_path / "data")
    rt = open_circuit(str(path), config(root, engine=engine))
    make_input_folders(rt)
    _write(root, "a", [{"k": 1, "v": v} for v in range(a_rows)], W)
    _write(root, "b", [{"k": 1}], W)
    _write(root, "c", [{"k": 1}], W if kind in ("join3", "product3") else 1)
    return rt, view


@pytest.mark.parametrize("engine", ["arrow", "spark"])
@pytest.mark.parametrize("kind, a_rows", [("join3", 1), ("product3", 1), ("count", 3), ("distinct", 3),
                                          ("consolidate", 3)])
def test_a_weight_outside_the_range_refuses_the_step(spark, tmp_path, engine, kind, a_rows):
    rt, view = _step(tmp_path, engine, kind, a_rows)
    before = rt.committed.last_committed()
    with pytest.raises(DbspError) as refused:
        run_step(rt)
    assert refused.value.exit_code == EXIT_REFUSED, refused.value
    text = str(refused.value)
    assert "outside" in text and ("node 'out" in text or "node 'ab" in text or "of node" in text), text
    assert "example row" in text and '1' in text.split("example row")[1], text
    assert rt.committed.last_committed() == before and rt.store.manifest() is None  # nothing committed


@pytest.mark.parametrize("engine", ["arrow", "spark"])
def test_weights_just_inside_the_range_are_exact(spark, tmp_path, engine):
    rt, view = _step(tmp_path, engine, "count", 2)
    run_step(rt)
    got, _ = output_delta(rt, view)
    assert got == {(1, 2 * W * W, W * W): 1}  # count(*) = 2^63 - 2^33 + 2, sum(v) = (0+1)·W²

    (tmp_path / "j").mkdir()
    rt, view = _step(tmp_path / "j", engine, "consolidate", 2)
    run_step(rt)
    assert output_delta(rt, view)[0] == {(1,): 2 * W * W}
