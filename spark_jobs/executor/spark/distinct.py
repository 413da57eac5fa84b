"""distinct and its incremental form H (Proposition 4.7).

H looks only at the tuples of the delta: it reads their integrated weight before the change
(``i``) and emits +1/-1 where the sign of ``i`` versus ``i + d`` crosses zero, so its work is
bounded by the delta plus the lookups, never by the whole integral.
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.executor.spark.zset import (IN_LIST_MAX, WEIGHT, checked_add, checked_sum, col, consolidate, data_columns,
                                           restrict)

_D, _I = "__d", "__i"


def distinct(df: DataFrame) -> DataFrame:
    """distinct(m)[x] = 1 if m[x] > 0 else 0 (a consolidated set)."""
    cols = data_columns(df)
    positive = consolidate(df).where(col(WEIGHT) > 0)
    return positive.select(*[col(c) for c in cols], F.lit(1).cast("long").alias(WEIGHT))


def distinct_h(delta: DataFrame, prev_integral: DataFrame | None, *, broadcast_delta: bool = True,
               in_list_max: int = IN_LIST_MAX) -> DataFrame:
    """H(i, d): the change of distinct(I x) caused by ``delta``; consolidated, weights in {+1, -1}.

    ``prev_integral`` is z^-1(I x), the integral before this delta (any number of rows per tuple);
    None means empty. ``broadcast_delta`` broadcasts the delta's tuples for the lookup (set it
    False for a delta too large to broadcast).
    """
    cols = data_columns(delta)
    tagged = delta.select(*[col(c) for c in cols], col(WEIGHT).alias(_D), F.lit(0).cast("long").alias(_I))
    if prev_integral is not None:
        looked_up = restrict(prev_integral.select(*[col(c) for c in cols], col(WEIGHT)), delta, cols, cols,
                             broadcast_delta, in_list_max)
        tagged = tagged.unionByName(
            looked_up.select(*[col(c) for c in cols], F.lit(0).cast("long").alias(_D), col(WEIGHT).alias(_I)))
    per_tuple = (tagged.groupBy(*[col(c) for c in cols])
                 .agg(checked_sum(_D, cols).alias(_D), checked_sum(_I, cols).alias(_I))
                 .where(F.col(_D) != 0))
    before, after = F.col(_I), checked_add(F.col(_I), F.col(_D), cols)
    sign = (F.when((before <= 0) & (after > 0), F.lit(1))
            .when((before > 0) & (after <= 0), F.lit(-1))
            .cast("long"))
    return per_tuple.select(*[col(c) for c in cols], sign.alias(WEIGHT)).where(col(WEIGHT).isNotNull())
