"""Deletes that exceed inserts are refused (or quarantined), never integrated as negative weights.

Issue 13.4: a delete of a row that was never inserted left a negative weight in the integral: a
`distinct` view dropped the tuple while an `aggregate` view still counted it, and a later real
insert cancelled against it. Here: such a step is refused (exit code 2 through the CLI, the file
and an example row named, nothing committed), both symptoms cannot happen, the quarantine mode
sets the excess aside and reports it, out-of-range weights are refused, and a step of inserts
only never looks at the integral.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.executor import bag_check
from spark_jobs.executor.sources import InputRefused
from spark_jobs.runtime import bag
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from tests import oracle
from tests.dag_tasks import TASK_MODES, run_stage_tasks
from tests.policies import config

CIRCUIT = """
name: bag
{settings}
inputs:
  items:
    schema: {{k: long, v: string}}
    source: {{kind: changes, path: inbox/items, format: parquet}}
nodes:
  uniq:   {{op: distinct, input: items}}
  counts: {{op: aggregate, input: items, group_by: [k], aggregates: {{n: "count(*)"}}}}
outputs:
  uniq: {{}}
  counts: {{}}
"""


def _circuit(tmp_path, settings: str = "") -> str:
    path = tmp_path / "bag.yaml"
    path.write_text(CIRCUIT.format(settings=settings))
    return str(path)


def _write(root, name: str, rows: list[tuple[int, str, int]]) -> str:
    folder = root / "inbox" / "items"
    os.makedirs(folder, exist_ok=True)
    path = folder / name
    pq.write_table(pa.table({"k": pa.array([r[0] for r in rows], pa.int64()), "v": [r[1] for r in rows],
                             "_weight": pa.array([r[2] for r in rows], pa.int64())}), path)
    return str(path)


def _views(rt) -> dict[str, Counter]:
    return {v: oracle.view_counter(rt, v) for v in ("uniq", "counts")}


def _expected(bag_rows: Counter) -> dict[str, Counter]:
    """The views recomputed on an integrated input that never went negative."""
    counts: Counter = Counter()
    for (k, _v), w in bag_rows.items():
        counts[k] += w
    return {"uniq": Counter({t: 1 for t, w in bag_rows.items() if w > 0}),
            "counts": Counter({(k, n): 1 for k, n in counts.items() if n > 0})}


def _rt(circuit: str, root, **policy):
    """The circuit on ``root``; ``policy``: execution policy fields changed (``tests/policies.py``)."""
    return open_circuit(circuit, config(root, **policy) if policy else load_config(data_root=str(root)))


def test_delete_of_a_row_never_inserted_is_refused_by_the_cli(spark, tmp_path):
    circuit = _circuit(tmp_path)
    _write(tmp_path, "001.parquet", [(1, "a", 1), (2, "b", 2)])
    rt = _rt(circuit, tmp_path)
    run_step(rt)
    before = _views(rt)
    bad = _write(tmp_path, "002.parquet", [(1, "a", -1), (3, "ghost", -1)])
    done = subprocess.run([sys.executable, "-m", "spark_jobs.cli.main", "step", circuit, "--data-root", str(tmp_path)],
                          capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    assert bad in done.stderr and "{k: 3, v: 'ghost'}" in done.stderr, done.stderr[-3000:]
    assert "held 0 copies" in done.stderr and "Traceback" not in done.stderr
    fresh = _rt(circuit, tmp_path)
    assert fresh.store.last_committed() == 1 and _views(fresh) == before  # nothing committed
    assert os.path.exists(bad)


def test_neither_symptom_of_the_issue_can_happen(spark, tmp_path):
    """distinct and aggregate cannot disagree, and a later insert is not cancelled by a ghost delete."""
    circuit = _circuit(tmp_path)
    rt = _rt(circuit, tmp_path)
    _write(tmp_path, "001.parquet", [(1, "a", 1)])
    run_step(rt)
    ghost = _write(tmp_path, "002.parquet", [(2, "b", -1)])
    with pytest.raises(InputRefused) as err:
        run_step(rt)
    assert [p for p, _ in err.value.problems] == [ghost]
    os.remove(ghost)  # the user removes the bad file; the real insert then shows in both views
    _write(tmp_path, "003.parquet", [(2, "b", 1)])
    run_step(rt)
    assert _views(rt) == _expected(Counter({(1, "a"): 1, (2, "b"): 1}))
    # deleting more copies than exist is refused too, even with an insert of another copy in the step
    over = _write(tmp_path, "004.parquet", [(1, "a", 1), (1, "a", -3)])
    with pytest.raises(InputRefused, match="held 1 copy"):
        run_step(rt)
    os.remove(over)
    _write(tmp_path, "005.parquet", [(1, "a", 1), (1, "a", -2), (2, "b", -1)])  # exactly to zero: fine
    run_step(rt)
    assert _views(rt) == _expected(Counter())


def test_quarantine_sets_the_excess_aside_and_reports_it(spark, tmp_path):
    circuit = _circuit(tmp_path, "settings: {on_negative: quarantine}")
    rt = _rt(circuit, tmp_path)
    _write(tmp_path, "001.parquet", [(1, "a", 2)])
    run_step(rt)
    src = _write(tmp_path, "002.parquet", [(1, "a", -3), (2, "ghost", -1), (3, "c", 1)])
    report = run_step(rt)
    # a small step runs in-process; its bag check finds the excess and hands the step to Spark
    assert report.engine == "spark" and "deletes rows it does not hold" in report.engine_reason, report
    folder = bag.quarantine_path(rt, 2, "items")
    assert any(folder in n and "2 tuple(s)" in n and "2 deleted row(s)" in n for n in report.notes), report.notes
    rows = sorted(pq.read_table(folder).to_pylist(), key=lambda r: r["k"])
    assert [(r["k"], r["v"], r["_weight"], r["_weight_before"], r["_change"], r["_files"]) for r in rows] == [
        (1, "a", -1, 2, -3, [src]), (2, "ghost", -1, 0, -1, [src])]
    assert rt.store.manifest().meta["quarantined"]["items"]["tuples"] == 2
    # the step applied what could be applied: (1, a) down to zero, (3, c) inserted
    assert _views(rt) == _expected(Counter({(3, "c"): 1}))
    _write(tmp_path, "003.parquet", [(2, "ghost", 1)])  # a later real insert is not cancelled
    run_step(rt)
    assert _views(rt) == _expected(Counter({(3, "c"): 1, (2, "ghost"): 1}))


def test_weights_outside_the_documented_range_are_refused(spark, tmp_path):
    circuit = _circuit(tmp_path)
    rt = _rt(circuit, tmp_path)
    big = _write(tmp_path, "001.parquet", [(1, "a", 10 ** 18)])
    with pytest.raises(InputRefused) as err:
        run_step(rt)
    assert err.value.problems == [(big, "column _weight must lie between -2147483647 and 2147483647: its "
                                        "values reach 1000000000000000000")]
    assert rt.store.last_committed() == 0


def test_a_step_of_inserts_only_never_looks_at_the_integral(spark, tmp_path, monkeypatch):
    calls = []  # either engine's check: Spark's find_negatives, the in-process one's negative_tuples
    for name in ("find_negatives", "negative_tuples"):
        real = getattr(bag_check, name)
        monkeypatch.setattr(bag, name, lambda *a, _real=real, **k: calls.append(1) or _real(*a, **k))
    circuit = _circuit(tmp_path)
    rt = _rt(circuit, tmp_path)
    for i in range(2):
        _write(tmp_path, f"00{i}.parquet", [(i, "x", 1)])
        run_step(rt)
    assert calls == []
    _write(tmp_path, "009.parquet", [(0, "x", -1)])
    run_step(rt)
    assert calls == [1] and _views(rt) == _expected(Counter({(1, "x"): 1}))


def test_the_check_on_spark_agrees_with_the_check_on_the_driver(spark, tmp_path):
    """A change too large for the driver is checked by one Spark job, with the same verdicts."""
    circuit = _circuit(tmp_path)
    rt = _rt(circuit, tmp_path, engine="spark", local_change_rows=0)  # every change goes the Spark way
    _write(tmp_path, "001.parquet", [(1, "a", 2), (2, "b", 1)])
    run_step(rt)
    bad = _write(tmp_path, "002.parquet", [(1, "a", -1), (2, "b", -2)])
    with pytest.raises(InputRefused) as err:
        run_step(rt)
    assert len(err.value.problems) == 1 and "{k: 2, v: 'b'}" in err.value.problems[0][1]
    os.remove(bad)
    _write(tmp_path, "003.parquet", [(1, "a", -2), (2, "b", -1)])
    run_step(rt)
    assert _views(rt) == _expected(Counter())


@pytest.mark.parametrize("tasks", TASK_MODES)
def test_a_dag_run_refuses_the_same_way(spark, tmp_path, tasks):
    """The DAG's task protocol (plan, stages, check, commit) checks deletes like `dbsp step`: the
    stage that reads the input refuses, naming the file and the row, and nothing is committed."""
    from spark_jobs.runtime import timestep

    circuit = _circuit(tmp_path)
    rt = _rt(circuit, tmp_path)
    _write(tmp_path, "001.parquet", [(1, "a", 1)])
    run_step(rt)
    ghost = _write(tmp_path, "002.parquet", [(1, "a", -1), (2, "ghost", -1)])
    timestep.plan(rt, "r1")
    with pytest.raises(InputRefused) as err:
        run_stage_tasks(rt, "r1", tasks)
    assert [p for p, _ in err.value.problems] == [ghost]
    assert "{k: 2, v: 'ghost'}" in err.value.problems[0][1] and "held 0 copies" in err.value.problems[0][1]
    assert _rt(circuit, tmp_path).store.last_committed() == 1
    os.remove(ghost)  # a weight out of range is refused by the stage too (the same read)
    big = _write(tmp_path, "003.parquet", [(1, "a", 10 ** 18)])
    timestep.plan(rt, "r2")
    with pytest.raises(InputRefused, match="column _weight must lie between") as err:
        run_stage_tasks(rt, "r2", tasks)
    assert [p for p, _ in err.value.problems] == [big]


@pytest.mark.parametrize("tasks", TASK_MODES)
def test_a_dag_run_quarantines_the_same_way(spark, tmp_path, tasks):
    """With on_negative: quarantine the stage sets the excess aside as `dbsp step` does; the commit
    records it in the manifest and says so in its notes."""
    from spark_jobs.runtime import timestep

    circuit = _circuit(tmp_path, "settings: {on_negative: quarantine}")
    rt = _rt(circuit, tmp_path)
    _write(tmp_path, "001.parquet", [(1, "a", 2)])
    run_step(rt)
    src = _write(tmp_path, "002.parquet", [(1, "a", -3), (2, "ghost", -1), (3, "c", 1)])
    timestep.plan(rt, "q1")
    run_stage_tasks(rt, "q1", tasks)
    timestep.check(rt, "q1")
    done = timestep.commit(rt, "q1")
    folder = bag.quarantine_path(rt, 2, "items")
    assert any(folder in n and "2 tuple(s)" in n and "2 deleted row(s)" in n for n in done["notes"]), done
    rows = sorted(pq.read_table(folder).to_pylist(), key=lambda r: r["k"])
    assert [(r["k"], r["_weight"], r["_files"]) for r in rows] == [(1, -1, [src]), (2, -1, [src])]
    assert rt.store.manifest().meta["quarantined"]["items"]["tuples"] == 2
    assert _views(rt) == _expected(Counter({(3, "c"): 1}))


def test_an_in_process_step_checks_deletes_against_the_integral_it_keeps(spark, tmp_path):
    """A small step runs on Arrow with its bag check there: a valid delete stays in-process (and
    appends to the integral), one past what the integral holds is handed to Spark, which refuses."""
    circuit = _circuit(tmp_path)
    rt = _rt(circuit, tmp_path)
    _write(tmp_path, "001.parquet", [(1, "a", 2), (2, "b", 1)])
    run_step(rt)
    _write(tmp_path, "002.parquet", [(1, "a", -1)])
    report = run_step(rt)
    assert report.engine == "arrow", report.engine_reason
    over = _write(tmp_path, "003.parquet", [(1, "a", -2)])  # one copy is left
    with pytest.raises(InputRefused, match="held 1 copy") as err:
        run_step(rt)
    assert [p for p, _ in err.value.problems] == [over]
    assert rt.store.last_committed() == 2
    assert _views(rt) == _expected(Counter({(1, "a"): 1, (2, "b"): 1}))
