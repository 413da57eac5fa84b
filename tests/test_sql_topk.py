"""Top-k in SQL nodes (and a YAML ``topk`` node) on random streams: at every one of 20 timesteps
(inserts, deletes, bags, NULLs, many ties), each view equals DuckDB running the same query on the
integrated inputs.

The steps are small, so they run in-process (Arrow) through ``run_step`` with real Parquet state;
the Spark kernels are compared with the Arrow ones in ``tests/test_topk.py``.
"""
from __future__ import annotations

import pytest

from spark_jobs.spec.loader import check_text
from tests.sql_streams import SqlStream
from tests.test_sql_streams import INPUTS, relations

CIRCUIT = "name: sql_topk\n" + INPUTS + """
nodes:
  top2:
    op: sql
    query: |
      SELECT k, x, rn FROM (
        SELECT k, x, row_number() OVER (PARTITION BY k ORDER BY x DESC) AS rn FROM a) t
      WHERE rn <= 2
  ties:
    op: sql
    query: |
      SELECT * FROM (SELECT k, x, s, row_number() OVER (PARTITION BY k ORDER BY x DESC) AS rn FROM a) t
      WHERE rn < 3
  ranked:
    op: sql
    query: |
      WITH r AS (SELECT s, x + 1 AS y, rank() OVER (PARTITION BY s ORDER BY x) AS r FROM a)
      SELECT * FROM r WHERE 3 >= r AND y IS NOT NULL
  dense_global:
    op: sql
    query: |
      SELECT k, y FROM (SELECT k, y, dense_rank() OVER (ORDER BY y % 3 DESC NULLS FIRST) AS d FROM b) t
      WHERE d = 1
  best_match:
    op: sql
    query: |
      SELECT * FROM (SELECT a.k, b.y, rank() OVER (PARTITION BY a.k ORDER BY b.y) AS r
                     FROM a JOIN b ON a.k = b.k) m
      WHERE r <= 1
  lowest: {op: sql, query: "SELECT k, x FROM a ORDER BY x, k DESC LIMIT 3"}
  of_top: {op: sql, query: "SELECT k, count(*) AS n, max(x) AS hi FROM top2 GROUP BY k"}
  yaml_top:
    op: topk
    input: b
    partition_by: [k]
    order_by: [y DESC NULLS FIRST]
    k: 2
    rank: rank
    rank_column: r
outputs: [top2, ties, ranked, dense_global, best_match, lowest, of_top, yaml_top]
"""

# row_number() breaks ties on the other selected columns, ascending, NULLS FIRST: spelled out for DuckDB
ORACLE = {"ties": "SELECT * FROM (SELECT k, x, s, row_number() OVER (PARTITION BY k ORDER BY x DESC, s ASC NULLS "
                  "FIRST) AS rn FROM a) t WHERE rn < 3",
          "yaml_top": "SELECT * FROM (SELECT k, y, rank() OVER (PARTITION BY k ORDER BY y DESC NULLS FIRST) AS r "
                      "FROM b) t WHERE r <= 2"}


def test_top_k_sql_equals_duckdb_at_every_step(tmp_path):
    stream = SqlStream(tmp_path, CIRCUIT, oracle=ORACLE, in_process=True)
    rels = relations(seed=11)
    for t in range(20):
        inserts, deletes = (0, 0) if t % 7 == 6 else (8, 2) if t < 3 else (4, 4)
        stream.step({name: rel.change(inserts, deletes) for name, rel in rels.items()})
    assert stream.t == 20


def test_explain_shows_the_top_k_and_its_state(tmp_path):
    from spark_jobs.ir.explain import explain_text
    from tests.streams import compile_text

    text = explain_text(compile_text(CIRCUIT).incremental)
    assert "top-k(touched)" in text
    assert "integral of 'top2.map1' (for top-k 'top2': rows of the touched groups)" in text


YAML = """name: t
inputs:
  a:
    schema: {k: long, x: long, s: string}
    source: {kind: changes, path: a}
nodes:
  q:
    op: topk
    input: a
%s
outputs: [q]
"""


