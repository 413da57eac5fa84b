"""A step past the in-process memory bound, run in sub-steps of one transaction (runtime/chunks.py).

The differential test: on random streams of inserts and deletes, a root whose memory bound is
tiny (every step past it, split into sub-steps of a few rows) commits, at every timestep, the
same view deltas and the same state as a root that runs each step whole in-process. A crash
between two sub-steps commits nothing; a delete below zero refuses the whole timestep.
"""
from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pytest

from spark_jobs.policy import ArrowPolicy, ExecutionPolicy
from spark_jobs.runtime.chunks import split
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import choose_path, pending_inputs, run_step
from spark_jobs.state import failpoints
from tests.engines import Bag, output_delta, write_change
from tests.policies import config
from tests.test_paths import CIRCUIT, INPUTS, _traces
from tests.test_recompute import CDC_CIRCUIT, cdc_records

# every step past 5 changed rows is past the memory bound (1 byte a row, 0 base, 7 bytes): 7-row sub-steps
TINY = {"max_change_rows": 5, "base_memory_bytes": 0, "bytes_per_change_row": 1, "max_memory_bytes": 7}


def _roots(tmp_path, text: str, chunk: dict) -> dict:
    circuit = tmp_path / "c.yaml"
    circuit.write_text(text)
    cfgs = {"whole": config(tmp_path / "whole", engine="arrow", cost={"recompute": "never"}),
            "chunked": config(tmp_path / "chunked", arrow=chunk, cost={"recompute": "never"})}
    return {k: open_circuit(str(circuit), c) for k, c in cfgs.items()}


def _same(rts: dict, t: int) -> None:
    for view in rts["whole"].compiled.spec.outputs:
        assert output_delta(rts["chunked"], view) == output_delta(rts["whole"], view), (t, view)
    assert _traces(rts["chunked"]) == _traces(rts["whole"]), f"timestep {t}: the state differs"


@pytest.mark.parametrize("seed,chunk", [(1, TINY), (2, dict(TINY, chunk_rows=3))])
def test_sub_steps_commit_the_timestep_of_one_whole_step(tmp_path, seed, chunk):
    """Joins, sum/count and max aggregates, distinct, over inserts and deletes of both inputs."""
    rts = _roots(tmp_path, CIRCUIT, chunk)
    rng = random.Random(seed)
    bags = {name: Bag(cols, domain, rng) for name, (cols, domain) in INPUTS.items()}
    chunked = 0
    for t in range(1, 8):
        for name, bag in bags.items():
            change = bag.change(12 if t % 2 else 30, 3 if t % 3 else 20)
            for rt in rts.values():
                write_change(str(rt.config.data_root), name, t, bag.columns, change)
        reports = {k: run_step(rt) for k, rt in rts.items()}
        if t > 1:  # (the load: on Spark, a load is never split)
            assert reports["chunked"].engine == "arrow", reports["chunked"].engine_reason
            assert "sub-steps" in reports["chunked"].engine_reason, reports["chunked"].engine_reason
            assert any("sub-steps" in n for n in reports["chunked"].notes), reports["chunked"].notes
            chunked += 1
        _same(rts, t)
    assert chunked == 6


def test_sub_steps_of_cdc_and_snapshot_inputs(tmp_path):
    """Inputs with traces of their own (cdc rows by key, the last snapshot): read and folded
    once, their own traces written once, the circuit's state in sub-steps."""
    import json
    import os

    import pyarrow.parquet as pq

    rts = _roots(tmp_path, CDC_CIRCUIT, dict(TINY, chunk_rows=3))
    rng = random.Random(3)
    rows: dict[int, dict] = {}
    for t in range(1, 6):
        records = cdc_records(rng, rows, 10)
        customers = pa.table({"cust": pa.array(range(4), pa.int64()),
                              "region": pa.array([rng.choice("ab") for _ in range(4)])})
        for rt in rts.values():
            root = str(rt.config.data_root)
            inbox, snaps = os.path.join(root, "inbox", "orders"), os.path.join(root, "snapshots", "customers")
            os.makedirs(inbox, exist_ok=True), os.makedirs(snaps, exist_ok=True)
            with open(os.path.join(inbox, f"t{t:04d}.jsonl"), "w") as fh:
                fh.write("".join(json.dumps(r) + "\n" for r in records))
            if t % 2:
                pq.write_table(customers, os.path.join(snaps, f"s{t:04d}.parquet"))
        reports = {k: run_step(rt) for k, rt in rts.items()}
        if t > 1:
            assert "sub-steps" in reports["chunked"].engine_reason, reports["chunked"].engine_reason
        _same(rts, t)


def test_a_crash_between_sub_steps_commits_nothing(tmp_path):
    rts = _roots(tmp_path, CIRCUIT, TINY)
    rng = random.Random(5)
    bags = {name: Bag(cols, domain, rng) for name, (cols, domain) in INPUTS.items()}
    for t in (1, 2):
        for name, bag in bags.items():
            change = bag.change(25, 6)
            for root in rts.values():
                write_change(str(root.config.data_root), name, t, bag.columns, change)
        if t == 1:
            for rt in rts.values():
                run_step(rt)
    chunked = rts["chunked"]
    before = chunked.committed.manifest().to_json()
    with failpoints.armed("between_sub_steps", skip=1):  # after the second sub-step's writes
        with pytest.raises(failpoints.InjectedFailure):
            run_step(chunked)
    assert chunked.committed.last_committed() == 1 and chunked.committed.manifest().to_json() == before
    run_step(rts["whole"])
    report = run_step(chunked)  # the retried timestep: everything again, from the committed state
    assert report.timestep == 2 and "sub-steps" in report.engine_reason
    _same(rts, 2)


