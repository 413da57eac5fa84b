"""One writer per circuit and state root (spark_jobs/state/lease.py).

The unit tests run the lease on a local folder (no Spark); the last tests run real `dbsp step`
processes: a second one is refused at once with exit code 4 while the first is in the middle of
its step, and a holder killed with SIGKILL has its lease taken over by the next step.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.examples.generators import PaperExampleGenerator
from spark_jobs.runtime import timestep
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.state.fs import LocalFileSystem
from spark_jobs.errors import EXIT_LEASE_HELD
from spark_jobs.state.lease import Lease, LeaseHeld, LeaseLost, LeaseRecord
from tests import oracle
from tests.policies import make_input_folders
from tests.dag_tasks import TASK_MODES, run_stage_tasks
from tests.test_state_remote_fs import store_fs  # noqa: F401 - a fixture: every store file system

PAPER = str(PROJECT_ROOT / "circuits" / "paper_example.yaml")


def _lease(root, owner: str, **kw) -> Lease:
    return Lease(LocalFileSystem(), str(root), owner, circuit="c", **kw)


def test_a_second_writer_is_refused_until_the_first_releases(tmp_path):
    first = _lease(tmp_path, "a").acquire()
    with pytest.raises(LeaseHeld) as err:
        _lease(tmp_path, "b").acquire()
    assert f"process {os.getpid()}" in str(err.value) and "another writer" in str(err.value)
    first.check()  # still its own
    first.release()
    second = _lease(tmp_path, "b").acquire()
    with pytest.raises(LeaseLost):
        first.check()
    second.release()


def test_an_expired_lease_is_taken_over_and_its_holder_may_not_commit(tmp_path):
    slow = _lease(tmp_path, "slow", ttl=0.3).acquire()
    with pytest.raises(LeaseHeld):
        _lease(tmp_path, "other", ttl=0.3).acquire()
    time.sleep(0.5)  # no heartbeat: it expires
    taker = _lease(tmp_path, "other", ttl=0.3).acquire()
    with pytest.raises(LeaseLost, match="taken over"):
        slow.check()
    with pytest.raises(LeaseLost):
        slow.renew()
    slow.release()  # not its own any more: leaves the taker's lease alone
    taker.check()


def test_the_lease_on_every_store_file_system(store_fs):
    """Local disk, pyarrow's local FS and Hadoop (viewfs://, the hdfs:// and s3a:// code path):
    the exclusive create refuses a second writer, a stale lease is taken over and its old holder
    may not commit, and a release lets the next writer in."""
    fs, root = store_fs
    # ttl 2 s: through Hadoop (py4j calls) an acquire took more than 0.5 s on a loaded machine,
    # so the first lease went stale before the second writer tried
    first = Lease(fs, root, "a", circuit="c", ttl=2.0).acquire()
    with pytest.raises(LeaseHeld, match="another writer"):
        Lease(fs, root, "b", circuit="c", ttl=2.0).acquire()
    time.sleep(2.2)  # not renewed: stale
    taker = Lease(fs, root, "b", circuit="c").acquire()
    with pytest.raises(LeaseLost):
        first.check()
    first.release()  # not its own any more: the taker's record stays
    taker.check()
    taker.release()
    assert [n for n in fs.listdir(fs.join(root, "lease")) if n.endswith(".json")] == []
    Lease(fs, root, "c", circuit="c").acquire().release()


def test_a_heartbeat_keeps_a_lease_alive(tmp_path):
    holder = _lease(tmp_path, "a", ttl=0.4, heartbeat=0.05)
    with holder:
        time.sleep(0.8)
        with pytest.raises(LeaseHeld):
            _lease(tmp_path, "b", ttl=0.4).acquire()
    _lease(tmp_path, "b").acquire()  # released on exit


def test_a_dead_process_lease_is_taken_over_at_once(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    fs = LocalFileSystem()
    now = time.time()
    record = LeaseRecord("gone", "process", _lease(tmp_path, "x").host, dead.pid, now, now, 3600.0, "c")
    fs.publish_text(os.path.join(tmp_path, "lease", "000000000001.json"), record.to_json(), ".tmp-")
    taker = _lease(tmp_path, "new").acquire()
    assert sorted(os.listdir(tmp_path / "lease")) == ["000000000002.json"]  # the stale record is gone
    taker.release()


def test_two_takers_of_a_stale_lease_one_wins(tmp_path):
    _lease(tmp_path, "old", ttl=0.01).acquire()
    time.sleep(0.05)
    won, refused = [], []
    barrier = threading.Barrier(8)

    def take(i: int) -> None:
        barrier.wait()
        try:
            won.append(_lease(tmp_path, f"t{i}").acquire())
        except LeaseHeld:
            refused.append(i)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == 7
    won[0].check()


def test_a_dag_run_lease_spans_its_tasks_and_passes_to_the_next_run(tmp_path):
    """Tasks of one run share its lease; a `dbsp step` is refused meanwhile; the next run's plan
    takes the lease over (Airflow starts it only after the previous run ended)."""
    plan_task = _lease(tmp_path, "run:r1", kind="run").acquire()
    plan_task.stop_heartbeat()  # the task's process ends; the lease stays
    stage_task = _lease(tmp_path, "run:r1", kind="run").acquire()  # a later task of the same run
    with pytest.raises(LeaseHeld, match="DAG run 'r1'"):
        _lease(tmp_path, "dbsp-step").acquire()
    _lease(tmp_path, "run:r2", kind="run", take_over_runs=True).acquire()
    with pytest.raises(LeaseLost):
        stage_task.check()


def test_a_dag_run_that_fails_for_good_gives_its_lease_back(tmp_path, monkeypatch):
    from spark_jobs.executor.sources import InputRefused
    from spark_jobs.orchestration.tasks import give_up

    monkeypatch.setenv("DBSP_DATA_ROOT", str(tmp_path))
    root = tmp_path / "_dbsp" / "paper_example"
    _lease(root, "run:r1", kind="run").acquire().stop_heartbeat()
    give_up(PAPER, "r2", None, InputRefused([("f", "bad")]))  # another run's failure: not ours to give
    with pytest.raises(LeaseHeld):
        _lease(root, "dbsp-step").acquire()
    give_up(PAPER, "r1", None, InputRefused([("f", "bad")]))
    _lease(root, "dbsp-step").acquire()


def _cli(root, *env_extra: tuple[str, str]) -> subprocess.Popen:
    env = dict(os.environ, **dict(env_extra))
    return subprocess.Popen([sys.executable, "-m", "spark_jobs.cli.main", "step", PAPER, "--data-root", str(root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=PROJECT_ROOT)


def test_concurrent_steps_and_a_killed_holder(spark, tmp_path):
    """A step paused in its middle holds the lease: a second `dbsp step` exits with code 4 at
    once and touches nothing; the first is then killed with SIGKILL, and the next step takes its
    lease over, cleans its leftovers and commits."""
    PaperExampleGenerator(str(tmp_path)).write_batch()
    first = _cli(tmp_path, ("DBSP_FAILPOINT", "mid_step"), ("DBSP_FAILPOINT_SLEEP", "600"))
    try:
        lease_dir = tmp_path / "_dbsp" / "paper_example" / "lease"
        staged = tmp_path / "_dbsp" / "paper_example" / "traces"
        for line in first.stderr:  # wait until the first step has written its files (at mid_step)
            if "failpoint mid_step: pausing" in line:
                break
        assert first.poll() is None
        written = sorted(p.name for p in staged.rglob("*") if p.is_dir())
        started = time.time()
        second = _cli(tmp_path)
        out, err = second.communicate(timeout=300)
        assert second.returncode == EXIT_LEASE_HELD, err[-3000:]
        assert "another writer" in err and f"process {first.pid}" in err and "Traceback" not in err
        assert time.time() - started < 60  # refused before starting Spark
        assert sorted(p.name for p in staged.rglob("*") if p.is_dir()) == written  # its files are intact
        assert os.listdir(lease_dir)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    third = _cli(tmp_path)
    out, err = third.communicate(timeout=600)
    assert third.returncode == 0, err[-3000:]
    rt = open_circuit(PAPER, load_config(data_root=str(tmp_path)))
    assert rt.store.last_committed() == 1
    assert {"v": oracle.view_counter(rt, "v")} == oracle.paper_example(str(tmp_path))
    assert os.listdir(lease_dir) == []  # released


@pytest.mark.parametrize("tasks", TASK_MODES)
def test_a_dag_run_holds_the_lease_from_plan_to_commit(spark, tmp_path, tasks):
    PaperExampleGenerator(str(tmp_path)).write_batch()
    rt = open_circuit(PAPER, load_config(data_root=str(tmp_path)))
    timestep.plan(rt, "manual__1")
    other = open_circuit(PAPER, load_config(data_root=str(tmp_path)))
    from spark_jobs.runtime.step import run_step

    with pytest.raises(LeaseHeld, match="DAG run 'manual__1'"):
        run_step(other)
    run_stage_tasks(rt, "manual__1", tasks)
    timestep.check(rt, "manual__1")
    assert timestep.commit(rt, "manual__1")["timestep"] == 1
    assert run_step(other).timestep == 2  # released by the commit


def test_an_empty_run_skipped_by_its_plan_gives_the_lease_back(tmp_path):
    """No task follows a plan that skips its run, so the plan itself releases the run's lease
    (no Spark: the plan of a local state root starts none)."""
    rt = open_circuit(PAPER, load_config(data_root=str(tmp_path)))
    make_input_folders(rt)  # empty folders: no new file (a missing folder would refuse the plan)
    p = timestep.plan(rt, "scheduled__1")
    assert p["empty"] and timestep.is_skipped(rt, p)
    assert os.listdir(tmp_path / "_dbsp" / "paper_example" / "lease") == []
    assert "spark" not in rt.__dict__
