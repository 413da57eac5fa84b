"""Airflow DAG file that reports broken circuits: an import error with the `dbsp validate` message.

It holds no runnable DAG. When a circuit in the circuits folder does not validate, this file gets
an import error listing every problem (file, line, node, what was expected); the valid circuits'
DAGs come from dbsp_circuits.py and stay scheduled, because Airflow 3.3 marks all DAGs of a file
with an import error as stale. See dags/README.md.
"""
from __future__ import annotations

import os
import sys

try:
    import spark_jobs  # noqa: F401  (installed into the venv by `make install`)
except ImportError:  # a checkout used without installing: the package sits next to dags/
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_jobs.orchestration.dag_factory import build_error_dags  # noqa: E402

globals().update(build_error_dags())
