"""The relation-to-stream join (``op: join`` with ``stream: left|right``; ``ir/ops/stream_join.py``).

Each stream row is joined once, on arrival, with the relation as of that step; the view is the
sum over steps of each step's arrivals joined with the relation then, and the stream side keeps
no state. Checked against a plain-Python oracle on random streams (the relation inserts and
deletes, the stream appends), on Arrow at every step, and on Spark and Arrow alternating (each
engine reading the state the other wrote).
"""
from __future__ import annotations

import random
from collections import Counter

import pytest

from spark_jobs.ir.compile import compile_spec
from spark_jobs.ir.explain import explain_text, insert_only_nodes
from spark_jobs.ir.graph import state_of
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.spec.columns import output_columns
from spark_jobs.spec.errors import CircuitError
from spark_jobs.spec.loader import load_circuit_text
from spark_jobs.state.store import view_trace_id
from tests.engines import Bag, kernel_step, maybe, output_delta
from tests.policies import config

CIRCUIT = """\
name: bids_on_arrival
inputs:
  bids:
    schema: {auction: long, price: long}
    source: {kind: append_only, path: inbox/bids, format: parquet}
  auctions:
    schema: {id: long, category: long}
    source: {kind: changes, path: inbox/auctions, format: parquet}
nodes:
  big:     {op: filter, input: bids, where: "price > 0"}
  j:       {op: join, left: big, right: auctions, left_on: [auction], right_on: [id], stream: left}
  j2:      {op: join, left: auctions, right: bids, left_on: [id], right_on: [auction], stream: right}
  per_cat: {op: aggregate, input: j, group_by: [category], aggregates: {hi: "max(price)", n: "count(*)"}}
outputs: [j, j2, per_cat]
"""
COLUMNS = {"bids": {"auction": "long", "price": "long"}, "auctions": {"id": "long", "category": "long"}}
DOMAINS = {"bids": {"auction": lambda r: maybe(r, [0, 1, 2, 3, 4], 0.1), "price": lambda r: r.choice([0, 1, 2, 3])},
           "auctions": {"id": lambda r: maybe(r, [0, 1, 2, 3], 0.1), "category": lambda r: maybe(r, [10, 20])}}


def _compiled(text: str = CIRCUIT):
    spec = load_circuit_text(text)
    return compile_spec(spec, output_columns(spec))


class Oracle:
    """The views by the definition: at each step, that step's arrivals joined with the relation
    as of that step (its change included), added to what earlier steps emitted."""

    def __init__(self) -> None:
        self.j: Counter = Counter()
        self.j2: Counter = Counter()

    def step(self, arrivals: Counter, relation: Counter) -> None:
        for (auction, price), wb in arrivals.items():
            for (aid, category), wa in relation.items():
                if auction is not None and auction == aid:
                    self.j2[(aid, category, auction, price)] += wa * wb
                    if price > 0:
                        self.j[(auction, price, aid, category)] += wa * wb

    def views(self) -> dict[str, Counter]:
        per_cat: dict = {}
        for (_a, price, _i, category), w in self.j.items():
            hi, n = per_cat.get(category, (None, 0))
            per_cat[category] = (price if hi is None else max(hi, price), n + w)
        return {"j": +self.j, "j2": +self.j2,
                "per_cat": Counter({(c, hi, n): 1 for c, (hi, n) in per_cat.items() if n})}


def test_the_stream_side_keeps_no_state_and_explain_says_so():
    compiled = _compiled()
    q, inc = compiled.optimized, compiled.incremental
    assert q["j"].op == q["j2"].op == "stream_join"
    stateful = sorted(n.id for n in inc if state_of(inc, n))
    assert stateful == ["I(auctions)", "per_cat"], stateful  # no I(bids), no I(big)
    assert inc["per_cat"].op == "aggregate_insert_only"  # the join's output only inserts
    assert {"j", "j2", "big"} <= set(insert_only_nodes(q))
    text = explain_text(inc, "x", insert_only_nodes(q))
    assert "none: stream side 'big' is joined on arrival and not kept" in text
    assert "none: stream side 'bids' is joined on arrival and not kept" in text
    assert "relation side of stream join 'j'" in text


