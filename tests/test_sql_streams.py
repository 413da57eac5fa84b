"""SQL nodes on random streams: every supported construct, at every one of 20+ timesteps, equals
DuckDB running the same query (transpiled from Spark SQL) on the integrated inputs.

Inputs change by inserts (some with multiplicity > 1: bags), deletes of rows that exist, and
NULLs in every column. Constructs are grouped as several nodes of a few circuits so that one
stream (and one Spark job per step) tests many of them at once.
"""
from __future__ import annotations

import random

import pytest

from tests.sql_streams import SqlStream
from tests.streams import RandomRelation

pytestmark = pytest.mark.slow

INPUTS = """
inputs:
  a:
    schema: {k: long, x: long, s: string}
    source: {kind: changes, path: inbox/a, format: parquet}
  b:
    schema: {k: long, y: long}
    source: {kind: changes, path: inbox/b, format: parquet}
  c:
    schema: {s: string, z: long}
    source: {kind: changes, path: inbox/c, format: parquet}
"""

JOINS = "name: sql_joins\n" + INPUTS + """
nodes:
  inner_extra: {op: sql, query: "SELECT a.k, a.x, b.y FROM a JOIN b ON a.k = b.k AND a.x < b.y + 2"}
  comma3:
    op: sql
    query: |
      SELECT a.k, b.y, c.z
      FROM a, b, c
      WHERE a.k = b.k AND a.s = c.s AND c.z > 0
  left_right_only: {op: sql, query: "SELECT a.k, a.x, b.y FROM a LEFT JOIN b ON a.k = b.k AND b.y > 2"}
  left_mixed: {op: sql, query: "SELECT a.k AS ak, a.x, b.k AS bk, b.y FROM a LEFT JOIN b ON a.k = b.k AND a.x < b.y"}
  left_left_only: {op: sql, query: "SELECT a.k AS ak, a.x, b.y FROM a LEFT OUTER JOIN b ON a.k = b.k AND a.x > 2"}
  right_join: {op: sql, query: "SELECT a.x, b.k, b.y FROM a RIGHT JOIN b ON a.k = b.k"}
  full_mixed: {op: sql, query: "SELECT a.k AS ak, a.x, b.k AS bk, b.y FROM a FULL OUTER JOIN b ON a.k = b.k AND a.x <> b.y"}
  full_using: {op: sql, query: "SELECT * FROM a FULL JOIN b USING (k)"}
  cross_filtered: {op: sql, query: "SELECT a.k, c.z FROM a CROSS JOIN c WHERE c.z = 1"}
  chain: {op: sql, query: "SELECT a.k, b.y, c.z FROM a LEFT JOIN b ON a.k = b.k JOIN c ON a.s = c.s"}
  semi_join: {op: sql, query: "SELECT * FROM a LEFT SEMI JOIN b ON a.k = b.k AND b.y > a.x"}
  anti_join: {op: sql, query: "SELECT * FROM a LEFT ANTI JOIN b ON a.k = b.k"}
outputs: [inner_extra, comma3, left_right_only, left_mixed, left_left_only, right_join, full_mixed, full_using,
          cross_filtered, chain, semi_join, anti_join]
"""

SUBQUERIES = "name: sql_subqueries\n" + INPUTS + """
nodes:
  in_sub: {op: sql, query: "SELECT k, x FROM a WHERE x IN (SELECT y FROM b)"}
  not_in: {op: sql, query: "SELECT k, x FROM a WHERE x NOT IN (SELECT y FROM b WHERE k > 1)"}
  tuple_in: {op: sql, query: "SELECT k, x FROM a WHERE (k, x) IN (SELECT k, y FROM b)"}
  exists_eq: {op: sql, query: "SELECT k, s FROM a WHERE EXISTS (SELECT * FROM b WHERE b.k = a.k)"}
  not_exists_residual: {op: sql, query: "SELECT k, x FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.k AND b.y > a.x)"}
  exists_uncorrelated: {op: sql, query: "SELECT k FROM a WHERE EXISTS (SELECT 1 FROM c WHERE z > 2)"}
  in_correlated: {op: sql, query: "SELECT k, x FROM a WHERE x IN (SELECT y FROM b WHERE b.k = a.k)"}
  scalar_where: {op: sql, query: "SELECT k, x FROM a WHERE x > (SELECT avg(y) FROM b)"}
  scalar_select: {op: sql, query: "SELECT k, x - (SELECT min(y) FROM b) AS d FROM a WHERE s = 'p'"}
outputs: [in_sub, not_in, tuple_in, exists_eq, not_exists_residual, exists_uncorrelated, in_correlated,
          scalar_where, scalar_select]
"""

