"""Retention of history (``settings.retention``, ``dbsp gc``): old view deltas and manifests are
removed after commits and by ``dbsp gc``, by timesteps or by age; reads of removed history fail
with a reason; the view itself (its whole history) stays right."""
from __future__ import annotations

import os
from collections import Counter
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.config import load_config
from spark_jobs.spec.time import Retention
from spark_jobs.state.retention import Keep, horizon

CIRCUIT = """
name: kept
inputs:
  t:
    schema: {id: long, a: long}
    source: {kind: changes, path: inbox/t, format: parquet}
nodes:
  big: {op: filter, input: t, where: "a > 2"}
outputs: [big]
settings:
  retention: %s
"""


def test_horizon_rules():
    now = datetime(2024, 1, 10, tzinfo=timezone.utc)
    times = [(t, (now - timedelta(days=10 - t)).isoformat()) for t in range(1, 10)]  # t=9 is 1 day old
    assert horizon(Keep(timesteps=3), 9, times, now) == 6
    assert horizon(Keep(), 9, times, now) == 0
    assert horizon(Retention(age_us=int(2.5 * 86400e6)), 9, times, now) == 7  # 3 days old and older
    assert horizon(Retention(age_us=int(86400e6)), 9, times, now) == 8  # never the last one
    assert horizon(Retention(age_us=int(30 * 86400e6)), 9, times, now) == 0


def _open(tmp_path, retention: str):
    from spark_jobs.runtime.circuit import CircuitRuntime, compile_file

    path = tmp_path / "c.yaml"
    path.write_text(CIRCUIT % retention)
    config = load_config(data_root=str(tmp_path / "data"))
    return CircuitRuntime(config, compile_file(str(path)), str(path))


def _write(tmp_path, t: int, rows: list[tuple[int, int, int]]) -> None:
    folder = tmp_path / "data" / "inbox" / "t"
    os.makedirs(folder, exist_ok=True)
    ids, a, w = zip(*rows)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "a": pa.array(a, pa.int64()),
                             "_weight": pa.array(w, pa.int64())}), str(folder / f"b{t:03d}.parquet"))


def _output_timesteps(rt) -> list[int]:
    from spark_jobs.state import layout as L

    top = rt.store.layout.abs(rt.store.layout.output_view_dir("big"))
    return sorted(L.parse_dir_timestep(n) for n in os.listdir(top))