def test_a_delete_below_zero_refuses_the_whole_timestep(tmp_path):
    rts = _roots(tmp_path, CIRCUIT, TINY)
    chunked = rts["chunked"]
    rng = random.Random(9)
    bags = {name: Bag(cols, domain, rng) for name, (cols, domain) in INPUTS.items()}
    for name, bag in bags.items():
        write_change(str(chunked.config.data_root), name, 1, bag.columns, bag.change(20, 0))
    run_step(chunked)
    before = chunked.committed.manifest().to_json()
    orders = bags["orders"]
    change = orders.change(20, 0)
    change[(10**6, 1, 1, "never")] = -1  # never inserted
    write_change(str(chunked.config.data_root), "orders", 2, orders.columns, change)
    with pytest.raises(Exception, match="never|below|delete"):
        run_step(chunked)
    assert chunked.committed.last_committed() == 1 and chunked.committed.manifest().to_json() == before


def test_the_engine_past_the_memory_bound():
    """`dbsp step` (chunked) keeps a local profile's step in-process in sub-steps; a DAG run's plan
    (not chunked), a cluster profile, a load, or a bound that holds no sub-step: Spark."""
    policy = ExecutionPolicy()
    fits = policy.chunk_rows()
    assert 2_500_000 < fits < 3_000_000
    engine, why = policy.engine_for(4_000_000, first_step=False, local_spark=True, chunked=True)
    assert engine == "arrow" and f"in 2 sub-steps of at most {fits} rows" in why, why
    assert policy.engine_for(4_000_000, first_step=False, local_spark=True)[0] == "spark"
    assert policy.engine_for(4_000_000, first_step=False, local_spark=False, chunked=True)[0] == "spark"
    assert policy.engine_for(4_000_000, first_step=True, local_spark=True, chunked=True)[0] == "spark"
    assert policy.engine_for(2_000_000, first_step=False, local_spark=True, chunked=True)[1].endswith(
        "<= execution.arrow.max_memory_bytes (4.00 GiB)")  # within the bound: one whole step
    big = ExecutionPolicy(arrow=ArrowPolicy(chunk_rows=fits + 1))
    engine, why = big.engine_for(4_000_000, first_step=False, local_spark=True, chunked=True)
    assert engine == "spark" and "not even one sub-step fits" in why, why
    assert ExecutionPolicy(arrow=ArrowPolicy(chunk_rows=1_000_000)).engine_for(
        4_000_000, first_step=False, local_spark=True, chunked=True)[1].count("in 4 sub-steps") == 1


def test_a_dag_plan_past_the_memory_bound_stays_on_spark(tmp_path):
    rts = _roots(tmp_path, CIRCUIT, TINY)
    chunked = rts["chunked"]
    rng = random.Random(4)
    bags = {name: Bag(cols, domain, rng) for name, (cols, domain) in INPUTS.items()}
    for t in (1, 2):
        for name, bag in bags.items():
            write_change(str(chunked.config.data_root), name, t, bag.columns, bag.change(20, 3))
        if t == 1:
            run_step(chunked)
    pending = pending_inputs(chunked)
    assert choose_path(chunked, pending).engine == "spark"
    assert choose_path(chunked, pending, chunked=True).engine == "arrow"


def test_split_is_tuple_disjoint_and_sums_to_the_change():
    rng = random.Random(3)
    rows = [(rng.randrange(6), rng.choice(["a", "b", None]), rng.random()) for _ in range(200)]
    weights = [rng.choice((1, -1, 2)) for _ in rows]
    table = pa.table({"k": [r[0] for r in rows], "s": [r[1] for r in rows], "f": [r[2] for r in rows],
                      "_weight": weights})
    floats = pa.table({"f": [r[2] for r in rows], "_weight": weights})
    for n in (1, 2, 3, 7):
        parts = split({"t": table, "only_floats": floats}, n)
        assert len(parts) == n
        total, seen = Counter(), {}
        for i, part in enumerate(parts):
            for row in part.get("t", table.schema.empty_table()).to_pylist():
                key = (row["k"], row["s"], row["f"])
                total[key] += row["_weight"]
                assert seen.setdefault(key, i) == i  # every row of a tuple in one sub-change
        want = Counter()
        for r, w in zip(rows, weights):
            want[r] += w
        assert total == want
        assert parts[0]["only_floats"] is floats  # no exactly comparable column: kept whole
        assert all("only_floats" not in p for p in parts[1:])


def test_windowed_aggregates_with_lateness_in_sub_steps(tmp_path, monkeypatch):
    """tests/test_windows.py's event stream (tumbling, sliding and global windows, a lateness
    bound, late rows and deletes) with nearly every step past the memory bound, in sub-steps of 3
    rows: after every step each view equals DuckDB's from-scratch query and the late rows are
    counted exactly (the change is read and its late rows dropped once, whole, before the split)."""
    from dataclasses import replace

    import spark_jobs.runtime.chunks as chunks
    import tests.test_windows as windows

    def chunked_config(root, engine):
        cfg = config(root, engine=engine, arrow=dict(TINY, max_change_rows=2, max_memory_bytes=4, chunk_rows=3),
                     cost={"recompute": "never"})
        return replace(cfg, views=replace(cfg.views, enabled=False))

    split_steps = []
    compute = chunks.compute

    def counted(*args, **kwargs):
        split_steps.append(args[-2])
        return compute(*args, **kwargs)

    monkeypatch.setattr(windows, "step_config", chunked_config)
    monkeypatch.setattr(chunks, "compute", counted)
    windows._run(tmp_path, 40, lambda t: "arrow", check_every=1, seed=11)
    assert len(split_steps) >= 15 and set(split_steps) == {3}, split_steps
