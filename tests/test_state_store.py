"""State store on real Spark: commit, reopen, read traces and views back."""
from __future__ import annotations

import decimal
import json
import os
from collections import Counter

import pytest

from spark_jobs.state import (FingerprintMismatch, StateStore, TimestepNotRetained,
                              TransactionClosed)

SCHEMA = "k long, v string, _weight long"
SUM_SCHEMA = "k long, total decimal(38,1), n long"


def zset(df) -> dict:
    """Consolidated {tuple: weight} of a DataFrame (None = empty)."""
    out: Counter = Counter()
    if df is not None:
        for r in df.collect():
            d = r.asDict()
            w = d.pop("_weight")
            out[tuple(sorted(d.items()))] += w
    return {k: w for k, w in out.items() if w}


def store(spark, root, fingerprint="fp1", **kw) -> StateStore:
    return StateStore(spark, str(root), "c1", fingerprint, **kw)


def test_empty_store(spark, tmp_path):
    s = store(spark, tmp_path / "st")
    assert s.last_committed() == 0
    assert s.manifest() is None
    assert s.read_trace("x") is None
    assert s.read_view("v") is None
    s.check_fingerprint()
    assert s.status()["last_committed"] == 0


def test_commit_reopen_and_read_back(spark, tmp_path):
    root = tmp_path / "st"
    s = store(spark, root)
    steps = [
        [(1, "a", 1), (2, "b", 1)],
        [(3, "c", 1), (1, "a", -1)],
        [(2, "b", 2)],
    ]
    for i, rows in enumerate(steps, start=1):
        tx = s.begin()
        assert tx.timestep == i
        df = spark.createDataFrame(rows, SCHEMA)
        tx.append("join:left#1", df, keys=("k",))
        tx.append("agg:sum", spark.createDataFrame([(1, decimal.Decimal("2.5"), 1)], SUM_SCHEMA),
                  kind="sum", keys=("k",))
        tx.write_output("out", df)
        tx.consume("orders", [{"name": f"{i}.parquet", "size": 10 * i, "mtime": 1.0 * i}])
        tx.set_input_meta("orders", "cursor", i)
        tx.set_meta("run_id", f"r{i}")
        m = tx.commit()
        assert m.timestep == i
        with pytest.raises(TransactionClosed):
            tx.append("x", df)

    s2 = store(spark, root)  # a new object sees the same committed state
    assert s2.last_committed() == 3
    assert zset(s2.read_trace("join:left#1")) == {
        (("k", 2), ("v", "b")): 3, (("k", 3), ("v", "c")): 1}
    assert zset(s2.read_trace("join:left#1", 2)) == {
        (("k", 2), ("v", "b")): 1, (("k", 3), ("v", "c")): 1}
    assert zset(s2.read_view("out")) == zset(s2.read_trace("join:left#1"))
    assert zset(s2.read_output_delta("out", 3)) == {(("k", 2), ("v", "b")): 2}
    sums = {r["k"]: (r["total"], r["n"]) for r in s2.read_trace("agg:sum").groupBy("k").sum()
            .withColumnRenamed("sum(total)", "total").withColumnRenamed("sum(n)", "n").collect()}
    assert sums == {1: (7.5, 3)}

    m = s2.manifest()
    assert [(f["name"], f["timestep"]) for f in m.consumed("orders")] == [(f"{i}.parquet", i) for i in (1, 2, 3)]
    assert m.inputs["orders"]["cursor"] == 3
    assert m.meta == {"run_id": "r3"}
    assert m.outputs["out"].rows_inserted == 2 and m.outputs["out"].rows_deleted == 0
    assert s2.manifest(2).outputs["out"].rows_deleted == 1
    raw = json.loads(open(os.path.join(root, "manifests", "000000000003.json")).read())
    assert set(raw) >= {"format_version", "circuit", "fingerprint", "timestep", "committed_at",
                        "traces", "outputs", "inputs", "meta"}
    entry = raw["traces"]["join:left#1"]
    assert set(entry) >= {"kind", "keys", "base", "deltas", "rows", "bytes"}
    # step 2's two deltas outweighed the base-less trace: compacted to 2 rows, then step 3's delta
    assert entry["keys"] == ["k"] and entry["rows"] == 3 and len(entry["base"]) == 1
    for d in entry["base"] + [d for _, d in entry["deltas"]]:
        assert ":" not in d and "#" not in d and os.path.isdir(os.path.join(root, d))
    st = s2.status()
    assert st["last_committed"] == 3
    assert st["traces"]["join:left#1"]["kind"] == "zset"
    assert st["traces"]["join:left#1"]["files"] == 2


