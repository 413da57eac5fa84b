"""The "Quality report" button on a run's task: the circuit's quality reports in the browser.

The dbsp plugin (``plugin.py``) serves ``<state root>/<circuit>/quality/index.html`` (one row
per check of every timestep, newest first) at ``/dbsp/quality/<dag_id>/``, behind Airflow's
login. The link class must be known to the API server: the plugin registers it.
"""
from __future__ import annotations

from airflow.sdk import BaseOperatorLink

QUALITY_URL = "/dbsp/quality"


def quality_url(dag_id: str) -> str:
    return f"{QUALITY_URL}/{dag_id}/"


class QualityReportLink(BaseOperatorLink):
    name = "Quality report"

    def get_link(self, operator, *, ti_key) -> str:
        return quality_url(ti_key.dag_id)
