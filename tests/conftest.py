"""Shared fixtures: one real local Spark session for the whole test run."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def spark():
    from spark_jobs.config import load_config
    from spark_jobs.executor.session import get_spark

    # Not stopped at teardown: SparkSession.stop() can hang in pyspark's accumulator-server
    # shutdown; the JVM goes away with this process anyway.
    session = get_spark(load_config())
    # Test data is tiny: one shuffle partition per stage keeps the per-task overhead down.
    session.conf.set("spark.sql.shuffle.partitions", "1")
    return session
