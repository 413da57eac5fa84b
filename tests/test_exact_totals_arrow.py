"""The Arrow kernel's running totals (``arrow/aggregate.linear_step``) against the Spark kernel's
(``spark/aggregate.aggregate_linear_step``): the same stream of changes (doubles whose sums
depend on the order of addition, specials, longs near 2^55, decimal(38,18) that Spark's product
would round, decimal(12,4), NULLs, groups emptied, the global group) over one totals trace that
the two engines append to by turns, read in a shuffled order by both at every step. Totals and
output rows must be equal bit for bit (``repr`` of every value). One Spark job per step."""
from __future__ import annotations

import decimal
import math
import random
from collections import Counter

import pyarrow as pa
import pytest

from spark_jobs.executor.spark import zset
from spark_jobs.executor.arrow import aggregate as arrow_agg
from spark_jobs.executor.engine import NotLocal
from spark_jobs.executor.spark.aggregate import aggregate_linear_step
from spark_jobs.executor.spark.zset import WEIGHT
from tests.test_exact_totals import NASTY
from tests.test_operators_aggregate import collect_tagged

D = decimal.Decimal
SCHEMA = "g string, x double, i long, m decimal(38,18), k decimal(12,4)"
ARROW = pa.schema([("g", pa.string()), ("x", pa.float64()), ("i", pa.int64()), ("m", pa.decimal128(38, 18)),
                   ("k", pa.decimal128(12, 4)), (WEIGHT, pa.int64())])
AGGS = (("n", "count", None, False), ("sx", "sum", "x", False), ("ax", "avg", "x", False),
        ("ai", "avg", "i", False), ("sm", "sum", "m", False), ("ak", "avg", "k", False), ("ck", "count", "k", False))
XS = (*NASTY, math.inf, -math.inf, math.nan, -0.0, None)
IS = (2 ** 55 + 1, -(2 ** 54), 7, -3, None)
MS = (D("12345678901.123456789012345678"), D("-0.000000000000000001"), D("2.5"), None)
KS = (D("12.3456"), D("-0.0001"), D("99999999.9999"), None)


def _row(rng: random.Random) -> tuple:
    return (rng.choice(("a", "b", None)), rng.choice(XS), rng.choice(IS), rng.choice(MS), rng.choice(KS))


def _change(rng: random.Random, live: Counter) -> list[tuple[tuple, int]]:
    """Up to 4 inserts and deletes of live rows; sometimes every row of a group is deleted."""
    rows: list[tuple[tuple, int]] = []
    alive = [t for t, w in live.items() if w > 0]
    if alive and rng.random() < 0.2:
        g = rng.choice(alive)[0]
        rows += [(t, -live[t]) for t in alive if t[0] == g]
    for _ in range(rng.randint(0, 4)):
        alive = [t for t, w in live.items() if w > 0 and all(t != r for r, _ in rows)]
        if alive and rng.random() < 0.4:
            t = rng.choice(alive)
            rows.append((t, -rng.randint(1, live[t])))
        else:
            rows.append((_row(rng), rng.choice((1, 2, 3))))
    return rows


def _arrow(rows: list[tuple[tuple, int]]) -> pa.Table:
    columns = list(zip(*[(*t, w) for t, w in rows])) if rows else [[] for _ in ARROW]
    return pa.Table.from_arrays([pa.array(list(c), f.type) for c, f in zip(columns, ARROW)], schema=ARROW)


def _table_rows(table: pa.Table) -> list[tuple]:
    return [tuple(r.values()) for r in table.to_pylist()]


def _bits(rows) -> Counter:
    """Rows keyed by the exact text of their values (``repr`` tells every double apart, -0.0 too)."""
    return Counter(repr(tuple(r)) for r in rows)


@pytest.mark.parametrize("group_by", [("g",), ()], ids=["grouped", "global"])
def test_arrow_totals_are_the_spark_totals_bit_for_bit(spark, group_by):
    rng = random.Random(29 + len(group_by))
    live: Counter = Counter()
    trace: list[tuple] = []  # the totals trace, as rows: appended by Spark and Arrow by turns
    spark_schema, arrow_schema = None, None
    tz = spark.conf.get("spark.sql.session.timeZone")
    for step in range(5):
        rows = _change(rng, live) if step else [(_row(rng), 1) for _ in range(5)]
        for t, w in rows:
            live[t] += w
        rng.shuffle(trace)  # compaction and merges add parts up in any order
        prev = zset.from_tuples(spark, trace, spark_schema) if trace else None
        out, totals = aggregate_linear_step(zset.from_rows(spark, rows, SCHEMA), prev, group_by, AGGS, step == 0,
                                            broadcast_delta=False, node="agg")
        got = collect_tagged({"out": out, "tot": totals})
        prev_arrow = (pa.Table.from_pylist([dict(zip(arrow_schema.names, t)) for t in trace], arrow_schema)
                      if trace else None)
        arrow_out, arrow_tot = arrow_agg.linear_step(_arrow(rows), prev_arrow, group_by, AGGS, step == 0, tz, "agg")
        assert _bits(_table_rows(arrow_out)) == _bits((*t, w) for t, w in got["out"]), \
            f"step {step}: output rows differ"
        assert _bits(_table_rows(arrow_tot)) == _bits(t for t, _ in got["tot"]), f"step {step}: totals differ"
        if spark_schema is None:
            spark_schema, arrow_schema = totals.schema, arrow_tot.schema
            assert arrow_schema.names == spark_schema.fieldNames()
        trace += _table_rows(arrow_tot) if step % 2 else [t for t, _ in got["tot"]]


def test_values_spark_refuses_hand_the_step_to_spark():
    """A double beyond the exact range and a bigint sum overflow: Arrow steps aside (Spark then
    refuses the step with its message, ``test_exact_totals``)."""
    too_big = _arrow([(("a", 1e31, 1, None, None), 1)])
    with pytest.raises(NotLocal, match="too large for an exact sum"):
        arrow_agg.linear_step(too_big, None, ("g",), (("s", "sum", "x", False),), True, "UTC", "n")
    overflow = _arrow([(("a", 1.0, 2 ** 62, None, None), 2)])
    with pytest.raises(NotLocal, match="overflows bigint"):
        arrow_agg.linear_step(overflow, None, ("g",), (("t", "sum", "i", False),), True, "UTC", "n")
