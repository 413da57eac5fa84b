"""SQLite's ``now()`` to the millisecond in Airflow's queries: a triggered run starts at once.

The scheduler starts a queued DAG run only once ``dag_run.run_after <= now()`` (Airflow 3.3,
``DagRun.get_queued_dag_runs_to_set_running``; the same test picks the running runs to examine and
the DAGs whose next scheduled run is due). SQLAlchemy writes ``now()`` for SQLite as
``CURRENT_TIMESTAMP``, which is ``'YYYY-MM-DD HH:MM:SS'`` - whole seconds - while ``run_after`` is
stored with microseconds, and SQLite compares the two as text: ``'12:00:41.766230' <= '12:00:41'``
is false. So a run triggered at 41.766 s was not started before the clock reached 42 s: every
triggered run under ``make airflow`` (SQLite) waited 0-1 s, 0.5 s on average, before its first
task was even scheduled (measured: queued -> started 0.47-1.1 s with scheduler loops of 15-40 ms
every 0.27 s). A cron run was likewise created up to a second after it was due.

``install()`` makes SQLAlchemy write ``now()`` for SQLite as
``STRFTIME('%Y-%m-%d %H:%M:%f', 'now')`` (UTC, milliseconds; the same text format, so every
comparison Airflow makes stays a comparison of times). Other databases are untouched; PostgreSQL's
``now()`` has microseconds already. ``scripts/airflow_local.sh`` installs it through
``$AIRFLOW_HOME/config/airflow_local_settings.py``, which every Airflow process imports at start,
before its first query.
"""
from __future__ import annotations

NOW_SQL = "STRFTIME('%Y-%m-%d %H:%M:%f', 'now')"
_installed = False


def install() -> bool:
    """Register the SQLite ``now()`` (once per process); False if SQLAlchemy is missing."""
    global _installed
    if _installed:
        return True
    try:
        from sqlalchemy.ext.compiler import compiles
        from sqlalchemy.sql.functions import now
    except ImportError:  # not an Airflow process: nothing to fix
        return False

    @compiles(now, "sqlite")
    def _sqlite_now(element, compiler, **kw) -> str:  # noqa: ARG001 - SQLAlchemy's signature
        return NOW_SQL

    _installed = True
    return True
