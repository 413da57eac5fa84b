"""Late rows of an input's change, in-process on Arrow: the rule of ``sources/lateness.py``.

A row is late when its event time is below the watermark committed before this step. Times are
compared as microseconds since 1970-01-01 UTC (a ``timestamp_ntz`` value as the UTC wall time,
the sessions' time zone in every profile), so both engines judge a row alike. As on Spark, with a
watermark a row whose time is NULL is neither kept nor counted late (its comparison is unknown).
"""
from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.spec.model import WEIGHT


def event_micros(table: pa.Table, column: str) -> pa.ChunkedArray:
    """The event time of every row in microseconds since the epoch (NULL stays NULL)."""
    times = table.column(column)
    unit = pa.timestamp("us", tz=times.type.tz) if pa.types.is_timestamp(times.type) else pa.timestamp("us")
    return times.cast(unit).cast(pa.int64())


def _weights(table: pa.Table, mask: pa.ChunkedArray | pa.Array, sign: int) -> int:
    w = table.column(WEIGHT)
    picked = pc.filter(w, pc.and_(mask, pc.greater(w, 0) if sign > 0 else pc.less(w, 0)))
    total = pc.sum(picked).as_py() or 0
    return int(abs(total))


def split_late(table: pa.Table, column: str, watermark_us: int | None) -> tuple[pa.Table, dict[str, Any]]:
    """The rows that are not late, and the change's totals as ``lateness.change_totals`` gives
    them (``ins``/``del`` kept, ``late_ins``/``late_del``, ``max_us``)."""
    micros = event_micros(table, column)
    top = pc.max(micros).as_py() if table.num_rows else None
    if watermark_us is None:
        on_time = pa.chunked_array([pa.array([True] * table.num_rows)])
        late = pa.chunked_array([pa.array([False] * table.num_rows)])
    else:
        late = pc.less(micros, watermark_us)
        on_time = pc.invert(late)  # NULL for a NULL time: neither kept nor late, as on Spark
    totals = {"ins": _weights(table, on_time, 1), "del": _weights(table, on_time, -1),
              "late_ins": _weights(table, late, 1), "late_del": _weights(table, late, -1), "max_us": top}
    return table.filter(on_time), totals


__all__ = ["event_micros", "split_late"]
