"""Shared fixtures: one real local Spark session for the whole test run."""
from __future__ import annotations

import fcntl
import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def spark():
    from spark_jobs.config import load_config
    from spark_jobs.executor.spark.session import get_spark

    # Not stopped at teardown: SparkSession.stop() can hang in pyspark's accumulator-server
    # shutdown; the JVM goes away with this process anyway.
    config = load_config()
    # Test data is tiny and this machine has 2 cores: the time is Spark's per-stage and per-task
    # overhead, so one partition everywhere and no adaptive re-planning (AQE splits a query into a
    # job per shuffle stage), and no automatic broadcasts (each is a job of its own; explicit
    # broadcast hints still apply). Results are the same; production keeps the profile's settings.
    # One session serves the whole suite (900+ tests): 2g of driver heap ran out late in a CI run
    # (a broadcast in the recursion tests), so the test session gets more; the machine has 24 GiB.
    config.spark.conf.update({"spark.driver.memory": "4g",
                              "spark.default.parallelism": "1", "spark.sql.shuffle.partitions": "1",
                              "spark.sql.adaptive.enabled": "false",
                              "spark.sql.autoBroadcastJoinThreshold": "-1"})
    return get_spark(config)


@pytest.fixture(autouse=True)
def _no_leaked_failpoints():
    """A failpoint armed through the environment must not outlive its test: with
    DBSP_FAILPOINT_KILL=1 it would end the whole test run at the next step."""
    yield
    leaked = {k: os.environ.pop(k) for k in ("DBSP_FAILPOINT", "DBSP_FAILPOINT_KILL") if k in os.environ}
    assert not leaked, f"a test left failpoints armed in the environment: {leaked}"



# Modules that bind fixed loopback ports (a standalone master on 7077, Spark Connect on 15002):
# under `make test` (pytest-xdist, a module per worker at a time) two of them could start their
# services at once, so each holds one machine-wide lock while it runs.
FIXED_PORT_MODULES = {"test_cluster.py", "test_services.py"}
FIXED_PORTS_LOCK = Path(tempfile.gettempdir()) / "dbsp-tests-fixed-ports.lock"


@pytest.fixture(scope="module", autouse=True)
def _fixed_ports_one_module_at_a_time(request):
    if request.path.name not in FIXED_PORT_MODULES:
        yield
        return
    with open(FIXED_PORTS_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield
