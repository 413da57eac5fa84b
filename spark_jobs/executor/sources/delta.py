"""``D`` for snapshot sources: the change between the newest snapshot and the previous value."""
from __future__ import annotations

from pyspark.sql import DataFrame

from spark_jobs.executor.spark import zset
from spark_jobs.spec.model import WEIGHT


def snapshot_delta(new_snapshot: DataFrame, previous: DataFrame | None) -> DataFrame:
    """``new - previous``, consolidated: an update shows as -old +new, unchanged rows vanish.

    ``previous`` is the integrated value so far (any Z-set, consolidated or not; None at first).
    Its columns are matched by name.
    """
    if previous is None:
        return zset.consolidate(new_snapshot)
    aligned = previous.select(*[zset.col(c) for c in new_snapshot.columns if c != WEIGHT],
                              zset.col(WEIGHT).cast("long").alias(WEIGHT))
    return zset.consolidate(zset.plus(new_snapshot, zset.negate(aligned)))
