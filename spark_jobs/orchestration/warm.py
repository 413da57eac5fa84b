"""Task processes that start warm: the scheduler imports the task runtime and compiles the
circuits once, before forking.

Airflow 3's LocalExecutor forks its workers from the scheduler, and each worker forks a fresh
process per task (the task SDK supervisor). Whatever the scheduler has imported, every task
process has for free. Measured here (``python -X importtime``): the Spark Connect client (grpc,
pandas, pyarrow) ~0.9 s, the dbsp runtime ~0.3 s, Great Expectations ~2 s, in every task; then
the task parses its DAG file, which compiles its circuit (0.3 s under load). So
``scripts/airflow_local.sh`` installs ``$AIRFLOW_HOME/config/airflow_local_settings.py`` (Airflow
imports it at start in every process), which calls ``preload()``: in the scheduler only, it
imports those modules and compiles the circuits (``runtime.circuit.compile_file`` remembers a
compiled file by its text, so an edited circuit is compiled again). Nothing is started (no Spark
session, no thread, no socket); a fork keeps the imported modules and shares their memory with
the parent until written.

Set ``DBSP_PRELOAD=0`` to turn it off; ``DBSP_PRELOAD=all`` also preloads in other processes.
The same settings file installs two fixes of Airflow's latency under ``make airflow``
(``sqlite_clock.py``: a triggered run is due at once on SQLite; ``task_exit.py``: a task's end
is reported when its process ends); ``DBSP_PRELOAD`` does not turn those off.
"""
from __future__ import annotations

import logging
import os
import sys
import time

log = logging.getLogger(__name__)
ENV = "DBSP_PRELOAD"
MARKER = "dbsp-spark: preloads the task runtime"  # in the installed airflow_local_settings.py
SETTINGS_FILE = f'''# {MARKER} (written by scripts/airflow_local.sh; see spark_jobs/orchestration/warm.py).
# Remove this file (or set DBSP_PRELOAD=0) to turn preloading off.
from spark_jobs.orchestration.sqlite_clock import install as _dbsp_sqlite_clock
from spark_jobs.orchestration.task_exit import install as _dbsp_task_exit
from spark_jobs.orchestration.warm import preload as _dbsp_preload

_dbsp_sqlite_clock()  # a triggered run starts at once on SQLite (see sqlite_clock.py)
_dbsp_preload()
_dbsp_task_exit()  # a task's end is reported when its process ends (see task_exit.py)
__all__: list = []  # nothing here is an Airflow setting or policy
'''
MODULES = (
    "pyspark.sql.connect.session", "pyspark.sql.connect.dataframe", "pyspark.sql.functions",
    "pyarrow.parquet", "pandas",
    "spark_jobs.runtime.timestep", "spark_jobs.runtime.staging", "spark_jobs.runtime.inputs",
    "spark_jobs.runtime.step", "spark_jobs.runtime.quality_gate", "spark_jobs.executor.evaluate",
    "spark_jobs.orchestration.dag_factory",
    # the in-process engine, which runs a DAG run's small steps (and which even an empty run's
    # plan asks whether it could): ~0.4 s of imports in every task otherwise (measured under load)
    "pyarrow.dataset", "spark_jobs.executor.arrow.kernels", "spark_jobs.executor.arrow.inputs",
    "spark_jobs.runtime.cost", "spark_jobs.runtime.recompute", "spark_jobs.runtime.change",
    "spark_jobs.runtime.retention",
)


def wanted() -> bool:
    """Preload in the scheduler (it forks the LocalExecutor's workers), unless turned off."""
    mode = os.environ.get(ENV, "1").lower()
    if mode in ("0", "false", "no", "off"):
        return False
    return mode == "all" or sys.argv[1:2] == ["scheduler"]


def preload(modules: tuple[str, ...] = MODULES, great_expectations: bool = True) -> float:
    """Import the task runtime (and GE, with its logs quietened); returns the seconds spent."""
    if not wanted():
        return 0.0
    import importlib

    started = time.perf_counter()
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a preload must never stop Airflow
            log.warning("dbsp preload: cannot import %s: %s", name, exc)
    if great_expectations:
        try:
            from spark_jobs.quality.expectations import gx_module

            gx_module()
        except Exception as exc:  # noqa: BLE001
            log.warning("dbsp preload: cannot import great_expectations: %s", exc)
    try:  # the circuits compiled once: a task's DAG parse and its step find them compiled
        from spark_jobs.orchestration.dag_factory import build_dags

        build_dags()
    except Exception as exc:  # noqa: BLE001 - a broken circuit is the DAG processor's to report
        log.warning("dbsp preload: circuits not compiled ahead: %s", exc)
    seconds = time.perf_counter() - started
    log.info("dbsp preload: task runtime imported in %.1f s", seconds)
    return seconds


def install(airflow_home: str) -> str:
    """Write ``$AIRFLOW_HOME/config/airflow_local_settings.py`` unless a file of the user's is
    there; returns what happened (for the launcher's output)."""
    folder = os.path.join(airflow_home, "config")
    path = os.path.join(folder, "airflow_local_settings.py")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            if MARKER not in fh.read():
                return f"{path} is yours: left as is (task processes start without preloading)"
    os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(SETTINGS_FILE)
    return f"task runtime preloaded by the scheduler ({path})"
