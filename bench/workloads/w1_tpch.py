"""W1: TPC-H-style star joins + aggregates (customer ⋈ orders ⋈ lineitem) as Q3 and Q10 circuits,
with refresh-function-style changes (new orders with their items, whole orders deleted).

Sizes are TPC-H scale factors: SF 1 is 150k customers / 1.5M orders / ~6M line items.
"""
from __future__ import annotations

from dataclasses import replace

from bench.generators import TpchGenerator
from bench.workloads import handwritten_q3
from bench.workloads.base import Size, Workload

SIZES = (Size("sf1", 1.0), Size("sf3", 3.0))  # SF10: ~76M rows, not run on this 2-core machine yet
SMOKE_SIZES = (Size("sf0.0005", 0.0005),)


def duckdb_q3(tables: dict[str, str]) -> str:
    """The same query as bench/circuits/w1_tpch.yaml, as plain SQL over the Parquet tables."""
    return f"""
        SELECT l_orderkey, o_orderdate, o_shippriority,
               sum(l_extendedprice * (1 - l_discount)) AS revenue, count(*) AS items
        FROM read_parquet('{tables["customer"]}') c
        JOIN read_parquet('{tables["orders"]}') o ON c.c_custkey = o.o_custkey
        JOIN read_parquet('{tables["lineitem"]}') l ON l.l_orderkey = o.o_orderkey
        WHERE c.c_mktsegment = 'BUILDING' AND o.o_orderdate < DATE '1995-03-15'
          AND l.l_shipdate > DATE '1995-03-15'
        GROUP BY l_orderkey, o_orderdate, o_shippriority"""


def duckdb_q10(tables: dict[str, str]) -> str:
    """The same query as bench/circuits/w1_q10.yaml."""
    return f"""
        SELECT c_custkey, c_name, c_nationkey, sum(l_extendedprice * (1 - l_discount)) AS revenue
        FROM read_parquet('{tables["customer"]}') c
        JOIN read_parquet('{tables["orders"]}') o ON c.c_custkey = o.o_custkey
        JOIN read_parquet('{tables["lineitem"]}') l ON l.l_orderkey = o.o_orderkey
        WHERE o.o_orderdate >= DATE '1993-10-01' AND o.o_orderdate < DATE '1994-01-01'
          AND l.l_returnflag = 'R'
        GROUP BY c_custkey, c_name, c_nationkey"""


WORKLOAD = Workload(
    key="w1",
    title="W1 TPC-H Q3 star join + aggregate",
    circuit="w1_tpch.yaml",
    view="q3",
    float_cols=("revenue",),
    make_generator=lambda root, sf: TpchGenerator(root, sf),
    sizes=SIZES,
    smoke_sizes=SMOKE_SIZES,
    size_help="TPC-H scale factor (customers = 150,000 x SF, orders = 10/customer, ~4 items/order)",
    duckdb_sql=duckdb_q3,
    reference=handwritten_q3.measure,
)

# Q10: the same tables, generator and sizes as Q3; another circuit, view and reference query,
# and no hand-written step.
WORKLOAD_Q10 = replace(
    WORKLOAD,
    key="w1q10",
    title="W1 TPC-H Q10 star join + aggregate",
    circuit="w1_q10.yaml",
    view="q10",
    duckdb_sql=duckdb_q10,
    reference=None,
    notes=[],  # its own list, not Q3's
    in_smoke=False,  # the same operators as Q3; CI runs Q3 only
)
