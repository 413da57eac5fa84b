"""A crash at any failpoint leaves the last commit intact, and begin() cleans the leftovers."""
from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pytest

from spark_jobs.state import InjectedFailure, StateStore, arm, disarm, failpoint
from spark_jobs.state.layout import timestep_of, with_parents

SCHEMA = "k long, v string, _weight long"


def zset(df) -> dict:
    out: Counter = Counter()
    for r in (df.collect() if df is not None else []):
        d = r.asDict()
        w = d.pop("_weight")
        out[tuple(sorted(d.items()))] += w
    return {k: w for k, w in out.items() if w}


def data_dirs(root) -> set[str]:
    out = set()
    for top in ("traces", "outputs"):
        base = os.path.join(root, top)
        for g in os.listdir(base) if os.path.isdir(base) else []:
            for d in os.listdir(os.path.join(base, g)):
                out.add(f"{top}/{g}/{d}")
    return out


def step(s: StateStore, spark, i: int, *, crash_mid: bool = False, writer: str = "spark"):
    """One timestep as the executor would run it (no context manager: a crash is a crash); with
    ``writer="arrow"`` as an in-process step writes (pyarrow files, in-process compaction)."""
    tx = s.begin()
    if writer == "arrow":
        tx.in_process = True
        table = pa.table({"k": pa.array([i], pa.int64()), "v": [f"r{i}"], "_weight": pa.array([1], pa.int64())})
        tx.append_table("state:x", table, keys=("k",))
    else:
        df = spark.createDataFrame([(i, f"r{i}", 1)], SCHEMA)
        tx.append("state:x", df, keys=("k",))
    if crash_mid:
        failpoint("mid_step")
    if writer == "arrow":
        tx.write_output_table("v", table)
    else:
        tx.write_output("v", df)
    tx.consume("in", [{"name": f"{i}", "size": i, "mtime": float(i)}])
    return tx.commit()


@pytest.fixture(autouse=True)
def _disarm():
    yield
    disarm()


@pytest.mark.parametrize("point,skip,prior,durable,writer", [
    ("begin", 0, 1, False, "spark"),
    ("mid_step", 0, 1, False, "spark"),
    ("after_state_write", 0, 1, False, "spark"),  # after the trace delta
    ("after_state_write", 1, 1, False, "spark"),  # after the output delta
    ("after_state_write", 2, 3, False, "spark"),  # after compacting state:x (deltas outweigh its base)
    ("before_manifest", 0, 3, False, "spark"),  # compaction files written, manifest not
    ("after_manifest", 0, 1, True, "spark"),
    ("after_state_write", 1, 1, False, "arrow"),  # written with pyarrow: after the output delta
    ("after_state_write", 2, 3, False, "arrow"),  # after an in-process compaction
    ("before_manifest", 0, 3, False, "arrow"),
    ("after_manifest", 0, 1, True, "arrow"),
])
def test_crash_is_atomic_and_cleaned(spark, tmp_path, point, skip, prior, durable, writer):
    root = str(tmp_path / "st")
    s = StateStore(spark, root, "c", "fp")
    for i in range(1, prior + 1):
        step(s, spark, i, writer=writer)
    before = zset(s.read_trace("state:x"))
    crash = prior + 1
    arm(point, skip)
    with pytest.raises(InjectedFailure):
        step(s, spark, crash, crash_mid=True, writer=writer)
    disarm()

    s2 = StateStore(spark, root, "c", "fp")  # as a fresh process would see it
    assert s2.last_committed() == (crash if durable else prior)
    if durable:
        assert len(zset(s2.read_trace("state:x"))) == crash
    else:
        assert zset(s2.read_trace("state:x")) == before
        assert [f["name"] for f in s2.manifest().consumed("in")] == [
            f"{i}" for i in range(1, prior + 1)]

    tx = s2.begin()  # cleans the leftovers
    # a batch folder is listed while one of its slots is
    listed = with_parents(set().union(*(s2.manifest(t).referenced_dirs() for t in s2.timesteps())))
    leftovers = {d for d in data_dirs(root) - listed
                 if d.startswith("traces/") or int(d.rsplit("/t", 1)[1][:12]) >= tx.timestep}
    assert leftovers == set()
    assert not [n for n in os.listdir(os.path.join(root, "manifests")) if n.startswith(".tmp-")]
    tx.abort()

    if not durable:
        step(s2, spark, crash, writer=writer)  # the retry applies the timestep exactly once
    step(s2, spark, crash + 1)  # the next step on Spark reads what the in-process steps wrote
    last = crash + 1
    assert s2.last_committed() == last
    expected = {(("k", i), ("v", f"r{i}")): 1 for i in range(1, last + 1)}
    assert zset(s2.read_trace("state:x")) == expected
    assert zset(s2.read_view("v")) == expected
    for t in range(1, last + 1):  # every committed output delta exactly once
        assert zset(s2.read_output_delta("v", t)) == {(("k", t), ("v", f"r{t}")): 1}


def test_env_failpoint_and_temp_manifest_cleanup(spark, tmp_path, monkeypatch):
    root = str(tmp_path / "st")
    s = StateStore(spark, root, "c", "fp")
    step(s, spark, 1)
    monkeypatch.setenv("DBSP_FAILPOINT", "before_manifest")
    with pytest.raises(InjectedFailure):
        step(s, spark, 2)
    monkeypatch.delenv("DBSP_FAILPOINT")
    stray = os.path.join(root, "manifests", ".tmp-000000000002.json.deadbeef")
    open(stray, "w").write("{partial")
    assert s.last_committed() == 1
    removed = s.recover()
    assert removed["temp"] == [os.path.basename(stray)]
    # the failed step's delta (and the compaction it wrote before the manifest), and its output
    assert removed["traces"] and all(timestep_of(r) == 2 for r in removed["traces"])
    assert len(removed["outputs"]) == 1
    assert data_dirs(root) == s.manifest(1).referenced_dirs()


def test_context_manager_aborts_on_error(spark, tmp_path):
    root = str(tmp_path / "st")
    s = StateStore(spark, root, "c", "fp")
    with pytest.raises(RuntimeError, match="boom"):
        with s.begin() as tx:
            tx.append("t", spark.createDataFrame([(1, "a", 1)], SCHEMA))
            raise RuntimeError("boom")
    assert s.last_committed() == 0
    assert data_dirs(root) == set()
    # after_manifest: the commit is durable, so leaving the block must not delete it
    arm("after_manifest")
    with pytest.raises(InjectedFailure):
        with s.begin() as tx:
            tx.append("t", spark.createDataFrame([(1, "a", 1)], SCHEMA))
            tx.commit()
    assert s.last_committed() == 1
    assert zset(s.read_trace("t")) == {(("k", 1), ("v", "a")): 1}


def test_second_begin_disables_the_first(spark, tmp_path):
    """begin() cleans what an open transaction wrote, so that transaction must not commit."""
    s = StateStore(spark, str(tmp_path / "st"), "c", "fp")
    first = s.begin()
    first.append("t", spark.createDataFrame([(1, "a", 1)], SCHEMA))
    second = s.begin()
    with pytest.raises(Exception, match="aborted"):
        first.commit()
    second.append("t", spark.createDataFrame([(2, "b", 1)], SCHEMA))
    second.commit()
    assert zset(s.read_trace("t")) == {(("k", 2), ("v", "b")): 1}
