"""Windowed aggregates (``aggregate.window``) and the state bound that drops closed windows.

A random event stream of 120 timesteps runs through ``run_step`` in-process (Arrow, with the
watermark and late rows as on Spark), out of order inside the lateness, with late rows and
deletes: after every step each view equals DuckDB's from-scratch query over the rows that were
not late, late rows are counted exactly, and the windowed aggregates' committed state stays
within a constant factor of one window's worth of rows. A few steps run on Spark (its kernels,
its lateness and its store rewrites) and must give the same views.
"""
from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.ir.bounds import state_bounds
from spark_jobs.ir.explain import explain_text
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.event_time import committed_watermark, micros
from spark_jobs.runtime.step import run_step
from spark_jobs.spec import load_circuit_text
from spark_jobs.spec.errors import CircuitError
from tests.engines import output_delta
from tests.event_streams import MIN, T0, EventSource, integrate, naive, same_bags, step_config, write_change
LATENESS_MIN = 20
STEP_MIN = 4  # event time advances about this much per timestep

CIRCUIT = """
name: windows
inputs:
  clicks:
    schema: {user_id: long, ts: timestamp, amount: long}
    source: {kind: changes, path: inbox/clicks, format: parquet}
    time: {column: ts, lateness: "20 minutes"}
nodes:
  recent: {op: filter, input: clicks, where: "amount > 0"}
  tumbling:
    op: aggregate
    input: recent
    group_by: [user_id]
    window: {column: ts, size: "30 minutes"}
    aggregates: {n: "count(*)", total: "sum(amount)"}
  sliding:
    op: aggregate
    input: clicks
    group_by: [user_id]
    window: {column: ts, size: "1 hour", slide: "20 minutes"}
    aggregates: {n: "count(*)", top: "max(amount)"}
  overall:
    op: aggregate
    input: clicks
    group_by: []
    window: {column: ts, size: "15 minutes"}
    aggregates: {n: "count(*)", low: "min(amount)"}
outputs: [tumbling, sliding, overall]
"""

