"""Compaction keeps a trace's value, GC keeps the retained timesteps, writes follow the delta."""
from __future__ import annotations

import math
import os
import random
from collections import Counter
from decimal import Decimal as D

import pyarrow.parquet as pq
import pytest

from spark_jobs.state import StateStore, TimestepNotRetained, consolidate
from spark_jobs.policy import StatePolicy

SCHEMA = "k long, v string, _weight long"
SUM_SCHEMA = "g long, s decimal(38,2), n long"


def zset(df) -> dict:
    out: Counter = Counter()
    for r in (df.collect() if df is not None else []):
        d = r.asDict()
        w = d.pop("_weight")
        out[(d["k"], d["v"])] += w
    return {k: w for k, w in out.items() if w}


def sums(df) -> dict:
    if df is None:
        return {}
    return {r["g"]: (r["s"], r["n"]) for r in consolidate(df, "sum", ("g",)).collect()}


def dirs_on_disk(root, top="traces") -> set[str]:
    base = os.path.join(root, top)
    return {f"{top}/{g}/{d}" for g in (os.listdir(base) if os.path.isdir(base) else [])
            for d in os.listdir(os.path.join(base, g))}


def dir_bytes(path) -> int:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def test_compaction_preserves_value_and_gc_keeps_retained(spark, tmp_path):
    root = str(tmp_path / "st")
    s = StateStore(spark, root, "c", "fp", compact_fraction=0.5, keep_timesteps=2)
    rng = random.Random(7)
    acc: Counter = Counter()
    acc_sum: dict = {}
    history: list[tuple[dict, dict]] = []
    compacted = 0
    for t in range(1, 8):
        rows = [(rng.randrange(12), rng.choice("ab"), rng.choice([1, 1, 2, -1])) for _ in range(8)]
        srows = [(rng.randrange(4), rng.choice([D("1.5"), D("-1.5"), D("2.0")]), rng.choice([1, -1]))
                 for _ in range(6)]
        if t == 5:  # cancel one group exactly: its sums must disappear on compaction
            srows = [(g, -s_, -n) for g, (s_, n) in acc_sum.items() if g == 0] + srows[:3]
        with s.begin() as tx:
            tx.append("z", spark.createDataFrame(rows, SCHEMA), keys=("k",), sort_by=("k",))
            tx.append("agg", spark.createDataFrame(srows, SUM_SCHEMA), kind="sum", keys=("g",))
            m = tx.commit()
        for k, v, w in rows:
            acc[(k, v)] += w
        for g, x, n in srows:
            s_, n_ = acc_sum.get(g, (D(0), 0))
            acc_sum[g] = (s_ + x, n_ + n)
        history.append(({k: w for k, w in acc.items() if w},
                        {g: v for g, v in acc_sum.items() if v != (0.0, 0)}))
        if m.traces["z"].base and not m.traces["z"].deltas:
            compacted += 1
            assert len(m.traces["z"].base) == 1
        # the value is the same whatever the files are
        assert zset(s.read_trace("z")) == history[-1][0]
        assert sums(s.read_trace("agg")) == history[-1][1]  # decimals: exact
        if t > 1:  # the previous timestep is still retained and unchanged
            assert zset(s.read_trace("z", t - 1)) == history[-2][0]
            assert sums(s.read_trace("agg", t - 1)) == history[-2][1]
        # GC: only the last 2 manifests, and only the files they list
        assert s.timesteps() == list(range(max(1, t - 1), t + 1))
        listed = set().union(*(s.manifest(x).referenced_dirs() for x in s.timesteps()))
        assert dirs_on_disk(root) == {d for d in listed if d.startswith("traces/")}
    assert compacted >= 2
    with pytest.raises(TimestepNotRetained):
        s.read_trace("z", 5)
    reopened = StateStore(spark, root, "c", "fp")
    assert zset(reopened.read_trace("z")) == history[-1][0]
    # the compacted base is consolidated: one row per tuple, no zero weights
    base = reopened.manifest().traces["agg"].base
    if base:
        df = spark.read.parquet(os.path.join(root, base[0]))
        assert df.count() == df.select("g").distinct().count()
        assert all((r["s"], r["n"]) != (0.0, 0) for r in df.collect())


def test_compaction_that_cancels_everything(spark, tmp_path):
    s = StateStore(spark, str(tmp_path / "st"), "c", "fp")
    for i in range(4):
        with s.begin() as tx:
            w = 1 if i % 2 == 0 else -1
            tx.append("z", spark.createDataFrame([(1, "a", w)], SCHEMA))
            m = tx.commit()
    assert m.traces["z"].dirs == []  # compacted into nothing
    assert s.read_trace("z") is None
    assert zset(s.read_trace("z", 3)) == {(1, "a"): 1}


