"""One SparkSession per process, built from the profile's Spark settings."""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator

from spark_jobs.config import Config, SparkSettings
from spark_jobs.errors import DbspError, EXIT_FAILED

_LOOPBACK = {"SPARK_LOCAL_IP": "127.0.0.1"}
# Defaults a profile's conf may override. PySpark's DataFrame debugging records the Python call
# site of every API call in the JVM (about five Py4J round trips per call, ~4,000 per W1 step:
# seconds of driver time); errors still name the failing operator without it.
ENGINE_CONF = {"spark.python.sql.dataFrameDebugging.enabled": "false"}
# Runtime SQL settings every session gets (a Spark Connect client too). Timestamps are written as
# Parquet's INT64 microseconds adjusted to UTC, as pyarrow writes them, not Spark's default INT96
# (read back by pyarrow as naive nanoseconds): view deltas, feed files and state written by either
# engine then have the same column types for any reader.
#
# Spark 4.2's MergeSubplans turns a non-grouping aggregate that several parts of a plan read into
# scalar subqueries, each planned again where it is read, and nested ones again inside those. A
# step's one job is the union of every view delta and state write of the circuit, and the nodes
# above a global aggregate (a `SELECT` without `FROM` is one row counted over an input; an
# uncorrelated scalar subquery) all read it: on 64 constant views of sqllogictest's random/expr
# the step's plan grew to 6 MB with ~5,000 subquery references, physical planning took minutes
# and the driver ran out of heap (measured on one such view: planning 39 s with the rule, 0.2 s
# without). Left out, the shared aggregate is a plain subplan, as in Spark 4.0.
MERGE_SUBPLANS = "org.apache.spark.sql.catalyst.optimizer.MergeSubplans"
RUNTIME_CONF = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
                "spark.sql.optimizer.excludedRules": MERGE_SUBPLANS}
# Static settings, fixed when the JVM's SQL context starts (a Spark Connect client cannot set
# them; scripts/spark_connect.sh and docker/spark-service.sh pass them to the server). Spark keeps
# at most 100 generated classes by default; one W1 step generates ~120 (whole-stage code and
# projections), so every step evicted the last one's and recompiled all of them with Janino:
# ~120 compiles of 20-40 ms each, about half the step's time. With room for a few circuits'
# worth, a warm step compiles only what it has never seen.
#
# Local files are read and written through Hadoop's raw local file system, without its checksum
# layer: that layer names a file's checksum `.<name>.crc` and parses the name as a URI, so a file
# named `a:b.parquet` (a timestamped export) failed with "Relative path in absolute URI" (Spark
# then said "corrupt data?"). Any name POSIX allows is readable this way; nothing of the engine
# reads the .crc files (input fingerprints, Parquet footers and the manifests' records say what a
# file is).
ENGINE_STATIC_CONF = {"spark.sql.codegen.cache.maxEntries": "2000",
                      "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem"}


def compiled_classes(spark) -> int:
    """Generated classes this JVM has compiled so far (Spark's codegen metrics). A warm step
    should compile next to nothing: its code is the last step's, found in the class cache."""
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics  # type: ignore[attr-defined]
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


class ConnectServerUnreachable(DbspError, ConnectionError):
    """No Spark Connect server answers at the profile's address (the client would retry for
    minutes before failing)."""
    exit_code = EXIT_FAILED


def check_reachable(remote: str, timeout: float = 3.0) -> None:
    """Fail at once, with what to do, when nothing listens at ``sc://host:port``."""
    import socket
    from urllib.parse import urlparse

    parsed = urlparse(remote.replace("sc://", "http://", 1))
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 15002
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise ConnectServerUnreachable(
            f"no Spark Connect server at {remote} ({exc}). Start one with `scripts/spark_connect.sh start` "
            f"(or `make airflow`), or use another profile (--config local).") from None


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
        check_reachable(settings.remote or "sc://127.0.0.1:15002")
        builder = builder.remote(settings.remote or "sc://127.0.0.1:15002")
    else:
        builder = builder.master(settings.master)
    # a Spark Connect client cannot set static settings: the server's launch sets them
    # (scripts/spark_connect.sh)
    engine = dict(RUNTIME_CONF) if settings.mode == "connect" else {**RUNTIME_CONF, **ENGINE_CONF, **ENGINE_STATIC_CONF}
    for k, v in {**engine, **settings.conf}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    if settings.mode != "connect":
        spark.sparkContext.setLogLevel("ERROR")
    return spark


