"""Z-set basics on real Spark: consolidation (nulls equal), negation, addition, empties."""
from __future__ import annotations

from collections import Counter

import pytest
from pyspark.sql.types import LongType

from spark_jobs.executor.spark import zset
from spark_jobs.executor.spark.zset import WEIGHT

SCHEMA = "k int, v string"


def test_consolidate_merges_equal_tuples_nulls_included_and_drops_zero(spark):
    df = zset.from_rows(spark, [((1, "a"), 2), ((1, "a"), 1), ((None, None), 1), ((None, None), 4),
                                ((2, None), 3), ((2, None), -3), ((None, "b"), -2)], SCHEMA)
    assert not zset.is_consolidated(df)
    out = zset.consolidate(df)
    assert out.columns == ["k", "v", WEIGHT]
    assert isinstance(out.schema[WEIGHT].dataType, LongType)
    rows = {(r["k"], r["v"]): r[WEIGHT] for r in out.collect()}
    assert rows == {(1, "a"): 3, (None, None): 5, (None, "b"): -2}


def test_is_consolidated_rejects_zero_weight(spark):
    assert not zset.is_consolidated(zset.from_rows(spark, [((1, "a"), 0)], SCHEMA))
    assert zset.is_consolidated(zset.from_rows(spark, [((1, "a"), -1), ((1, None), 1)], SCHEMA))


def test_negate_plus_and_to_counter(spark):
    a = zset.from_rows(spark, {(1, "a"): 2, (None, "b"): 1}, SCHEMA)
    b = zset.from_rows(spark, {(1, "a"): -2, (3, None): 5}, SCHEMA)
    reordered = b.select(WEIGHT, "v", "k")  # plus matches columns by name
    total = zset.plus(a, zset.negate(a), reordered, a)
    assert total.columns == ["k", "v", WEIGHT]
    assert zset.to_counter(total) == Counter({(None, "b"): 1, (3, None): 5})


def test_empty_values(spark):
    a = zset.from_rows(spark, {(1, "a"): 2}, SCHEMA)
    assert zset.empty_like(a).schema == a.schema
    empty = zset.plus(schema=zset.zset_schema(SCHEMA), spark=spark)
    assert empty.columns == ["k", "v", WEIGHT]
    assert zset.empty(spark, SCHEMA).schema == empty.schema
    assert zset.to_counter(zset.plus(empty, zset.empty_like(a))) == Counter()
    with pytest.raises(ValueError):
        zset.plus()
