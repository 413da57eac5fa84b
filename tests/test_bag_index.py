"""The bag check by digest sidecars (``state/bag_index.py``) against a Python reference, on random
integrals and changes, without Spark. The integral is spread over several directories, some with
sidecars and some without (files Spark or an older version wrote), and a sidecar that does not
match its file (another row count, another schema) is ignored: whatever the mix, the tuples the
check refuses are exactly those whose integrated weight would go below zero, and the digests are
read where they exist. The digest itself follows Spark's equality (-0.0 is 0.0, one NaN) and tells
apart tuples that differ in any column, NULL included."""
from __future__ import annotations

import os
import random

import numpy as np
import pyarrow as pa
import pytest

from spark_jobs.executor.bag_check import BEFORE, CHANGE, negative_tuples
from spark_jobs.policy import BagCheckPolicy, NarrowPolicy, StatePolicy
from spark_jobs.state import bag_index
from spark_jobs.state.arrow_trace import write_dir
from spark_jobs.state.fs import LocalFileSystem
from spark_jobs.state.lookup import TraceFiles

from tests.test_bag_check_driver import SCHEMA, _case, _key, _reference, _table

SECRET = bytes(range(32))


def _write(fs, path: str, rows: list[tuple], sidecar: bool) -> list[str]:
    each = (lambda p, t: bag_index.write_sidecar(p, t, SECRET)) if sidecar else None
    write_dir(fs, path, _table(rows), StatePolicy(sorted_row_group_bytes=1024, rows_per_file=97),
              sort_by=["k", "s", "x"], each_file=each)
    return [full for full, _ in fs.data_files(path)]


@pytest.mark.parametrize("streamed,small", [(False, 2_000), (True, 2_000), (False, 0)])
def test_the_check_by_digest_matches_the_reference(tmp_path, monkeypatch, streamed, small):
    monkeypatch.setattr(bag_index, "SMALL_MATCH_ROWS", small)  # 0: every match by group_by and join
    rng = random.Random(2511)
    fs = LocalFileSystem()
    narrow = NarrowPolicy(max_keys=0, max_decoded_rows=0) if streamed else NarrowPolicy()
    used = 0
    for case in range(60):
        integral, change = _case(rng)
        if rng.random() < 0.5:  # keys without NULL: the fast path is taken (a NULL key is looked up exactly)
            integral = [r for r in integral if r[0] is not None]
            change = [r for r in change if r[0] is not None] or [(1, "a", 1.5, -1)]
        files = None
        if integral:
            paths: list[str] = []
            cut = sorted(rng.sample(range(len(integral) + 1), 2))
            for i, part in enumerate((integral[:cut[0]], integral[cut[0]:cut[1]], integral[cut[1]:])):
                if part:
                    paths += _write(fs, str(tmp_path / f"c{streamed}{small}-{case}-{i}"), part,
                                    sidecar=rng.random() < 0.7)
            if paths and rng.random() < 0.2:  # a sidecar of another file's rows: ignored (row count, schema)
                side = bag_index.sidecar_path(rng.choice(paths))
                if os.path.exists(side):
                    other = _table([(1, "z", 1.0, 5)] * 3)
                    bag_index.write_sidecar(side[:-len(".arrow")].replace(bag_index.PREFIX, ""), other, SECRET)
            files = TraceFiles(fs, paths, SCHEMA)
        before = bag_index.STATS.indexed_files
        got = negative_tuples(_table(change), files, narrow, BagCheckPolicy(), cache=False, secret=SECRET)
        used += bag_index.STATS.indexed_files - before
        found = {} if got is None else {_key((r["k"], r["s"], r["x"])): (r[BEFORE], r[CHANGE]) for r in got.to_pylist()}
        assert found == _reference(integral, change), case
    assert used > 20  # the digests were read, not only the exact path


def test_digests_follow_sparks_equality_and_tell_tuples_apart():
    nan2 = np.frombuffer(np.array([0x7FF8000000000001], dtype=np.uint64).tobytes(), dtype=np.float64)[0]
    rows = [(1, "a", 0.0), (1, "a", -0.0), (1, "a", float("nan")), (1, "a", float(nan2)),
            (1, None, 0.0), (1, "", 0.0), (None, "a", 0.0), (0, "a", 0.0), (1, "b", 0.0), (1, "a", None),
            (2**40, "a", 0.0), (1, "a" * 100, 1e300)]
    t = _table([(*r, 1) for r in rows])
    d0, d1 = bag_index.digests(t, ["k", "s", "x"], SECRET)
    pairs = list(zip(d0.tolist(), d1.tolist()))
    assert pairs[0] == pairs[1] and pairs[2] == pairs[3]  # -0.0 is 0.0; every NaN is one NaN
    distinct = [pairs[0], pairs[2]] + pairs[4:]
    assert len(set(distinct)) == len(distinct)
    other = bag_index.digests(t, ["k", "s", "x"], bytes(32))  # another store's secret: other digests
    assert list(zip(other[0].tolist(), other[1].tolist()))[0] != pairs[0]
    # the same rows in another chunk of the same table digest alike (keys per schema, not per call)
    again = bag_index.digests(pa.concat_tables([t.slice(5), t.slice(0, 5)]), ["k", "s", "x"], SECRET)
    assert list(zip(again[0].tolist(), again[1].tolist())) == pairs[5:] + pairs[:5]


def test_the_store_secret_is_made_once_and_kept(tmp_path):
    assert bag_index.secret(str(tmp_path)) is None
    made = bag_index.secret(str(tmp_path), create=True)
    assert made is not None and len(made) == 32
    assert bag_index.secret(str(tmp_path), create=True) == made == bag_index.secret(str(tmp_path))
    assert os.stat(tmp_path / bag_index.SECRET_FILE).st_mode & 0o077 == 0


