"""Recursive circuits: the maintained fixed point equals a from-scratch fixed point in plain Python.

Random graphs with cycles and self-loops, random insertions AND deletions, every timestep checked;
mutual recursion; stratified negation with the negated relation changing too; the iteration
limit; and the same circuits through the Parquet state store (see test_recursion_runtime.py).
"""
from __future__ import annotations

import logging
import random
from collections import Counter
from typing import Callable, Iterable

import pytest

from spark_jobs.config import PROJECT_ROOT
from spark_jobs.executor import loop
from spark_jobs.policy import ExecutionPolicy
from spark_jobs.executor.evaluate import evaluate_step
from spark_jobs.executor.sources import spark_schema
from tests.policies import policy
from tests.streams import LiteralState, collect_all, compile_path, compile_text, zset_df

pytestmark = pytest.mark.slow
TC = str(PROJECT_ROOT / "circuits" / "transitive_closure.yaml")
BOM = str(PROJECT_ROOT / "circuits" / "bill_of_materials.yaml")
Pair = tuple[int, int]


def closure(edges: Iterable[Pair]) -> set[Pair]:
    """Naive fixed point of R = E ∪ {(a, d) : (a, b) ∈ R, (b, d) ∈ E}."""
    edges = set(edges)
    reach = set(edges)
    while True:
        new = {(a, d) for a, b in reach for c, d in edges if b == c} - reach
        if not new:
            return reach
        reach |= new


def needs(contains: set[Pair], discontinued: set[int]) -> set[Pair]:
    """live = (contains ∪ {(a, q) : (a, p) ∈ live, (p, q) ∈ contains}) minus discontinued parts."""
    live: set[Pair] = set()
    while True:
        nxt = {(a, p) for a, p in contains | {(a, q) for a, p in live for c, q in contains if p == c}
               if p not in discontinued}
        if nxt == live:
            return live
        live = nxt


def parity(edges: set[Pair]) -> set[Pair]:
    """Pairs joined by a path of even length >= 2 (odd and even defined by mutual recursion)."""
    odd, even = set(edges), set()
    while True:
        new_even = {(a, d) for a, b in odd for c, d in edges if b == c}
        new_odd = set(edges) | {(a, d) for a, b in even for c, d in edges if b == c}
        if (new_even, new_odd) == (even, odd):
            return even
        even, odd = new_even, new_odd


class SetStream:
    """A random set of rows changing by insertions and deletions (weights +1/-1, never a bag)."""

    def __init__(self, rng: random.Random, make: Callable[[random.Random], tuple]) -> None:
        self.rng, self.make, self.rows = rng, make, set()

    def change(self, inserts: int, deletes: int) -> Counter:
        delta = Counter()
        for row in self.rng.sample(sorted(self.rows), min(deletes, len(self.rows))):
            delta[row] -= 1
        for _ in range(inserts):
            row = self.make(self.rng)
            if row not in self.rows and not delta[row]:
                delta[row] += 1
        for row, w in delta.items():
            (self.rows.add if w > 0 else self.rows.discard)(row)
        return Counter({r: w for r, w in delta.items() if w})


def run_stream(spark, compiled, script, expected: Callable[[dict[str, set]], dict[str, set]],
               policy: ExecutionPolicy | None = None) -> int:
    """Feed ``script`` (per step: input -> Counter delta) to the incremental circuit; after every
    step the integrated view must equal ``expected(current input sets)``. Returns the steps run."""
    spec = compiled.spec
    schemas = {n: spark_schema(i) for n, i in spec.inputs.items()}
    state = LiteralState()
    current: dict[str, set] = {n: set() for n in spec.inputs}
    views: dict[str, Counter] = {v: Counter() for v in spec.outputs}
    steps = 0
    for t, deltas in enumerate(script, start=1):
        for name, d in deltas.items():
            for row, w in d.items():
                (current[name].add if w > 0 else current[name].discard)(row)
        dfs = {n: zset_df(spark, schemas[n], d) for n, d in deltas.items() if d}
        result = evaluate_step(compiled.incremental, dfs, state, first_step=t == 1, input_schemas=schemas,
                               broadcast_deltas=False, policy=policy)
        states = {("state", k): df for k, df in state.pending(result.updates).items()}
        got = collect_all({(v,): df for v, df in result.outputs.items()} | states)  # one job: views + states
        want = expected(current)
        for view in want:
            for *row, w in got[(view,)]:
                views[view][tuple(row)] += w
            views[view] = +views[view]
            assert views[view] == Counter({r: 1 for r in want[view]}), (
                f"step {t}, view {view}: maintained != from scratch\n deltas {deltas}\n"
                f" extra {set(views[view]) - want[view]}\n missing {want[view] - set(views[view])}")
        state.replace(spark, {k: (df.schema, got[(tag, k)]) for (tag, k), df in states.items()})
        steps = t
    return steps


def edge(nodes: int) -> Callable[[random.Random], Pair]:
    return lambda rng: (rng.randrange(nodes), rng.randrange(nodes))  # self-loops and cycles included


