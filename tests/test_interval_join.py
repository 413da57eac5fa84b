"""Interval joins (``join.within``): pairs whose times differ by at most the range, with state
bounded by the other side's watermark.

A random stream of 110 timesteps on two timed inputs runs through ``run_step`` in-process (out
of order inside the lateness, late rows, deletes): after every other step both joins (with an
equi-key, and without one) equal DuckDB's from-scratch join over the rows that were not late,
late rows are counted exactly, and each side's integral keeps about range + lateness of event
time, not history. Two steps run on Spark and must agree.
"""
from __future__ import annotations

import random
from collections import Counter

import duckdb
import pyarrow as pa
import pytest

from spark_jobs.ir.bounds import state_bounds
from spark_jobs.ir.compile import compile_spec
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.event_time import committed_watermark
from spark_jobs.runtime.step import run_step
from spark_jobs.spec import load_circuit_text
from spark_jobs.spec.columns import output_columns
from spark_jobs.spec.errors import CircuitError
from tests.engines import output_delta
from tests.event_streams import MIN, EventSource, integrate, naive, same_bags, step_config, write_change
RANGE_MIN, LATENESS_MIN, STEP_MIN = 5, 10, 2

CIRCUIT = """
name: near
inputs:
  clicks:
    schema: {lk: long, ts: timestamp, a: long}
    source: {kind: changes, path: inbox/clicks, format: parquet}
    time: {column: ts, lateness: "10 minutes"}
  views:
    schema: {rk: long, vts: timestamp, b: long}
    source: {kind: changes, path: inbox/views, format: parquet}
    time: {column: vts, lateness: "10 minutes"}
nodes:
  keyed: {op: join, left: clicks, right: views, left_on: [lk], right_on: [rk],
          within: {left: ts, right: vts, range: "5 minutes"}}
  any_key: {op: join, left: clicks, right: views, within: {left: ts, right: vts, range: "5 minutes"}}
outputs: [keyed, any_key]
"""
ORACLE = {
    "keyed": "SELECT c.*, v.* FROM clicks c JOIN views v ON c.lk = v.rk AND abs(epoch_us(c.ts) - epoch_us(v.vts)) <= {r}",
    "any_key": "SELECT c.*, v.* FROM clicks c JOIN views v ON abs(epoch_us(c.ts) - epoch_us(v.vts)) <= {r}",
}
SCHEMAS = {
    "clicks": pa.schema([("lk", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("a", pa.int64()),
                         ("_weight", pa.int64())]),
    "views": pa.schema([("rk", pa.int64()), ("vts", pa.timestamp("us", tz="UTC")), ("b", pa.int64()),
                        ("_weight", pa.int64())]),
}


def oracle(accepted: dict[str, Counter]) -> dict[str, Counter]:
    con = duckdb.connect()
    for name, bag in accepted.items():
        rows = [r for r, w in bag.items() for _ in range(w)]
        schema = SCHEMAS[name]
        con.register(f"{name}_arrow", pa.table([pa.array([r[i] for r in rows], schema.field(i).type)
                                                for i in range(3)], names=schema.names[:3]))
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_arrow")
    return {view: Counter(tuple(naive(v) for v in r) for r in con.execute(q.format(r=RANGE_MIN * MIN)).fetchall())
            for view, q in ORACLE.items()}


def _run(tmp_path, steps: int, engine_of, check_every: int = 1):
    path = tmp_path / "near.yaml"
    path.write_text(CIRCUIT)
    root = tmp_path / "data"
    rt = open_circuit(str(path), step_config(root, "arrow"))
    rng = random.Random(11)
    sides = {name: EventSource(rng, STEP_MIN, counts=(0, 2, 4, 6), backs=(0, 1, 3, 6, 9, 15), keys=3,
                               values=range(5), deletes=(0, 0, 1)) for name in ("clicks", "views")}
    integrated = {v: Counter() for v in ORACLE}
    late_total = {n: 0 for n in sides}
    peak = {}
    for t in range(1, steps + 1):
        for name, side in sides.items():
            change = side.step(t, committed_watermark(rt.store.manifest(), name).watermark_us)
            write_change(str(root), name, t, SCHEMAS[name], change)
            late_total[name] += side.late
        engine = engine_of(t)
        if engine != rt.config.policy.engine:
            rt = open_circuit(str(path), step_config(root, engine))
        report = run_step(rt)
        assert report.engine == engine, (t, report.engine_reason)
        for name, side in sides.items():
            meta = rt.store.manifest().inputs[name]["event_time"]
            assert (meta["late_inserted"] + meta["late_deleted"], meta["late_total"]) == (side.late, late_total[name])
        for view in ORACLE:
            integrate(integrated[view], output_delta(rt, view)[0])
        if t % check_every == 0 or t == steps:
            expected = oracle({n: s.accepted for n, s in sides.items()})
            for view in ORACLE:
                same_bags(integrated[view], expected[view], f"step {t} {view}")
        traces = rt.store.manifest().traces
        for trace in ("I(clicks)", "I(views)"):
            peak[trace] = max(peak.get(trace, 0), traces[trace].rows if trace in traces else 0)
    return rt, sides, peak, late_total


def test_random_streams_equal_duckdb_and_state_stays_bounded(tmp_path):
    rt, sides, peak, late_total = _run(tmp_path, 110, lambda t: "arrow", check_every=2)
    assert min(late_total.values()) > 10
    # one side keeps the rows within range + lateness of the other's watermark, plus the steps
    # between two bounded compactions (max(range, lateness) of event time): at most 6 rows a
    # step, (5 + 10 + 10) / 2 + 2 steps of them
    per_step = 6
    steps_kept = (RANGE_MIN + LATENESS_MIN + max(RANGE_MIN, LATENESS_MIN)) // STEP_MIN + 2
    for trace, rows in peak.items():
        assert rows <= per_step * steps_kept, (trace, rows, per_step * steps_kept)
    assert sum(len(s.accepted) for s in sides.values()) > 4 * max(peak.values())  # history outgrew it


def test_spark_steps_give_the_same_joins(spark, tmp_path):
    """Spark on steps 1 and 5, Arrow in between, each reading the state the other wrote."""
    _run(tmp_path, 6, lambda t: "spark" if t in (1, 5) else "arrow")


def test_bounds_of_both_sides():
    spec = load_circuit_text(CIRCUIT)
    bounds = state_bounds(compile_spec(spec, output_columns(spec)).incremental)
    assert bounds["I(clicks)"].describe() == ("drops rows with ts < watermark(clicks) and "
                                              "ts < watermark(views) - 5 minutes")
    assert bounds["I(views)"].thresholds({"clicks": 20 * MIN, "views": 30 * MIN}) == \
        (("vts", 30 * MIN), ("vts", 15 * MIN))
    assert bounds["I(views)"].every_us == max(RANGE_MIN, LATENESS_MIN) * MIN  # compacted once per lateness


@pytest.mark.parametrize("within, says", [
    ('{left: ts, right: vts, range: "5 parsecs"}', "unknown unit 'parsecs'"),
    ('{left: a, right: vts, range: "5 minutes"}', "within.left 'a' has type long; event time needs a timestamp"),
    ('{left: ts, right: nope, range: "5 minutes"}', "column 'nope' is not a column of right input 'views'"),
])
def test_malformed_within_is_refused_with_file_node_and_line(within, says):
    text = CIRCUIT.replace('  any_key: {op: join, left: clicks, right: views, within: {left: ts, right: vts, range: "5 minutes"}}',
                           f"  any_key: {{op: join, left: clicks, right: views, within: {within}}}")
    with pytest.raises(CircuitError) as err:
        load_circuit_text(text, "j.yaml")
    assert says in str(err.value) and "j.yaml:15: node 'any_key'" in str(err.value), str(err.value)
