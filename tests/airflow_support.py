"""Helpers for the Airflow tests: an isolated AIRFLOW_HOME, a DagBag, and (from the package) a
small REST client and a real local Airflow started through scripts/airflow_local.sh."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from spark_jobs.orchestration.airflow_env import free_port  # noqa: F401  (re-exported for tests)
from spark_jobs.orchestration.rest import AirflowAPI, LocalAirflow, task_log  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
DAGS = ROOT / "dags"
LOADER = DAGS / "dbsp_circuits.py"  # the valid circuits' DAGs
ERRORS = DAGS / "dbsp_circuit_errors.py"  # import error for the broken ones
# A circuit the validator refuses (line 7: node 'big' reads 'tt', a typo of input 't').
BROKEN_CIRCUIT = """\
name: broken_circuit
inputs:
  t:
    schema: {id: long, a: long}
    source: {kind: changes, path: inbox/t, format: parquet}
nodes:
  big: {op: filter, input: tt, where: "a > 2"}
outputs:
  big: {}
"""


def use_isolated_home(home: Path) -> None:
    """Point Airflow at ``home`` before anything imports it (its config is read at import)."""
    if "airflow" in sys.modules and os.environ.get("AIRFLOW_HOME") != str(home):
        return  # already configured by an earlier test in this process; parsing needs no DB
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS)


def dagbag():
    """Parse dags/ the way Airflow's DAG processor does (DagBag.process_file + validate)."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=DAGS, bundle_path=DAGS)
