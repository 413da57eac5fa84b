"""The in-process recompute in two passes (runtime/recompute_arrow.py).

A recomputed step streams each input's integral through the linear operators over it (in
batches, reading only the columns they use), evaluates the rest once, and appends to the
integrals of those linear nodes the change an incremental step would append. On random streams,
steps alternating incremental and recompute (with batches of a few rows, so every integral is
read in several) must commit the same view deltas and the same state as an always-incremental
run; the circuit below has a linear chain with a filter over a projection, a view that is a
filter of an input, a union of two inputs, a join reading an input directly, a distinct and a
max (whose first step needs the deleted tuples netted out).
"""
from __future__ import annotations

import random

import pytest

from spark_jobs.runtime import recompute_arrow
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from tests.engines import KEYS, STRINGS, Bag, output_delta, write_change
from tests.policies import config
from tests.test_paths import _traces

CIRCUIT = """
name: twopass
inputs:
  orders:
    schema: {id: long, cust: long, amount: long, status: string, note: string}
    source: {kind: changes, path: inbox/orders, format: parquet}
  customers:
    schema: {cust: long, region: string}
    source: {kind: changes, path: inbox/customers, format: parquet}
nodes:
  priced: {op: select, input: orders, columns: {cust: cust, double_amount: "amount * 2", status: status}}
  paid: {op: filter, input: priced, where: "status <> 'x' AND double_amount > 1"}
  enriched: {op: join, left: paid, right: customers, on: [cust]}
  by_region: {op: aggregate, input: enriched, group_by: [region],
              aggregates: {revenue: "sum(double_amount)", n: "count(*)", top: "max(double_amount)"}}
  big: {op: filter, input: orders, where: "amount >= 3"}
  cust_ids: {op: select, input: orders, columns: [cust]}
  known: {op: select, input: customers, columns: [cust]}
  everyone: {op: union, inputs: [cust_ids, known]}
  tops: {op: aggregate, input: big, group_by: [cust], aggregates: {top: "max(note)", low: "min(amount)"}}
  raw: {op: join, left: orders, right: customers, on: [cust]}
  raw_regions: {op: aggregate, input: raw, group_by: [region], aggregates: {n: "count(*)"}}
outputs:
  by_region: {}
  big: {}
  everyone: {}
  raw_regions: {}
  tops: {}
"""
INPUTS = {
    "orders": ({"id": "long", "cust": "long", "amount": "long", "status": "string", "note": "string"},
               {"id": KEYS, "cust": KEYS, "amount": KEYS, "status": STRINGS, "note": STRINGS}),
    "customers": ({"cust": "long", "region": "string"}, {"cust": KEYS, "region": STRINGS}),
}


@pytest.mark.parametrize("seed", [11, 12])
def test_two_pass_recompute_commits_what_incremental_steps_commit(tmp_path, seed, monkeypatch):
    monkeypatch.setattr(recompute_arrow, "BATCH_ROWS", 3)  # every integral read in several batches
    circuit = tmp_path / "twopass.yaml"
    circuit.write_text(CIRCUIT)
    rng = random.Random(seed)
    bags = {name: Bag(cols, domain, rng) for name, (cols, domain) in INPUTS.items()}
    plain = open_circuit(str(circuit), config(tmp_path / "incremental", engine="arrow", cost={"recompute": "never"}))
    mixed = open_circuit(str(circuit), config(tmp_path / "mixed", engine="arrow", cost={"recompute": "always"}))
    prefix, _, _ = recompute_arrow.plan(mixed.compiled.incremental)
    appended = [n for n in prefix if mixed.compiled.incremental[n].op == "integrate"]
    for t in range(1, 8):
        for name, bag in bags.items():
            change = bag.change(10, 5 if t % 3 else 15)  # every third step deletes a lot
            for root in ("incremental", "mixed"):
                write_change(str(tmp_path / root), name, t, bag.columns, change)
        run_step(plain)
        got = run_step(mixed)
        assert got.mode == ("recompute" if t > 1 else "incremental") and got.engine == "arrow", got.engine_reason
        for view in plain.compiled.spec.outputs:
            assert output_delta(mixed, view) == output_delta(plain, view), f"timestep {t}, view {view}"
        assert _traces(mixed) == _traces(plain), f"timestep {t}: the state differs"
        # the linear nodes' integrals got the change appended as the incremental run's did (a
        # rewrite would leave one base and no deltas): the same layout of base and deltas
        ours, theirs = mixed.committed.manifest().traces, plain.committed.manifest().traces
        for trace in appended:
            assert _layout(ours[trace]) == _layout(theirs[trace]), (t, trace)


def test_the_plan_streams_linear_prefixes_and_reads_only_their_columns(tmp_path):
    rt = open_circuit(_write(tmp_path), config(tmp_path / "r"))
    circuit = rt.compiled.incremental
    prefix, rest, frontier = recompute_arrow.plan(circuit)
    assert {"priced", "paid", "big", "cust_ids", "known", "orders", "customers"} <= set(prefix)
    assert "everyone" not in prefix or circuit["everyone"].op != "plus"  # two inputs: not one input's prefix
    assert {"paid", "big", "orders", "customers"} <= frontier and not frontier & {"priced"}
    assert not rest & {"priced", "paid", "big"}
    nodes = recompute_arrow._ancestors(circuit, {"paid"}) & set(prefix)
    assert recompute_arrow.read_columns(circuit, "orders", nodes, {"paid"}) == {"cust", "amount", "status"}
    everything = recompute_arrow._ancestors(circuit, frontier) & set(prefix)
    every = {"id", "cust", "amount", "status", "note"}  # "raw" joins the input itself
    assert recompute_arrow.read_columns(circuit, "orders", everything, frontier) == every


def _layout(entry) -> tuple[int, list[int]]:
    return len(entry.base), [d[0] for d in entry.deltas]


def _write(tmp_path) -> str:
    path = tmp_path / "twopass.yaml"
    path.write_text(CIRCUIT)
    return str(path)
