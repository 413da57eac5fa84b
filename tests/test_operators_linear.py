"""Linear kernels (map, filter, plus, negate) keep weights and follow SQL null semantics."""
from __future__ import annotations

from collections import Counter

from spark_jobs.executor.spark import zset
from spark_jobs.executor.spark import linear

SCHEMA = "k int, v string, x long"
ROWS = [((1, "a", 10), 2), ((1, "a", 10), -1), ((None, "b", None), 3), ((2, None, 5), -2), ((3, "c", -1), 1)]


def test_map_computes_columns_and_merges_projected_tuples(spark):
    df = zset.from_rows(spark, ROWS + [((1, "z", 10), 4)], SCHEMA)
    out = linear.map(df, (("k", "k"), ("x2", "x * 2"), ("has_v", "v IS NOT NULL")))
    assert out.columns == ["k", "x2", "has_v", zset.WEIGHT]
    assert zset.to_counter(out) == Counter({(1, 20, True): 5, (None, None, True): 3,
                                            (2, 10, False): -2, (3, -2, True): 1})


def test_filter_drops_null_predicates(spark):
    df = zset.from_rows(spark, ROWS, SCHEMA)
    out = linear.filter(df, "x > 0")  # NULL > 0 is NULL: dropped, as in SQL
    assert zset.to_counter(out) == Counter({(1, "a", 10): 1, (2, None, 5): -2})


def test_plus_and_negate_cancel(spark):
    df = zset.from_rows(spark, ROWS, SCHEMA)
    assert zset.to_counter(linear.plus(df, linear.negate(df))) == Counter()
    assert zset.to_counter(linear.plus(df)) == zset.to_counter(df)