AGGREGATES_AND_SETS = "name: sql_aggregates_sets\n" + INPUTS + """
nodes:
  grouped:
    op: sql
    query: |
      SELECT s, count(*) AS n, count(x) AS nx, sum(x) AS sx, avg(x) AS ax, min(x) AS lo, max(x) AS hi,
             count(DISTINCT k) AS dk
      FROM a GROUP BY s
  having: {op: sql, query: "SELECT k, sum(x) AS sx FROM a GROUP BY k HAVING count(*) > 1 AND sum(x) > 3"}
  expr_group: {op: sql, query: "SELECT x % 3 AS m, sum(k * x) AS t, max(s) AS ms FROM a GROUP BY x % 3"}
  global: {op: sql, query: "SELECT count(*) AS n, sum(y) AS sy, max(y) AS my FROM b"}
  outer_count: {op: sql, query: "SELECT a.s, count(b.y) AS n FROM a LEFT JOIN b ON a.k = b.k GROUP BY a.s"}
  distinct_rows: {op: sql, query: "SELECT DISTINCT s, k FROM a"}
  union_set: {op: sql, query: "SELECT k FROM a UNION SELECT k FROM b"}
  union_bag: {op: sql, query: "SELECT k, x FROM a WHERE x > 3 UNION ALL SELECT k, y FROM b"}
  except_set: {op: sql, query: "SELECT k FROM a EXCEPT SELECT k FROM b"}
  intersect_set: {op: sql, query: "SELECT k FROM a INTERSECT SELECT k FROM b"}
  except_all: {op: sql, query: "SELECT k FROM a EXCEPT ALL SELECT k FROM b"}
  intersect_all: {op: sql, query: "SELECT k, s FROM a INTERSECT ALL SELECT k, s FROM (SELECT b.k, c.s FROM b JOIN c ON b.y = c.z) t"}
  cte:
    op: sql
    query: |
      WITH big AS (SELECT k, x FROM a WHERE x > 2)
      SELECT b1.k, b2.x FROM big b1 JOIN big b2 ON b1.k = b2.k
  derived: {op: sql, query: "SELECT t.s, t.n FROM (SELECT s, count(*) AS n FROM a GROUP BY s) t WHERE t.n > 1"}
  cased:
    op: sql
    query: |
      SELECT k, CASE WHEN x > 3 THEN 'big' WHEN x IS NULL THEN 'none' ELSE 'small' END AS size,
             coalesce(s, 'z') AS s2, CAST(x AS double) / 2 AS half, upper(s) AS us
      FROM a
  of_cased: {op: sql, query: "SELECT size, count(*) AS n, sum(half) AS h FROM cased GROUP BY size"}
outputs: [grouped, having, expr_group, global, outer_count, distinct_rows, union_set, union_bag, except_set,
          intersect_set, except_all, intersect_all, cte, derived, cased, of_cased]
"""


def _maybe_null(gen, p=0.15):
    return lambda rng: None if rng.random() < p else gen(rng)


def relations(seed: int) -> dict[str, RandomRelation]:
    rng = random.Random(seed)
    return {
        "a": RandomRelation(["k", "x", "s"], {"k": _maybe_null(lambda r: r.randint(1, 5)),
                                              "x": _maybe_null(lambda r: r.randint(0, 6)),
                                              "s": _maybe_null(lambda r: r.choice("pqr"))}, rng),
        "b": RandomRelation(["k", "y"], {"k": _maybe_null(lambda r: r.randint(1, 5)),
                                         "y": _maybe_null(lambda r: r.randint(0, 6))}, rng),
        "c": RandomRelation(["s", "z"], {"s": _maybe_null(lambda r: r.choice("pqrs")),
                                         "z": _maybe_null(lambda r: r.randint(0, 3))}, rng),
    }


def run(tmp_path, text: str, seed: int, steps: int = 20, real_files: bool = True) -> None:
    stream = SqlStream(tmp_path, text, real_files=real_files)
    rels = relations(seed)
    for t in range(steps):
        # a quiet step now and then (no change), and bursts of deletes
        inserts, deletes = (0, 0) if t % 7 == 6 else (8, 2) if t < 3 else (4, 4)
        stream.step({name: rel.change(inserts, deletes) for name, rel in rels.items()})


@pytest.mark.parametrize("text", [JOINS, SUBQUERIES, AGGREGATES_AND_SETS], ids=["joins", "subqueries", "aggregates_sets"])
def test_sql_constructs_equal_duckdb_at_every_step(spark, tmp_path, text):
    run(tmp_path, text, seed=len(text))


