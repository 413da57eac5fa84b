"""A `cdc` input under the state-trust rules: consumed files recorded relative (a copied data root
continues where it was) and a full refresh that rebuilds the input's keyed trace from empty.

The oracle applies every record, in file order, to a Python dict (the final keyed table).
"""
from __future__ import annotations

import json
import os
import shutil
from collections import Counter

from spark_jobs.config import load_config
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.inputs import keyed_trace
from spark_jobs.runtime.step import pending_inputs, run_step
from spark_jobs.state.arrow_read import read_view

CIRCUIT = """
name: keyed
inputs:
  t:
    schema: {k: long, v: long, op: string}
    key: [k]
    source: {kind: cdc, path: inbox/t, format: jsonl, unknown_key: count}
nodes:
  big: {op: filter, input: t, where: "v > 2"}
outputs: [big]
"""

# (file, records): inserts, then updates/deletes (one of an unknown key each batch), then more
BATCHES = [
    ("b1.jsonl", [{"k": 1, "v": 5, "op": "c"}, {"k": 2, "v": 1, "op": "c"}, {"k": 3, "v": 7, "op": "c"},
                  {"k": 9, "op": "d"}]),
    ("b2.jsonl", [{"k": 2, "v": 8, "op": "u"}, {"k": 1, "op": "d"}, {"k": 4, "v": 3, "op": "r"},
                  {"k": 8, "v": 1, "op": "u"}]),
    ("b3.jsonl", [{"k": 3, "v": 0, "op": "u"}, {"k": 1, "v": 6, "op": "c"}, {"k": 7, "op": "d"}]),
]


def _oracle(upto: int) -> tuple[dict, int]:
    """(the keyed table after the first ``upto`` batches, unknown keys counted)."""
    table, unknown = {}, 0
    for _name, records in BATCHES[:upto]:
        for r in records:
            if r["op"] in ("c", "r") or (r["op"] == "u" and r["k"] in table):
                table[r["k"]] = r["v"]
            elif r["op"] == "d" and r["k"] in table:
                del table[r["k"]]
            else:
                unknown += 1
    return table, unknown


def _big(table: dict) -> Counter:
    """The view `big`, from scratch over the keyed table."""
    return Counter({(k, v): 1 for k, v in table.items() if v > 2})


def _write(root, i: int) -> None:
    name, records = BATCHES[i]
    os.makedirs(root / "inbox" / "t", exist_ok=True)
    (root / "inbox" / "t" / name).write_text("".join(json.dumps(r) + "\n" for r in records))


def _rt(root):
    return open_circuit(str(root / "keyed.yaml"), load_config(data_root=str(root)))


def _view(rt) -> Counter:
    table = read_view(rt.committed, "big")
    rows = zip(table.column("k").to_pylist(), table.column("v").to_pylist(), table.column("_weight").to_pylist())
    return Counter({(k, v): w for k, v, w in rows if w})


def test_a_cdc_input_survives_a_copied_data_root_and_a_full_refresh(spark, tmp_path):
    original, copy = tmp_path / "a", tmp_path / "b"
    original.mkdir()
    (original / "keyed.yaml").write_text(CIRCUIT)
    _write(original, 0)
    _write(original, 1)
    run_step(_rt(original))  # two files in one step: they apply in file order
    shutil.copytree(original, copy, symlinks=True)  # cp -a
    _write(copy, 2)
    rt = _rt(copy)
    assert [f.name for f in pending_inputs(rt)["t"]] == ["b3.jsonl"]  # the consumed ones are known
    report = run_step(rt)
    table, unknown = _oracle(3)
    want = _big(table)
    assert report.timestep == 2 and report.inputs[0].files == [str(copy / "inbox" / "t" / "b3.jsonl")]
    assert _view(rt) == want
    manifest = rt.committed.manifest()
    assert manifest.inputs["t"]["unknown_keys"] == unknown
    assert all("path" not in rec and str(tmp_path) not in json.dumps(rec) for rec in manifest.consumed("t"))

    refreshed = _rt(copy)
    report = run_step(refreshed, full_refresh=True)  # the keyed trace starts empty, every file replayed
    assert report.timestep == 3 and len(report.inputs[0].files) == 3
    assert _view(refreshed) == want
    manifest = refreshed.committed.manifest()
    assert manifest.inputs["t"]["unknown_keys"] == unknown  # the replay's count, not added to the old
    assert [rec["name"] for rec in manifest.consumed("t")] == ["b1.jsonl", "b2.jsonl", "b3.jsonl"]
    rows: Counter = Counter()  # the rebuilt keyed trace holds the final keyed table, each key once
    for r in refreshed.store.read_trace(keyed_trace("t")).collect():
        rows[(r["k"], r["v"])] += r["_weight"]
    assert +rows == Counter({(k, v): 1 for k, v in table.items()})
