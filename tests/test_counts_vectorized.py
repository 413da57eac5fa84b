"""The vectorized grouped count step (``arrow/aggregate._counts_step``) gives the rows, types
and totals of the reference Python path, step after step, on random changes with deletes, NULL
keys and arguments, -0.0/NaN keys and timestamps (no Spark: seconds)."""
from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pytest

from spark_jobs.executor.arrow import aggregate as agg
from spark_jobs.executor.arrow.zsets import consolidate, total
from spark_jobs.spec.model import WEIGHT

AGGS = [("n", "count", None, False), ("nx", "count", "x", False), ("nx2", "count", "x", False),
        ("ny", "count", "y + 1", False)]
SCHEMA = pa.schema([("g", pa.int64()), ("f", pa.float64()), ("t", pa.timestamp("us", tz="UTC")),
                    ("x", pa.string()), ("y", pa.int64()), (WEIGHT, pa.int64())])
BASE = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _change(rng: random.Random, live: list[tuple]) -> pa.Table:
    rows = []
    for _ in range(rng.randint(0, 40)):
        if live and rng.random() < 0.35:
            row = live.pop(rng.randrange(len(live)))
            rows.append((*row, -1))
        else:
            row = (rng.choice([None, 1, 2, 3]), rng.choice([0.0, -0.0, float("nan"), 1.5, None]),
                   BASE + dt.timedelta(minutes=rng.choice([0, 10])), rng.choice([None, "a", "b"]),
                   rng.choice([None, 4, 5]))
            live.append(row)
            rows.append((*row, 1))
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], schema=SCHEMA)


def _sorted(table: pa.Table) -> list:
    return sorted(map(repr, consolidate(table).to_pylist())) if table.num_rows else []  # repr: NaN == NaN


@pytest.mark.parametrize("group_by", [("g",), ("g", "f"), ("t", "g", "x")])
def test_vectorized_counts_equal_the_python_path(group_by):
    rng = random.Random(hash(group_by) & 0xFFFF)
    live: list[tuple] = []
    compare_paths([_change(rng, live) for _ in range(25)], group_by, AGGS)


def compare_paths(deltas: list[pa.Table], group_by: tuple, aggs: list) -> None:
    """Step both paths of ``_linear_step`` through ``deltas``: the same rows, types and totals."""
    state_fast = state_slow = None
    for step, delta in enumerate(deltas):
        fast = agg._linear_step(delta, state_fast, group_by, aggs, step == 0, "UTC", "n", vectorized=True)
        slow = agg._linear_step(delta, state_slow, group_by, aggs, step == 0, "UTC", "n", vectorized=False)
        assert fast[0].schema == slow[0].schema and fast[1].schema == slow[1].schema
        assert _sorted(fast[0]) == _sorted(slow[0]), f"step {step}: view delta"
        assert sorted(map(repr, fast[1].to_pylist())) == sorted(map(repr, slow[1].to_pylist())), f"step {step}: totals"
        state_fast = fast[1] if state_fast is None else total([state_fast, fast[1]])
        state_slow = slow[1] if state_slow is None else total([state_slow, slow[1]])