def test_read_view_at_older_timesteps(spark, tmp_path):
    """Retained t reads the view trace; older t sums the kept output deltas."""
    s = store(spark, tmp_path / "st", keep_timesteps=2)
    expected: list[dict] = []
    acc: Counter = Counter()
    for i in range(1, 6):
        rows = [(i, "x", 1)] + ([(i - 1, "x", -1)] if i % 2 == 0 else [])
        with s.begin() as tx:
            tx.write_output("v", spark.createDataFrame(rows, SCHEMA))
            tx.commit()
        for k, v, w in rows:
            acc[(("k", k), ("v", v))] += w
        expected.append({k: w for k, w in acc.items() if w})
    assert s.timesteps() == [4, 5]
    for t in range(1, 6):
        assert zset(s.read_view("v", t)) == expected[t - 1], t
    assert zset(s.read_output_delta("v", 2)) == {(("k", 2), ("v", "x")): 1,
                                                  (("k", 1), ("v", "x")): -1}
    with pytest.raises(TimestepNotRetained):
        s.read_trace("view:v", 2)
    with pytest.raises(ValueError, match="not committed"):
        s.read_view("v", 9)


def test_empty_writes_are_skipped(spark, tmp_path):
    s = store(spark, tmp_path / "st")
    tx = s.begin()
    empty = spark.createDataFrame([], SCHEMA)
    tx.append("a", empty, rows=0)  # hint: nothing written at all
    tx.append("b", empty)  # no hint: written, found empty, removed
    tx.write_output("v", empty)
    m = tx.commit()
    assert m.traces["a"].dirs == [] and m.traces["b"].dirs == []
    assert m.outputs["v"].delta is None
    assert s.read_trace("a") is None and s.read_view("v") is None
    assert not os.listdir(tmp_path / "st" / "traces" / "b")


def test_replace_and_write_output_twice(spark, tmp_path):
    s = store(spark, tmp_path / "st")
    with s.begin() as tx:
        tx.append("t", spark.createDataFrame([(1, "a", 1)], SCHEMA))
        tx.commit()
    with s.begin() as tx:
        tx.append("t", spark.createDataFrame([(2, "b", 1)], SCHEMA))
        tx.replace("t", spark.createDataFrame([(9, "z", 5)], SCHEMA))
        tx.write_output("v", spark.createDataFrame([(1, "a", 1)], SCHEMA))
        tx.write_output("v", spark.createDataFrame([(2, "b", 1)], SCHEMA))
        m = tx.commit()
    assert zset(s.read_trace("t")) == {(("k", 9), ("v", "z")): 5}
    assert len(m.traces["t"].base) == 1 and m.traces["t"].deltas == []
    assert zset(s.read_view("v")) == {(("k", 2), ("v", "b")): 1}
    assert zset(s.read_trace("t", 1)) == {(("k", 1), ("v", "a")): 1}  # old t still readable
    # only the directories some manifest lists exist (the superseded ones were removed)
    on_disk = {f"traces/{g}/{d}" for g in os.listdir(tmp_path / "st" / "traces")
               for d in os.listdir(tmp_path / "st" / "traces" / g)}
    listed = s.manifest(1).referenced_dirs() | s.manifest(2).referenced_dirs()
    assert on_disk <= listed
    assert len(os.listdir(tmp_path / "st" / "outputs" / "v")) == 1


