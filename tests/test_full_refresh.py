"""A full refresh after editing a circuit rebuilds its state from the retained inputs (issue 13.8).

The circuit is edited (a filter added, an aggregate changed, a view dropped, one added) and
refreshed, by `dbsp step --full-refresh`'s code path and by the DAG's `full_refresh` param: the
views equal the recompute of the edited circuit, the committed deltas are new view - old view,
the input files stay, and incremental steps go on from there.
"""
from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.cli.main import build_parser
from spark_jobs.config import load_config
from spark_jobs.executor.spark.zset import to_counter
from spark_jobs.runtime import timestep
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from spark_jobs.state import FingerprintMismatch
from tests import oracle
from tests.dag_tasks import TASK_MODES, run_stage_tasks

V1 = """
name: editable
inputs:
  sales:
    schema: {k: long, amount: long}
    source: {kind: changes, path: inbox/sales, format: parquet}
nodes:
  paid:   {op: filter, input: sales, where: "amount > 0"}
  totals: {op: aggregate, input: paid, group_by: [k], aggregates: {total: "sum(amount)"}}
  wide:   {op: aggregate, input: paid, group_by: [k], aggregates: {n: "count(*)"}}
  gone:   {op: distinct, input: paid}
outputs: {totals: {}, wide: {}, gone: {}}
"""
# a filter added, sum -> max (same columns), a column added, a view dropped and a new one
V2 = """
name: editable
inputs:
  sales:
    schema: {k: long, amount: long}
    source: {kind: changes, path: inbox/sales, format: parquet}
nodes:
  paid:   {op: filter, input: sales, where: "amount > 0"}
  large:  {op: filter, input: paid, where: "amount > 5"}
  totals: {op: aggregate, input: large, group_by: [k], aggregates: {total: "max(amount)"}}
  wide:   {op: aggregate, input: large, group_by: [k], aggregates: {n: "count(*)", s: "sum(amount)"}}
  keys:   {op: select, input: large, columns: [k]}
  fresh:  {op: distinct, input: keys}
outputs: {totals: {}, wide: {}, fresh: {}}
"""


def _write(root, name: str, rows: list[tuple[int, int, int]]) -> None:
    folder = root / "inbox" / "sales"
    os.makedirs(folder, exist_ok=True)
    pq.write_table(pa.table({"k": pa.array([r[0] for r in rows], pa.int64()),
                             "amount": pa.array([r[1] for r in rows], pa.int64()),
                             "_weight": pa.array([r[2] for r in rows], pa.int64())}), folder / name)


def _bag(history: list[list[tuple[int, int, int]]]) -> Counter:
    out: Counter = Counter()
    for batch in history:
        for k, amount, w in batch:
            out[(k, amount)] += w
    return +out


def _expected_v1(bag: Counter) -> dict[str, Counter]:
    paid = Counter({t: w for t, w in bag.items() if t[1] > 0})
    total, n = Counter(), Counter()
    for (k, amount), w in paid.items():
        total[k] += amount * w
        n[k] += w
    return {"totals": Counter({(k, total[k]): 1 for k in n}), "wide": Counter({(k, c): 1 for k, c in n.items()}),
            "gone": Counter({t: 1 for t in paid})}


def _expected_v2(bag: Counter) -> dict[str, Counter]:
    large = Counter({t: w for t, w in bag.items() if t[1] > 5})
    top, n, s = {}, Counter(), Counter()
    for (k, amount), w in large.items():
        top[k] = max(top.get(k, amount), amount)
        n[k] += w
        s[k] += amount * w
    return {"totals": Counter({(k, top[k]): 1 for k in n}),
            "wide": Counter({(k, n[k], s[k]): 1 for k in n}),
            "fresh": Counter({(k,): 1 for k in n})}


def _views(rt) -> dict[str, Counter]:
    return {v: oracle.view_counter(rt, v) for v in rt.compiled.spec.outputs}


BATCHES = [[(1, 3, 1), (1, 4, 1), (1, 8, 1), (2, 9, 2), (3, -1, 1)], [(2, 9, -1), (4, 20, 1), (1, 3, -1)]]


def _edited(tmp_path, text: str) -> str:
    path = tmp_path / "editable.yaml"
    path.write_text(text)
    return str(path)


def _rt(path: str, root):
    return open_circuit(path, load_config(data_root=str(root)))


def test_refresh_after_an_edit_by_the_step_runner(spark, tmp_path):
    circuit = _edited(tmp_path, V1)
    history = []
    for i, batch in enumerate(BATCHES):
        _write(tmp_path, f"{i:03d}.parquet", batch)
        history.append(batch)
        run_step(_rt(circuit, tmp_path))
    old = _rt(circuit, tmp_path)
    assert _views(old) == _expected_v1(_bag(history))
    old_totals = _views(old)["totals"]
    _edited(tmp_path, V2)
    with pytest.raises(FingerprintMismatch):
        run_step(_rt(circuit, tmp_path))
    notes = []
    rt = _rt(circuit, tmp_path)
    report = run_step(rt, progress=notes.append, full_refresh=True)
    assert report.timestep == 3
    want = _expected_v2(_bag(history))
    assert _views(rt) == want
    # the delta of a view that kept its columns is new - old; the others are said
    change = _signed(want["totals"], old_totals)
    assert change and to_counter(rt.store.read_output_delta("totals", 3)) == change
    assert any("view gone is no longer in the circuit" in n for n in report.notes)
    assert any("view wide changed its columns" in n for n in report.notes)
    assert any("view fresh is new" in n for n in report.notes)
    assert sorted(os.listdir(tmp_path / "inbox" / "sales")) == ["000.parquet", "001.parquet"]  # inputs kept
    assert [(r["name"], r["timestep"]) for r in rt.store.manifest().consumed("sales")] == [
        ("000.parquet", 3), ("001.parquet", 3)]  # exactly the files the refresh read
    later = [(5, 50, 1), (4, 20, -1), (1, 8, 1)]
    _write(tmp_path, "002.parquet", later)
    history.append(later)
    run_step(rt)
    assert _views(rt) == _expected_v2(_bag(history))


def _signed(new: Counter, old: Counter) -> Counter:
    out = Counter(new)
    out.subtract(old)
    return Counter({t: w for t, w in out.items() if w})


@pytest.mark.parametrize("tasks", TASK_MODES)
def test_refresh_after_an_edit_as_a_dag_run(spark, tmp_path, tasks):
    circuit = _edited(tmp_path, V1)
    for i, batch in enumerate(BATCHES):
        _write(tmp_path, f"{i:03d}.parquet", batch)
        run_step(_rt(circuit, tmp_path))
    old_totals = _views(_rt(circuit, tmp_path))["totals"]
    _edited(tmp_path, V2)
    rt = _rt(circuit, tmp_path)
    with pytest.raises(FingerprintMismatch):
        timestep.plan(rt, "inc__1")
    run = "refresh__1"
    timestep.plan(rt, run, mode="full_refresh")
    run_stage_tasks(rt, run, tasks)
    timestep.check(rt, run)
    done = timestep.commit(rt, run)
    assert done["timestep"] == 3 and any("view gone" in n for n in done["notes"])
    want = _expected_v2(_bag(BATCHES))
    fresh = _rt(circuit, tmp_path)
    assert _views(fresh) == want
    assert to_counter(fresh.store.read_output_delta("totals", 3)) == _signed(want["totals"], old_totals)
    _write(tmp_path, "002.parquet", [(6, 7, 1)])
    run_step(fresh)
    assert _views(fresh) == _expected_v2(_bag(BATCHES + [[(6, 7, 1)]]))


def test_the_cli_has_the_flag():
    args = build_parser().parse_args(["step", "x", "--full-refresh"])
    assert args.full_refresh is True
