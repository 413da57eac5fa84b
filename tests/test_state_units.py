"""State store pieces that need no Spark: names, manifests, failpoints, compaction rule."""
from __future__ import annotations

import pytest

from spark_jobs.policy import StatePolicy
from spark_jobs.state import failpoints as fp
from spark_jobs.state.arrow_fs import ArrowFileSystem
from spark_jobs.state.fs import LocalFileSystem, filesystem_for
from spark_jobs.state.layout import (parse_dir_timestep, parse_manifest_name, safe_name,
                                     new_dir_name, manifest_name)
from spark_jobs.state.manifest import FileStat, Manifest, OutputEntry, TraceEntry
from spark_jobs.state.trace import needs_compaction


def test_safe_name_is_deterministic_and_injective():
    assert safe_name("orders") == "orders"
    ids = ["join:left#3", "join:left_3", "join_left_3", "view:by region", "_hidden", ".x",
           "a/b", "a" * 200]
    names = [safe_name(i) for i in ids]
    assert names == [safe_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    for n in names:
        assert n[0].isalnum() and len(n) <= 100
        assert all(c.isalnum() or c in "._-" for c in n)


def test_names_round_trip():
    assert parse_manifest_name(manifest_name(42)) == 42
    assert parse_manifest_name(".tmp-000000000042.json.abcd1234") is None
    assert parse_dir_timestep(new_dir_name(7)) == 7
    assert parse_dir_timestep("_temporary") is None


def test_manifest_json_round_trip():
    m = Manifest(
        circuit="c", fingerprint="f1", timestep=3, committed_at="2026-01-01T00:00:00+00:00",
        traces={"t:1": TraceEntry("sum", ("k",), ["traces/a/t000000000002-00000000"],
                                  [(3, "traces/a/t000000000003-11111111")],
                                  {"traces/a/t000000000002-00000000": FileStat(10, 100),
                                   "traces/a/t000000000003-11111111": FileStat(2, 30)})},
        outputs={"v": OutputEntry("outputs/v/t000000000003-22222222", 2, 1, 3, 40)},
        inputs={"orders": {"consumed": [{"path": "/x", "size": 1, "mtime": 2.0}], "cur": 5}},
        meta={"run": "r1"})
    back = Manifest.from_json(m.to_json())
    assert back == m
    raw = back.to_dict()
    assert raw["traces"]["t:1"]["rows"] == 12 and raw["traces"]["t:1"]["bytes"] == 130
    assert raw["traces"]["t:1"]["deltas"] == [[3, "traces/a/t000000000003-11111111"]]
    assert back.referenced_dirs() == {"traces/a/t000000000002-00000000",
                                      "traces/a/t000000000003-11111111",
                                      "outputs/v/t000000000003-22222222"}
    with pytest.raises(ValueError, match="newer"):
        Manifest.from_dict({**raw, "format_version": 99})


def test_failpoints_arm_env_and_skip(monkeypatch):
    fp.failpoint("x")  # not armed: nothing
    with fp.armed("x"):
        with pytest.raises(fp.InjectedFailure):
            fp.failpoint("x")
    fp.failpoint("x")
    fp.arm("y", skip=1)
    fp.failpoint("y")
    with pytest.raises(fp.InjectedFailure):
        fp.failpoint("y")
    fp.disarm()
    monkeypatch.setenv(fp.ENV_VAR, "a, b")
    with pytest.raises(fp.InjectedFailure):
        fp.failpoint("b")
    fp.failpoint("c")


def _entry(base: list[int], deltas: list[int]) -> TraceEntry:
    files = {}
    e = TraceEntry("zset")
    for i, b in enumerate(base):
        files[f"b{i}"] = FileStat(1, b)
        e.base.append(f"b{i}")
    for i, b in enumerate(deltas):
        files[f"d{i}"] = FileStat(1, b)
        e.deltas.append((i + 1, f"d{i}"))
    e.files = files
    return e


def test_compaction_rule():
    assert not needs_compaction(_entry([1000], [600]), 0.5)  # one delta only
    assert needs_compaction(_entry([1000], [300, 300]), 0.5)
    assert not needs_compaction(_entry([1000], [200, 200]), 0.5)
    # no base: the largest delta stands for it (an initial load is not rewritten for small steps)
    assert not needs_compaction(_entry([], [1000]), 0.5)
    assert needs_compaction(_entry([], [1, 1]), 0.5)
    assert not needs_compaction(_entry([], [1000, 10, 10, 10]), 0.5)
    assert needs_compaction(_entry([], [1000, 300, 300]), 0.5)
    # a sorted trace gets its sorted base early (its lookups skip row groups only there)
    sorted_entry = _entry([], [1000, 10, 10])
    sorted_entry.sort_by = ("k",)
    assert not needs_compaction(sorted_entry, 0.5)
    sorted_entry.deltas.append((4, "d1"))
    assert needs_compaction(sorted_entry, 0.5)


def test_only_a_large_compaction_of_a_sorted_trace_is_written_sorted():
    from spark_jobs.state.store import _Rewrite

    least = StatePolicy().sort_min_rows
    e = _entry([10], [10, 10])
    e.sort_by = ("k",)
    e.files["b0"] = FileStat(least, 10)
    assert _Rewrite("t", e, e.dirs, True, least).sorted  # a new base: sorted
    assert not _Rewrite("t", e, ["d0", "d1"], False, least).sorted  # a merge of deltas: never
    e.files["b0"] = FileStat(least - 3, 10)
    assert not _Rewrite("t", e, e.dirs, True, least).sorted  # small: read whole by lookups anyway
    e.sort_by = ()
    e.files["b0"] = FileStat(10 * least, 10)
    assert not _Rewrite("t", e, e.dirs, True, least).sorted  # not a key-sorted trace


def test_filesystem_choice_and_atomic_publish(tmp_path):
    assert isinstance(filesystem_for(str(tmp_path)), LocalFileSystem)
    assert isinstance(filesystem_for(f"file://{tmp_path}"), LocalFileSystem)
    assert isinstance(filesystem_for("s3a://bucket/state"), ArrowFileSystem)  # no I/O until used
    fs = LocalFileSystem()
    target = str(tmp_path / "m" / "000000000001.json")
    fs.publish_text(target, "one", ".tmp-")
    fs.publish_text(target, "two", ".tmp-")
    assert fs.read_text(target) == "two"
    with pytest.raises(FileExistsError):
        fs.publish_text(target, "three", ".tmp-", exclusive=True)
    assert fs.listdir(str(tmp_path / "m")) == ["000000000001.json"]
