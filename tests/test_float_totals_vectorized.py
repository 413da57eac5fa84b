"""The vectorized exact sums of doubles (``arrow/aggregate._float_delta_totals``) give the rows,
types and totals of the reference Python path, step after step, on random changes with deletes,
NULL keys and arguments, negative, tiny, huge and subnormal values, weights up to 3 (no Spark:
seconds); what it cannot take (NaN, infinities, too large values, float keys) falls back."""
from __future__ import annotations

import random

import pyarrow as pa
import pytest

from spark_jobs.executor.arrow import aggregate as agg
from spark_jobs.spec.model import WEIGHT
from tests.test_counts_vectorized import compare_paths

AGGS = [("s", "sum", "x", False), ("a", "avg", "x", False), ("n", "count", None, False),
        ("v", "sum", "x * 3 - y", False)]
SCHEMA = pa.schema([("g", pa.int64()), ("d", pa.date32()), ("x", pa.float64()), ("y", pa.float64()),
                    (WEIGHT, pa.int64())])
VALUES = [None, 0.0, -0.0, 1.5, -2.25, 0.1, 1e-300, 5e-324, -3.7e29, 1.2e29, 123456.789, 2.0 ** 52 + 1]


def _change(rng: random.Random, live: list[tuple]) -> pa.Table:
    rows = []
    for _ in range(rng.randint(0, 60)):
        if live and rng.random() < 0.35:
            row = live.pop(rng.randrange(len(live)))
            rows.append((*row, -1))
        else:
            row = (rng.choice([None, 1, 2, 3]), rng.choice([None, 19000, 19001]), rng.choice(VALUES),
                   rng.choice(VALUES[:6]))
            live.append(row)
            rows.append((*row, rng.choice([1, 1, 2, 3])))
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], schema=SCHEMA)


@pytest.mark.parametrize("group_by", [("g",), ("g", "d")])
def test_vectorized_float_sums_equal_the_python_path(group_by, monkeypatch):
    calls = []
    real = agg._float_delta_totals
    monkeypatch.setattr(agg, "_float_delta_totals", lambda *a: calls.append(real(*a) is not None) or real(*a))
    rng = random.Random(7 + len(group_by))
    live: list[tuple] = []
    compare_paths([_change(rng, live) for _ in range(25)], group_by, AGGS)
    assert sum(calls) >= 20  # the vectorized path ran (not the fallback)


def test_what_the_vectorized_sums_cannot_take_falls_back():
    def table(x, g=pa.int64()):
        return pa.table({"g": pa.array([1], g), "x": pa.array([x], pa.float64()), WEIGHT: pa.array([1], pa.int64())})

    aggs = [("s", "sum", "x", False)]
    assert agg._float_delta_totals(table(1.5), ("g",), aggs, "UTC", "n") is not None
    for x in (float("nan"), float("inf"), 2.0 ** 100):
        assert agg._float_delta_totals(table(x), ("g",), aggs, "UTC", "n") is None
    assert agg._float_delta_totals(table(1.5, pa.float64()), ("g",), aggs, "UTC", "n") is None
    assert agg._float_delta_totals(table(1.5), (), aggs, "UTC", "n") is None