@pytest.mark.parametrize("fields, words", [
    ("    partition_by: [kk]\n    order_by: [x]\n    k: 2",
     "column 'kk' in 'partition_by' is not a column of input 'a'"),
    ("    order_by: [x DESCENDING]\n    k: 2", "order_by item 'x DESCENDING': expected 'column [ASC|DESC]"),
    ("    order_by: [zz DESC]\n    k: 2", "column 'zz' in 'order_by' is not a column of input 'a'"),
    ("    order_by: [x]\n    k: 0", "field 'k'"),
    ("    order_by: [x]\n    k: 2\n    rank: ntile", "'ntile' is not allowed; expected one of: row_number, rank"),
    ("    order_by: [x]\n    k: 2\n    rank_column: s", "rank_column 's' is already a column of input 'a'"),
    ("    order_by: [x]", "missing required field 'k' for op 'topk'"),
])
def test_a_yaml_topk_node_is_checked(fields, words):
    _, problems = check_text(YAML % fields, "c.yaml")
    assert problems and str(problems[0]).startswith("c.yaml:") and "node 'q'" in str(problems[0])
    assert words in str(problems[0]), str(problems[0])


def test_a_yaml_topk_node_reads_its_order():
    spec, problems = check_text(YAML % "    partition_by: [k]\n    order_by: [x DESC, {column: s, nulls: last}]\n"
                                       "    k: 2\n    rank: dense_rank\n    rank_column: r", "c.yaml")
    assert not problems
    top = spec.nodes["q"].extra["topk"]
    assert top.order_by == (("x", True, False), ("s", False, False)) and top.rank == "dense_rank"


ORDER_BY_AGGREGATE = "name: sql_topk_agg\n" + INPUTS + """
nodes:
  most: {op: sql, query: "SELECT k, count(*) AS n FROM a GROUP BY k ORDER BY count(*) DESC, k LIMIT 2"}
  hidden: {op: sql, query: "SELECT k FROM a GROUP BY k ORDER BY sum(x) DESC NULLS LAST, k LIMIT 3"}
  spread:
    op: sql
    query: |
      SELECT s, min(x) AS lo FROM a WHERE x IS NOT NULL GROUP BY s
      HAVING count(*) > 1 ORDER BY max(x) - min(x), s DESC LIMIT 2
  joined:
    op: sql
    query: "SELECT a.k, count(*) AS n FROM a JOIN b ON a.k = b.k GROUP BY a.k ORDER BY count(DISTINCT b.y), a.k LIMIT 1"
outputs: [most, hidden, spread, joined]
"""


def test_order_by_an_aggregate_with_limit_is_aggregate_then_top_k_and_equals_duckdb(tmp_path):
    """``ORDER BY count(*) LIMIT k``: the aggregate computed as a hidden column of the grouped query,
    the top-k sorting on it, on a stream with deletes (groups moving in and out of the top k)."""
    stream = SqlStream(tmp_path, ORDER_BY_AGGREGATE, in_process=True)
    rels = relations(seed=5)
    for t in range(12):
        inserts, deletes = (8, 2) if t < 3 else (3, 5) if t % 2 else (5, 3)
        stream.step({name: rel.change(inserts, deletes) for name, rel in rels.items()})
    assert stream.t == 12
    from spark_jobs.spec.columns import output_columns
    from spark_jobs.spec.loader import load_circuit_text

    columns = output_columns(load_circuit_text(ORDER_BY_AGGREGATE))
    assert columns["most"] == ("k", "n") and columns["hidden"] == ("k",) and columns["spread"] == ("s", "lo")


def test_order_by_an_aggregate_with_select_distinct_is_refused():
    _, problems = check_text(ORDER_BY_AGGREGATE.replace("SELECT k FROM a GROUP BY k ORDER BY sum(x)",
                                                        "SELECT DISTINCT k FROM a GROUP BY k ORDER BY sum(x)"), "c.yaml")
    assert problems and "ORDER BY an aggregate with SELECT DISTINCT" in str(problems[0])
