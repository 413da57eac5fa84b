"""Event time on inputs: durations, watermarks, late rows dropped and counted or refused.

Pure parts (durations, the watermark rule, validation messages) run without Spark; the steps
run the real ``dbsp step`` code path (``run_step``) and the DAG's tasks on local Spark with
Parquet files, and compare every view with a recompute over the rows that were not late.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.config import load_config
from spark_jobs.runtime.event_time import StepClock, Watermark, committed_watermark, micros
from spark_jobs.spec import load_circuit_text
from spark_jobs.spec.errors import CircuitError
from spark_jobs.spec.time import (DurationError, WindowSpec, format_duration, parse_duration,
                                  parse_retention, retention_settings)

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
MIN = 60_000_000


def test_durations():
    assert parse_duration("10 minutes") == 10 * MIN
    assert parse_duration("1 hour 30 minutes") == 90 * MIN
    assert parse_duration("90s") == 90_000_000
    assert parse_duration("0 seconds") == 0
    assert parse_duration("2 weeks") == 14 * 24 * 60 * MIN
    assert format_duration(90 * MIN) == "90 minutes" and format_duration(60 * MIN) == "1 hour"
    for bad, says in (("10 minuts", "unknown unit 'minuts'"), ("1 month", "no fixed length"),
                      ("ten minutes", "cannot read"), ("", "expected a duration"), (10, "expected a duration")):
        with pytest.raises(DurationError, match=says):
            parse_duration(bad)
    assert parse_retention("100 timesteps").timesteps == 100
    assert parse_retention("7 days").age_us == 7 * 24 * 60 * MIN
    assert parse_retention("forever").forever
    settings, problems = retention_settings({"view_deltas": "0 timesteps", "inputs": "3 days"})
    assert settings.inputs.age_us == 3 * 24 * 60 * MIN and settings.view_deltas is None
    assert problems == [("view_deltas", "retention of view deltas: '0 timesteps': keep at least 1 timestep")]


def test_windows_of_a_time():
    tumbling = WindowSpec("ts", 60 * MIN, 60 * MIN)
    assert tumbling.windows_of(90 * MIN) == [(60 * MIN, 120 * MIN)]
    assert tumbling.windows_of(60 * MIN) == [(60 * MIN, 120 * MIN)]  # [start, end)
    sliding = WindowSpec("ts", 60 * MIN, 15 * MIN)
    assert sliding.windows_of(61 * MIN) == [(k * 15 * MIN, k * 15 * MIN + 60 * MIN) for k in (1, 2, 3, 4)]
    assert sliding.windows_of(-1) == [(k * 15 * MIN, k * 15 * MIN + 60 * MIN) for k in (-4, -3, -2, -1)]
    odd = WindowSpec("ts", 10, 4)  # size not a multiple of the slide: 2 or 3 windows per time
    for ts in range(-20, 20):
        assert odd.windows_of(ts) == [(s, s + 10) for s in range(-40, 40, 4) if s <= ts < s + 10]


def test_watermark_never_goes_back():
    w = Watermark().advanced(10 * MIN, 100 * MIN, 0)
    assert (w.max_us, w.watermark_us) == (100 * MIN, 90 * MIN)
    w = w.advanced(10 * MIN, 95 * MIN, 2)  # an older batch: the max stays
    assert (w.max_us, w.watermark_us, w.late_total) == (100 * MIN, 90 * MIN, 2)
    w = w.advanced(30 * MIN, 110 * MIN, 0)  # lateness raised: the watermark does not move back
    assert (w.max_us, w.watermark_us) == (110 * MIN, 90 * MIN)
    assert w.advanced(30 * MIN, None, 0) == w
    assert Watermark.from_meta(w.to_meta()) == w


CIRCUIT = """
name: clicks_per_user
inputs:
  clicks:
    schema: {user_id: long, ts: timestamp, page: string}
    source: {kind: changes, path: inbox/clicks, format: parquet}
    time: {column: ts, lateness: "10 minutes"%(on_late)s}
  users:
    schema: {user_id: long, name: string}
    source: {kind: changes, path: inbox/users, format: parquet}
