"""The fixed-point loop in-process (``arrow/loop_kernels.py``) inside a Spark step, through the state store.

A committed step whose changes are small runs its loop on the driver, looking traces up in their
Parquet row groups. These tests run random streams through ``run_step`` (Parquet state,
compaction into sorted files included) and check every timestep against a Python fixed point;
that the driver loop did run; and the fallbacks to Spark: deltas growing past the driver's limit
in the middle of a loop, and the loop switched off.
"""
from __future__ import annotations

import logging
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.executor import loop
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from tests.policies import config, sorted_small
from tests.test_recursion import BOM, TC, SetStream, closure, edge, needs

pytestmark = pytest.mark.slow


def _write(root, folder: str, name: str, rows: dict[tuple, int], columns: tuple[str, ...]) -> None:
    path = os.path.join(str(root), "inbox", folder)
    os.makedirs(path, exist_ok=True)
    data = {c: pa.array([r[i] for r in rows], pa.int64()) for i, c in enumerate(columns)}
    data["_weight"] = pa.array(list(rows.values()), pa.int64())
    pq.write_table(pa.table(data, schema=pa.schema([*[(c, pa.int64()) for c in columns], ("_weight", pa.int64())])),
                   os.path.join(path, name))


def _view(rt, view: str) -> set[tuple]:
    df = rt.store.read_view(view)
    return set() if df is None else {tuple(r[:-1]) for r in df.collect() if r[-1] == 1}


def _loops(caplog) -> list[dict]:
    return [r.profile for r in caplog.records if hasattr(r, "profile")]


def _closure_stream(spark, tmp_path, caplog, steps: int, seed: int, cfg=None) -> list[dict]:
    """Random edges (cycles, self-loops; at step 12 every edge deleted) through run_step (Spark
    steps), each step checked against the Python closure; returns the loops' profiles."""
    rt = open_circuit(TC, cfg or config(tmp_path, engine="spark"))
    edges = SetStream(random.Random(seed), edge(7))
    with caplog.at_level(logging.DEBUG, logger=loop.__name__):
        for t in range(1, steps + 1):
            if t == 12:
                change = edges.change(inserts=0, deletes=len(edges.rows))
            else:
                change = edges.change(inserts=5 if t < 4 else 2, deletes=0 if t < 4 else 2)
            if not change:
                continue
            _write(tmp_path, "edges", f"b{t:03d}.parquet", dict(change), ("src", "dst"))
            run_step(rt)
            assert _view(rt, "closure") == closure(edges.rows), f"timestep {t}: {dict(change)}"
    return _loops(caplog)


def test_closure_on_the_driver_matches_python_over_20_timesteps(spark, tmp_path, caplog):
    loops = _closure_stream(spark, tmp_path, caplog, 20, seed=5, cfg=sorted_small(tmp_path, engine="spark"))
    assert len(loops) >= 18
    assert all(p["driver"] and p["jobs"] == 0 for p in loops[1:]), loops  # the first step has no state
    traces = open_circuit(TC, config(tmp_path)).store.manifest().traces
    assert any(e.base and e.sort_by for k, e in traces.items() if k.startswith("closure/I(")), \
        "no trace was compacted into sorted files: the sorted lookup path went untested"


def test_bill_of_materials_on_the_driver_with_the_negated_relation_changing(spark, tmp_path, caplog):
    rng = random.Random(11)
    contains = SetStream(rng, edge(8))
    gone = SetStream(rng, lambda r: (r.randrange(8),))
    rt = open_circuit(BOM, config(tmp_path, engine="spark"))
    with caplog.at_level(logging.DEBUG, logger=loop.__name__):
        for t in range(1, 11):
            c = contains.change(inserts=5 if t < 3 else 2, deletes=0 if t < 3 else 2)
            d = gone.change(inserts=1, deletes=1 if t % 3 == 0 else 0)
            if c:
                _write(tmp_path, "contains", f"c{t:03d}.parquet", dict(c), ("assembly", "part"))
            if d:
                _write(tmp_path, "discontinued", f"d{t:03d}.parquet", dict(d), ("part",))
            run_step(rt)
            want = needs(contains.rows, {p for (p,) in gone.rows})
            assert _view(rt, "needs") == want, f"timestep {t}"
    assert any(p["driver"] for p in _loops(caplog))


def test_deltas_outgrowing_the_driver_fall_back_to_spark_mid_loop(spark, tmp_path, caplog):
    """With a tiny driver limit, the driver loop gives up in the middle of an iteration and the
    step runs on Spark from the start: same results (the first, small steps stay on the driver)."""
    cfg = config(tmp_path, engine="spark", recursion={"local_rows": 6})
    with caplog.at_level(logging.DEBUG, logger=loop.__name__):
        loops = _closure_stream(spark, tmp_path, caplog, 8, seed=3, cfg=cfg)
    assert any(not p["driver"] for p in loops) and any(p["driver"] for p in loops), loops
    assert any("loop on Spark (" in r.getMessage() and "local_rows" in r.getMessage() for r in caplog.records)


def test_driver_loop_off_runs_on_spark(spark, tmp_path, caplog):
    cfg = config(tmp_path, engine="spark", recursion={"driver_loop": False})
    loops = _closure_stream(spark, tmp_path, caplog, 6, seed=9, cfg=cfg)
    assert loops and not any(p["driver"] for p in loops), loops


FILTERED = """\
name: filtered
inputs:
  edges:
    schema: {src: long, dst: long}
    source: {kind: changes, path: inbox/edges, format: parquet}
nodes:
  reach:
    op: recursive
    body:
      step: {op: join, left: reach, right: edges, left_on: [dst], right_on: [src]}
      hop:  {op: select, input: step, columns: {src: src, dst: edges_dst}}
      low:  {op: filter, input: hop, where: "dst < 4 AND md5(cast(dst AS string)) IS NOT NULL"}
      paths: {op: union, inputs: [edges, low]}
    outputs: [paths]
outputs: [reach]
"""


def test_a_body_the_driver_does_not_run_runs_on_spark(spark, tmp_path, caplog):
    """A ``filter`` whose expression the Arrow kernels do not compute (md5): the driver loop
    refuses, the loop runs on Spark; same results."""
    path = tmp_path / "filtered.yaml"
    path.write_text(FILTERED)
    rt = open_circuit(str(path), config(tmp_path, engine="spark"))
    edges: set[tuple[int, int]] = set()

    def want() -> set[tuple[int, int]]:
        reach = set(edges)
        while True:
            new = {(a, d) for a, b in reach for c, d in edges if b == c and d < 4} - reach
            if not new:
                return reach
            reach |= new

    steps = [{(0, 1): 1, (1, 2): 1, (2, 3): 1, (3, 5): 1, (5, 0): 1}, {(1, 2): -1, (1, 3): 1}, {(2, 2): 1}]
    with caplog.at_level(logging.DEBUG, logger=loop.__name__):
        for t, change in enumerate(steps, start=1):
            _write(tmp_path, "edges", f"b{t:03d}.parquet", change, ("src", "dst"))
            for e, w in change.items():
                (edges.add if w > 0 else edges.discard)(e)
            run_step(rt)
            assert _view(rt, "reach") == want(), f"timestep {t}"
    assert not any(p["driver"] for p in _loops(caplog))
    assert any("loop on Spark (expression 'dst < 4 AND md5" in r.getMessage() for r in caplog.records)
