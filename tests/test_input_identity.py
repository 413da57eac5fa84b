"""Consumed input files are known by name below their folder, size and fingerprint, not by path.

Issue 13.3: after `cp -a` of a data root, the next step re-applied every consumed file. Here: a
copied data root continues exactly where it was; a consumed file whose content changed is
refused; manifests of format 1 (absolute paths) are still read, inside and outside the current
folder.
"""
from __future__ import annotations

import json
import os
import shutil

import pytest

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.examples.generators import PaperExampleGenerator
from spark_jobs.executor.sources import InputRefused
from spark_jobs.executor.sources.identity import FULL_HASH_BYTES, file_fingerprint
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime import timestep
from spark_jobs.runtime.step import pending_inputs, run_step
from tests import oracle
from tests.dag_tasks import run_stage_tasks

PAPER = str(PROJECT_ROOT / "circuits" / "paper_example.yaml")


def _rt(root):
    return open_circuit(PAPER, load_config(data_root=str(root)))


def _view(rt):
    return {"v": oracle.view_counter(rt, "v")}


def test_a_copied_data_root_continues_where_it_was(spark, tmp_path):
    original, copy = tmp_path / "a", tmp_path / "b"
    gen = PaperExampleGenerator(str(original), seed=5)
    for _ in range(2):
        gen.write_batch(inserts=20, deletes=5)
        run_step(_rt(original))
    shutil.copytree(original, copy, symlinks=True)  # cp -a
    new = gen.write_batch(inserts=20, deletes=5)  # the same new files in both roots
    for path in new:
        dst = copy / os.path.relpath(path, original)
        os.makedirs(dst.parent, exist_ok=True)
        shutil.copy2(path, dst)
    for root in (original, copy):
        rt = _rt(root)
        assert sum(len(f) for f in pending_inputs(rt).values()) == len(new)  # only the new ones
        report = run_step(rt)
        assert report.timestep == 3 and sum(len(i.files) for i in report.inputs) == len(new)
        assert _view(rt) == oracle.paper_example(str(root))
    assert _view(_rt(original)) == _view(_rt(copy))
    manifest = _rt(copy).store.manifest()
    assert all("path" not in rec and str(tmp_path) not in json.dumps(rec)
               for rec in manifest.consumed("t"))  # nothing of the mount point


