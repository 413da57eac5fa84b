"""The columnar min/max step (``arrow/extrema_columns``) equals the row-by-row one on random
changes: same new rows, same undecided groups; and it declines inputs it does not handle."""
from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pytest

from spark_jobs.executor.arrow import aggregate as agg
from spark_jobs.executor.arrow import extrema_columns as ec
from spark_jobs.spec.model import WEIGHT


def _tables(rng: random.Random, two_keys: bool, nulls: bool, aggs: list) -> tuple[pa.Table, pa.Table, pa.Schema]:
    """A change (inserts and deletes) and old output rows, one per group with weight 1."""
    keys = ["k", "j"] if two_keys else ["k"]

    def key() -> tuple:
        return tuple(rng.randrange(6) for _ in keys)

    def value() -> int | None:
        return None if nulls and rng.random() < 0.15 else rng.randrange(8)

    change: Counter = Counter()
    for _ in range(rng.randrange(0, 40)):
        change[(*key(), value(), value())] += rng.choice([-2, -1, 1, 1, 3])
    change = Counter({r: w for r, w in change.items() if w})
    rows = list(change)
    cols = {c: pa.array([r[i] for r in rows], pa.int64()) for i, c in enumerate([*keys, "a", "b"])}
    delta = pa.table({**cols, WEIGHT: pa.array([change[r] for r in rows], pa.int64())})
    groups = {r[:len(keys)] for r in rows} | {key() for _ in range(3)}
    old_rows = [g for g in groups if rng.random() < 0.7]
    fields = [pa.field(k, pa.int64()) for k in keys] + [pa.field(o, pa.int64()) for o, *_ in aggs]
    schema = pa.schema(fields + [pa.field(WEIGHT, pa.int64())])
    old = pa.table({**{k: pa.array([g[i] for g in old_rows], pa.int64()) for i, k in enumerate(keys)},
                    **{o: pa.array([value() for _ in old_rows], pa.int64()) for o, *_ in aggs},
                    WEIGHT: pa.array([1] * len(old_rows), pa.int64())}, schema=schema)
    return delta, old, schema


def _rows(t: pa.Table | None) -> Counter:
    return Counter() if t is None else Counter(tuple(r.values()) for r in t.to_pylist())


@pytest.mark.parametrize("seed", range(300))
def test_columnar_equals_rows(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ec, "FROM_ROWS", 0)  # the columnar version on every size
    rng = random.Random(seed)
    aggs = rng.choice([[("lo", "min", "a", False)], [("hi", "max", "a", False)],
                       [("lo", "min", "a", False), ("hi", "max", "b", False)]])
    two = seed % 3 == 0
    keys = ["k", "j"] if two else ["k"]
    delta, old, schema = _tables(rng, two, seed % 2 == 0, aggs)
    fast = agg.extrema_step(delta, old, keys, aggs, schema, "UTC")
    monkeypatch.setattr(agg, "extrema_columns", lambda *a, **k: None)
    slow = agg.extrema_step(delta, old, keys, aggs, schema, "UTC")
    assert _rows(fast[0]) == _rows(slow[0])
    assert set(_rows(fast[1])) == set(_rows(slow[1]))
    assert fast[0].schema == slow[0].schema


def test_declines_other_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ec, "FROM_ROWS", 0)
    aggs = [("lo", "min", "a", False)]
    schema = pa.schema([pa.field("k", pa.float64()), pa.field("lo", pa.int64()), pa.field(WEIGHT, pa.int64())])
    d = pa.table({"k": pa.array([1.0]), "a": pa.array([1]), WEIGHT: pa.array([-1])})
    old = pa.table({"k": pa.array([1.0]), "lo": pa.array([1]), WEIGHT: pa.array([1])}, schema=schema)
    assert ec.extrema_columns(d, {0: d.column("a")}, old, ["k"], aggs, schema) is None  # float keys
    d = pa.table({"k": pa.array([1, None]), "a": pa.array([1, 2]), WEIGHT: pa.array([-1, 1])})
    schema = pa.schema([pa.field("k", pa.int64()), pa.field("lo", pa.int64()), pa.field(WEIGHT, pa.int64())])
    old = pa.table({"k": pa.array([1]), "lo": pa.array([1]), WEIGHT: pa.array([1])}, schema=schema)
    assert ec.extrema_columns(d, {0: d.column("a")}, old, ["k"], aggs, schema) is None  # a NULL key
    d = pa.table({"k": pa.array([1]), "a": pa.array([1]), WEIGHT: pa.array([-1])})
    doubled = pa.table({"k": pa.array([1]), "lo": pa.array([1]), WEIGHT: pa.array([2])}, schema=schema)
    assert ec.extrema_columns(d, {0: d.column("a")}, doubled, ["k"], aggs, schema) is None  # weight 2
    assert ec.extrema_columns(d, {0: pa.array([1.5])}, old, ["k"], aggs, schema) is None  # a float argument
    monkeypatch.setattr(ec, "FROM_ROWS", 2)
    assert ec.extrema_columns(d, {0: d.column("a")}, old, ["k"], aggs, schema) is None  # small: in Python
