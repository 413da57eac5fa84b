"""Small DataFrames made driver-local (LocalRelation) with ONE Spark job for all of them.

Why: Spark broadcasts a local relation without running a job, and folds filters and
projections over it at planning time. A step whose input changes are local looks state up
with no broadcast job per lookup (each ~0.1 s). The rows stay in the JVM: they are collected
with ``collectAsList`` and turned back into a relation there (no Python round trip per row).
"""
from __future__ import annotations

from typing import Mapping

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from spark_jobs.executor.session import temporary_conf
from spark_jobs.executor.zset import col

_SLOT = "__local_slot"
# A collect under a top-level limit scans one partition first and more in later jobs; this
# makes the first job scan them all.
_ONE_JOB_LIMIT = {"spark.sql.limit.initialNumPartitions": "100000"}


def _part(i: int) -> str:
    return f"__local_p{i}"


def to_local(spark: SparkSession, rows, schema) -> DataFrame:
    """A DataFrame over JVM rows (``java.util.List<Row>``) with a JVM ``StructType``."""
    return DataFrame(spark._jsparkSession.createDataFrame(rows, schema), spark)  # type: ignore[attr-defined]


def collect_local(spark: SparkSession, frames: Mapping[str, DataFrame], max_rows: int,
                  extras: Mapping[str, DataFrame] | None = None
                  ) -> tuple[dict[str, DataFrame] | None, dict[str, list[Row]]]:
    """Collect ``frames`` as local relations, and the (small) ``extras`` as Python rows, in one job.

    Each frame contributes at most ``max_rows + 1`` rows; if any has more, the frames are not
    made local (None: the caller keeps its distributed frames) but the extras are still
    returned. Extras are meant for a few summary rows (e.g. counts) computed in the same job.
    Every part goes into a struct column of its own, so parts with clashing column names or
    types share one union.
    """
    extras = dict(extras or {})
    parts = [df.limit(max_rows + 1) for df in frames.values()] + list(extras.values())
    if not parts:
        return {}, {}
    nulls = [F.lit(None).cast(df.schema) for df in parts]
    union = None
    for i, df in enumerate(parts):
        row = F.struct(*[col(c) for c in df.columns])
        tagged = df.select(F.lit(i).alias(_SLOT),
                           *[(row if j == i else nulls[j]).alias(_part(j)) for j in range(len(parts))])
        union = tagged if union is None else union.unionByName(tagged)
    assert union is not None
    with temporary_conf(spark, _ONE_JOB_LIMIT):
        jrows = union._jdf.collectAsList()
    local = to_local(spark, jrows, union._jdf.schema())

    def part(i: int) -> DataFrame:  # a filter + projection of a local relation: still local
        return local.where(F.col(_SLOT) == i).select(f"{_part(i)}.*")

    n = len(frames)
    rows = {name: part(n + k).collect() for k, name in enumerate(extras)}  # local: no job
    # every frame fits iff all of them together do (each was cut at max_rows + 1)
    if jrows.size() - sum(len(r) for r in rows.values()) > max_rows:
        return None, rows
    return {name: part(i) for i, name in enumerate(frames)}, rows
