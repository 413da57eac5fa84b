"""One SparkSession per process, built from the profile's Spark settings."""
from __future__ import annotations

import os
import sys

from spark_jobs.config import Config, SparkSettings

_LOOPBACK = {"SPARK_LOCAL_IP": "127.0.0.1"}


def get_spark(settings: SparkSettings | Config | None = None):
    """Return the active SparkSession or build one (local, Spark Connect or cluster master)."""
    from pyspark.sql import SparkSession

    if isinstance(settings, Config):
        settings = settings.spark
    settings = settings or SparkSettings(conf={"spark.sql.shuffle.partitions": "4"})
    for k, v in _LOOPBACK.items():
        os.environ.setdefault(k, v)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers must use this venv's Python
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(settings.app_name)
    if settings.mode == "connect":
        builder = builder.remote(settings.remote or "sc://127.0.0.1:15002")
    else:
        builder = builder.master(settings.master)
    for k, v in settings.conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    if settings.mode != "connect":
        spark.sparkContext.setLogLevel("ERROR")
    return spark
