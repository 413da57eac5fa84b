"""Views that all read one global aggregate run on Spark in seconds, not minutes.

A `SELECT` without `FROM` is one row counted over an input (a global aggregate), and every
constant view reads it. A step's one Spark job is the union of all view deltas and state writes;
Spark 4.2's MergeSubplans turned the shared aggregate into scalar subqueries, planned again where
each is read and nested inside each other: on 64 constant views of sqllogictest's random/expr
(`slt_good_72.test`, every 120th query) the step never finished and the driver ran out of heap.
The session leaves that rule out (``session.RUNTIME_CONF``).
"""
from __future__ import annotations

import random

import pytest

from tests.sql_streams import SqlStream
from tests.streams import RandomRelation

# the first view's constant part overflows a Spark int (Arrow leaves it to Spark, so every step
# runs on Spark); the others are constant aggregates as in random/expr (slt_good_72.test line 71755
# is the second with SUM: its exact sum of doubles is a slower plan, run by the corpus run)
CIRCUIT = """
name: shared_aggregate
inputs:
  tab0:
    schema: {col0: long, col1: long}
    source: {kind: changes, path: inbox/tab0, format: parquet}
nodes:
  overflow:
    op: sql
    query: "SELECT DISTINCT 0 - 79 + - 56 * - 51 * + 91 - - COALESCE ( 94, 88 * - 81 * - + 21 * 93 * + 48 * - - 77 + - 54, + 5 * + 72 * + + 5 ) AS c"
  min_const: {op: sql, query: "SELECT DISTINCT - + ( + MIN ( - COALESCE ( - 40, + 70 * 42 * 87 / - - 6 ) ) ) AS c"}
  count_star: {op: sql, query: "SELECT DISTINCT + 27 * - COUNT ( * ) AS c"}
outputs: [overflow, min_const, count_star]
"""


def test_the_session_leaves_merge_subplans_out(spark):
    from pyspark.sql import functions as F

    from spark_jobs.executor.spark.session import MERGE_SUBPLANS

    assert MERGE_SUBPLANS in (spark.conf.get("spark.sql.optimizer.excludedRules") or "")
    one = spark.range(3).agg(F.count(F.lit(1)).alias("n"))
    union = one.select((F.col("n") + 1).alias("v")).unionByName(one.select((F.col("n") * 2).alias("v")))
    plan = union._jdf.queryExecution().optimizedPlan().toString()
    assert "scalar-subquery" not in plan, plan


@pytest.mark.slow  # every step on Spark: 93 s at a 1-minute load of 19 (2026-11-29)
def test_constant_views_over_one_global_aggregate_step_on_spark(tmp_path, spark):
    stream = SqlStream(tmp_path, CIRCUIT, in_process=True)
    stream.use_engine("arrow")  # Arrow leaves the overflowing constant to Spark: each step runs on Spark
    rng = random.Random(3)
    rel = RandomRelation(["col0", "col1"], {"col0": lambda r: r.randint(1, 9), "col1": lambda r: r.randint(0, 9)}, rng)
    for t in range(2):  # a load, then deletes and inserts
        stream.step({"tab0": rel.change(4 if t == 0 else 2, 0 if t == 0 else 2)})
    assert len(stream.fallbacks) == 2 and all("ARITHMETIC_OVERFLOW" in r for r in stream.fallbacks), stream.fallbacks
