"""Airflow DAG file: one DAG per circuit in the circuits folder, one DAG run per DBSP timestep.

The folder is $DBSP_CIRCUITS_DIR, else the profile's ``circuits_dir`` ($DBSP_CONFIG, default
config/local.yaml). A circuit that does not validate is left out here and reported, with the message
`dbsp validate` gives, as an import error of dbsp_circuit_errors.py. See dags/README.md.
"""
from __future__ import annotations

import os
import sys

try:
    import spark_jobs  # noqa: F401  (installed into the venv by `make install`)
except ImportError:  # a checkout used without installing: the package sits next to dags/
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_jobs.orchestration.dag_factory import build_dags  # noqa: E402

globals().update(build_dags())
