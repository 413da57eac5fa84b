"""State narrowed on the driver (``executor.spark.narrow``) through the state store: I(Q^Δ(Δx)) = Q(I(Δx)).

A committed small step looks its join, distinct and aggregate state up by the keys its change
can hold, reading only the Parquet row groups that can contain them. These tests run random
streams of insertions and deletions (NULL keys included) through ``run_step`` with Parquet state
(compaction into key-sorted files included) and compare every view, at every step, with the
query circuit recomputed on the integrated inputs; and they check that narrowing did happen, and
that it stays away where the keys are unknown (a computed key) or the type is not looked up.
"""
from __future__ import annotations

import logging
import os
import random
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.config import load_config
from spark_jobs.executor import evaluate
from spark_jobs.executor.evaluate import evaluate_step
from spark_jobs.executor.sources import spark_schema
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from spark_jobs.executor.spark import kernels as spark_kernels
from tests.policies import sorted_small
from tests.streams import LiteralState, RandomRelation, _counter, collect_all, zset_df

pytestmark = pytest.mark.slow

CIRCUIT = """
name: narrow_ops
inputs:
  a:
    schema: {k: long, x: long, s: string}
    source: {kind: changes, path: inbox/a, format: parquet}
  b:
    schema: {k: long, y: long, f: double}
    source: {kind: changes, path: inbox/b, format: parquet}
  c:
    schema: {s: string, z: long}
    source: {kind: changes, path: inbox/c, format: parquet}
nodes:
  j:   {op: join, left: a, right: b, on: [k]}
  jc:  {op: join, left: j, right: c, on: [s]}
  tot:
    op: aggregate
    input: j
    group_by: [k]
    aggregates: {total: "sum(x * y)", n: "count(*)"}
  mm:
    op: aggregate
    input: a
    group_by: [s]
    aggregates: {lo: "min(x)", hi: "max(x)"}
  ks:  {op: select, input: a, columns: [k, s]}
  d:   {op: distinct, input: ks}
  a_k: {op: select, input: a, columns: [k]}
  b_k: {op: select, input: b, columns: [k]}
  only: {op: difference, left: a_k, right: b_k}
  shifted: {op: select, input: a, columns: {k1: "k + 1", x: x}}
  js:  {op: join, left: shifted, right: b, left_on: [k1], right_on: [k]}
  bf:  {op: select, input: b, columns: [f, y]}
  jf:  {op: join, left: bf, right: bf, on: [f]}
outputs: [jc, tot, mm, d, only, js, jf]
"""

TYPES = {"long": pa.int64(), "string": pa.string(), "double": pa.float64()}


def _maybe_null(gen, p=0.15):
    return lambda rng: None if rng.random() < p else gen(rng)


def _relations(rng: random.Random) -> dict[str, RandomRelation]:
    return {
        "a": RandomRelation(["k", "x", "s"], {"k": _maybe_null(lambda r: r.randint(1, 30)),
                                              "x": _maybe_null(lambda r: r.randint(0, 9)),
                                              "s": _maybe_null(lambda r: r.choice("pqrs"))}, rng),
        "b": RandomRelation(["k", "y", "f"], {"k": _maybe_null(lambda r: r.randint(1, 30)),
                                              "y": _maybe_null(lambda r: r.randint(0, 9)),
                                              "f": _maybe_null(lambda r: r.choice((0.5, 1.5, 2.5)))}, rng),
        "c": RandomRelation(["s", "z"], {"s": _maybe_null(lambda r: r.choice("pqrst")),
                                         "z": lambda r: r.randint(0, 3)}, rng),
    }


def _write(root, spec, name: str, t: int, rows: Counter) -> None:
    folder = os.path.join(str(root), "inbox", name)
    os.makedirs(folder, exist_ok=True)
    columns = spec.inputs[name].columns
    data = {c.name: pa.array([r[i] for r in rows], TYPES[c.type]) for i, c in enumerate(columns)}
    data["_weight"] = pa.array(list(rows.values()), pa.int64())
    pq.write_table(pa.table(data), os.path.join(folder, f"t{t:03d}.parquet"))


def test_narrowed_steps_match_the_recompute_on_random_streams(spark, tmp_path, caplog):
    path = tmp_path / "narrow_ops.yaml"
    path.write_text(CIRCUIT)
    rt = open_circuit(str(path), sorted_small(tmp_path, engine="spark"))  # the Spark path narrows
    compiled = rt.compiled
    schemas = {name: spark_schema(inp) for name, inp in compiled.spec.inputs.items()}
    relations = _relations(random.Random(23))
    narrowed = []
    with caplog.at_level(logging.DEBUG, logger=spark_kernels.__name__):
        for t in range(1, 10):  # compaction into sorted files at the 4th small delta (t = 5)
            sizes = (25, 0) if t == 1 else (5, 3)
            changes = {name: rel.change(*sizes) for name, rel in relations.items()}
            for name, rows in changes.items():
                if rows:
                    _write(tmp_path, compiled.spec, name, t, rows)
            caplog.clear()
            run_step(rt)
            narrowed.append(sum(r.narrowed for r in caplog.records if hasattr(r, "narrowed")))
            full = {name: zset_df(spark, schemas[name], +rel.bag) for name, rel in relations.items()}
            query = evaluate_step(compiled.query, full, LiteralState(), first_step=True, input_schemas=schemas,
                                  broadcast_deltas=False)
            views = {("view", v): rt.store.read_view(v) for v in compiled.spec.outputs}
            got = collect_all({("full", v): df for v, df in query.outputs.items()} |
                              {k: df for k, df in views.items() if df is not None})
            for view in compiled.spec.outputs:
                assert _counter(got.get(("view", view), [])) == _counter(got[("full", view)]), \
                    f"timestep {t}, view {view}: changes {changes}"
    assert narrowed[0] == 0  # no state yet
    assert all(n >= 8 for n in narrowed[1:]), narrowed  # every join, distinct and aggregate lookup
    traces = rt.store.manifest().traces
    assert any(e.base and e.sort_by for e in traces.values()), "no trace was compacted sorted"
    assert traces["I(a)"].sort_by == ("k",) and traces["tot"].sort_by == ("k",)


def test_a_sorted_append_to_an_empty_trace_is_its_base(spark, tmp_path):
    from spark_jobs.executor.spark.zset import from_rows
    from spark_jobs.state.store import StateStore

    store = StateStore(spark, str(tmp_path / "state"), "c1", "f1")
    df = from_rows(spark, {(3, "c"): 1, (1, "a"): 2, (2, "b"): -1}, "k long, s string")
    with store.begin() as txn:
        txn.append("t", df, keys=("k",), sort_by=("k",))
        txn.append("u", df, keys=("k",))
        txn.commit()
    with store.begin() as txn:
        txn.append("t", df, keys=("k",), sort_by=("k",))
        txn.commit()
    traces = store.manifest().traces
    assert len(traces["t"].base) == 1 and len(traces["t"].deltas) == 1
    assert not traces["u"].base and len(traces["u"].deltas) == 1
    (base,) = traces["t"].base
    files = [f for f in os.listdir(store.layout.abs(base)) if f.endswith(".parquet")]
    keys = pq.read_table(os.path.join(store.layout.abs(base), files[0])).column("k").to_pylist()
    assert keys == sorted(keys)
