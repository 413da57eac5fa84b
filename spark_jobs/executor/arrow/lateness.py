"""Late rows of an input's change, on Arrow: the in-process counterpart of
``executor/sources/lateness.py``, with the same rule (a row is late when its event time, in µs
since the epoch, is below the watermark committed before this step). Event times are never NULL here: both readers refuse a
file with a NULL in an input's event-time column (``InputSpec.not_null``)."""
from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.spec.model import WEIGHT


def event_micros(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """Event times in microseconds since the epoch."""
    return pc.cast(pc.cast(values, pa.timestamp("us", tz=values.type.tz)), pa.int64())


def change_totals(table: pa.Table, column: str, watermark_us: int | None) -> dict[str, Any]:
    """``late_ins``/``late_del`` (weights of the late rows) and ``max_us`` (the change's largest time)."""
    micros = event_micros(table.column(column))
    top = pc.max(micros).as_py() if table.num_rows else None
    if watermark_us is None:
        return {"late_ins": 0, "late_del": 0, "max_us": top}
    weights = table.filter(pc.fill_null(pc.less(micros, watermark_us), False)).column(WEIGHT)
    ins = pc.sum(pc.if_else(pc.greater(weights, 0), weights, 0)).as_py() or 0
    dels = -(pc.sum(pc.if_else(pc.less(weights, 0), weights, 0)).as_py() or 0)
    return {"late_ins": ins, "late_del": dels, "max_us": top}


def on_time(table: pa.Table, column: str, watermark_us: int | None) -> pa.Table:
    """The change without its late rows."""
    if watermark_us is None:
        return table
    return table.filter(pc.greater_equal(event_micros(table.column(column)), watermark_us))
