"""Spark SQL's time windows in sql nodes: ``GROUP BY window(ts, size[, slide])``.

The SQL form lowers to the same ``window_assign`` + aggregate as a YAML ``aggregate.window``: on a
random event stream (out of order inside the lateness, late rows, deletes) run in-process step
by step, each SQL view equals its YAML twin and DuckDB's from-scratch answer over the rows that
were not late, at every step; Spark itself, running the node's query on the integrated input,
gives the same rows (so the semantics, and the column names, are Spark's). Refusals name file,
node and query line.
"""
from __future__ import annotations

import random
import re
from collections import Counter

import pyarrow as pa
import pytest

from spark_jobs.ir.bounds import state_bounds
from spark_jobs.ir.compile import compile_spec
from spark_jobs.ir.explain import explain_text
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.event_time import committed_watermark
from spark_jobs.runtime.step import run_step
from spark_jobs.spec import load_circuit_text
from spark_jobs.spec.columns import output_columns
from spark_jobs.spec.errors import CircuitError
from tests.engines import output_delta
from tests.event_streams import EventSource, integrate, naive, same_bags, step_config, write_change
from tests.test_windows import SCHEMA, STEP_MIN, oracle

QUERIES = {
    "sql_tumbling": "SELECT window.start AS ws, window.end AS we, user_id, count(*) AS n, sum(amount) AS total "
                    "FROM clicks WHERE amount > 0 GROUP BY window(ts, '30 minutes'), user_id",
    "sql_sliding": "SELECT window.start, window.end, user_id, count(*) AS n, max(amount) AS top "
                   "FROM clicks GROUP BY window(ts, '1 hour', '20 minutes'), user_id",
    "sql_having": "SELECT window.end AS closes, count(*) * 10 AS n10, min(amount) AS low FROM clicks "
                  "GROUP BY window(ts, '15 minutes') HAVING count(*) > 1",
}
CIRCUIT = """
name: sql_windows
inputs:
  clicks:
    schema: {user_id: long, ts: timestamp, amount: long}
    source: {kind: changes, path: inbox/clicks, format: parquet}
    time: {column: ts, lateness: "20 minutes"}
nodes:
  positive: {op: filter, input: clicks, where: "amount > 0"}
  yaml_tumbling: {op: aggregate, input: positive, group_by: [user_id], window: {column: ts, size: "30 minutes"},
                  aggregates: {n: "count(*)", total: "sum(amount)"}}
  yaml_sliding: {op: aggregate, input: clicks, group_by: [user_id],
                 window: {column: ts, size: "1 hour", slide: "20 minutes"}, aggregates: {n: "count(*)", top: "max(amount)"}}
""" + "".join(f"  {name}:\n    op: sql\n    query: \"{query}\"\n" for name, query in QUERIES.items()) + """
outputs: [yaml_tumbling, yaml_sliding, sql_tumbling, sql_sliding, sql_having]
"""
TWINS = {"sql_tumbling": "yaml_tumbling", "sql_sliding": "yaml_sliding"}
ORACLE = {  # DuckDB over the windowed accepted rows (tests/test_windows.py's oracle)
    "sql_tumbling": (30, 30, "SELECT ws, we, user_id, count(*), sum(amount) FROM w WHERE amount > 0 GROUP BY ALL"),
    "sql_sliding": (60, 20, "SELECT ws, we, user_id, count(*), max(amount) FROM w GROUP BY ALL"),
    "sql_having": (15, 15, "SELECT we, count(*) * 10, min(amount) FROM w GROUP BY ws, we HAVING count(*) > 1"),
}


def test_sql_windows_equal_yaml_windows_duckdb_and_spark(spark, tmp_path):
    """36 in-process steps; then Spark's own answer to each query on the integrated input."""
    path = tmp_path / "w.yaml"
    path.write_text(CIRCUIT)
    root = tmp_path / "data"
    rt = open_circuit(str(path), step_config(root, "arrow"))
    events = EventSource(random.Random(11), STEP_MIN, counts=(0, 3, 6, 9), backs=(0, 1, 5, 12, 19, 30, 45),
                         keys=3, values=(-5, 1, 2, 7, 40), deletes=(0, 0, 1, 2))
    views = {name: Counter() for name in (*QUERIES, *TWINS.values())}
    late = 0
    for t in range(1, 37):
        change = events.step(t, committed_watermark(rt.store.manifest(), "clicks").watermark_us)
        late += events.late
        write_change(str(root), "clicks", t, SCHEMA, change)
        run_step(rt)
        for name, bag in views.items():
            integrate(bag, output_delta(rt, name)[0])
        expected = oracle(events.accepted, ORACLE)
        for name in QUERIES:
            same_bags(views[name], expected[name], f"step {t} {name} vs DuckDB")
        for sql, yaml in TWINS.items():
            same_bags(views[sql], +views[yaml], f"step {t} {sql} vs {yaml}")
    assert late > 5 and sum(views["sql_having"].values()) > 3  # late rows, and HAVING kept some windows
    assert rt.store.manifest().traces[_aggregate_of(rt, "sql_sliding")].dropped_below  # bounded by the watermark

    rows = [r for r, w in events.accepted.items() for _ in range(w)]
    frame = spark.createDataFrame(pa.table({"user_id": pa.array([r[0] for r in rows], pa.int64()),
                                            "ts": pa.array([r[1] for r in rows], pa.timestamp("us", tz="UTC")),
                                            "amount": pa.array([r[2] for r in rows], pa.int64())}).to_pandas())
    frame.createOrReplaceTempView("clicks")
    for name in ("sql_tumbling", "sql_sliding"):  # a tumbling and a sliding window: Spark's own semantics
        answer = spark.sql(QUERIES[name])
        assert tuple(answer.columns) == output_columns(load_circuit_text(CIRCUIT))[name]
        same_bags(views[name], Counter(tuple(naive(v) for v in r) for r in answer.collect()), f"Spark {name}")


