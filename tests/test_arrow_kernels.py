"""The Arrow kernels of the driver-side recursion loop agree with the Spark operators.

Joins (NULL keys match nothing, weights multiply, right columns renamed by ``right_out``),
consolidation, ``select`` of plain columns (Spark's case-insensitive names, backquotes), and
refusals (``NotLocal``) for what the driver loop leaves to Spark: expressions, null-safe joins.
"""
from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

from spark_jobs.executor.operators import arrow
from spark_jobs.executor.operators.join import join as spark_join
from spark_jobs.executor.operators.nested import JoinSpec
from spark_jobs.executor.zset import WEIGHT

LEFT = [(1, "a", 1), (2, "b", 2), (None, "c", 1), (2, "d", -1)]
RIGHT = [(2, 10, 3), (2, 11, 1), (None, 12, 1), (3, 13, 1)]


def _table(rows, names, types) -> pa.Table:
    return pa.table([pa.array([r[k] for r in rows], t) for k, t in enumerate(types)], names=names)


def _bag(table: pa.Table) -> Counter:
    return Counter({tuple(v for k, v in r.items() if k != WEIGHT): r[WEIGHT] for r in table.to_pylist()})


def test_join_matches_the_spark_join(spark):
    spec = JoinSpec(("k",), ("k",), False, (("k", "k"), ("v", "v")), (("x", "x"),))
    left = _table(LEFT, ["k", "v", WEIGHT], [pa.int64(), pa.string(), pa.int64()])
    right = _table(RIGHT, ["k", "x", WEIGHT], [pa.int64(), pa.int64(), pa.int64()])
    got = arrow.join(left, right, spec)
    want = spark_join(spark.createDataFrame(LEFT, f"k long, v string, {WEIGHT} long"),
                      spark.createDataFrame(RIGHT, f"k long, x long, {WEIGHT} long"),
                      ("k",), ("k",), False, spec.left_out, spec.right_out)
    assert got.column_names == want.columns
    assert _bag(got) == Counter({tuple(r[:-1]): r[-1] for r in want.collect()})
    assert _bag(got) == Counter({(2, "b", 10): 6, (2, "b", 11): 2, (2, "d", 10): -3, (2, "d", 11): -1})
    empty = arrow.join(left.slice(0, 0), right, spec)
    assert empty.num_rows == 0 and empty.column_names == ["k", "v", "x", WEIGHT]


def test_consolidate_sums_weights_and_drops_zeros():
    t = _table([(1, "a", 1), (1, "a", -1), (2, None, 2), (2, None, 1)], ["k", "v", WEIGHT],
               [pa.int64(), pa.string(), pa.int64()])
    assert _bag(arrow.consolidate(t)) == Counter({(2, None): 3})


def test_select_takes_plain_columns_and_refuses_expressions():
    t = _table([(1, 2, 1)], ["src", "edges_dst", WEIGHT], [pa.int64()] * 3)
    out = arrow.select(t, [("src", "SRC"), ("dst", "`edges_dst`")])
    assert out.column_names == ["src", "dst", WEIGHT] and out.to_pylist() == [{"src": 1, "dst": 2, WEIGHT: 1}]
    for expr in ("src + 1", "upper(src)", "nope"):
        with pytest.raises(arrow.NotLocal):
            arrow.select(t, [("x", expr)])


def test_null_safe_joins_and_products_are_left_to_spark():
    t = _table([(1, 1)], ["k", WEIGHT], [pa.int64()] * 2)
    for spec in (JoinSpec(("k",), ("k",), True, (("k", "k"),), ()), JoinSpec((), (), False, (("k", "k"),), ())):
        with pytest.raises(arrow.NotLocal):
            arrow.join(t, t, spec)
