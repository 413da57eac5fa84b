"""The two fixes that take a DAG run's fixed cost under `make airflow` from ~1-6 s to well under a
second, each against the real library it fixes (SQLAlchemy on SQLite, Airflow's supervisor, a
real child process); the end-to-end timing is bench.airflow's, never a test's."""
from __future__ import annotations

import os
import sqlite3
import time
from datetime import datetime, timedelta, timezone

import pytest

from spark_jobs.orchestration import sqlite_clock, task_exit, warm


def test_sqlite_current_timestamp_has_whole_seconds_so_a_just_queued_run_waits():
    """Why the fix exists: SQLite compares Airflow's stored times (microseconds) with
    CURRENT_TIMESTAMP (whole seconds) as text."""
    db = sqlite3.connect(":memory:")  # 'now' is one instant within a statement
    stamp, due = db.execute("SELECT CURRENT_TIMESTAMP, CURRENT_TIMESTAMP || '.000001' <= CURRENT_TIMESTAMP").fetchone()
    assert len(stamp) == 19 and due == 0  # queued a microsecond into this second: not due before the next


def test_now_on_sqlite_has_milliseconds_and_a_run_queued_a_moment_ago_is_due():
    from sqlalchemy import Column, DateTime, Integer, MetaData, Table, create_engine, func, insert, select

    assert sqlite_clock.install() and sqlite_clock.install()  # once per process, then a no-op
    engine = create_engine("sqlite://")
    assert "STRFTIME" in str(select(func.now()).compile(engine))
    runs = Table("dag_run", MetaData(), Column("id", Integer, primary_key=True), Column("run_after", DateTime))
    runs.metadata.create_all(engine)
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    with engine.begin() as conn:
        conn.execute(insert(runs), [{"id": 1, "run_after": now - timedelta(milliseconds=20)},
                                    {"id": 2, "run_after": now + timedelta(hours=1)}])
        due = conn.execute(select(runs.c.id).where(runs.c.run_after <= func.now())).scalars().all()
    assert due == [1]  # the one queued 20 ms ago, not the future one; CURRENT_TIMESTAMP gave [] within its second


def test_wait_for_exit_sees_a_child_end_without_reaping_it():
    pid = os.fork()
    if pid == 0:
        time.sleep(0.05)
        os._exit(3)
    t0 = time.monotonic()
    assert task_exit.wait_for_exit(pid, timeout=5.0) is True
    assert time.monotonic() - t0 < 1.0
    assert os.waitpid(pid, 0)[1] >> 8 == 3  # still reapable by its supervisor, with its exit code
    assert task_exit.wait_for_exit(pid, timeout=0.1) is None  # reaped: no longer our child
    assert task_exit.wait_for_exit(1, timeout=0.1) is None  # never our child


def test_wait_for_exit_gives_up_after_its_timeout():
    pid = os.fork()
    if pid == 0:
        time.sleep(2)
        os._exit(0)
    try:
        t0 = time.monotonic()
        assert task_exit.wait_for_exit(pid, timeout=0.1) is False
        assert 0.09 < time.monotonic() - t0 < 1.0
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_the_supervisor_patch_wraps_airflow_s_own_class_once():
    pytest.importorskip("airflow.sdk.execution_time.supervisor")
    from airflow.sdk.execution_time.supervisor import ActivitySubprocess

    assert task_exit.install() and task_exit.install()
    assert getattr(ActivitySubprocess, task_exit._PATCHED) is True
    assert ActivitySubprocess._service_subprocess.__module__ == task_exit.__name__


def test_the_installed_local_settings_apply_both_fixes(tmp_path):
    warm.install(str(tmp_path))
    text = (tmp_path / "config" / "airflow_local_settings.py").read_text()
    assert "_dbsp_sqlite_clock()" in text and "_dbsp_task_exit()" in text