def _aggregate_of(rt, view: str) -> str:
    """The id of the aggregate an sql view's query lowered to."""
    return next(n.id for n in rt.compiled.incremental.nodes.values()
                if n.origin == view and n.op.startswith("aggregate") and n.id in rt.store.manifest().traces)


def test_explain_shows_the_window_assignment_and_the_bound():
    spec = load_circuit_text(CIRCUIT)
    assert output_columns(spec)["sql_sliding"] == ("start", "end", "user_id", "n", "top")  # Spark's names
    assert output_columns(spec)["sql_tumbling"] == ("ws", "we", "user_id", "n", "total")
    compiled = compile_spec(spec, output_columns(spec))
    text = explain_text(compiled.incremental)
    assert re.search(r"sql_sliding\.window1 +window \(window_assign\)", text), text
    bounds = state_bounds(compiled.incremental)
    sliding = next(b for k, b in bounds.items() if k.startswith("sql_sliding.aggregate"))
    assert sliding.describe() == "drops rows with window_end <= watermark(clicks)"  # as the YAML form's
    assert sliding.thresholds({"clicks": None}) is None
    # the same IR as the YAML twin: window_assign with the same parameters
    windows = {n.origin: n for n in compiled.query.nodes.values() if n.op == "window_assign"}
    for sql, yaml in TWINS.items():
        assert {k: windows[sql].param(k) for k in ("column", "size_us", "slide_us")} == \
            {k: windows[yaml].param(k) for k in ("column", "size_us", "slide_us")}


HEAD = CIRCUIT.split("nodes:")[0] + "nodes:\n  v:\n    op: sql\n    query: |\n      SELECT count(*) AS n\n"


@pytest.mark.parametrize("group_by, says, col", [
    ("window(ts, size), user_id", "the size of window(ts, size) must be a string literal duration", 33),
    ("window(ts, '10 minutes', '1 hour')", "the slide (1 hour) is longer than the size (10 minutes)", 47),
    ("window(ts, '1 hour', '15 minutes', '5 minutes')", "a start offset (the fourth argument) is not supported",
     57),
    ("window(user_id, '1 hour')", "the time of window(...): 'user_id' has type long; event time needs a timestamp",
     29),
    ("window(ts + interval 1 hour, '1 hour')", "must be a timestamp column of the FROM clause", 29),
    ("window(ts, '1 month')", "months and years have no fixed length", 33),
    ("window(ts, '1 hour'), window(ts, '2 hours')", "one time window per query", 44),
    ("window(ts, '1 hour', '1 second')", "each row would be counted in 3600 windows", 43),
    ("window(ts)", "expected window(time column, size) or window(time column, size, slide)", 22),
    ("window(ts, '1 hour') AS w", "a GROUP BY item cannot be named", 43),
])
def test_malformed_sql_windows_are_refused_with_file_node_and_line(group_by, says, col):
    with pytest.raises(CircuitError) as err:
        load_circuit_text(HEAD + f"      FROM clicks GROUP BY {group_by}\noutputs: [v]\n", "s.yaml")
    assert f"s.yaml:13: node 'v': query line 2, column {col}: " in str(err.value), str(err.value)
    assert says in str(err.value), str(err.value)


@pytest.mark.parametrize("query, says", [
    ("SELECT window, count(*) AS n FROM clicks GROUP BY window(ts, '1 hour')",
     "query line 1, column 8: selecting the whole window struct is not supported: select window.start and window.end"),
    ("SELECT window(ts, '1 hour') AS w FROM clicks",
     "query line 1, column 8: window(...) over time in the SELECT list: a time window is supported only as a "
     "GROUP BY item"),
    ("SELECT window.start AS ws FROM clicks GROUP BY user_id", "window.start"),
])
def test_time_windows_outside_group_by_are_refused(query, says):
    with pytest.raises(CircuitError) as err:
        load_circuit_text(CIRCUIT.split("nodes:")[0] + f"nodes:\n  v:\n    op: sql\n    query: \"{query}\"\n"
                          "outputs: [v]\n", "s.yaml")
    assert "s.yaml:11: node 'v': " in str(err.value) and says in str(err.value), str(err.value)