def test_the_stream_side_must_only_insert():
    text = CIRCUIT.replace("kind: append_only, path: inbox/bids", "kind: changes, path: inbox/bids")
    with pytest.raises(CircuitError) as err:
        load_circuit_text(text, "c.yaml")
    assert "c.yaml:11: node 'j': the stream side 'big' must only insert rows: input 'bids' has a changes " \
           "source (declare it source.kind: append_only)" in str(err.value)
    agg = CIRCUIT.replace("right: bids, left_on: [id]", "right: per_cat, left_on: [id]").replace(
        "right_on: [auction], stream: right", "right_on: [n], stream: right")
    with pytest.raises(CircuitError, match="node 'j2': the stream side 'per_cat' must only insert rows: node "
                                           "'per_cat' is a aggregate"):
        load_circuit_text(agg, "c.yaml")


def _run(spark, tmp_path, engines: list[str], seed: int) -> dict[str, list[int]]:
    """``len(engines)`` random steps, step t on ``engines[t-1]``; after each the integrated view
    deltas equal the oracle. Returns the rows of every trace the run kept, step by step."""
    path = tmp_path / "c.yaml"
    path.write_text(CIRCUIT)
    rt = open_circuit(str(path), config(tmp_path / "data", engine="auto"))
    rng = random.Random(seed)
    bids, auctions = (Bag(COLUMNS[n], DOMAINS[n], rng) for n in ("bids", "auctions"))
    oracle, views = Oracle(), {v: Counter() for v in ("j", "j2", "per_cat")}
    rows: dict[str, list[int]] = {}
    for t, engine in enumerate(engines, 1):
        # the relation inserts and deletes (sometimes only one of them, sometimes nothing)
        deltas = {"auctions": auctions.change(rng.choice([0, 1, 3]), rng.choice([0, 0, 1, 2])),
                  "bids": bids.change(rng.choice([0, 2, 5]), 0)}
        kernel_step(spark, rt, engine, deltas, COLUMNS)
        oracle.step(deltas["bids"], auctions.rows)
        want = oracle.views()
        for view in views:
            views[view].update(output_delta(rt, view)[0])
            got = +views[view]
            assert got == want[view], (f"step {t} ({engine}) {view}: only got {dict(got - want[view])}, "
                                       f"only expected {dict(want[view] - got)}")
        for trace, entry in rt.store.manifest().traces.items():
            rows.setdefault(trace, []).append(entry.rows)
    return rows


def _assert_no_stream_state(rows: dict[str, list[int]]) -> None:
    kept = {t for t in rows if not t.startswith(view_trace_id(""))}
    assert kept == {"I(auctions)", "per_cat"}, kept


def test_random_steps_equal_the_oracle_in_process(spark, tmp_path):
    """60 steps on Arrow: deletes of matched relation rows leave the emitted rows alone."""
    _assert_no_stream_state(_run(spark, tmp_path, ["arrow"] * 60, seed=3))


def test_random_steps_equal_the_oracle_on_spark_and_arrow_alternating(spark, tmp_path):
    """Spark every other step (3 Spark steps: CI time), Arrow in between, one shared state."""
    _assert_no_stream_state(_run(spark, tmp_path, ["spark", "arrow"] * 3, seed=11))


def test_a_windowed_aggregate_over_a_stream_join_is_bounded_by_the_stream():
    """The stream's time passes through the join (a change holds only the step's arrivals), so a
    window over it closes with the stream's watermark; the relation's columns bound nothing."""
    from spark_jobs.ir.bounds import state_bounds

    compiled = _compiled("""\
name: windowed
inputs:
  bids:
    schema: {auction: long, price: long, ts: timestamp}
    source: {kind: append_only, path: inbox/bids, format: parquet}
    time: {column: ts, lateness: "5 minutes"}
  auctions:
    schema: {id: long, category: long, opened: timestamp}
    source: {kind: changes, path: inbox/auctions, format: parquet}
nodes:
  j: {op: join, left: bids, right: auctions, left_on: [auction], right_on: [id], stream: left}
  per_cat: {op: aggregate, input: j, group_by: [category], window: {column: ts, size: "10 minutes"},
            aggregates: {hi: "max(price)", n: "count(*)"}}
  by_opened: {op: aggregate, input: j, group_by: [category], window: {column: opened, size: "10 minutes"},
              aggregates: {n: "count(*)"}}
outputs: [per_cat, by_opened]
""")
    bounds = state_bounds(compiled.incremental)
    assert bounds["per_cat"].describe() == "drops rows with window_end <= watermark(bids)"
    assert "by_opened" not in bounds and "I(auctions)" not in bounds  # the relation's time bounds nothing
