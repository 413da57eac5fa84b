"""W2: distinct + antijoin + min/max over Zipf-skewed users (the non-linear operators' costs).

Sizes are the number of events in the initial load (users = events / 10, Zipf s = 1.1: the
top user holds about 15-20% of all events, so min/max re-reads a big group on every change).
"""
from __future__ import annotations

from bench.generators import ZipfGenerator
from bench.workloads.base import Size, Workload


def duckdb_ranges(tables: dict[str, str]) -> str:
    """The same query as bench/circuits/w2_zipf.yaml, as plain SQL over the Parquet tables."""
    return f"""
        SELECT user_id, min(price) AS lo, max(price) AS hi, count(*) AS n
        FROM (SELECT DISTINCT user_id, item_id, price FROM read_parquet('{tables["events"]}')) e
        WHERE NOT EXISTS (SELECT 1 FROM read_parquet('{tables["blocked"]}') b
                          WHERE b.user_id = e.user_id)
        GROUP BY user_id"""


WORKLOAD = Workload(
    key="w2",
    title="W2 distinct + antijoin + min/max (Zipf)",
    circuit="w2_zipf.yaml",
    view="ranges",
    float_cols=(),
    make_generator=lambda root, n: ZipfGenerator(root, int(n)),
    sizes=(Size("n100k", 100_000), Size("n1M", 1_000_000)),
    smoke_sizes=(Size("n2k", 2_000),),
    size_help="events in the initial load (users = events / 10, Zipf s = 1.1)",
    duckdb_sql=duckdb_ranges,
)