VIEWS = {  # DuckDB over the accepted rows: (size, slide) in minutes, the query on table w
    "tumbling": (30, 30, "SELECT ws, we, user_id, count(*), sum(amount) FROM w WHERE amount > 0 GROUP BY ALL"),
    "sliding": (60, 20, "SELECT ws, we, user_id, count(*), max(amount) FROM w GROUP BY ALL"),
    "overall": (15, 15, "SELECT ws, we, count(*), min(amount) FROM w GROUP BY ALL"),
}
SCHEMA = pa.schema([("user_id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("amount", pa.int64()),
                    ("_weight", pa.int64())])


def oracle(accepted: Counter, views: dict = VIEWS) -> dict[str, Counter]:
    """Every view from scratch: windows as Spark's window() defines them, in plain SQL (``views``:
    name -> (size, slide) in minutes, the query on table w of the windowed rows ws, we, clicks.*)."""
    con = duckdb.connect()
    rows = [r for r, w in accepted.items() for _ in range(w)]
    con.register("clicks_arrow", pa.table({"user_id": pa.array([r[0] for r in rows], pa.int64()),
                                           "ts": pa.array([r[1] for r in rows], pa.timestamp("us", tz="UTC")),
                                           "amount": pa.array([r[2] for r in rows], pa.int64())}))
    out = {}
    for view, (size, slide, query) in views.items():
        size_us, slide_us = size * MIN, slide * MIN
        con.execute(f"""CREATE OR REPLACE TEMP TABLE w AS
            SELECT make_timestamp(k * {slide_us}) AS ws, make_timestamp(k * {slide_us} + {size_us}) AS we, c.*
            FROM clicks_arrow c,
                 unnest(range((floor((epoch_us(ts) - {size_us}) / {slide_us}) + 1)::BIGINT,
                              (floor(epoch_us(ts) / {slide_us}) + 1)::BIGINT)) AS t(k)""")
        out[view] = Counter(tuple(naive(v) for v in r) for r in con.execute(query).fetchall())
    return out


def _run(tmp_path, steps: int, engine_of, check_every: int = 1, seed: int = 7):
    path = tmp_path / "windows.yaml"
    path.write_text(CIRCUIT)
    root = tmp_path / "data"
    rt = open_circuit(str(path), step_config(root, "arrow"))
    # 30/45 minutes back: usually late
    events = EventSource(random.Random(seed), STEP_MIN, counts=(0, 3, 6, 9), backs=(0, 1, 5, 12, 19, 30, 45),
                         keys=4, values=(-5, 1, 2, 7, 7, 40), deletes=(0, 0, 1, 2))
    integrated = {v: Counter() for v in VIEWS}
    late_total, peak = 0, {}
    for t in range(1, steps + 1):
        mark = committed_watermark(rt.store.manifest(), "clicks").watermark_us
        change = events.step(t, mark)
        late = events.late
        write_change(str(root), "clicks", t, SCHEMA, change)
        engine = engine_of(t)
        if engine != rt.config.policy.engine:
            rt = open_circuit(str(path), step_config(root, engine))
        report = run_step(rt)
        assert report.engine == engine, (t, report.engine_reason)
        clicks = next(r for r in report.inputs if r.name == "clicks")
        late_total += late
        meta = rt.store.manifest().inputs["clicks"]["event_time"]
        assert meta["late_inserted"] + meta["late_deleted"] == late, t
        assert meta["late_total"] == late_total
        assert (f"{late} late row(s) dropped" in clicks.note) == bool(late), clicks.note
        for view in VIEWS:
            integrate(integrated[view], output_delta(rt, view)[0])
        if t % check_every == 0 or t == steps:
            expected = oracle(events.accepted)
            for view in VIEWS:
                same_bags(integrated[view], expected[view], f"step {t} {view}")
        traces = rt.store.manifest().traces
        for trace in ("tumbling", "sliding", "overall", "I(sliding.window)"):
            peak[trace] = max(peak.get(trace, 0), traces[trace].rows if trace in traces else 0)
    return rt, events, peak, late_total


def test_random_event_stream_equals_duckdb_and_state_stays_bounded(tmp_path):
    """120 in-process steps. One window's worth of state: the groups (4 users) of the windows a
    row can still reach (lateness / slide + size / slide of them); the view keeps every window."""
    rt, events, peak, late_total = _run(tmp_path, 120, lambda t: "arrow", check_every=2)
    assert late_total > 20  # the stream did have late rows (inserts and deletes)
    span = 120 * STEP_MIN  # minutes of event time: 16 tumbling windows, 24 sliding ones
    # open windows: (lateness + size) / slide, + 1 for the current one, a group per user, and
    # the deltas compaction has not folded yet (at most as many again): a constant
    bound = {"tumbling": 4 * ((LATENESS_MIN + 30) // 30 + 2), "sliding": 4 * ((LATENESS_MIN + 60) // 20 + 2),
             "overall": (LATENESS_MIN + 15) // 15 + 2}
    for trace, groups in bound.items():
        assert peak[trace] <= 2 * groups, (trace, peak[trace], groups)
    # the integrated input of the max() aggregate: rows of the open windows, not of history
    assert peak["I(sliding.window)"] <= 3 * 9 * 3 * ((LATENESS_MIN + 60) // STEP_MIN), peak
    assert len(events.accepted) > 3 * peak["I(sliding.window)"] / 3  # history outgrew the state
    # the views keep every closed window
    view_rows = rt.store.manifest().traces["view:tumbling"].rows
    assert view_rows > peak["tumbling"] and view_rows >= 4 * span // 30 * 0.8


def test_spark_steps_give_the_same_views(spark, tmp_path):
    """Spark on steps 1 and 4, Arrow in between (each reading the state the other wrote): the
    Spark kernels, lateness and bounded rewrite (step 4 compacts with the watermark of step 3)
    agree with DuckDB. Two Spark steps only: CI time."""
    rt = _run(tmp_path, 4, lambda t: "spark" if t in (1, 4) else "arrow")[0]
    assert rt.store.manifest(4).traces["sliding"].dropped_below  # step 4 (Spark) dropped by the bound


def test_bounds_of_the_ir_and_explain():
    from spark_jobs.ir.compile import compile_spec
    from spark_jobs.spec.columns import output_columns

    spec = load_circuit_text(CIRCUIT)
    compiled = compile_spec(spec, output_columns(spec))
    bounds = state_bounds(compiled.incremental)
    assert set(bounds) == {"tumbling", "sliding", "overall", "I(sliding.window)", "I(overall.window)", "I(clicks)"}
    assert bounds["sliding"].describe() == "drops rows with window_end <= watermark(clicks)"
    assert bounds["sliding"].thresholds({"clicks": 10 * MIN}) == (("window_end", 10 * MIN + 1),)
    assert bounds["I(clicks)"].describe() == "drops rows with ts < watermark(clicks)"  # the bag check's
    assert bounds["tumbling"].thresholds({"clicks": None}) is None
    text = explain_text(compiled.incremental)
    assert "bounded by the watermark: drops rows with window_end <= watermark(clicks)" in text
    # no event time: nothing is bounded
    untimed = load_circuit_text(CIRCUIT.replace('    time: {column: ts, lateness: "20 minutes"}\n', ""))
    assert state_bounds(compile_spec(untimed, output_columns(untimed)).incremental) == {}


@pytest.mark.parametrize("window, says, line", [
    ('{column: ts, size: "0 minutes"}', "window.size must be longer than 0", 13),
    ('{column: ts, size: "10 minutes", slide: "1 hour"}', "window.slide (1 hour) is longer than window.size", 13),
    ('{column: user_id, size: "1 hour"}', "window column 'user_id' has type long; event time needs a timestamp", 13),
    ('{column: nope, size: "1 hour"}', "window column 'nope' is not a column of input", 13),
    ('{column: ts, size: "1 month"}', "months and years have no fixed length", 13),
    ('{column: ts, size: "1 hour", slide: "1 second"}', "each row would be counted in that many windows", 13),
])
def test_malformed_windows_are_refused_with_file_node_and_line(window, says, line):
    text = CIRCUIT.replace('    window: {column: ts, size: "30 minutes"}', f"    window: {window}")
    with pytest.raises(CircuitError) as err:
        load_circuit_text(text, "w.yaml")
    assert says in str(err.value)
    assert any(f"w.yaml:{n}: node 'tumbling'" in str(err.value) for n in range(line - 1, line + 2)), str(err.value)


def test_a_window_inside_a_recursive_body_stays_refused():
    text = """
name: rec
inputs:
  e:
    schema: {a: long, b: long, ts: timestamp}
    source: {kind: changes, path: inbox/e, format: parquet}
nodes:
  closure:
    op: recursive
    body:
      step: {op: join, left: closure, right: e, left_on: [b], right_on: [a]}
      hop: {op: select, input: step, columns: {a: a, b: e_b, ts: ts}}
      counted: {op: aggregate, input: hop, group_by: [a, b, ts], aggregates: {n: "count(*)"},
                window: {column: ts, size: "1 hour"}}
      paths: {op: union, inputs: [e, hop]}
    outputs: [paths]
outputs: [closure]
"""
    with pytest.raises(CircuitError, match=r"'window' is not supported inside a recursive body"):
        load_circuit_text(text, "r.yaml")


def test_a_join_of_two_windowed_aggregates_on_their_window_is_bounded():
    """The floor of window_end passes through an aggregate (only touched groups change), so a
    join on it drops each side's closed windows; a computed time column bounds nothing."""
    from spark_jobs.ir.compile import compile_spec
    from spark_jobs.spec.columns import output_columns

    text = CIRCUIT.split("nodes:")[0] + """nodes:
  a: {op: aggregate, input: clicks, group_by: [user_id], window: {column: ts, size: "30 minutes"},
      aggregates: {n: "count(*)"}}
  b: {op: aggregate, input: clicks, group_by: [], window: {column: ts, size: "30 minutes"},
      aggregates: {total: "count(*)"}}
  ab: {op: join, left: a, right: b, on: [window_end]}
  shifted: {op: select, input: clicks, columns: {user_id: user_id, ts: "ts + interval 1 hour"}}
  c: {op: aggregate, input: shifted, group_by: [user_id], window: {column: ts, size: "30 minutes"},
      aggregates: {n: "count(*)"}}
outputs: [ab, c]
"""
    spec = load_circuit_text(text)
    bounds = state_bounds(compile_spec(spec, output_columns(spec)).incremental)
    assert bounds["I(a)"].describe() == bounds["I(b)"].describe() == \
        "drops rows with window_end <= watermark(clicks)"
    assert "c" not in bounds and "I(clicks)" in bounds


def test_dag_tasks_bound_the_state_too(spark, tmp_path):
    """plan / stage / check / commit: the commit task applies the bound with the watermark the
    stage tasks saw (two runs: the second drops the window that closed)."""
    from spark_jobs.runtime.stages import stage_graph
    from spark_jobs.runtime.timestep import run_task

    text = CIRCUIT[:CIRCUIT.index("  sliding:")] + "outputs: [tumbling]\n"
    path = tmp_path / "w.yaml"
    path.write_text(text)
    rt = open_circuit(str(path), step_config(tmp_path / "data", "spark"))
    at = lambda minutes: T0 + timedelta(minutes=minutes)  # noqa: E731
    batches = [Counter({(1, at(10), 5): 1, (2, at(40), 7): 1}),  # watermark -> 20
               Counter({(1, at(75), 5): 1, (1, at(15), 9): 1})]  # 15 < 20: late; watermark -> 55
    view: Counter = Counter()
    for t, change in enumerate(batches, start=1):
        write_change(str(tmp_path / "data"), "clicks", t, SCHEMA, change)
        run_task(rt, "plan", f"run{t}")
        for stage in stage_graph(rt.compiled):
            run_task(rt, "stage", f"run{t}", stage.name)
        run_task(rt, "check", f"run{t}")
        run_task(rt, "commit", f"run{t}")
        integrate(view, output_delta(rt, "tumbling")[0])
    trace = rt.store.manifest().traces["tumbling"]
    assert trace.dropped_below == (("window_end", micros(at(55)) + 1),)
    state = [r for d in trace.dirs for r in pq.read_table(rt.store.layout.abs(d)).to_pylist()]
    assert sorted(naive(r["window_end"]) for r in state) == [naive(at(60)), naive(at(90))]  # [0, 30) is gone
    assert +view == Counter({(naive(at(0)), naive(at(30)), 1, 1, 5): 1, (naive(at(30)), naive(at(60)), 2, 1, 7): 1,
                             (naive(at(60)), naive(at(90)), 1, 1, 5): 1})  # the view keeps the closed window
    assert rt.store.manifest().inputs["clicks"]["event_time"]["late_total"] == 1
