"""Malformed input files in a small circuit's inbox, on both engines (issue: hostile inputs).

Each bad file is refused naming the file and the reason, nothing is committed (the manifest stays
at the last committed timestep), the file stays where it was, and once it is taken away the next
step commits. The default small change runs in-process on Arrow; ``execution.engine: spark``
forces Spark (``tests/policies.py``).
"""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.executor.sources import InputRefused
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from tests.policies import config

CIRCUIT = """\
name: hostile_inbox
inputs:
  t:
    schema: {k: long, v: double, s: string}
    source: {kind: changes, path: inbox/t, format: parquet}
  c:
    schema: {k: long, s: string}
    source: {kind: changes, path: inbox/c, format: csv}
nodes:
  total: {op: aggregate, input: t, group_by: [k], aggregates: {n: "count(*)", sv: "sum(v)"}}
  seen: {op: distinct, input: c}
outputs: [total, seen]
"""


def _parquet(root, name: str, **columns) -> str:
    path = os.path.join(str(root), "inbox", "t", name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def _csv(root, name: str, text: str) -> str:
    path = os.path.join(str(root), "inbox", "c", name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)
    return path


def _good(root, n: int) -> None:
    _parquet(root, f"good{n}.parquet", k=pa.array([n], pa.int64()), v=pa.array([1.5]), s=pa.array(["a"]))
    os.makedirs(os.path.join(str(root), "inbox", "c"), exist_ok=True)  # input c: no file yet, an empty folder


def _truncated(root) -> str:
    path = _parquet(root, "bad.parquet", k=pa.array([1, 2], pa.int64()), v=pa.array([1.0, 2.0]), s=pa.array(["a", "b"]))
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    return path


def _directory(root) -> str:
    """A folder named like a file: a folder's data files are read (Spark writes folders of parts),
    so the bad part inside it is what must be named."""
    path = os.path.join(str(root), "inbox", "t", "dir.parquet", "part-0.parquet")
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as fh:
        fh.write(b"PAR1 not really parquet PAR1")
    return path


# name -> (make the bad file under the data root and return its path, a fragment of the reason)
BAD_FILES = {
    "truncated parquet": (_truncated, "not a readable Parquet file"),
    "wrong column type": (lambda r: _parquet(r, "bad.parquet", k=pa.array(["1"]), v=pa.array([1.0]), s=pa.array(["a"])),
                          "column k has type string but the schema says long"),
    "extra column": (lambda r: _parquet(r, "bad.parquet", k=pa.array([1], pa.int64()), v=pa.array([1.0]),
                                        s=pa.array(["a"]), x=pa.array([1])), "unexpected column x"),
    "missing column": (lambda r: _parquet(r, "bad.parquet", k=pa.array([1], pa.int64()), v=pa.array([1.0])),
                       "missing column s"),
    "weight null": (lambda r: _parquet(r, "bad.parquet", k=pa.array([1], pa.int64()), v=pa.array([1.0]), s=pa.array(["a"]),
                                       _weight=pa.array([None], pa.int64())), "_weight has 1 null"),
    "weight not an integer": (lambda r: _parquet(r, "bad.parquet", k=pa.array([1], pa.int64()), v=pa.array([1.0]),
                                                 s=pa.array(["a"]), _weight=pa.array([0.5])),
                              "_weight has type double"),
    "weight huge": (lambda r: _parquet(r, "bad.parquet", k=pa.array([1, 1], pa.int64()), v=pa.array([1.0, 1.0]),
                                       s=pa.array(["a", "a"]), _weight=pa.array([2 ** 62, 2 ** 62], pa.int64())), "_weight"),
    "a folder named like a file": (_directory, "not a readable Parquet file"),
    "csv with a bad row": (lambda r: _csv(r, "bad.csv", "k,s\n1,a\nnot-a-number,b\n"),
                           "column k: 1 value(s) are not a valid long, e.g. 'not-a-number'"),
    "csv with too many fields": (lambda r: _csv(r, "bad.csv", "k,s\n1,a,extra\n"), "malformed row(s) (wrong number of fields)"),
}


def _names(root, case: str) -> str:
    """Each case's files under a name of its own (the cases share one inbox)."""
    make, _ = BAD_FILES[case]
    path = make(root)
    tag = case.replace(" ", "_")
    moved = os.path.join(os.path.dirname(path), f"{tag}-{os.path.basename(path)}")
    os.rename(path, moved)
    return moved


@pytest.mark.parametrize("engine", ["arrow", "spark"])
def test_bad_input_files_are_refused_together_and_the_next_good_step_commits(spark, tmp_path, engine):
    circuit = tmp_path / "hostile_inbox.yaml"
    circuit.write_text(CIRCUIT)
    cfg = config(tmp_path, engine=engine)
    _good(tmp_path, 1)
    rt = open_circuit(str(circuit), cfg)
    run_step(rt)
    assert rt.store.last_committed() == 1
    bad = {case: _names(tmp_path, case) for case in sorted(BAD_FILES)}
    _good(tmp_path, 2)
    rt = open_circuit(str(circuit), cfg)
    with pytest.raises(InputRefused) as err:
        run_step(rt)
    reasons = {path: reason for path, reason in err.value.problems}
    for case, path in bad.items():
        fragment = BAD_FILES[case][1]
        assert any(os.path.exists(p) and os.path.samefile(p, path) and fragment in r for p, r in reasons.items()), \
            (case, [(os.path.basename(p), r) for p, r in reasons.items()])
        assert os.path.exists(path)  # refused files stay where they are
    assert rt.store.last_committed() == 1
    for path in bad.values():
        os.remove(path)
    rt = open_circuit(str(circuit), cfg)
    run_step(rt)
    assert rt.store.last_committed() == 2


def test_an_expression_spark_refuses_after_validation_ends_in_one_line_naming_the_node(spark, tmp_path, capsys):
    """`s.x` on a string column passes validation (it does not know every column's type) and
    Spark's analyser refuses it: one line naming the node, exit code 1, nothing committed."""
    from spark_jobs.cli.main import main

    circuit = tmp_path / "fa.yaml"
    circuit.write_text(CIRCUIT.replace('aggregates: {n: "count(*)", sv: "sum(v)"}}',
                                       'aggregates: {n: "count(*)", sv: "sum(v)"}}\n  odd: {op: filter, input: t, '
                                       'where: "s.x = 1"}').replace("outputs: [total, seen]", "outputs: [odd]"))
    _good(tmp_path, 1)
    assert main(["step", str(circuit), "--data-root", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: node 'odd': Spark cannot evaluate an expression of the circuit: "
                              "[INVALID_EXTRACT_BASE_FIELD_TYPE]"), err[-1]
    assert not any("Traceback" in line for line in err)
    assert not (tmp_path / "_dbsp" / "hostile_inbox" / "manifests").exists()
