"""State and data roots on a Hadoop URI, not a local path.

No HDFS or S3 runs here, so the remote store is Hadoop's ``viewfs://``: a real Hadoop file
system with its own scheme and authority (a mount table), whose mount points at a temp folder.
Spark writes Parquet through it and the driver lists, reads and commits through the JVM's Hadoop
API: the code path hdfs:// and s3a:// take (they differ only in the connector Hadoop loads).
"""
from __future__ import annotations

import os
import uuid
from collections import Counter

import pyarrow.parquet as pq
import pytest

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.examples.generators import RevenueGenerator
from spark_jobs.runtime import timestep
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.stages import stage_graph
from spark_jobs.runtime.step import run_step
from spark_jobs.state import failpoints
from spark_jobs.state.arrow_fs import ArrowFileSystem
from spark_jobs.state.fs import LocalFileSystem, filesystem_for
from tests import oracle

REVENUE = str(PROJECT_ROOT / "circuits" / "revenue_by_region.yaml")


def viewfs_root(spark, local_dir) -> str:
    """A fresh ``viewfs://<table>/lake`` mounted on ``local_dir`` (a new table name per call:
    Hadoop caches a file system per scheme and authority)."""
    table = f"t{uuid.uuid4().hex[:8]}"
    os.makedirs(local_dir, exist_ok=True)
    spark._jsc.hadoopConfiguration().set(f"fs.viewfs.mounttable.{table}.link./lake", f"file://{local_dir}")
    return f"viewfs://{table}/lake"


@pytest.fixture(params=["local", "arrow-local", "hadoop-viewfs"])
def store_fs(request, tmp_path):
    """(file system, root) for each implementation of the state store's FileSystem protocol."""
    if request.param == "local":
        return LocalFileSystem(), str(tmp_path)
    if request.param == "arrow-local":
        return ArrowFileSystem(), str(tmp_path)
    spark = request.getfixturevalue("spark")
    root = viewfs_root(spark, str(tmp_path / "mnt"))
    fs = filesystem_for(root)
    assert isinstance(fs, ArrowFileSystem)
    return fs, fs.normalize(root + "/")


def test_filesystem_contract(store_fs, spark):
    fs, root = store_fs
    manifests = fs.join(root, "manifests")
    assert fs.listdir(manifests) == [] and not fs.exists(manifests)
    first = fs.join(manifests, "000000000001.json")
    fs.publish_text(first, '{"t": 1}', ".tmp-", exclusive=True)
    with pytest.raises(FileExistsError, match="another writer"):
        fs.publish_text(first, '{"t": "again"}', ".tmp-", exclusive=True)
    assert fs.read_text(first) == '{"t": 1}'
    report = fs.join(root, "quality", "index.html")
    fs.publish_text(report, "one", ".tmp-")
    fs.publish_text(report, "two", ".tmp-")  # a non-exclusive publish replaces
    assert fs.read_text(report) == "two"
    assert fs.listdir(manifests) == ["000000000001.json"]  # no temp file left behind
    assert fs.listdir(root) == ["manifests", "quality"]

    data = fs.join(root, "traces", "x", "t000000000001-abcd")
    spark.range(7).selectExpr("id", "1 as _weight").coalesce(1).write.parquet(fs.spark_uri(data))
    files = fs.data_files(data)
    assert len(files) == 1 and files[0][1] > 0  # _SUCCESS and .crc files are not data
    with fs.open_read(files[0][0]) as fh:
        assert pq.ParquetFile(fh).metadata.num_rows == 7
    fs.sync_tree(data)
    moved = fs.join(root, "traces", "y", "t000000000001-abcd")  # a view's folder moved into place
    fs.rename(data, moved)
    assert not fs.exists(data) and [n for n, _ in fs.data_files(moved)] == [files[0][0].replace(data, moved)]
    fs.remove_tree(fs.join(root, "traces"))
    fs.remove_file(fs.join(manifests, "missing.json"))  # removing what is gone is not an error
    assert not fs.exists(moved) and fs.listdir(root) == ["manifests", "quality"]