def test_validation_errors(spark, tmp_path):
    s = store(spark, tmp_path / "st")
    tx = s.begin()
    with pytest.raises(ValueError, match="_weight"):
        tx.append("t", spark.createDataFrame([(1,)], "k long"))
    with pytest.raises(ValueError, match="not integers or decimals"):
        tx.append("t", spark.createDataFrame([(1, "x")], "k long, s string"),
                  kind="sum", keys=("k",))
    with pytest.raises(ValueError, match="float totals would drift"):  # sums must be exact
        tx.append("t", spark.createDataFrame([(1, 0.1)], "k long, s double"), kind="sum", keys=("k",))
    with pytest.raises(ValueError, match="kind"):
        tx.append("t", spark.createDataFrame([(1, "a", 1)], SCHEMA), kind="bag")
    tx.append("t", spark.createDataFrame([(1, "a", 1)], SCHEMA))
    with pytest.raises(ValueError, match="cannot append"):
        tx.append("t", spark.createDataFrame([(1, decimal.Decimal("1.0"), 1)], SUM_SCHEMA), kind="sum", keys=("k",))
    with pytest.raises(TypeError, match="JSON"):
        tx.set_meta("x", object())
    tx.abort()
    assert s.last_committed() == 0


def test_fingerprint_mismatch(spark, tmp_path):
    root = tmp_path / "st"
    s = store(spark, root, fingerprint="old-fp")
    with s.begin() as tx:
        tx.commit()
    other = store(spark, root, fingerprint="new-fp")
    with pytest.raises(FingerprintMismatch) as err:
        other.check_fingerprint()
    msg = str(err.value)
    assert "old-fp" in msg and "new-fp" in msg and "dbsp reset c1 --yes" in msg
    with pytest.raises(FingerprintMismatch):
        other.begin()
    other.reset()
    assert not root.exists()
    assert other.last_committed() == 0
    with other.begin() as tx:
        assert tx.timestep == 1
        tx.commit()
    other.check_fingerprint()


def test_append_many_writes_several_traces_in_one_job(spark, tmp_path):
    """One batch write serves several traces: each reads back only its own rows and columns,
    an empty slot adds no file, and GC keeps the batch folder while a manifest lists a slot."""
    s = store(spark, tmp_path / "st", keep_timesteps=1, compact_fraction=1e9)  # deltas stay deltas
    for t in (1, 2):
        tx = s.begin()
        tx.append_many([
            ("a", spark.createDataFrame([(t, "x", 1)], SCHEMA), "zset", ("k",)),
            ("b", spark.createDataFrame([(t, decimal.Decimal("2.5") * t, 1)], SUM_SCHEMA), "sum", ("k",)),
            ("c", spark.createDataFrame([], SCHEMA), "zset", ()),
        ])
        tx.commit()
    assert zset(s.read_trace("a")) == {(("k", 1), ("v", "x")): 1, (("k", 2), ("v", "x")): 1}
    assert sorted(tuple(r) for r in s.read_trace("b").collect()) == [(1, 2.5, 1), (2, 5.0, 1)]
    assert s.read_trace("c") is None
    dirs = s.manifest().traces["a"].dirs
    assert len(dirs) == 2 and all("/~batches/" in d and d.endswith("dbsp_slot=0") for d in dirs)
    assert s.recover() == {"temp": [], "manifests": [], "traces": [], "outputs": []}
    assert all(os.path.isdir(os.path.join(tmp_path, "st", *d.split("/"))) for d in dirs)


def test_append_many_falls_back_on_type_clash(spark, tmp_path):
    """A column name with two types cannot share one write: each trace is appended on its own."""
    s = store(spark, tmp_path / "st")
    tx = s.begin()
    tx.append_many([("a", spark.createDataFrame([(1, "x", 1)], SCHEMA), "zset", ()),
                    ("b", spark.createDataFrame([("1", 1)], "k string, _weight long"), "zset", ())])
    tx.commit()
    assert all("~batches" not in d for t in ("a", "b") for d in s.manifest().traces[t].dirs)
    assert [tuple(r) for r in s.read_trace("b").collect()] == [("1", 1)]
