"""The same circuit on a real Spark standalone cluster (master + 2 workers on 127.0.0.1).

Switching to the cluster is a change of profile only (config/cluster.yaml): the driver process
below runs exactly the code `dbsp step` runs.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from spark_jobs import services
from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.examples.generators import PaperExampleGenerator
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from tests import oracle

pytestmark = pytest.mark.cluster
PAPER = str(PROJECT_ROOT / "circuits" / "paper_example.yaml")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("cluster-run")
    services.start_cluster(workers=2, run_dir=run_dir)
    try:
        yield run_dir
    finally:
        services.stop_cluster(run_dir=run_dir)
        assert services.processes_under(run_dir) == []


def _driver(profile: str, data_root, steps: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.cluster_driver", profile, str(data_root), str(steps)],
                            cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYSPARK_PYTHON=sys.executable))


def _views(data_root) -> dict:
    rt = open_circuit(PAPER, load_config(data_root=str(data_root)))
    return {"v": oracle.view_counter(rt, "v")}, rt.store.last_committed()


def test_cluster_run_equals_local_run(spark, cluster, tmp_path):
    on_cluster, local = tmp_path / "cluster", tmp_path / "local"
    proc = _driver("cluster", on_cluster, 3)
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    assert out.split() == ["committed", "1", "committed", "2", "committed", "3"]
    rt = open_circuit(PAPER, load_config(data_root=str(local)))  # same seed, local mode, this process
    gen = PaperExampleGenerator(str(local))
    for _ in range(3):
        gen.write_batch(inserts=40, deletes=10)
        run_step(rt)
    cluster_views, last = _views(on_cluster)
    assert last == 3
    assert cluster_views == {"v": oracle.view_counter(rt, "v")} == oracle.paper_example(str(on_cluster))


def test_worker_killed_mid_step(spark, cluster, tmp_path):
    """Kill a worker while steps run: each step completes (Spark retries the tasks elsewhere) or
    fails without committing; the next run then completes correctly."""
    proc = _driver("cluster", tmp_path, 3)
    deadline = time.time() + 600
    line = proc.stdout.readline()  # wait for the first commit, then kill during the next step
    assert line.startswith("committed 1") or time.time() > deadline, proc.stderr.read()[-3000:]
    time.sleep(2)
    services.kill_worker(1, run_dir=cluster)
    out, err = proc.communicate(timeout=900)
    _, last = _views(tmp_path)
    assert last == 1 + out.count("committed")
    assert proc.returncode == 0 or last < 3
    services.start_worker(1, run_dir=cluster)
    if last < 3:  # finish the remaining steps on the healed cluster
        rest = _driver("cluster", tmp_path, 3 - last)
        _, err = rest.communicate(timeout=900)
        assert rest.returncode == 0, err[-3000:]
    views, last = _views(tmp_path)
    assert last == 3
    assert views == oracle.paper_example(str(tmp_path))


def test_w1_on_the_cluster_through_the_policy_equals_a_local_run(spark, cluster, tmp_path):
    """W1 (TPC-H Q3) under the cluster profile, through the same policy as any profile: the load
    and the large change run on the cluster (Spark reads the change, the driver checks the view
    deltas and writes the values), the small change in the driver's process (it reaches the
    state), then a large change recomputed on the cluster; every step's views and state equal a
    local run's of the same changes, and an all in-process run's."""
    from tests.cluster_driver import W1_CIRCUIT, w1, w1_config
    from tests.engines import output_delta
    from tests.test_paths import _traces

    on_cluster, local, arrow = tmp_path / "cluster", tmp_path / "local", tmp_path / "arrow"
    proc = subprocess.Popen([sys.executable, "-m", "tests.cluster_driver", "w1", "cluster", str(on_cluster)],
                            cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYSPARK_PYTHON=sys.executable))
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    steps = [line.split(":")[0].split() for line in out.splitlines() if line.startswith("committed")]
    assert [s[1:] for s in steps] == [["1", "spark", "incremental"], ["2", "arrow", "incremental"],
                                      ["3", "spark", steps[2][3]], ["4", "spark", "recompute"]], out
    assert "max_change_rows" in out.splitlines()[2] or steps[2][3] == "recompute", out
    # the same engines in a local run; the cost model's incremental-or-recompute choice weighs
    # each run's own measured seconds, so the local run is given the cluster's
    modes = [s[3] for s in steps]
    here = [[str(t), engine, mode] for t, engine, mode, _why in w1(None, str(local), modes)]
    assert here == [s[1:] for s in steps]
    # and every step in this process (Arrow), the same modes: the engines' differential
    assert [e for _t, e, _m, _w in w1(None, str(arrow), modes, engine="arrow")] == ["arrow"] * 4
    cluster_rt = open_circuit(W1_CIRCUIT, w1_config("cluster", str(on_cluster)))
    for other in (local, arrow):
        other_rt = open_circuit(W1_CIRCUIT, w1_config(None, str(other)))
        assert output_delta(cluster_rt, "q3") == output_delta(other_rt, "q3"), other
        assert _traces(cluster_rt) == _traces(other_rt), other
    assert oracle.view_counter(cluster_rt, "q3") == oracle.view_counter(other_rt, "q3")