nodes:
  named: {op: join, left: clicks, right: users, on: [user_id]}
  per_user: {op: aggregate, input: named, group_by: [name], aggregates: {n: "count(*)", last: "max(ts)"}}
outputs: [per_user]
"""


def test_validation_messages():
    bad = CIRCUIT % {"on_late": ""}
    bad = bad.replace('lateness: "10 minutes"', 'lateness: "10 minuts"').replace(
        "users:\n    schema: {user_id: long, name: string}\n    source: {kind: changes, path: inbox/users, format: parquet}",
        "users:\n    schema: {user_id: long, name: string}\n    source: {kind: snapshots, path: snap/users}\n"
        "    time: {column: name, lateness: 1 hour}")
    with pytest.raises(CircuitError) as err:
        load_circuit_text(bad, "c.yaml")
    text = str(err.value)
    assert "c.yaml:7: node 'clicks': time.lateness: '10 minuts': unknown unit 'minuts'" in text
    assert "time.column 'name' has type string; event time needs a timestamp column" in text
    assert "event time needs a source whose rows are events (changes, append_only); a snapshots source" in text
    cdc = (CIRCUIT % {"on_late": ""}).replace(
        "source: {kind: changes, path: inbox/clicks, format: parquet}",
        "key: [user_id]\n    source: {kind: cdc, path: cdc/clicks, format: jsonl}")
    with pytest.raises(CircuitError, match="node 'clicks': event time needs a source whose rows are events "
                                           r"\(changes, append_only\); a cdc source"):
        load_circuit_text(cdc, "c.yaml")
    with pytest.raises(CircuitError, match="expected one of: drop, refuse"):
        load_circuit_text(CIRCUIT % {"on_late": ", on_late: keep"})
    with pytest.raises(CircuitError, match="time.column 'tss' is not a column of the input"):
        load_circuit_text((CIRCUIT % {"on_late": ""}).replace("column: ts,", "column: tss,"))



def _write(folder: str, name: str, rows: list[tuple], schema: pa.Schema) -> None:
    os.makedirs(folder, exist_ok=True)
    cols = list(zip(*rows)) if rows else [[] for _ in schema]
    pq.write_table(pa.table([pa.array(c, f.type) for c, f in zip(cols, schema)], schema=schema),
                   os.path.join(folder, name))


CLICK = pa.schema([("user_id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("page", pa.string()),
                   ("_weight", pa.int64())])
USER = pa.schema([("user_id", pa.int64()), ("name", pa.string())])


def _recompute(accepted: Counter, users: dict[int, str]) -> Counter:
    """per_user over the clicks that were not late (a bag), as SQL would compute it."""
    n: Counter = Counter()
    last: dict[str, datetime] = {}
    for (uid, ts, _page), w in accepted.items():
        if w and uid in users:
            name, ts = users[uid], ts.replace(tzinfo=None)  # Spark gives naive UTC times
            n[name] += w
            last[name] = max(last.get(name, ts), ts)
    return Counter({(name, n[name], last[name]): 1 for name in n if n[name]})


def _view(rt, view: str) -> Counter:
    from tests import oracle

    return oracle.view_counter(rt, view)


def _open(tmp_path, on_late: str = ""):
    from spark_jobs.runtime.circuit import CircuitRuntime, compile_file

    path = tmp_path / "c.yaml"
    path.write_text(CIRCUIT % {"on_late": on_late})
    config = load_config(data_root=str(tmp_path / "data"))
    return CircuitRuntime(config, compile_file(str(path)), str(path))


def test_late_rows_are_dropped_counted_and_recorded(spark, tmp_path, capsys):
    """Out-of-order batches: rows within the lateness are applied, rows below the watermark are
    dropped (inserts and deletes alike), counted exactly in the step summary, the quality report
    and the manifest; the view equals a recompute over the accepted rows at every step. Step 4
    runs through the CLI (`dbsp step`), whose summary says how many rows were late."""
    from spark_jobs.cli.main import main
    from spark_jobs.runtime.step import run_step

    rt = _open(tmp_path)
    inbox = str(tmp_path / "data" / "inbox")
    users = {1: "ann", 2: "bob", 3: "cy"}
    _write(f"{inbox}/users", "u.parquet", list(users.items()), USER)
    at = lambda minutes: T0 + timedelta(minutes=minutes)  # noqa: E731
    batches = [  # (rows, rows expected late)
        ([(1, at(0), "a", 1), (2, at(30), "b", 1), (3, at(5), "c", 2)], 0),  # watermark -> 20
        # 19 < 20; the delete is late too, and so is a delete of a row never inserted: dropped, so
        # the bag check (which judges the rows the circuit sees) does not refuse the step
        ([(1, at(21), "d", 1), (2, at(19), "late", 1), (3, at(5), "c", -1), (2, at(10), "never", -1)], 3),
        ([(1, at(50), "e", 1), (2, at(25), "f", 1)], 0),  # 25 >= 20, then the watermark -> 40
        ([(3, at(39), "g", 1), (3, at(41), "h", 1), (1, at(50), "e", -1)], 1),
        ([], 0),
    ]
    accepted: Counter = Counter()
    total_late = 0
    for t, (rows, late) in enumerate(batches, start=1):
        if rows:
            _write(f"{inbox}/clicks", f"b{t}.parquet", rows, CLICK)
        before = committed_watermark(rt.store.manifest(), "clicks").watermark_us
        if t == 4:
            capsys.readouterr()
            assert main(["step", str(tmp_path / "c.yaml"), "--data-root", str(tmp_path / "data")]) == 0
            note = capsys.readouterr().out
        else:
            report = run_step(rt)
            note = next(r for r in report.inputs if r.name == "clicks").note
        for uid, ts, page, w in rows:
            if before is None or micros(ts) >= before:
                accepted[(uid, ts, page)] += w
        total_late += late
        assert (f"{late} late row(s) dropped" in note) == bool(late), note
        meta = rt.store.manifest().inputs["clicks"]["event_time"]
        assert meta["late_inserted"] + meta["late_deleted"] == late and meta["late_total"] == total_late
        quality = json.loads(open(tmp_path / "data" / "_dbsp" / "clicks_per_user" / "quality" / f"t{t:012d}.json").read())
        line = [r for r in quality["results"] if r["name"] == "dbsp_late_rows"]
        assert len(line) == 1 and line[0]["success"] == (late == 0)
        assert line[0]["details"]["late_inserted"] + line[0]["details"]["late_deleted"] == late
        assert _view(rt, "per_user") == _recompute(accepted, users), f"timestep {t}"
    meta = rt.store.manifest().inputs["clicks"]["event_time"]
    assert meta["watermark"] == "2024-01-01T00:40:00Z" and meta["max_event_time"] == "2024-01-01T00:50:00Z"
    assert "event_time" not in rt.store.manifest().inputs.get("users", {})


def test_late_rows_refused_by_policy_commit_nothing(spark, tmp_path):
    from spark_jobs.executor.sources import InputRefused
    from spark_jobs.runtime.step import run_step

    rt = _open(tmp_path, ", on_late: refuse")
    inbox = str(tmp_path / "data" / "inbox")
    _write(f"{inbox}/users", "u.parquet", [(1, "ann")], USER)
    _write(f"{inbox}/clicks", "b1.parquet", [(1, T0 + timedelta(minutes=30), "a", 1)], CLICK)
    run_step(rt)
    _write(f"{inbox}/clicks", "b2.parquet", [(1, T0 + timedelta(minutes=25), "ok", 1)], CLICK)
    _write(f"{inbox}/clicks", "b3.parquet", [(1, T0 + timedelta(minutes=3), "x", 1),
                                             (1, T0 + timedelta(minutes=1), "y", 1)], CLICK)
    with pytest.raises(InputRefused) as err:
        run_step(rt)
    assert len(err.value.problems) == 1
    path, reason = err.value.problems[0]
    assert path.endswith("b3.parquet")
    assert "2 row(s) arrived late (on_late: refuse): ts 2024-01-01T00:01:00Z is below the watermark " \
           "2024-01-01T00:20:00Z" in reason
    assert rt.store.last_committed() == 1
    # a DAG run refuses the same files the same way, in the task that reads them
    from spark_jobs.runtime.timestep import run_task

    run_task(rt, "plan", "dag")
    with pytest.raises(InputRefused) as dag:
        run_task(rt, "stages", "dag")
    assert dag.value.problems == err.value.problems
    assert rt.store.last_committed() == 1


@pytest.mark.parametrize("tasks", ["per_stage", "per_step"])
def test_dag_tasks_drop_late_rows_and_carry_the_watermark(spark, tmp_path, tasks):
    """The same rules through a DAG run's tasks (plan, the stages one task each or all in one,
    check, commit): late rows counted in the stage's summary, the quality report and the commit
    summary; the watermark carried in the manifest; retention applied after the commit, and a
    full refresh planned after it refused, as `dbsp step` does."""
    from spark_jobs.orchestration.logs import commit_lines, stage_lines
    from spark_jobs.runtime.circuit import CircuitRuntime, compile_file
    from spark_jobs.runtime.inputs import CannotRebuild
    from spark_jobs.runtime.stages import stage_graph
    from spark_jobs.runtime.timestep import run_task

    path = tmp_path / "c.yaml"
    path.write_text(CIRCUIT % {"on_late": ""} + 'settings:\n  retention: {inputs: "1 timesteps"}\n')
    rt = CircuitRuntime(load_config(data_root=str(tmp_path / "data")), compile_file(str(path)), str(path))
    inbox = str(tmp_path / "data" / "inbox")
    _write(f"{inbox}/users", "u.parquet", [(1, "ann")], USER)
    for t, rows in enumerate(([(1, T0 + timedelta(minutes=30), "a", 1)],
                              [(1, T0 + timedelta(minutes=5), "late", 1), (1, T0 + timedelta(minutes=40), "b", 1)]),
                             start=1):
        _write(f"{inbox}/clicks", f"b{t}.parquet", rows, CLICK)
        run = f"run{t}"
        run_task(rt, "plan", run)
        if tasks == "per_step":
            stages = run_task(rt, "stages", run)["stages"]
        else:
            stages = [run_task(rt, "stage", run, stage.name) for stage in stage_graph(rt.compiled)]
        run_task(rt, "check", run)
        done = run_task(rt, "commit", run)
    seen = [s["inputs"]["clicks"] for s in stages if "clicks" in s.get("inputs", {})]
    assert len(seen) == 1 and seen[0]["late_rows"] == 1
    assert any("1 late row(s) dropped" in line for s in stages for line in stage_lines(s))
    assert done["late_rows"] == {"clicks": 1}
    assert "note: input clicks: 1 late row(s) dropped (1 inserts, 0 deletes); watermark 2024-01-01T00:30:00Z" \
        in commit_lines(done)
    quality = json.loads(open(tmp_path / "data" / "_dbsp" / "clicks_per_user" / "quality" / "t000000000002.json").read())
    line = [r for r in quality["results"] if r["name"] == "dbsp_late_rows"]
    assert len(line) == 1 and not line[0]["success"] and line[0]["details"]["late_inserted"] == 1
    meta = rt.store.manifest().inputs["clicks"]["event_time"]
    assert (meta["late_inserted"], meta["watermark"]) == (1, "2024-01-01T00:30:00Z")
    assert _view(rt, "per_user") == Counter({("ann", 2, datetime(2024, 1, 1, 0, 40)): 1})
    clock = StepClock(rt.compiled.spec.inputs, rt.store.manifest())
    assert clock.watermark("clicks") == int((T0 + timedelta(minutes=30)).timestamp() * 1_000_000)
    # retention after the commit: the files consumed before the last timestep are gone
    assert "consumed input file(s)" in done["retention"]
    assert os.listdir(f"{inbox}/clicks") == ["b2.parquet"] and not os.listdir(f"{inbox}/users")
    with pytest.raises(CannotRebuild, match="input 'clicks': 1 consumed change file"):
        run_task(rt, "plan", "refresh", mode="full_refresh")
