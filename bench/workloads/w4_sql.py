"""W4: TPC-H Q13 written as an SQL node (a LEFT OUTER JOIN and two aggregates) over W1's data and
changes: the cost of an outer join lowered to existing operators (inner join + unmatched rows).
"""
from __future__ import annotations

from dataclasses import replace

from bench.workloads.w1_tpch import WORKLOAD as W1

QUERY = """
    SELECT c_count, count(*) AS custdist
    FROM (SELECT c_custkey, count(o_orderkey) AS c_count
          FROM read_parquet('{customer}') LEFT OUTER JOIN read_parquet('{orders}')
            ON c_custkey = o_custkey AND o_orderdate >= DATE '1995-01-01'
          GROUP BY c_custkey) AS c_orders
    GROUP BY c_count"""


def duckdb_q13(tables: dict[str, str]) -> str:
    """The same query as bench/circuits/w4_sql_q13.yaml, over the Parquet tables."""
    return QUERY.format(**tables)


WORKLOAD = replace(
    W1,
    key="w4",
    title="W4 TPC-H Q13 as an SQL node (left outer join + aggregates)",
    circuit="w4_sql_q13.yaml",
    view="q13",
    float_cols=(),
    duckdb_sql=duckdb_q13,
    reference=None,
    notes=[],
    in_smoke=False,  # CI runs the SQL circuits in tests/test_sql_*.py
)
