"""Late rows of an input's change, on Spark: which rows are below the watermark, and the step's
totals (rows kept and dropped, largest event time) as one aggregate row.

A row is late when its event time is below the watermark committed before this step: nothing
of a batch depends on the order of its rows. Event times are compared as microseconds since
1970-01-01 UTC (``timestamp_ntz`` values are read in the session's time zone, UTC in every
profile), so the watermark is one integer whatever the column's type.
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.spec.model import WEIGHT

from .checks import FILE_COL


def event_micros(column: str) -> Column:
    """The event time of a row in microseconds since the epoch."""
    return F.unix_micros(F.col("`" + column.replace("`", "``") + "`").cast("timestamp"))


def is_late(column: str, watermark_us: int | None) -> Column:
    """True for the rows below the watermark (none before the first watermark)."""
    if watermark_us is None:
        return F.lit(False)
    return event_micros(column) < F.lit(watermark_us)


def on_time(df: DataFrame, column: str, watermark_us: int | None) -> DataFrame:
    """The rows of a change that are not late."""
    return df if watermark_us is None else df.where(~is_late(column, watermark_us))


def change_totals(df: DataFrame, column: str | None = None, watermark_us: int | None = None) -> DataFrame:
    """One row: ``ins``/``del`` (rows inserted and deleted, weights counted) of the rows kept and,
    with an event-time ``column``, ``late_ins``/``late_del`` of the late ones and ``max_us``, the
    largest event time of the change (late rows cannot raise it: they are below the watermark)."""
    w = F.col(WEIGHT)
    if column is None:
        return df.agg(F.sum(F.when(w > 0, w).otherwise(0)).alias("ins"),
                      F.sum(F.when(w < 0, -w).otherwise(0)).alias("del"))
    late = is_late(column, watermark_us)
    return df.agg(F.sum(F.when(~late & (w > 0), w).otherwise(0)).alias("ins"),
                  F.sum(F.when(~late & (w < 0), -w).otherwise(0)).alias("del"),
                  F.sum(F.when(late & (w > 0), w).otherwise(0)).alias("late_ins"),
                  F.sum(F.when(late & (w < 0), -w).otherwise(0)).alias("late_del"),
                  F.max(event_micros(column)).alias("max_us"))


def late_by_file(frame: DataFrame, column: str, watermark_us: int) -> list[tuple[str, int, int]]:
    """``(Spark's file path, late rows, earliest late event time)`` per file of a raw read that
    keeps ``FILE_COL`` (one Spark job: used to name the files of a refused step)."""
    late = frame.where(is_late(column, watermark_us))
    rows = (late.groupBy(FILE_COL).agg(F.count(F.lit(1)).alias("n"), F.min(event_micros(column)).alias("first"))
            .collect())
    return [(r[FILE_COL], int(r["n"]), int(r["first"])) for r in rows]


__all__ = ["change_totals", "event_micros", "is_late", "late_by_file", "on_time"]
