"""``sum(DISTINCT x)``, ``avg(DISTINCT x)`` and ``count(DISTINCT x)`` in ``op: sql``: on random
streams of inserts and deletes (duplicates, NULLs, groups emptied and refilled) every view equals
DuckDB at every step, in-process (asserted: no step on Spark) and on Spark, each engine reading the
state the other wrote. Why a stream: a DISTINCT aggregate is recomputed for the groups a change
touches (``aggregate_touched``), so a value deleted while a duplicate stays must keep the sum.
"""
from __future__ import annotations

import random

import pytest

from tests.sql_streams import SqlStream
from tests.streams import RandomRelation

CIRCUIT = """
name: sql_distinct_aggregates
inputs:
  a:
    schema: {k: long, x: long, d: "decimal(6,2)"}
    source: {kind: changes, path: inbox/a, format: parquet}
nodes:
  grouped:
    op: sql
    query: |
      SELECT k, sum(DISTINCT x) AS sx, avg(DISTINCT x) AS ax, count(DISTINCT x) AS cx, sum(x) AS s,
             count(*) AS n, sum(DISTINCT d) AS sd, avg(DISTINCT d) AS ad
      FROM a GROUP BY k
  global: {op: sql, query: "SELECT sum(DISTINCT x) AS sx, avg(DISTINCT x % 3) AS am, count(DISTINCT k) AS ck FROM a"}
  filtered_empty: {op: sql, query: "SELECT sum(DISTINCT x) AS sx, avg(DISTINCT x) AS ax FROM a WHERE x > 4"}
  having:
    op: sql
    query: "SELECT k, sum(DISTINCT x) - sum(x) AS gap FROM a GROUP BY k HAVING sum(DISTINCT x) > 3"
  expr: {op: sql, query: "SELECT - SUM(DISTINCT x) * 2 + COUNT(*) AS v FROM a WHERE NOT x IS NULL"}
outputs: [grouped, global, filtered_empty, having, expr]
"""


def _maybe_null(gen, p=0.2):
    return lambda rng: None if rng.random() < p else gen(rng)


def _relation(seed: int) -> RandomRelation:
    import decimal

    rng = random.Random(seed)
    return RandomRelation(["k", "x", "d"], {"k": _maybe_null(lambda r: r.randint(1, 3), 0.1),
                                            "x": _maybe_null(lambda r: r.randint(-2, 6)),
                                            "d": _maybe_null(lambda r: decimal.Decimal(r.randint(-9, 9)) / 4)}, rng)


@pytest.mark.parametrize("engines", [("arrow",), ("arrow", "spark")], ids=["in_process", "alternating_spark"])
def test_distinct_sum_avg_count_equal_duckdb_at_every_step(tmp_path, request, engines):
    if "spark" in engines:
        request.getfixturevalue("spark")  # the session's Spark, reused
    stream = SqlStream(tmp_path, CIRCUIT, in_process=True)
    rel = _relation(seed=7)
    steps = 14 if len(engines) == 1 else 6
    for t in range(steps):
        if len(engines) > 1:
            stream.use_engine(engines[t % 2])
        inserts, deletes = (10, 0) if t == 0 else (0, 0) if t % 5 == 4 else (3, 5) if t % 2 else (5, 3)
        stream.step({"a": rel.change(inserts, deletes)})
    assert stream.t == steps
    assert not stream.fallbacks, stream.fallbacks


def test_distinct_sum_of_a_double_runs_on_spark_and_equals_duckdb(tmp_path, spark):
    """Spark rounds its sum of the distinct doubles in the order it adds them: the in-process
    engine hands such a step to Spark rather than give other bits."""
    text = """
name: sql_distinct_double
inputs:
  a:
    schema: {k: long, f: double}
    source: {kind: changes, path: inbox/a, format: parquet}
nodes:
  v: {op: sql, query: "SELECT k, sum(DISTINCT f) AS sf, avg(DISTINCT f) AS af FROM a GROUP BY k"}
outputs: [v]
"""
    rng = random.Random(3)
    rel = RandomRelation(["k", "f"], {"k": lambda r: r.randint(1, 2),
                                      "f": _maybe_null(lambda r: r.choice([0.5, -0.0, 0.0, 2.25, -1.75]))}, rng)
    stream = SqlStream(tmp_path, text, in_process=True)
    stream.use_engine("arrow")
    for t in range(4):
        stream.step({"a": rel.change(6 if t == 0 else 3, 0 if t == 0 else 2)})
    assert stream.fallbacks and all("DISTINCT" in r for r in stream.fallbacks), stream.fallbacks
