"""The stream operators I (integrate), z^-1 (delay) and D (differentiate) on one timestep's values.

Across timesteps these are state: the evaluator reads the previous value from the state store and
hands these functions the pieces; each is a thin Z-set expression (section 2 of the paper).
"""
from __future__ import annotations

from pyspark.sql import DataFrame

from spark_jobs.executor.spark.zset import empty_like, negate, plus, select_names


def integrate_value(prev: DataFrame | None, delta: DataFrame) -> DataFrame:
    """I: the integral after this step, prev + delta (not consolidated)."""
    return delta if prev is None else plus(prev, delta)


def delay_value(prev: DataFrame | None, like: DataFrame) -> DataFrame:
    """z^-1: the previous step's value; the empty Z-set (with ``like``'s columns) on the first step."""
    return empty_like(like) if prev is None else select_names(prev, like.columns)


def differentiate_value(current: DataFrame, prev: DataFrame | None) -> DataFrame:
    """D: current - previous value (not consolidated)."""
    return current if prev is None else plus(current, negate(prev))
