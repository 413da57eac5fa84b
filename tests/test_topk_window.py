"""A ``topk`` with a ``window`` (Nexmark q7: the bids at the highest price per window) over a random
event stream with deletes, out of order and late rows: after every step each view equals DuckDB's
window query over the accepted rows, whether the step ran in-process or on Spark (each engine
reading the state the other wrote), and the state stays within the open windows.

The stream deletes rows at random, so a window's current maximum (and one of several tied maxima)
is deleted now and then: the top-k then reads that window's rows of its integral, and only then.
"""
from __future__ import annotations

import random
from collections import Counter

import pytest

from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.event_time import committed_watermark
from spark_jobs.runtime.step import run_step
from spark_jobs.spec import load_circuit_text
from spark_jobs.spec.errors import CircuitError
from tests.engines import output_delta
from tests.event_streams import EventSource, integrate, same_bags, step_config, write_change
from tests.test_windows import SCHEMA, STEP_MIN, oracle

CIRCUIT = """
name: topk_windows
inputs:
  clicks:
    schema: {user_id: long, ts: timestamp, amount: long}
    source: {kind: changes, path: inbox/clicks, format: parquet}
    time: {column: ts, lateness: "20 minutes"}
nodes:
  highest:
    op: topk
    input: clicks
    window: {column: ts, size: "30 minutes"}
    order_by: ["amount DESC"]
    k: 1
    rank: rank
  top2:
    op: topk
    input: clicks
    window: {column: ts, size: "1 hour", slide: "20 minutes"}
    partition_by: [user_id]
    order_by: ["amount DESC"]
    k: 2
    rank_column: n
outputs: [highest, top2]
"""

VIEWS = {  # DuckDB over the accepted rows: (size, slide) in minutes, the query on table w (ws, we, clicks.*)
    "highest": (30, 30, "SELECT ws, we, user_id, ts, amount FROM (SELECT *, rank() OVER (PARTITION BY ws, we "
                        "ORDER BY amount DESC) AS r FROM w) WHERE r <= 1"),
    "top2": (60, 20, "SELECT ws, we, user_id, ts, amount, CAST(r AS INTEGER) FROM (SELECT *, row_number() OVER "
                     "(PARTITION BY ws, we, user_id ORDER BY amount DESC, ts ASC NULLS FIRST) AS r FROM w) "
                     "WHERE r <= 2"),
}


def test_windowed_topk_equals_duckdb_on_both_engines_and_stays_bounded(spark, tmp_path, monkeypatch):
    """24 steps, step 12 on Spark (reading the state Arrow wrote, and Arrow then its); ties
    (amount 7 twice) and deletes of live rows, some of them a window's top (the Arrow kernel then reads that
    window's rows of the integral)."""
    from spark_jobs.executor.kernels import topk as kernels

    reads: list[int] = []
    integral_rows = kernels._integral_rows
    monkeypatch.setattr(kernels, "_integral_rows", lambda s, integral, delta, part: reads.append(delta.num_rows)
                        or integral_rows(s, integral, delta, part))
    path = tmp_path / "topk.yaml"
    path.write_text(CIRCUIT)
    root = tmp_path / "data"
    rt = open_circuit(str(path), step_config(root, "arrow"))
    events = EventSource(random.Random(3), STEP_MIN, counts=(0, 3, 6, 9), backs=(0, 1, 5, 12, 19, 30, 45),
                         keys=3, values=(-5, 1, 2, 7, 7, 40), deletes=(0, 1, 2, 3))
    integrated = {v: Counter() for v in VIEWS}
    peak = 0
    for t in range(1, 25):
        mark = committed_watermark(rt.store.manifest(), "clicks").watermark_us
        write_change(str(root), "clicks", t, SCHEMA, events.step(t, mark))
        engine = "spark" if t == 12 else "arrow"  # one Spark step: CI time
        if engine != rt.config.policy.engine:
            rt = open_circuit(str(path), step_config(root, engine))
        report = run_step(rt)
        assert report.engine == engine, (t, report.engine_reason)
        expected = oracle(events.accepted, VIEWS)
        for view in VIEWS:
            integrate(integrated[view], output_delta(rt, view)[0])
            same_bags(integrated[view], expected[view], f"step {t} {view}")
        traces = rt.store.manifest().traces
        peak = max(peak, traces["I(highest.window)"].rows if "I(highest.window)" in traces else 0)
    # the integral holds the rows of the windows a change can still reach, not the history
    assert len(events.accepted) > 1.3 * peak, (len(events.accepted), peak)
    assert reads  # a deleted top was read back from the integral, its window's rows only


@pytest.mark.parametrize("window, says", [
    ('{column: amount, size: "30 minutes"}', "window column 'amount' has type long"),
    ('{column: nope, size: "30 minutes"}', "window column 'nope' is not a column"),
    ('{column: ts, size: "0 minutes"}', "window.size must be longer than 0"),
])
def test_a_bad_topk_window_is_refused_with_its_line(window, says):
    text = CIRCUIT.replace('window: {column: ts, size: "30 minutes"}', f"window: {window}")
    with pytest.raises(CircuitError) as err:
        load_circuit_text(text, "c.yaml")
    assert says in str(err.value) and "highest" in str(err.value), str(err.value)


def test_a_topk_window_adds_the_window_columns_and_partitions_by_them():
    from spark_jobs.ir.bounds import state_bounds
    from spark_jobs.ir.compile import compile_spec
    from spark_jobs.spec.columns import output_columns

    spec = load_circuit_text(CIRCUIT, "c.yaml")
    compiled = compile_spec(spec, output_columns(spec))
    query = compiled.query
    node = query["top2"]
    assert node.param("partition_by") == ("window_start", "window_end", "user_id")
    assert query[node.inputs[0]].op == "window_assign"
    assert node.columns[:3] == ("window_start", "window_end", "user_id") and node.columns[-1] == "n"
    bounds = state_bounds(compiled.incremental)  # closed windows leave the state (the top-k's and its integral)
    for trace in ("highest", "I(highest.window)", "top2", "I(top2.window)"):
        assert bounds[trace].describe() == "drops rows with window_end <= watermark(clicks)", trace