def test_view_deltas_inputs_and_manifests_by_timesteps(spark, tmp_path, capsys):
    """7 steps keeping 3 timesteps of view deltas, 2 of consumed inputs, 2 manifests. Publishing
    crashes at steps 3-6: a gc then keeps the deltas the lagging Delta table still needs, which
    catches up from them at step 7. A full refresh after input files went refuses, saying why."""
    from spark_jobs.cli.main import main
    from spark_jobs.runtime.inputs import CannotRebuild
    from spark_jobs.runtime.retention import apply_retention
    from spark_jobs.runtime.step import run_step
    from spark_jobs.runtime.timestep import run_task
    from spark_jobs.state import failpoints
    from spark_jobs.state.store import TimestepNotRetained
    from tests import oracle

    rt = _open(tmp_path, '{view_deltas: "3 timesteps", inputs: "2 timesteps", manifests: "2 timesteps"}')
    expected: Counter = Counter()
    for t in range(1, 8):
        # a delete of a row whose insert's file retention removed already: the bag check reads the
        # input's integral, which retention never touches
        rows = [(t, 3 + t % 2, 1), (100 + t, 5, 1)] + ([(100 + t - 3, 5, -1)] if t > 3 else [])
        _write(tmp_path, t, rows)
        if 3 <= t <= 6:  # committed, then the publish crashes: the table stays at timestep 2
            with failpoints.armed("before_publish"), pytest.raises(failpoints.InjectedFailure):
                run_step(rt)
        else:
            report = run_step(rt)
        for i, a, w in rows:
            if a > 2:
                expected[(i, a)] += w
        assert oracle.view_counter(rt, "big") == +expected
        if t == 6:  # by the rule, deltas 1..3 may go; the table holds 2, so 3 stays
            gc = apply_retention(rt)
            assert gc.store.held_for_readers == {"big": 2}
            assert _output_timesteps(rt)[0] == 3
    published = report.published.results[0]
    assert (published.before, published.after, published.note) == (2, 7, "")  # caught up from deltas 3..7
    assert rt.store.timesteps() == [6, 7]
    kept = _output_timesteps(rt)
    assert min(kept) > 4 and 7 in kept, kept  # deltas of timesteps <= 7 - 3 are gone
    with pytest.raises(TimestepNotRetained, match="removed the view's deltas up to timestep 4"):
        rt.store.read_output_delta("big", 2)
    with pytest.raises(TimestepNotRetained, match="no longer kept"):
        rt.store.read_view("big", 3)
    assert rt.store.read_output_delta("big", 5) is not None
    # consumed input files read by timesteps <= 7 - 2 are gone (pending ones are never touched)
    assert sorted(os.listdir(tmp_path / "data" / "inbox" / "t")) == ["b006.parquet", "b007.parquet"]
    with pytest.raises(CannotRebuild) as err:
        run_task(rt, "plan", "refresh", mode="full_refresh")
    assert ("retention (settings.retention.inputs) removed input 't': 5 consumed change file(s) of timesteps "
            "up to 5") in str(err.value) and "no input is whole any more" in str(err.value)
    # dbsp gc has nothing left to do, and says so without Spark
    capsys.readouterr()
    code = main(["gc", str(tmp_path / "c.yaml"), "--data-root", str(tmp_path / "data"), "--dry-run"])
    assert code == 0
    out = capsys.readouterr().out
    assert "consumed input files: would remove none" in out and "view deltas: would remove none" in out
    code = main(["show", str(tmp_path / "c.yaml"), "big", "--delta", "--at", "2", "--data-root", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert code == 1 and "no longer kept" in err and "Traceback" not in err, err


def test_full_refresh_refusal_names_what_is_whole():
    from spark_jobs.runtime.inputs import rebuild_refusal
    from spark_jobs.spec import load_circuit_text

    spec = load_circuit_text(CIRCUIT.replace("nodes:", "  dim:\n    schema: {id: long}\n"
                                             "    source: {kind: snapshots, path: snap/dim}\nnodes:") % "{}")
    assert rebuild_refusal(spec.inputs, {}) is None
    assert rebuild_refusal(spec.inputs, {"t": {"files": 0, "through_timestep": 0}}) is None
    text = rebuild_refusal(spec.inputs, {"t": {"files": 3, "through_timestep": 9}})
    assert "input 't': 3 consumed change file(s) of timesteps up to 9" in text
    assert "inputs a full refresh could still rebuild whole: dim" in text


def test_view_deltas_by_age(spark, tmp_path, capsys):
    """An age rule measured from commit times: the manifests carry a timeline of them."""
    from spark_jobs.cli.main import main
    from spark_jobs.runtime.retention import apply_retention
    from spark_jobs.runtime.step import run_step

    rt = _open(tmp_path, '{view_deltas: "2 days"}')
    for t in range(1, 4):
        _write(tmp_path, t, [(t, 5, 1)])
        run_step(rt)
    assert [t for t, _ in rt.store.manifest().timeline] == [1, 2, 3]
    assert _output_timesteps(rt) == [1, 2, 3]  # nothing is 2 days old yet
    later = datetime.now(timezone.utc) + timedelta(days=3)
    dry = apply_retention(rt, dry_run=True, now=later)
    assert sorted(t for t, _ in dry.store.view_deltas.get("big", [])) + sorted(dry.store.kept_listed) != []
    assert _output_timesteps(rt) == [1, 2, 3]
    done = apply_retention(rt, now=later)
    removed = sorted(t for t, _ in done.store.view_deltas.get("big", []))
    assert removed and max(removed) <= 2 and all(t in removed or t in _output_timesteps(rt) for t in (1, 2))
    assert 3 in _output_timesteps(rt)
    capsys.readouterr()
    assert main(["gc", str(tmp_path / "c.yaml"), "--data-root", str(tmp_path / "data"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "kept: retention view_deltas=2 days, inputs=forever, manifests=profile state.keep_timesteps" in out
    assert "would remove" in out
