"""The in-process bag check (``bag_check.negative_tuples``) against a Python reference, on random
integrals and changes, without Spark: the tuples it refuses are exactly those whose integrated
weight would go below zero. Changes mix inserts of new keys, deletes, a tuple inserted and deleted
in the same change, rows of a deleted key that differ in another column, NULLs, -0.0 and NaN (one
key to Spark); the integral is a sorted trace in small row groups, looked up (few keys) or streamed
(``BagCheckPolicy``: more keys than the narrowing bounds), so both of its paths are compared, and
the lookup both keeping its decoded row groups and decoding them once (``cache``)."""
from __future__ import annotations

import math
import random
from collections import Counter

import pyarrow as pa
import pytest

from spark_jobs.executor.bag_check import BEFORE, CHANGE, negative_tuples
from spark_jobs.policy import BagCheckPolicy, NarrowPolicy, StatePolicy
from spark_jobs.state.arrow_trace import write_dir
from spark_jobs.state.fs import LocalFileSystem
from spark_jobs.state.lookup import TraceFiles

SCHEMA = pa.schema([("k", pa.int64()), ("s", pa.string()), ("x", pa.float64()), ("_weight", pa.int64())])


def _key(row: tuple) -> tuple:
    """Spark's equality of a tuple: -0.0 is 0.0, every NaN one NaN."""
    k, s, x = row
    if isinstance(x, float):
        x = "nan" if math.isnan(x) else x + 0.0
    return (k, s, x)


def _table(rows: list[tuple]) -> pa.Table:
    return pa.table([list(c) for c in zip(*rows)] if rows else [[], [], [], []], schema=SCHEMA)


def _value(rng: random.Random, key: int | None) -> tuple:
    return (key, rng.choice(["a", "b", None]), rng.choice([1.5, 0.0, -0.0, float("nan"), None, 2.0]))


def _case(rng: random.Random) -> tuple[list[tuple], list[tuple]]:
    held = [_value(rng, rng.choice([None, *range(60)])) for _ in range(rng.randint(0, 300))]
    integral = [(*t, rng.randint(1, 3)) for t in held]
    change: list[tuple] = []
    for _ in range(rng.randint(1, 80)):
        pick = rng.random()
        if pick < 0.3 and held:  # delete (some copies of) a held tuple, possibly more than held
            change.append((*rng.choice(held), -rng.randint(1, 4)))
        elif pick < 0.5:  # delete a tuple that shares a key with a held one, or nothing at all
            change.append((*_value(rng, rng.choice([None, *range(70)])), -1))
        elif pick < 0.6 and change:  # insert again what the change deletes (its net may be >= 0)
            t = rng.choice(change)
            change.append((*t[:3], rng.randint(1, 3)))
        else:  # an insert of a new key
            change.append((*_value(rng, rng.randint(100, 200)), rng.randint(1, 2)))
    return integral, change


def _reference(integral: list[tuple], change: list[tuple]) -> dict[tuple, tuple[int, int]]:
    before, delta = Counter(), Counter()
    for *t, w in integral:
        before[_key(tuple(t))] += w
    for *t, w in change:
        delta[_key(tuple(t))] += w
    return {t: (before[t], d) for t, d in delta.items() if d < 0 and before[t] + d < 0}


@pytest.mark.parametrize("streamed,cache", [(False, True), (False, False), (True, True)])
def test_negative_tuples_match_the_reference(tmp_path, streamed, cache):
    rng = random.Random(25)
    fs = LocalFileSystem()
    # streamed: the narrowing bounds admit nothing, so every lookup streams (``TraceFiles.matching``)
    narrow = NarrowPolicy(max_keys=0, max_decoded_rows=0) if streamed else NarrowPolicy()
    for case in range(40):
        integral, change = _case(rng)
        files = None
        if integral:
            path = str(tmp_path / f"i{streamed}{cache}-{case}")
            write_dir(fs, path, _table(integral), StatePolicy(sorted_row_group_bytes=1024), sort_by=["k", "s", "x"])
            paths = [full for full, _ in fs.data_files(path)]
            files = TraceFiles(fs, paths, SCHEMA)
        # cache False: the integral's row groups decoded once, strings as dictionaries, not kept
        got = negative_tuples(_table(change), files, narrow, BagCheckPolicy(), cache=cache)
        found = {} if got is None else {_key((r["k"], r["s"], r["x"])): (r[BEFORE], r[CHANGE]) for r in got.to_pylist()}
        assert found == _reference(integral, change), case