def test_append_writes_only_the_delta(spark, tmp_path):
    """The bytes written by a 10-row append do not depend on how big the trace is."""
    written = {}
    for size in (1_000, 100_000):
        root = str(tmp_path / f"st{size}")
        s = StateStore(spark, root, "c", "fp")
        big = spark.range(size).selectExpr("id as k", "concat('v', id) as v", "1L as _weight")
        with s.begin() as tx:
            tx.replace("z", big, keys=("k",), rows=size)
            tx.commit()
        before = dirs_on_disk(root) | dirs_on_disk(root, "outputs")
        small = spark.range(10).selectExpr("id + 5000000 as k", "'new' as v", "1L as _weight")
        with s.begin() as tx:
            tx.append("z", small, keys=("k",))
            m = tx.commit()
        new = (dirs_on_disk(root) | dirs_on_disk(root, "outputs")) - before
        assert len(new) == 1  # nothing but the delta (no compaction, no rewrite)
        (delta,) = new
        assert m.traces["z"].deltas == [(2, delta)]
        assert m.traces["z"].files[delta].rows == 10
        written[size] = dir_bytes(os.path.join(root, delta))
        assert m.traces["z"].rows == size + 10
    assert written[1_000] == written[100_000] < 4096


def test_large_writes_split_by_range_and_sorted(spark, tmp_path):
    root = str(tmp_path / "st")
    s = StateStore(spark, root, "c", "fp", policy=StatePolicy(rows_per_file=1_000))
    df = spark.range(5_000).selectExpr("(id * 7919) % 5000 as k", "'x' as v", "1L as _weight")
    with s.begin() as tx:
        tx.replace("z", df, keys=("k",), sort_by=("k",), rows=5_000)
        m = tx.commit()
    (base,) = m.traces["z"].base
    assert m.traces["z"].rows == 5_000 and m.traces["z"].sort_by == ("k",)
    path = os.path.join(root, base)
    ranges = []
    for name in sorted(os.listdir(path)):
        if name.endswith(".parquet"):
            ks = pq.read_table(os.path.join(path, name), columns=["k"]).column("k").to_pylist()
            assert ks == sorted(ks)  # sorted within the file: row-group stats can skip
            ranges.append((ks[0], ks[-1]))
    assert len(ranges) >= 3
    ranges.sort()
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:]))  # disjoint key ranges


def test_small_deltas_merge_in_tiers_and_keep_the_value(spark, tmp_path):
    """A big base with tiny deltas never reaches compact_fraction; deltas still merge by size
    tier, so the trace stays a few directories, and its value is unchanged at every step."""
    root = str(tmp_path / "st")
    s = StateStore(spark, root, "c", "fp", compact_fraction=0.5)
    with s.begin() as tx:
        tx.replace("z", spark.range(2_000).selectExpr("id as k", "'base' as v", "1L as _weight"), keys=("k",))
        tx.append("agg", spark.createDataFrame([(0, D("1.0"), 1)], SUM_SCHEMA), kind="sum", keys=("g",))
        tx.commit()
    rng = random.Random(3)
    acc: Counter = Counter({(k, "base"): 1 for k in range(2_000)})
    acc_sum = {0: (D("1.0"), 1)}
    most = 0
    for t in range(2, 40):
        rows = [(rng.randrange(3_000), rng.choice("ab"), rng.choice([1, -1])) for _ in range(3)]
        g = rng.randrange(3)
        with s.begin() as tx:  # two traces appended together: merges of both share one job
            tx.append("z", spark.createDataFrame(rows, SCHEMA), keys=("k",))
            tx.append("agg", spark.createDataFrame([(g, D("0.5"), 1)], SUM_SCHEMA), kind="sum", keys=("g",))
            m = tx.commit()
        for k, v, w in rows:
            acc[(k, v)] += w
        old = acc_sum.get(g, (D(0), 0))
        acc_sum[g] = (old[0] + D("0.5"), old[1] + 1)
        entry = m.traces["z"]
        assert len(entry.base) == 1  # never compacted: 3-row deltas against a 2,000-row base
        fanout = StatePolicy().delta_fanout
        tiers = Counter(int(math.log(max(entry.files[d].rows, 1), fanout)) for _, d in entry.deltas)
        assert max(tiers.values(), default=0) < fanout, tiers
        most = max(most, len(entry.deltas))
        assert zset(s.read_trace("z")) == {k: w for k, w in acc.items() if w}
        assert sums(s.read_trace("agg")) == acc_sum
    assert most < 10  # 38 appends, a handful of directories


def test_a_tier_is_full_when_fanout_timesteps_wrote_into_it():
    """A step in sub-steps (runtime/chunks.py) writes one delta per sub-step: its deltas count as
    one timestep's, so a trace's tiers fill at the pace of its timesteps, not of its sub-steps;
    a full tier merges every delta in it."""
    from spark_jobs.state.manifest import FileStat, TraceEntry
    from spark_jobs.state.trace import delta_merge

    def entry(deltas):
        e = TraceEntry(kind="zset", keys=())
        e.deltas = [(t, f"d{i}") for i, (t, _) in enumerate(deltas)]
        e.files = {f"d{i}": FileStat(rows=rows, bytes=rows) for i, (_, rows) in enumerate(deltas)}
        return e

    two_steps_in_sub_steps = entry([(2, 100), (2, 100), (3, 100), (3, 100)])
    assert delta_merge(two_steps_in_sub_steps, 4) == []
    assert delta_merge(entry([(2, 100), (2, 100), (3, 100), (4, 100), (5, 100)]), 4) == [f"d{i}" for i in range(5)]
    assert delta_merge(entry([(2, 100), (3, 100), (4, 100), (5, 100)]), 4) == ["d0", "d1", "d2", "d3"]
    assert delta_merge(entry([(2, 100), (3, 100), (4, 100), (5, 1_000)]), 4) == []  # d3 is a tier up
