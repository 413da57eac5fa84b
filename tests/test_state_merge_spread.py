"""An in-process step spreads its traces' tier merges over steps (``Transaction._merges_now``),
and the garbage of a commit can be collected after it (``commit(collect=False)``, then
``StateStore.collect_garbage``): neither changes what any committed timestep reads.

Random streams of inserts and deletes over several traces (each gets a delta every step, so their
tiers fill together) are committed twice, merges spread (the default) and every due merge done
(``merge_rows_per_row`` unbounded); every trace's value equals the integrated stream after every
step in both. No Spark: the store commits with pyarrow."""
from __future__ import annotations

import math
import random
from collections import Counter

import pyarrow as pa

from spark_jobs.policy import StatePolicy
from spark_jobs.state import StateStore
from spark_jobs.state import layout as L

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string()), ("_weight", pa.int64())])
TRACES = ("I(a)", "I(b)", "I(c)", "I(d)", "I(e)")


def _no_spark():
    raise AssertionError("an in-process step started Spark")


def _store(root, **policy) -> StateStore:
    return StateStore(_no_spark, str(root), "c", "fp", policy=StatePolicy(compact_fraction=1e9, **policy))


def _change(rng: random.Random, acc: Counter, rows: int) -> list[tuple[int, str, int]]:
    """About ``rows`` rows: inserts of new tuples and deletes of tuples the trace holds."""
    out: Counter = Counter()
    held = [t for t, w in acc.items() if w > 0]
    for _ in range(rows):
        if held and rng.random() < 0.3:
            out[rng.choice(held)] -= 1
        else:
            k = rng.randrange(10_000)
            out[(k, f"v{k % 5}")] += 1
    return [(k, v, w) for (k, v), w in out.items() if w]


def _table(rows: list[tuple[int, str, int]]) -> pa.Table:
    return pa.table({"k": [r[0] for r in rows], "v": [r[1] for r in rows], "_weight": [r[2] for r in rows]},
                    schema=SCHEMA)


def _value(store: StateStore, tid: str) -> Counter:
    got: Counter = Counter()
    for k, v, w in zip(*(store.trace_files(tid).read_all().column(c).to_pylist() for c in ("k", "v", "_weight"))):
        got[(k, v)] += w
    return Counter({t: w for t, w in got.items() if w})


def _run(root, seed: int, steps: int, collect_later: bool, **policy):
    """Commit the stream, checking every trace against it after each step; the store and, per
    step, each trace's delta count per tier."""
    rng = random.Random(seed)
    store = _store(root, **policy)
    acc = {tid: Counter() for tid in TRACES}
    history = []
    for t in range(steps):
        tx = store.begin()
        tx.in_process = True
        for i, tid in enumerate(TRACES):
            rows = _change(rng, acc[tid], 400 if t == 0 else rng.randint(5, 40) * (i + 1))
            for k, v, w in rows:
                acc[tid][(k, v)] += w
            tx.append_table(tid, _table(rows), sort_by=("k", "v"), keys=("k", "v"))
        m = tx.commit(collect=not collect_later)
        if collect_later:
            store.collect_garbage()
        fanout = store.policy.delta_fanout
        tiers = {tid: Counter(int(math.log(max(e.files[d].rows, 1), fanout)) for _, d in e.deltas)
                 for tid, e in m.traces.items()}
        for tid in TRACES:
            want = Counter({k: w for k, w in acc[tid].items() if w})
            assert _value(store, tid) == want, f"{tid} after timestep {m.timestep}"
        history.append(tiers)
    return store, history


def test_spread_merges_keep_every_trace_equal_to_its_stream_and_bounded(tmp_path):
    for seed in range(2):
        spread, hs = _run(tmp_path / f"spread{seed}", seed, 30, False)
        every, he = _run(tmp_path / f"every{seed}", seed, 30, False, merge_rows_per_row=1e18)
        fanout = StatePolicy().delta_fanout
        for tiers in hs:  # a tier waits at most until it holds 2 x fanout deltas
            assert all(n <= 2 * fanout for per in tiers.values() for n in per.values()), tiers
        for tiers in he:  # every due merge done (one tier a trace a step): as before
            assert all(n <= fanout for per in tiers.values() for n in per.values()), tiers
        for tid in TRACES:
            assert _value(spread, tid) == _value(every, tid)

        def deltas(tiers) -> int:
            return sum(n for per in tiers.values() for n in per.values())
        # spread: some steps left due merges for later (the traces' tiers fill together)
        assert any(deltas(s) > deltas(e) for s, e in zip(hs, he))


def test_garbage_collected_after_the_commit_never_removes_a_listed_file(tmp_path):
    """``commit(collect=False)`` publishes the manifest; every file a retained manifest lists
    exists after each commit and after ``collect_garbage``, which removes the rest; what a crash
    leaves uncollected the next ``begin`` removes."""
    store, _ = _run(tmp_path / "later", 5, 30, True)
    now = _run(tmp_path / "now", 5, 30, False)[0]
    for tid in TRACES:
        assert _value(store, tid) == _value(now, tid)

    def listed() -> set[str]:
        dirs: set[str] = set()
        for t in store.timesteps():
            dirs |= store.manifest(t).referenced_dirs()
        return dirs

    def on_disk() -> set[str]:
        return {rel for rel in store.layout.data_dirs(L.TRACES) if L.timestep_of(rel) is not None}

    rng = random.Random(9)
    for _ in range(12):  # commits whose garbage is left: a crash after each manifest
        tx = store.begin()
        tx.in_process = True
        for tid in TRACES:
            tx.append_table(tid, _table(_change(rng, Counter(), 60)), sort_by=("k", "v"), keys=("k", "v"))
        tx.commit(collect=False)
        assert listed() <= on_disk()
    assert len(store.timesteps()) > store.keep_timesteps  # the last commit's expired manifest is left
    store.collect_garbage()
    assert len(store.timesteps()) == store.keep_timesteps
    assert listed() == on_disk()  # the expired manifests' files went, none still listed
    # the last commit's superseded writes, left by a crash before collect_garbage: begin removes them
    tx = store.begin()
    tx.in_process = True
    for tid in TRACES:
        tx.append_table(tid, _table(_change(rng, Counter(), 60)), sort_by=("k", "v"), keys=("k", "v"))
    tx.commit(collect=False)
    left = on_disk() - listed()
    store.begin().abort()
    assert listed() <= on_disk() and not (on_disk() & left)
