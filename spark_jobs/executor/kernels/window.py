"""Spark and Arrow kernels of window assignment (definition: ``ir/ops/window.py``).

A row with time t (µs since the epoch) is in the windows whose start k * slide satisfies
``t - size < k * slide <= t``: k from floor((t - size) / slide) + 1 to floor(t / slide). Both
kernels compute those k with integer arithmetic on microseconds, so they agree with each other
and with Spark's ``window()`` (the tests compare with DuckDB)."""
from __future__ import annotations

from typing import Any

from spark_jobs.ir.graph import Node
from spark_jobs.ir.ops.window import spec_of


def spark_window(s: Any, node: Node) -> Any:
    from pyspark.sql import functions as F

    from spark_jobs.executor.spark.zset import WEIGHT, col

    window = spec_of(node)
    df = s.value(node.inputs[0])
    t = F.unix_micros(col(window.column).cast("timestamp"))
    first = F.floor((t - F.lit(window.size_us)) / F.lit(window.slide_us)).cast("long") + 1
    last = F.floor(t / F.lit(window.slide_us)).cast("long")
    k = F.explode(F.sequence(first, last))  # a NULL time: no sequence, no row
    rest = [c for c in df.columns if c != WEIGHT]
    ks = df.select(k.alias("__k"), *[col(c) for c in rest], col(WEIGHT))
    start = col("__k") * F.lit(window.slide_us)
    return ks.select(F.timestamp_micros(start).alias("window_start"),
                     F.timestamp_micros(start + F.lit(window.size_us)).alias("window_end"),
                     *[col(c) for c in rest], col(WEIGHT))


def arrow_window(s: Any, node: Node) -> Any:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    window = spec_of(node)
    table = s.engine.table(s.value(node.inputs[0]))
    times = table.column(window.column)
    valid = pc.is_valid(times)
    table, times = table.filter(valid), times.filter(valid)
    t = np.asarray(pc.cast(times, pa.timestamp("us", tz=times.type.tz)).cast(pa.int64()).to_numpy(
        zero_copy_only=False), dtype=np.int64)
    first = (t - window.size_us) // window.slide_us + 1
    last = t // window.slide_us
    counts = np.maximum(last - first + 1, 0)
    rows = np.repeat(np.arange(len(t)), counts)
    offsets = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
    starts = (np.repeat(first, counts) + offsets) * window.slide_us
    stamp = pa.timestamp("us", tz="UTC")
    out = table.take(pa.array(rows, pa.int64()))
    return pa.table([pa.array(starts, stamp), pa.array(starts + window.size_us, stamp)] + out.columns,
                    names=["window_start", "window_end"] + out.column_names)