def test_a_consumed_file_that_changed_is_refused(spark, tmp_path):
    gen = PaperExampleGenerator(str(tmp_path), seed=2)
    files = gen.write_batch(inserts=10, deletes=0)
    rt = _rt(tmp_path)
    run_step(rt)
    victim = files[0]
    stat = os.stat(victim)
    with open(victim, "r+b") as fh:  # same size, other bytes, then a touch
        data = bytearray(fh.read())
        data[len(data) // 2] ^= 0xFF
        fh.seek(0)
        fh.write(bytes(data))
    os.utime(victim, (stat.st_atime, stat.st_mtime + 10))
    with pytest.raises(InputRefused) as err:
        run_step(rt)
    assert [p for p, _ in err.value.problems] == [victim]
    assert "was consumed at timestep 1 and has changed" in err.value.problems[0][1]
    assert rt.store.last_committed() == 1
    with open(victim, "ab") as fh:  # a grown file is caught by its size, without reading it
        fh.write(b"x")
    with pytest.raises(InputRefused, match="its size is now"):
        run_step(rt)


def test_a_touched_but_unchanged_file_is_not_refused_and_is_checked_once(spark, tmp_path, monkeypatch):
    gen = PaperExampleGenerator(str(tmp_path), seed=3)
    files = gen.write_batch(inserts=10, deletes=0)
    rt = _rt(tmp_path)
    run_step(rt)
    for f in files:
        os.utime(f, (1, 1))  # a copy that did not keep times
    from spark_jobs.executor.sources import discovery

    reads = []
    real = discovery.fingerprint_of
    monkeypatch.setattr(discovery, "fingerprint_of", lambda item: reads.append(item.name) or real(item))
    assert run_step(rt).timestep == 2 and len(reads) == len(files)  # verified once...
    reads.clear()
    assert run_step(rt).timestep == 3 and reads == []  # ...and its new time recorded


def _as_format_1(rt, tmp_path) -> None:
    """Rewrite the last manifest as format 1: input t's paths on another mount, r's under this one."""
    path = rt.store.layout.manifest_path(rt.store.last_committed())
    raw = json.loads(open(path).read())
    raw["format_version"] = 1
    for name, entry in raw["inputs"].items():
        folder = "/elsewhere/old-root" if name == "t" else str(tmp_path)
        entry["consumed"] = [{"path": f"{folder}/inbox/{name}/{rec['name']}", "size": rec["size"],
                              "mtime": rec["mtime"]} for rec in entry["consumed"]]
    open(path, "w").write(json.dumps(raw))


def test_manifests_with_absolute_paths_are_migrated(spark, tmp_path):
    """A format-1 manifest: paths under the current folder map to names; paths of another mount
    are matched below the source's folder, and the step says so."""
    gen = PaperExampleGenerator(str(tmp_path), seed=4)
    gen.write_batch(inserts=10, deletes=0)
    rt = _rt(tmp_path)
    run_step(rt)
    _as_format_1(rt, tmp_path)
    gen.write_batch(inserts=10, deletes=3)
    fresh = _rt(tmp_path)
    notes = []
    report = run_step(fresh, progress=notes.append)
    assert report.timestep == 2 and sum(len(i.files) for i in report.inputs) == 2  # only the new files
    assert any("input t: 1 consumed file(s) were recorded by absolute paths outside" in n for n in notes)
    assert not any("input r:" in n and "read input r:" not in n for n in notes)  # only its read count
    assert _view(fresh) == oracle.paper_example(str(tmp_path))
    assert all("path" not in rec and "fingerprint" in rec for rec in fresh.store.manifest().consumed("t"))
    # a migrated record gets the timestep it was consumed by at the latest (input retention ages files by it)
    assert sorted(rec["timestep"] for rec in fresh.store.manifest().consumed("t")) == [1, 2]


def test_a_dag_run_records_and_refuses_inputs_like_dbsp_step(spark, tmp_path):
    """The plan migrates format-1 records and says so; the commit records names and fingerprints;
    a consumed file that changed refuses the next run's plan. (One mode: all of this is in the
    plan and commit tasks, which both modes share; the stage tasks only pass the records on.)"""
    tasks = "per_step"
    gen = PaperExampleGenerator(str(tmp_path), seed=4)
    files = gen.write_batch(inserts=10, deletes=0)
    run_step(_rt(tmp_path))
    _as_format_1(_rt(tmp_path), tmp_path)
    gen.write_batch(inserts=10, deletes=3)
    rt = _rt(tmp_path)
    planned = timestep.plan(rt, "m1")
    assert sum(len(f) for f in planned["inputs"].values()) == 2  # only the new files
    moved = "input t: 1 consumed file(s) were recorded by absolute paths outside"
    assert any(moved in n for n in planned["notes"])
    run_stage_tasks(rt, "m1", tasks)
    timestep.check(rt, "m1")
    done = timestep.commit(rt, "m1")
    assert done["timestep"] == 2 and any(moved in n for n in done["notes"])
    assert _view(rt) == oracle.paper_example(str(tmp_path))
    for name in ("t", "r"):
        assert all("path" not in rec and "fingerprint" in rec for rec in rt.store.manifest().consumed(name))
    with open(files[0], "r+b") as fh:  # same size, other bytes
        data = bytearray(fh.read())
        data[len(data) // 2] ^= 0xFF
        fh.seek(0)
        fh.write(bytes(data))
    with pytest.raises(InputRefused, match="t-0001.parquet: this file was consumed at timestep 1 and has changed"):
        timestep.plan(_rt(tmp_path), "m2")


def test_large_files_are_fingerprinted_from_samples(tmp_path):
    big = tmp_path / "big.csv"
    big.write_bytes(os.urandom(FULL_HASH_BYTES + 5_000_000))
    size = big.stat().st_size
    before = file_fingerprint(str(big), size)
    data = bytearray(big.read_bytes())
    data[-10] ^= 1  # the tail (a Parquet footer) is always read
    big.write_bytes(bytes(data))
    assert file_fingerprint(str(big), size) != before