FILTERED = """
name: bagidx
inputs:
  items:
    schema: {k: long, v: string, x: double}
    source: {kind: changes, path: inbox/items, format: parquet}
nodes:
  kept:   {op: filter, input: items, where: "k >= 0"}
  uniq:   {op: distinct, input: kept}
  counts: {op: aggregate, input: kept, group_by: [k], aggregates: {n: "count(*)"}}
outputs:
  uniq: {}
  counts: {}
"""


def _write_items(root, name: str, rows: list[tuple]) -> str:
    import pyarrow.parquet as pq

    folder = root / "inbox" / "items"
    os.makedirs(folder, exist_ok=True)
    path = str(folder / name)
    pq.write_table(pa.table({"k": pa.array([r[0] for r in rows], pa.int64()), "v": [r[1] for r in rows],
                             "x": pa.array([r[2] for r in rows], pa.float64()),
                             "_weight": pa.array([r[3] for r in rows], pa.int64())}), path)
    return path


def test_in_process_steps_write_sidecars_and_refuse_exactly_what_the_reference_refuses(spark, tmp_path):
    """A circuit whose input integral only the bag check reads (filtered first, as W1's): its
    in-process steps write a sidecar per file and check deletes by digest; on a random stream of
    valid deletes, over-deletes and ghosts, the steps refused are the reference's, with the
    exact check's message, and the views are a recompute of what was accepted."""
    from collections import Counter

    from spark_jobs.executor.sources import InputRefused
    from spark_jobs.runtime.step import run_step
    from tests import oracle
    from tests.test_bag_check import _rt

    path = tmp_path / "c.yaml"
    path.write_text(FILTERED)
    rt = _rt(str(path), tmp_path)
    rng = random.Random(7)
    held: Counter = Counter()
    used = bag_index.STATS.indexed_files
    for step in range(9):
        rows = [(rng.randint(0, 40), rng.choice(["a", "b", None]), rng.choice([0.5, -0.0, 0.0, None]), 1)
                for _ in range(rng.randint(5, 30))]
        alive = [t for t, w in held.items() if w > 0]
        for t in rng.sample(alive, min(len(alive), rng.randint(0, 8))):
            rows.append((*t, -rng.randint(1, held[t])))
        ghost = step in (4, 7)
        if ghost:  # a tuple that was never inserted, or one more copy than held, sharing a held key
            t = rng.choice(alive)
            rows.append((t[0], "ghost", 1.0, -1) if step == 4 else (*t, -(held[t] + 1)))
            rows = [r for r in rows if r[:3] != t[:3] or r[3] < -held[t]]
        change: Counter = Counter()
        for *t, w in rows:
            change[(t[0], t[1], 0.0 if t[2] == 0 else t[2])] += w
        bad = any(held[t] + w < 0 for t, w in change.items() if w < 0)
        assert bad == ghost, step
        written = _write_items(tmp_path, f"{step:03d}.parquet", rows)
        if bad:
            with pytest.raises(InputRefused, match="would go below zero"):
                run_step(rt)
            os.remove(written)
            continue
        report = run_step(rt)
        assert report.engine == "arrow", report.engine_reason
        held.update(change)
    sides = [f for d, _, fs in os.walk(tmp_path / "_dbsp") for f in fs if f.startswith(bag_index.PREFIX)]
    assert sides and bag_index.STATS.indexed_files > used
    counts: Counter = Counter()
    for (k, _v, _x), w in held.items():
        counts[k] += w
    assert oracle.view_counter(rt, "uniq") == Counter({t: 1 for t, w in held.items() if w > 0})
    assert oracle.view_counter(rt, "counts") == Counter({(k, n): 1 for k, n in counts.items() if n > 0})


def test_state_with_sidecars_and_without_agrees_on_both_engines(spark, tmp_path):
    """The filtered circuit stepped on Spark, on Arrow and alternately (Arrow's files with
    sidecars, Spark's without, read by each other): the same view deltas at every step; the
    alternating run's Arrow steps check deletes against a trace of both kinds of files."""
    from tests.engines import STRINGS, maybe, run_both

    items = ({"k": "long", "v": "string", "x": "double"},
             {"k": lambda r: r.choice(range(5)), "v": STRINGS, "x": lambda r: maybe(r, [0.5, -0.0, 0.0, float("nan")])})
    used = bag_index.STATS.indexed_files
    engines = run_both(tmp_path, FILTERED, {"items": items}, steps=4, seed=25, sizes=lambda t: (10, 6))
    assert engines == ["arrow", "spark", "arrow", "spark"]
    assert bag_index.STATS.indexed_files > used


def test_opened_sidecars_are_kept_until_their_trace_moves_on(tmp_path):
    fs = LocalFileSystem()
    trace = tmp_path / "traces" / "I(x)"
    old = _write(fs, str(trace / "t1"), [(1, "a", 1.0, 1), (2, "b", 2.0, 1)], sidecar=True)
    new = _write(fs, str(trace / "t2"), [(1, "a", 1.0, 1)], sidecar=True)
    neg = _table([(1, "a", 1.0, -1)])
    assert bag_index.before(old + new, [2, 1], neg, ["k", "s", "x"], "k", SECRET)[0].tolist() == [2]
    opened = {at[0] for at in bag_index._OPENED}
    assert {bag_index.sidecar_path(p) for p in old + new} <= opened
    bag_index.forget_others(new)  # t1 compacted away: its map is dropped, t2's kept
    opened = {at[0] for at in bag_index._OPENED}
    assert bag_index.sidecar_path(new[0]) in opened and bag_index.sidecar_path(old[0]) not in opened
