"""I(Q^Δ(Δx)) = Q(I(Δx)) on random streams of insertions and deletions, for every operator and
both example circuits (20+ timesteps each, real local Spark)."""
from __future__ import annotations

import random

import pytest

from tests.streams import RandomRelation, check_script, check_stream, compile_path, compile_text

pytestmark = pytest.mark.slow


def _maybe_null(gen, p=0.15):
    return lambda rng: None if rng.random() < p else gen(rng)


A_B = """
inputs:
  a:
    schema: {k: long, x: long, s: string}
    source: {kind: changes, path: a}
  b:
    schema: {k: long, y: long}
    source: {kind: changes, path: b}
"""


def _relations(seed: int) -> dict[str, RandomRelation]:
    rng = random.Random(seed)
    return {
        "a": RandomRelation(["k", "x", "s"], {"k": _maybe_null(lambda r: r.randint(1, 4)),
                                              "x": _maybe_null(lambda r: r.randint(0, 6)),
                                              "s": _maybe_null(lambda r: r.choice("pq"))}, rng),
        "b": RandomRelation(["k", "y"], {"k": _maybe_null(lambda r: r.randint(1, 4)),
                                         "y": _maybe_null(lambda r: r.randint(0, 6))}, rng),
    }


LINEAR_AND_SETS = "name: ops_linear_sets\n" + A_B + """
nodes:
  sel: {op: select, input: a, columns: {k: k, x2: "x * 2", tag: "concat(coalesce(s, '?'), '!')"}}
  mapped: {op: map, input: a, columns: [s, k]}
  filt: {op: filter, input: a, where: "x > 2 and s = 'p'"}
  a_k: {op: select, input: a, columns: [k]}
  b_k: {op: select, input: b, columns: [k]}
  all_k: {op: union_all, inputs: [a_k, b_k]}
  any_k: {op: union, inputs: [a_k, b_k]}
  only_a: {op: difference, left: a_k, right: b_k}
  both: {op: intersect, left: a_k, right: b_k}
  dist: {op: distinct, input: a}
outputs: [sel, mapped, filt, all_k, any_k, only_a, both, dist]
"""

JOINS = "name: ops_joins\n" + A_B + """
nodes:
  j: {op: join, left: a, right: b, on: [k]}
  j2: {op: join, left: a, right: b, left_on: [x], right_on: [y]}
  small_a: {op: filter, input: a, where: "x < 2"}
  small_b: {op: filter, input: b, where: "y < 2"}
  p: {op: product, left: small_a, right: small_b}
  aj: {op: antijoin, left: a, right: b, on: [k]}
  aj2: {op: antijoin, left: a, right: b, left_on: [x], right_on: [y]}
outputs: [j, j2, p, aj, aj2]
"""

AGGREGATES = "name: ops_aggregates\n" + A_B + """
nodes:
  g_all: {op: aggregate, input: a, group_by: [k], aggregates: {n: "count(*)", nx: "count(x)", sx: "sum(x)",
          ax: "avg(x)", lo: "min(x)", hi: "max(x)", dx: "count(distinct x)", ls: "max(s)"}}
  g_lin: {op: aggregate, input: a, group_by: [k, s], aggregates: {n: "count(*)", sx: "sum(x)", ax: "avg(x)"}}
  glob_lin: {op: aggregate, input: a, aggregates: {n: "count(*)", sx: "sum(x)", ax: "avg(x * 1.5)"}}
  glob_all: {op: aggregate, input: b, aggregates: {lo: "min(y)", hi: "max(y)", dy: "count(distinct y)"}}
  joined: {op: join, left: a, right: b, on: [k]}
  g_join: {op: aggregate, input: joined, group_by: [s], aggregates: {total: "sum(x * y)", top: "max(y)"}}
outputs: [g_all, g_lin, glob_lin, glob_all, g_join]
"""

STREAMS = "name: ops_streams\n" + A_B + """
nodes:
  i: {op: integrate, input: b}
  z: {op: delay, input: b}
  d: {op: differentiate, input: b}
  zi: {op: delay, input: i}
outputs: [i, z, d, zi]
"""


@pytest.mark.parametrize("text", [LINEAR_AND_SETS, JOINS, AGGREGATES, STREAMS],
                         ids=["linear_and_sets", "joins", "aggregates", "streams"])
def test_operators_on_random_streams(spark, text):
    check_stream(spark, compile_text(text), _relations(seed=hash(text) % 1000), steps=20)


def test_paper_example_circuit(spark):
    rng = random.Random(3)
    rels = {
        "t": RandomRelation(["id", "a", "x"], {"id": lambda r: r.randint(1, 6), "a": lambda r: r.randint(0, 5),
                                               "x": lambda r: r.choice("pqrs")}, rng),
        "r": RandomRelation(["id", "s", "y"], {"id": lambda r: r.randint(1, 6), "s": lambda r: r.randint(3, 9),
                                               "y": lambda r: r.choice("uvw")}, rng),
    }
    check_stream(spark, compile_path("circuits/paper_example.yaml"), rels, steps=20)


def test_revenue_example_circuit(spark):
    rng = random.Random(5)
    rels = {
        "orders": RandomRelation(["order_id", "customer_id", "amount", "status"],
                                 {"order_id": lambda r: r.randint(1, 40), "customer_id": lambda r: r.randint(1, 6),
                                  "amount": lambda r: r.choice([5.5, 20.0, 99.99, 100.0, 250.25]),
                                  "status": lambda r: r.choice(["paid", "paid", "pending"])}, rng),
        "customers": RandomRelation(["customer_id", "name", "region"],
                                    {"customer_id": lambda r: r.randint(1, 6), "name": lambda r: r.choice("ab"),
                                     "region": _maybe_null(lambda r: r.choice(["n", "s", "e"]), 0.1)}, rng),
    }
    check_stream(spark, compile_path("circuits/revenue_by_region.yaml"), rels, steps=20)


def test_scripted_edge_cases(spark):
    """The deleted row is its group's min/max, a group disappears, a join key arrives on both sides
    in the same step, and a global aggregate goes back to empty."""
    from collections import Counter

    compiled = compile_text(AGGREGATES)
    C = Counter
    script = [
        {"a": C({(1, 5, "p"): 1, (1, 9, "p"): 1, (2, 3, "q"): 2}), "b": C({(7, 1): 1})},
        {"a": C({(1, 9, "p"): -1})},                       # delete group 1's max
        {"a": C({(1, 5, "p"): -1, (1, 1, "q"): 1})},        # delete group 1's min, new min
        {"a": C({(2, 3, "q"): -2})},                        # group 2 disappears
        {"a": C({(3, 4, "p"): 1}), "b": C({(3, 8): 1})},    # key 3 on both join sides at once
        {"a": C({(1, 1, "q"): -1, (3, 4, "p"): -1}), "b": C({(7, 1): -1, (3, 8): -1})},  # all empty again
        {"a": C({(None, None, None): 1}), "b": C({(None, None): 2})},  # nulls
    ]
    check_script(spark, compiled, script)
