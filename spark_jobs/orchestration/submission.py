"""How a DAG's tasks reach Spark, chosen by the profile (no Airflow, no Spark imports here).

- ``in_process`` (default): the task process runs the step itself: as the driver of a local
  session (``spark.mode: local``), as the driver of a cluster application (``cluster``), or as a
  thin client of a Spark Connect server (``connect``: no JVM per task, the fastest).
- ``spark_submit`` (``spark.submit: spark-submit``, modes local/cluster): each task is a
  ``SparkSubmitOperator`` running ``spark_jobs/runtime/stage_main.py`` as its own application,
  through the Airflow connection ``spark.conn_id`` (default ``spark_dbsp``).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

from spark_jobs.config import Config

DEFAULT_CONN_ID = "spark_dbsp"


@dataclass(frozen=True)
class Submission:
    kind: str  # "in_process" | "spark_submit"
    profile: str  # path of the profile file, passed on to stage_main
    conn_id: str = DEFAULT_CONN_ID
    conf: dict[str, str] = field(default_factory=dict)

    def describe(self, config: Config) -> str:
        """One line for the DAG's docs."""
        s = config.spark
        if self.kind == "spark_submit":
            return (f"`spark-submit` per task (connection `{self.conn_id}`, master `{s.master}`), "
                    f"profile `{config.profile}`")
        where = (f"Spark Connect client of `{s.remote}`" if s.mode == "connect"
                 else f"driver in the task process, master `{s.master}`")
        return f"in-process ({where}), profile `{config.profile}`"


def submission_for(config: Config) -> Submission:
    """Read ``spark.submit`` (``in-process`` | ``spark-submit``) and ``spark.conn_id``."""
    raw = config.raw.get("spark") or {}
    submit = str(raw.get("submit") or "in-process")
    if submit in ("in-process", "in_process"):
        return Submission("in_process", config.path)
    if submit != "spark-submit":
        raise ValueError(f"{config.path}: spark.submit is {submit!r}; expected 'spark-submit' or 'in-process'")
    if config.spark.mode == "connect":
        raise ValueError(f"{config.path}: spark.submit 'spark-submit' needs spark.mode local or cluster; "
                         f"Spark Connect clients need no spark-submit")
    conf = dict(config.spark.conf)
    conf.setdefault("spark.pyspark.python", sys.executable)  # executors and driver: this venv's Python
    conf.setdefault("spark.pyspark.driver.python", sys.executable)
    return Submission("spark_submit", config.path, str(raw.get("conn_id") or DEFAULT_CONN_ID), conf)
