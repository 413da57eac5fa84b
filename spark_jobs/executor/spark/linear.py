"""Linear operators (map, filter, plus, negate): each is its own incremental version (Thm 3.3).

They touch every row independently and keep the weight as is, so they run on a delta unchanged.
Module-level ``map``/``filter`` are meant to be called qualified (``linear.map``).
"""
from __future__ import annotations

from typing import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.executor.spark import zset
from spark_jobs.executor.spark.zset import WEIGHT, col


def map(df: DataFrame, columns: Sequence[tuple[str, str]]) -> DataFrame:  # noqa: A001 - paper's name
    """Project/compute ``(out_name, spark_sql_expr)`` columns; weights unchanged (not consolidated)."""
    columns = tuple(tuple(c) for c in columns)
    return zset.select_kept(df, ("map", columns), lambda: [*[F.expr(expr).alias(out) for out, expr in columns],
                                                           col(WEIGHT)])


def filter(df: DataFrame, where: str) -> DataFrame:  # noqa: A001 - paper's name (sigma_P)
    """Keep rows whose predicate is TRUE (NULL drops the row, as SQL WHERE does)."""
    return df.where(zset.kept(("filter", where), lambda: F.expr(where)))


def plus(*dfs: DataFrame) -> DataFrame:
    """Z-set addition (UNION ALL)."""
    return zset.plus(*dfs)


def negate(df: DataFrame) -> DataFrame:
    """Z-set negation."""
    return zset.negate(df)
