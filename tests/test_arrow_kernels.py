"""The Arrow Z-set library agrees with the Spark operators on the cases that differ between them.

Joins (SQL ``=``: a NULL key matches nothing; null-safe ``<=>`` for set operations: NULL matches
NULL, which Arrow's own join never does; products; weights multiply; right columns renamed by
``right_out``), consolidation (NULLs equal), ``select`` of plain columns (Spark's case-insensitive
names, backquotes) and H, each against the Spark kernel on the same rows.
"""
from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

from spark_jobs.executor.arrow import distinct as arrow_distinct
from spark_jobs.executor.arrow import zsets
from spark_jobs.executor.arrow.expressions import apply_map
from spark_jobs.executor.spark import distinct as spark_distinct
from spark_jobs.executor.spark.join import join as spark_join
from spark_jobs.executor.spark.zset import WEIGHT, from_tuples

LEFT = [(1, "a", 1), (2, "b", 2), (None, "c", 1), (2, "d", -1)]
RIGHT = [(2, 10, 3), (2, 11, 1), (None, 12, 1), (3, 13, 1)]


def _table(rows, names, types) -> pa.Table:
    return pa.table([pa.array([r[k] for r in rows], t) for k, t in enumerate(types)], names=names)


def _bag(table: pa.Table) -> Counter:
    out: Counter = Counter()
    for r in table.to_pylist():
        out[tuple(v for k, v in r.items() if k != WEIGHT)] += r[WEIGHT]
    return out


def _spark_bag(df) -> Counter:
    out: Counter = Counter()
    for r in df.collect():
        out[tuple(r[:-1])] += r[-1]
    return out


@pytest.mark.parametrize("null_safe, keys", [(False, ("k",)), (True, ("k",)), (False, ())])
def test_join_matches_the_spark_join(spark, null_safe, keys):
    left_out, right_out = (("k", "k"), ("v", "v")), (("x", "x"),)
    left = _table(LEFT, ["k", "v", WEIGHT], [pa.int64(), pa.string(), pa.int64()])
    right = _table(RIGHT, ["k", "x", WEIGHT], [pa.int64(), pa.int64(), pa.int64()])
    got = zsets.join(left, right, keys, keys, null_safe, left_out, right_out)
    want = spark_join(from_tuples(spark, LEFT, f"k long, v string, {WEIGHT} long"),
                      from_tuples(spark, RIGHT, f"k long, x long, {WEIGHT} long"), keys, keys, null_safe,
                      left_out, right_out)
    assert got.column_names == want.columns
    assert _bag(got) == _spark_bag(want)
    if keys and not null_safe:
        assert _bag(got) == Counter({(2, "b", 10): 6, (2, "b", 11): 2, (2, "d", 10): -3, (2, "d", 11): -1})
    if null_safe:
        assert _bag(got)[(None, "c", 12)] == 1  # NULL <=> NULL
    empty = zsets.join(left.slice(0, 0), right, keys, keys, null_safe, left_out, right_out)
    assert empty.num_rows == 0 and empty.column_names == ["k", "v", "x", WEIGHT]


@pytest.mark.parametrize("null_safe", [False, True])
def test_join_matches_keys_of_different_numeric_types_as_spark_compares_them(null_safe):
    """An ``int`` key (a literal, ``SELECT 2``) against a ``bigint`` column matches as bigints,
    an integer against a double as doubles, a NULL-typed key as the other side's type; each
    output column keeps its own type (Arrow's join refused mixed types: the step ran on Spark)."""
    left = _table([(1, 1), (2, 1), (None, 1)], ["k", WEIGHT], [pa.int64(), pa.int64()])
    for right_type in (pa.int32(), pa.float64(), pa.null()):
        values = [None, None, None] if right_type == pa.null() else [2, 3, None]
        right = _table([(v, 1) for v in values], ["j", WEIGHT], [right_type, pa.int64()])
        got = zsets.join(left, right, ["k"], ["j"], null_safe, [("k", "k")], [("j", "j")])
        assert got.schema.field("k").type == pa.int64() and got.schema.field("j").type == right_type
        want = Counter({(2, 2): 1}) if right_type != pa.null() else Counter()
        if null_safe:
            want[(None, None)] += 1 if right_type != pa.null() else 3
        assert _bag(got) == want, right_type


def test_consolidate_sums_weights_and_drops_zeros():
    t = _table([(1, "a", 1), (1, "a", -1), (2, None, 2), (2, None, 1)], ["k", "v", WEIGHT],
               [pa.int64(), pa.string(), pa.int64()])
    assert _bag(zsets.consolidate(t)) == Counter({(2, None): 3})