def test_hadoop_create_new_refuses_an_existing_name(spark, tmp_path):
    """The exclusive create that object stores publish manifests and leases with, through
    Hadoop's createFile builder (here on Hadoop's local file system, which ignores the
    conditional-create option and checks at create time, as HDFS would)."""
    from spark_jobs.state.hadoop_fs import HadoopHandler

    handler = HadoopHandler(spark, f"file://{tmp_path}")
    path = f"file://{tmp_path}/lease/000000000001.json"
    handler.create_new(path, b'{"owner": "a"}')
    with pytest.raises(FileExistsError, match="another writer"):
        handler.create_new(path, b'{"owner": "b"}')
    assert (tmp_path / "lease" / "000000000001.json").read_bytes() == b'{"owner": "a"}'


def _views(rt) -> dict[str, Counter]:
    return {v: oracle.view_counter(rt, v) for v in rt.compiled.spec.outputs}


@pytest.mark.slow
def test_circuit_with_data_and_state_on_a_hadoop_uri(spark, tmp_path, monkeypatch):
    """`dbsp step` and the DAG's task protocol with both roots on viewfs:// equal a recompute;
    a failure before the manifest commits nothing, and the next run is correct."""
    # this viewfs mount lives in Spark's Hadoop configuration only; deltalake's own HDFS client
    # cannot see it, so the published tables go to a local folder
    monkeypatch.setenv("DBSP_VIEWS_ROOT", str(tmp_path / "views"))
    lake = tmp_path / "lake"
    root = viewfs_root(spark, str(lake))
    gen = RevenueGenerator(str(lake), seed=5)  # writes inbox files through the mount's target
    rt = open_circuit(REVENUE, load_config(data_root=root))
    assert rt.store.root == f"{root}/_dbsp/revenue_by_region" and isinstance(rt.store.fs, ArrowFileSystem)

    gen.write_batch(new_orders=30, deletes=5)
    run_step(rt)
    assert _views(rt) == oracle.revenue_by_region(str(lake))

    gen.write_batch(new_orders=20, deletes=6)
    with failpoints.armed("before_manifest"), pytest.raises(failpoints.InjectedFailure):
        run_step(rt)
    assert open_circuit(REVENUE, load_config(data_root=root)).store.last_committed() == 1

    for i in (2, 3):  # the DAG-run tasks: staging under the state root, on the same store
        if i == 3:
            gen.write_batch(new_orders=25, deletes=4)
        run_id = f"run-{i}"
        timestep.plan(rt, run_id)
        for stage in stage_graph(rt.compiled):
            timestep.run_stage(rt, run_id, stage.name)
        timestep.check(rt, run_id)
        assert timestep.commit(rt, run_id)["timestep"] == i
        assert _views(rt) == oracle.revenue_by_region(str(lake)), f"timestep {i}"

    local_state = lake / "_dbsp" / "revenue_by_region"
    written = sorted(os.listdir(local_state / "manifests"))  # Hadoop's local FS adds .crc files
    assert [n for n in written if not n.endswith(".crc")] == ["000000000002.json", "000000000003.json"]
    assert not (local_state / "staging").exists() or not os.listdir(local_state / "staging")
    assert (local_state / "quality" / "index.html").exists()


def test_state_root_key_moves_only_the_state(tmp_path, monkeypatch):
    profile = tmp_path / "p.yaml"
    profile.write_text(f"data_root: {tmp_path / 'data'}\nstate_root: viewfs://lake/state\n")
    config = load_config(str(profile))
    assert config.data_root == str(tmp_path / "data") and config.resolved_state_root == "viewfs://lake/state"
    assert config.with_data_root(str(tmp_path / "other")).resolved_state_root == "viewfs://lake/state"
    monkeypatch.setenv("DBSP_STATE_ROOT", str(tmp_path / "st"))
    assert load_config(str(profile)).resolved_state_root == str(tmp_path / "st")
    monkeypatch.delenv("DBSP_STATE_ROOT")
    profile.write_text(f"data_root: {tmp_path / 'data'}\n")
    assert load_config(str(profile)).resolved_state_root == f"{tmp_path / 'data'}/_dbsp"
