"""The stream operators I (integrate), z^-1 (delay) and D (differentiate) on one timestep's values.

Across timesteps these are state: the evaluator reads the previous value from the state store and
hands these functions the pieces; each is a thin Z-set expression (section 2 of the paper).
"""
from __future__ import annotations

from pyspark.sql import DataFrame

from spark_jobs.executor.spark import lazy
from spark_jobs.executor.spark.zset import empty_like, negate, plus, select_names


def integrate_value(prev: DataFrame | None, delta: DataFrame) -> DataFrame:
    """I: the integral after this step, prev + delta (not consolidated). Over a state read not
    made yet (``lazy.LazyFrame``) with the delta's columns and types, the sum is lazy too: a
    step whose circuit never reads the integral (its delay reads the committed trace) then
    neither reads the trace nor plans the union. Its schema is the read's (the union's first
    side; every column of a read is nullable already)."""
    if prev is None:
        return delta
    if lazy.pending(prev) and _same_fields(prev, delta):
        return lazy.LazyFrame(prev.sparkSession, lambda: plus(prev, delta)._jdf, prev.schema)
    return plus(prev, delta)


def _same_fields(a: DataFrame, b: DataFrame) -> bool:
    """Do ``a`` and ``b`` have the same column names and types (any order)? (Then a union by
    name widens nothing.)"""
    return sorted(a.dtypes) == sorted(b.dtypes) and len(set(a.columns)) == len(a.columns)


def delay_value(prev: DataFrame | None, like: DataFrame) -> DataFrame:
    """z^-1: the previous step's value; the empty Z-set (with ``like``'s columns) on the first step."""
    return empty_like(like) if prev is None else select_names(prev, like.columns)


def differentiate_value(current: DataFrame, prev: DataFrame | None) -> DataFrame:
    """D: current - previous value (not consolidated)."""
    return current if prev is None else plus(current, negate(prev))