def test_a_global_sum_trace_of_wide_decimals_compacts_in_process():
    """The one row of a global aggregate's totals (decimal(38,0) limbs, decimal(38,2) sums)
    consolidates with pyarrow: each total kept in its column's type, zeros compared in that type
    (an int64 0 cast to decimal(38, s > 19) or to a Decimal's own inferred precision failed, and
    the rewrite fell back to Spark)."""
    from decimal import Decimal

    from spark_jobs.state.arrow_trace import consolidate

    big = pa.decimal128(38, 0)
    t = pa.table({"__rows": pa.array([3, -1], pa.int64()),
                  "__s1_d": pa.array([Decimal("123456789012345678901.25"), Decimal("-0.25")], pa.decimal128(38, 2)),
                  "__s3_l0": pa.array([Decimal(-10 ** 21), Decimal(7)], big)})
    out = consolidate(t, "sum")
    assert out.schema == t.schema
    assert out.to_pylist() == [{"__rows": 2, "__s1_d": Decimal("123456789012345678901.00"),
                                "__s3_l0": Decimal(-10 ** 21 + 7)}]
    small = pa.table({"__s0_d": pa.array([Decimal("0.5"), Decimal("-0.5")], pa.decimal128(38, 30)),
                      "__s1_i": pa.array([Decimal(0), Decimal(0)], big)})
    assert consolidate(small, "sum").num_rows == 0  # totals all zero: the row is dropped
    keyed = t.append_column("g", pa.array([1, 2], pa.int64()))
    assert consolidate(keyed, "sum", ["g"]).num_rows == 2


def test_select_takes_plain_columns_as_spark_resolves_them():
    t = _table([(1, 2, 1)], ["src", "edges_dst", WEIGHT], [pa.int64()] * 3)
    out = apply_map(t, [("src", "SRC"), ("dst", "`edges_dst`")], "UTC")
    assert out.column_names == ["src", "dst", WEIGHT] and out.to_pylist() == [{"src": 1, "dst": 2, WEIGHT: 1}]


def test_h_matches_the_spark_kernel(spark):
    delta = [("a", 1), ("b", -1), ("c", 2), (None, 1), ("d", -1)]
    before = [("b", 1), ("c", 1), ("d", 2), (None, -1), ("e", 1)]
    schema = f"s string, {WEIGHT} long"
    types = [pa.string(), pa.int64()]
    got = arrow_distinct.distinct_h(_table(delta, ["s", WEIGHT], types), _table(before, ["s", WEIGHT], types))
    want = spark_distinct.distinct_h(from_tuples(spark, delta, schema), from_tuples(spark, before, schema),
                                     broadcast_delta=False)
    assert _bag(got) == _spark_bag(want) == Counter({("a",): 1, ("b",): -1})  # c, d and NULL do not cross 0


def test_multi_column_semi_and_anti_match_null_safe_with_spark_float_equality():
    """``zsets.semi``/``anti`` on several keys (one hash join, no Python per row): NULL matches
    NULL, NaN matches NaN, -0.0 matches 0.0, the probe's key types cast to the table's."""
    import random

    from spark_jobs.state.float_keys import canonical_value as cv

    rng = random.Random(1)
    floats, ints = [None, 0.0, -0.0, float("nan"), 1.5], [None, 1, 2]
    for _ in range(200):
        n, m = rng.randint(0, 12), rng.randint(0, 6)
        t = pa.table({"a": [rng.choice(floats) for _ in range(n)], "b": [rng.choice(ints) for _ in range(n)],
                      WEIGHT: [1] * n}, schema=pa.schema([("a", pa.float64()), ("b", pa.int64()), (WEIGHT, pa.int64())]))
        p = pa.table({"x": [rng.choice(floats) for _ in range(m)], "y": [rng.choice(ints) for _ in range(m)]},
                     schema=pa.schema([("x", pa.float64()), ("y", pa.int32())]))
        wanted = set(zip(map(cv, p["x"].to_pylist()), map(cv, p["y"].to_pylist())))
        hits = [(cv(a), cv(b)) in wanted for a, b in zip(t["a"].to_pylist(), t["b"].to_pylist())]
        assert zsets.semi(t, p, ["a", "b"], ["x", "y"]).num_rows == sum(hits)
        assert zsets.anti(t, p, ["a", "b"], ["x", "y"]).num_rows == n - sum(hits)
        assert zsets.matches(t, p, ["a", "b"], ["x", "y"]).to_pylist() == hits
    nulls = pa.table({"a": pa.nulls(3), "b": pa.array([1, 2, None], pa.int64()), WEIGHT: [1, 1, 1]})  # a NULL type
    probe = pa.table({"a": pa.nulls(2), "b": pa.array([2, None], pa.int64())})
    assert zsets.matches(nulls, probe, ["a", "b"], ["a", "b"]).to_pylist() == [False, True, True]