EVERY_TYPE = """
name: sql_every_type
inputs:
  t:
    schema: {k: long, b: boolean, ti: tinyint, sm: smallint, i: int, l: long, f: float, d: double,
             dec: "decimal(10,2)", s: string, dt: date, ts: timestamp, bin: binary}
    source: {kind: changes, path: inbox/t, format: parquet}
  u:
    schema: {k: long, tag: string}
    source: {kind: changes, path: inbox/u, format: parquet}
nodes:
  padded: {op: sql, query: "SELECT u.k AS uk, u.tag, t.* FROM u LEFT JOIN t ON u.k = t.k"}
  both:
    op: sql
    query: |
      SELECT coalesce(u.k, t.k) AS key, u.tag, t.b, t.ti, t.sm, t.i, t.l, t.f, t.d, t.dec, t.s, t.dt, t.ts, t.bin
      FROM t FULL OUTER JOIN u ON t.k = u.k
  summary:
    op: sql
    query: |
      SELECT uk, count(dec) AS n, sum(dec) AS total, max(dt) AS last_day, min(s) AS first_s, max(ts) AS last_ts
      FROM padded GROUP BY uk
outputs: [padded, both, summary]
"""


def test_outer_join_nulls_of_every_type_through_parquet_state(spark, tmp_path):
    """NULL padding takes the other side's column types for every type (the padded rows are
    written to Parquet state and views, and aggregated), through run_step with real files."""
    import datetime
    import decimal

    rng = random.Random(5)
    gens = {
        "k": lambda r: r.randint(1, 4), "b": lambda r: r.random() < 0.5, "ti": lambda r: r.randint(-3, 3),
        "sm": lambda r: r.randint(0, 300), "i": lambda r: r.randint(0, 9), "l": lambda r: r.randint(0, 10**12),
        "f": lambda r: r.choice([0.5, 1.25, -2.0]), "d": lambda r: r.choice([0.1, 2.5, -7.75]),
        "dec": lambda r: decimal.Decimal(r.randint(-999, 999)) / 100, "s": lambda r: r.choice(["x", "yy", ""]),
        "dt": lambda r: datetime.date(2020, 1, r.randint(1, 28)),
        "ts": lambda r: datetime.datetime(2021, 5, r.randint(1, 28), r.randint(0, 23), tzinfo=datetime.timezone.utc),
        "bin": lambda r: bytes([r.randint(0, 255)]),
    }
    t_cols = ["k", "b", "ti", "sm", "i", "l", "f", "d", "dec", "s", "dt", "ts", "bin"]
    rels = {"t": RandomRelation(t_cols, {c: _maybe_null(g, 0.1) for c, g in gens.items()}, rng),
            "u": RandomRelation(["k", "tag"], {"k": _maybe_null(lambda r: r.randint(1, 6), 0.1),
                                               "tag": lambda r: r.choice("mn")}, rng)}
    stream = SqlStream(tmp_path, EVERY_TYPE, real_files=True)
    for step in range(20):
        inserts, deletes = (4, 0) if step < 2 else (2, 2)
        stream.step({name: rel.change(inserts, deletes) for name, rel in rels.items()})


RECURSIVE = """
name: sql_recursive
inputs:
  edges:
    schema: {src: long, dst: long}
    source: {kind: changes, path: inbox/edges, format: parquet}
  blocked:
    schema: {node: long}
    source: {kind: changes, path: inbox/blocked, format: parquet}
nodes:
  paths:
    op: sql
    query: |
      WITH RECURSIVE paths (src, dst) AS (
        SELECT src, dst FROM edges
        UNION
        SELECT p.src, e.dst FROM paths p JOIN edges e ON p.dst = e.src
        WHERE e.dst NOT IN (SELECT node FROM blocked)
      )
      SELECT src, dst FROM paths
  reach_count: {op: sql, query: "SELECT src, count(*) AS n FROM paths GROUP BY src"}
outputs: [paths, reach_count]
"""


def test_with_recursive_equals_duckdb_at_every_step(spark, tmp_path):
    """WITH RECURSIVE (a transitive closure avoiding blocked nodes, NOT IN on a lower stratum)
    lowered to the recursive scope, over edge inserts and deletes (cycles included)."""
    rng = random.Random(9)
    rels = {"edges": RandomRelation(["src", "dst"], {"src": lambda r: r.randint(1, 7),
                                                     "dst": lambda r: r.randint(1, 7)}, rng),
            "blocked": RandomRelation(["node"], {"node": _maybe_null(lambda r: r.randint(1, 7), 0.1)}, rng)}
    stream = SqlStream(tmp_path, RECURSIVE)
    for step in range(20):
        stream.step({"edges": rels["edges"].change(3, 0 if step < 3 else 2),
                     "blocked": rels["blocked"].change(1 if step % 4 == 0 else 0, 1 if step % 5 == 4 else 0)})
