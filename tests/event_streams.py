"""Random event streams for the tests of windows and interval joins: rows ``(key, ts, value)``
of one timed input around each step's time, some out of order inside the lateness, some late,
and deletes of rows the input accepted; with the rule the engine applies (a row below the
watermark committed before the step is late), so a test knows the rows that were not late."""
from __future__ import annotations

import os
import random
from collections import Counter
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.runtime.event_time import micros
from tests.policies import config

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
MIN = 60_000_000


class EventSource:
    """One input's events: ``counts`` rows a step (a choice), each ``backs`` minutes (a choice)
    before the step's time, keys in ``range(keys)``, values from ``values``; ``deletes`` (a
    choice) accepted rows deleted a step. ``accepted``: the rows that were not late, as a bag."""

    def __init__(self, rng: random.Random, step_min: int, counts: Sequence[int], backs: Sequence[int], keys: int,
                 values: Sequence[int], deletes: Sequence[int]) -> None:
        self.rng, self.step_min = rng, step_min
        self.counts, self.backs, self.keys, self.values, self.deletes = counts, backs, keys, values, deletes
        self.accepted: Counter = Counter()
        self.late = 0  # of the last step

    def step(self, t: int, watermark: int | None) -> Counter:
        """The change of step ``t`` (``self.late``: how many of its rows, by weight, are late)."""
        rng, now = self.rng, T0 + timedelta(minutes=self.step_min * t)
        change: Counter = Counter()
        for _ in range(rng.choice(self.counts)):
            ts = now - timedelta(minutes=rng.choice(self.backs), seconds=rng.randrange(60))
            change[(rng.randrange(self.keys), ts, rng.choice(self.values))] += rng.choice((1, 1, 2))
        live = sorted(self.accepted.elements(), key=repr)
        for row in rng.sample(live, min(len(live), rng.choice(self.deletes))):
            change[row] -= 1
        change = Counter({r: w for r, w in change.items() if w})
        self.late = 0
        for row, w in change.items():
            if watermark is not None and micros(row[1]) < watermark:
                self.late += abs(w)
            else:
                self.accepted[row] += w
        self.accepted = +self.accepted
        return change


def step_config(root, engine: str):
    """The default profile on ``engine``; views are not published as Delta tables (not under test
    here, and a third of an in-process step's time)."""
    cfg = config(root, engine=engine)
    return replace(cfg, views=replace(cfg.views, enabled=False))


def write_change(root: str, name: str, t: int, schema: pa.Schema, rows: Counter) -> None:
    """Step ``t``'s change of input ``name`` as a Parquet file of its inbox (``_weight`` last)."""
    folder = os.path.join(root, "inbox", name)
    os.makedirs(folder, exist_ok=True)
    cols = list(zip(*[(*r, w) for r, w in rows.items()])) if rows else [[] for _ in schema]
    pq.write_table(pa.table([pa.array(c, f.type) for c, f in zip(cols, schema)], schema=schema),
                   os.path.join(folder, f"t{t:04d}.parquet"))


def naive(value):
    """Datetimes as naive UTC ``datetime`` (DuckDB's TIMESTAMP; Arrow gives aware UTC, and pandas
    ``Timestamp`` for the nanosecond timestamps of Spark's Parquet files)."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(timezone.utc).replace(tzinfo=None)
        return datetime(*value.timetuple()[:6], value.microsecond)
    return value


def integrate(integrated: Counter, delta: Counter) -> None:
    """Add a view delta (rows -> weight) to a running bag, datetimes made comparable."""
    for row, w in delta.items():
        integrated[tuple(naive(v) for v in row)] += w


def same_bags(got: Counter, expected: Counter, where: str) -> None:
    got = Counter({r: w for r, w in got.items() if w})
    assert got == expected, f"{where}: {sorted(got - expected)} / {sorted(expected - got)}"