# A small change (``ExecutionPolicy.small_change``) is broadcast to look state up, and the step
# runs without adaptive execution (AQE submits every shuffle and broadcast stage as a Spark job of
# its own, ~50-100 ms each, and has nothing to coalesce or re-plan on delta-sized data). A larger
# change (an initial load) keeps AQE and joins without broadcasting (it may not fit in memory).
# Also: two shuffle partitions (delta-sized shuffles; one task per core), and a small file-open
# cost so the many small files of a trace (a base and its deltas) are read by a few tasks, not
# one task per file.
_STEP_CONF = {"spark.sql.adaptive.enabled": "false",
              "spark.sql.autoBroadcastJoinThreshold": "-1",  # only the deltas hinted: a job each
              "spark.sql.shuffle.partitions": "2",
              "spark.sql.files.openCostInBytes": str(64 * 1024)}


# A change held on the driver (``local_relations``: at most ``execution.local_change_rows`` rows,
# its state lookups narrowed on the driver too) is a few thousand rows at most: one task per leaf
# (a local relation, else one task per core of ``spark.default.parallelism``) and one shuffle
# partition. A W1 step's one job ran 65-70 tasks in 10-13 stages, most of them on empty or
# few-row partitions; each task costs scheduling, serialization and a thread hand-off. (A file
# scan keeps its splits: ``step_conf`` sets spark.sql.files.minPartitionNum to the default
# parallelism.)
# Without constraint propagation: the optimizer derives every operator's constraints (each
# filter's and join's predicates, carried up through every alias) to infer IS NOT NULL filters
# and prune filters, again at each pass over the step's one plan; on a W1 step that was ~7% of
# the step (measured in one A/B run, 2026-11-29). Delta-sized rows gain nothing from the filters
# it adds, and the projections over the local changes were folded over every row before these
# rules run anyway (``session.folded_on_local_rows``): which rows an expression sees is not changed.
_LOCAL_STEP_CONF = {"spark.sql.shuffle.partitions": "1",
                    "spark.sql.leafNodeDefaultParallelism": "1",
                    "spark.sql.constraintPropagation.enabled": "false"}


@contextmanager
def temporary_conf(spark, settings: dict[str, str]) -> Iterator[None]:
    """Run the body with these runtime Spark SQL settings; restore the previous values after."""
    saved = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


_FOLD_RULE = "org.apache.spark.sql.catalyst.optimizer.ConvertToLocalRelation"


@contextmanager
def without_local_folding(spark) -> Iterator[None]:
    """Spark's optimizer without ``ConvertToLocalRelation`` while the block runs (the session's
    setting restored after)."""
    key = "spark.sql.optimizer.excludedRules"
    with temporary_conf(spark, {key: ",".join(r for r in (spark.conf.get(key, None), _FOLD_RULE) if r)}):
        yield


def folded_on_local_rows(exc: BaseException) -> bool:
    """Did Spark's optimizer fail evaluating an expression over rows held in the plan
    (``ConvertToLocalRelation``, which runs a filter or projection over a small change handed to
    Spark as rows before the other rules simplify it)? Why it matters: over files the same plan is
    first simplified (``NOT (x < NULL OR e)`` becomes false, and ``e`` is never evaluated), so
    whether a step failed (``[DIVIDE_BY_ZERO]`` under ANSI) depended on where its rows came from.
    The step then runs again with that rule left out: Spark's answer as over files (Spark SQL's
    batch answer over the tables), or the same error if the plan evaluates it anyway."""
    trace = getattr(exc, "_stackTrace", None) or ""
    return "ConvertToLocalRelation" in trace


@contextmanager
def step_conf(spark, small_change: bool, local: bool = False) -> Iterator[None]:
    """Run the body with the Spark SQL settings of a small-change step; restore them after.
    ``local``: the change is held on the driver (``_LOCAL_STEP_CONF`` on top)."""
    if not small_change:
        yield
        return
    settings = dict(_STEP_CONF)
    if local:
        settings.update(_LOCAL_STEP_CONF)
        # a file scan (state the driver did not narrow) keeps its parallelism: the leaf default
        # also sizes file splits, unless spark.sql.files.minPartitionNum is set
        cores = spark.conf.get("spark.default.parallelism", None)
        if cores and not spark.conf.get("spark.sql.files.minPartitionNum", None):
            settings["spark.sql.files.minPartitionNum"] = cores
    with temporary_conf(spark, settings):
        yield
