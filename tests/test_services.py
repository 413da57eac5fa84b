"""The Spark service scripts for real: a standalone cluster and a Spark Connect server on
loopback, each started, used by a job in a separate process (through config/cluster.yaml and
config/connect.yaml), stopped, and checked to leave no process behind. While the Connect server
runs, the same steps forced onto it and run in-process commit the same views and state.

Each test uses its own run dir (logs, pids, work dirs) but the default ports, so it is skipped
when a port is taken (e.g. by a cluster you started by hand: `scripts/spark_cluster.sh stop`).
"""
from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time

import pytest

from spark_jobs import services

pytestmark = pytest.mark.cluster


def _port_busy(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _require_free(*ports: int) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime (Spark needs Java 17+)")
    busy = [p for p in ports if _port_busy(p)]
    if busy:
        pytest.skip(f"port(s) {busy} on 127.0.0.1 already in use (a Spark service started by hand?)")


def _probe(profile: str, data_dir) -> dict:
    """Run `python -m spark_jobs.services probe <profile>` in a fresh process: the driver (or the
    Connect client) lives and dies there, as it would in an Airflow task."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, "-m", "spark_jobs.services", "probe", profile,
                           "--data-dir", str(data_dir)],
                          capture_output=True, text=True, timeout=150, env=env)
    assert proc.returncode == 0, f"probe through {profile} failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _daemon_pids(run_dir) -> list[int]:
    """Pids the scripts recorded (spark-daemon.sh pid files)."""
    return [int(f.read_text().strip()) for f in sorted((run_dir / "pids").glob("*.pid"))]


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"   # a zombie is dead, not yet reaped
    except FileNotFoundError:
        return True


def _assert_nothing_left(run_dir) -> None:
    deadline = time.time() + 10
    while services.processes_under(run_dir) and time.time() < deadline:
        time.sleep(0.2)
    assert services.processes_under(run_dir) == [], "processes still running from " + str(run_dir)


def test_standalone_cluster_runs_a_job_and_stops_clean(tmp_path):
    _require_free(7077, 8081, 8082, 8083)
    run_dir = tmp_path / "cluster"
    timings = {}
    t0 = time.perf_counter()
    try:
        assert services.start_cluster(workers=2, run_dir=run_dir) == "spark://127.0.0.1:7077"
        timings["start"] = time.perf_counter() - t0
        assert services.alive_workers() == 2
        assert services.cluster_running(run_dir=run_dir)
        daemons = _daemon_pids(run_dir)
        assert len(daemons) == 3                              # master + 2 workers
        assert set(daemons) <= set(services.processes_under(run_dir))

        t1 = time.perf_counter()
        result = _probe("cluster", tmp_path / "data")
        timings["job"] = time.perf_counter() - t1
        assert result["groups"] == 7
        assert result["parquet_rows"] == 1000       # executors wrote and read under the data dir
        assert result["executors"] == 2              # one 1-core executor per worker
    finally:
        t2 = time.perf_counter()
        services.stop_cluster(run_dir=run_dir)
        timings["stop"] = time.perf_counter() - t2
        print("standalone cluster timings (s):", {k: round(v, 1) for k, v in timings.items()})
    _assert_nothing_left(run_dir)
    assert not services.cluster_running(run_dir=run_dir)
    assert _daemon_pids(run_dir) == []                    # pid files removed ...
    assert all(_gone(pid) for pid in daemons)             # ... and the processes gone
    assert [p for p in services.spark_daemon_processes() if str(run_dir) in p] == []  # ps: no worker of ours


def _same_steps_on_connect_as_in_process(base) -> None:
    """The same random changes stepped on the Connect server (every step forced onto Spark, in a
    client process of its own) and in this process (in-process, Arrow): after every timestep the
    committed view deltas, every trace's integrated value and the manifest's keys are the same."""
    from spark_jobs.runtime.circuit import open_circuit
    from spark_jobs.runtime.step import run_step
    from tests.engines import Bag, output_delta, write_change
    from tests.policies import config
    from tests.test_paths import CIRCUIT, INPUTS, _traces

    circuit = base / "paths.yaml"
    base.mkdir()
    circuit.write_text(CIRCUIT)
    remote, local = base / "connect", base / "local"
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    log = base / "driver.log"
    with open(log, "w") as err:  # a file, not a pipe: a full pipe would stall the client
        driver = subprocess.Popen([sys.executable, "-m", "tests.cluster_driver", "spark", "connect", str(remote),
                                   str(circuit)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                  text=True, env=env)
    try:
        rt_local = open_circuit(str(circuit), config(local))
        rt_remote = open_circuit(str(circuit), config(remote))  # read with pyarrow only: never stepped here
        rng = random.Random(11)
        bags = {name: Bag(cols, domain, rng) for name, (cols, domain) in INPUTS.items()}
        for t in (1, 2):  # the load, then a change with deletes (the lean path: results back as Arrow)
            for name, bag in bags.items():
                change = bag.change(10, 4)
                for root in (remote, local):
                    write_change(str(root), name, t, bag.columns, change)
            driver.stdin.write("step\n")
            driver.stdin.flush()
            line = driver.stdout.readline()
            assert line.split() == ["committed", str(t), "spark"], line + log.read_text()[-3000:]
            assert run_step(rt_local).engine == "arrow"
            for view in rt_local.compiled.spec.outputs:
                assert output_delta(rt_remote, view) == output_delta(rt_local, view), f"timestep {t}, view {view}"
            assert _traces(rt_remote) == _traces(rt_local), f"timestep {t}: the state differs"
            meta = rt_remote.committed.manifest().meta
            assert meta["engine"] == "spark", meta
            assert set(meta) - {"bytes_read"} == set(rt_local.committed.manifest().meta) - {"bytes_read"}
    finally:
        driver.stdin.close()
        driver.wait(timeout=120)
    assert driver.returncode == 0, log.read_text()[-3000:]


def test_spark_connect_server_serves_a_client_and_stops_clean(tmp_path):
    _require_free(15002)
    run_dir = tmp_path / "connect"
    timings = {}
    t0 = time.perf_counter()
    try:
        assert services.start_connect(run_dir=run_dir) == "sc://127.0.0.1:15002"
        timings["start"] = time.perf_counter() - t0
        assert services.connect_running(run_dir=run_dir)
        (server,) = _daemon_pids(run_dir)
        assert services.start_connect(run_dir=run_dir)  # idempotent: a second start is a no-op
        assert _daemon_pids(run_dir) == [server]

        t1 = time.perf_counter()
        result = _probe("connect", tmp_path / "data")
        timings["client"] = time.perf_counter() - t1
        assert result["groups"] == 7
        assert result["parquet_rows"] == 1000       # the server wrote and read under the data dir
        timings.update({k: v for k, v in result.items() if k.endswith("_s")})
        t3 = time.perf_counter()
        _same_steps_on_connect_as_in_process(tmp_path / "differential")
        timings["differential"] = time.perf_counter() - t3
    finally:
        t2 = time.perf_counter()
        services.stop_connect(run_dir=run_dir)
        timings["stop"] = time.perf_counter() - t2
        print("spark connect timings (s):", {k: round(v, 1) for k, v in timings.items()})
    _assert_nothing_left(run_dir)
    assert not services.connect_running(run_dir=run_dir)
    assert _gone(server)