def test_transitive_closure_random_inserts_and_deletes(spark):
    rng = random.Random(7)
    edges = SetStream(rng, edge(6))

    def change(t: int) -> Counter:  # generated lazily, in step order
        if t == 12:
            return edges.change(inserts=0, deletes=len(edges.rows))  # everything deleted at once
        return edges.change(inserts=4 if t < 4 else 2, deletes=0 if t < 4 else 2)

    script = ({"edges": change(t)} for t in range(20))
    steps = run_stream(spark, compile_path(TC), script, lambda cur: {"closure": closure(cur["edges"])})
    assert steps == 20


@pytest.mark.parametrize("lookup", ["scan", "cached"])
def test_transitive_closure_with_broadcast_lookups(spark, lookup):
    """The other trace-lookup paths (state treated as big: broadcast lookups, no key ranges)."""
    rng = random.Random(13)
    edges = SetStream(rng, edge(6))
    script = ({"edges": edges.change(inserts=4 if t < 3 else 2, deletes=0 if t < 3 else 2)} for t in range(8))
    big = policy(recursion={"big_state_rows": 0, "lookup": lookup})
    assert run_stream(spark, compile_path(TC), script, lambda cur: {"closure": closure(cur["edges"])}, big) == 8


def test_a_small_change_runs_the_iterations_it_needs_not_the_deepest(spark, caplog):
    """The loop stops when no deeper trace row matches the change: a change away from a long
    chain (13 iterations to its fixed point) runs 2-3 iterations, also after a delete inside the
    chain made it shallower, which runs no more iterations than the chain's fixed point."""
    chain = Counter({(k, k + 1): 1 for k in range(12)})
    script = [{"edges": chain}, {"edges": Counter({(100, 101): 1})}, {"edges": Counter({(9, 10): -1})},
              {"edges": Counter({(101, 102): 1})}, {"edges": Counter({(50, 50): 1})}]
    with caplog.at_level(logging.DEBUG, logger=loop.__name__):
        run_stream(spark, compile_path(TC), script, lambda cur: {"closure": closure(cur["edges"])})
    iterations = [r.profile["iterations"] for r in caplog.records if hasattr(r, "profile")]
    assert len(iterations) == len(script)
    assert iterations[0] >= 12  # the chain's fixed point: one iteration per path length
    assert iterations[1] <= 3 and iterations[3] <= 4 and iterations[4] <= 3, iterations
    assert iterations[2] <= iterations[0], iterations  # a chain edge: retracts up to the longest path


def test_bill_of_materials_with_the_negated_relation_changing(spark):
    rng = random.Random(11)
    contains = SetStream(rng, edge(7))
    discontinued = SetStream(rng, lambda r: (r.randrange(7),))
    script = ({"contains": contains.change(3, 1 if t > 2 else 0),
               "discontinued": discontinued.change(1 if t % 3 == 0 else 0, 1 if t % 4 == 3 else 0)}
              for t in range(8))

    def expected(cur):
        live = needs(cur["contains"], {p for (p,) in cur["discontinued"]})
        counts = Counter(a for a, _ in live)
        return {"needs": live, "parts_per_assembly": {(a, n) for a, n in counts.items()}}

    assert run_stream(spark, compile_path(BOM), script, expected) == 8


MUTUAL = """\
name: parity
inputs:
  edges: {schema: {src: long, dst: long}}
nodes:
  even:
    op: recursive
    body:
      e_step: {op: join, left: odd_paths, right: edges, left_on: [dst], right_on: [src]}
      even_paths: {op: select, input: e_step, columns: {src: src, dst: edges_dst}}
      e_set: {op: distinct, input: even_paths}
      o_step: {op: join, left: e_set, right: edges, left_on: [dst], right_on: [src]}
      o_hop: {op: select, input: o_step, columns: {src: src, dst: edges_dst}}
      odd_paths: {op: union, inputs: [edges, o_hop]}
    outputs: [e_set, odd_paths]
outputs: [even]
"""


def test_mutual_recursion(spark):
    rng = random.Random(5)
    edges = SetStream(rng, edge(6))
    script = ({"edges": edges.change(3, 1 if t > 1 else 0)} for t in range(6))
    assert run_stream(spark, compile_text(MUTUAL), script, lambda cur: {"even": parity(cur["edges"])}) == 6


def test_query_circuit_fixed_point_from_scratch(spark):
    """The query circuit (no state) computes the fixed point from scratch: semi-naive at t = 1."""
    compiled = compile_path(TC)
    schemas = {n: spark_schema(i) for n, i in compiled.spec.inputs.items()}
    graph = {(1, 2), (2, 3), (3, 1), (4, 4), (4, 5)}
    full = zset_df(spark, schemas["edges"], Counter({e: 1 for e in graph}))
    result = evaluate_step(compiled.query, {"edges": full}, LiteralState(), first_step=True,
                           input_schemas=schemas)
    got = collect_all({("v",): result.outputs["closure"]})[("v",)]
    assert {(a, b) for a, b, _ in got} == closure(graph) and len(got) == len(closure(graph))
    assert all(w == 1 for *_, w in got) and not result.updates
