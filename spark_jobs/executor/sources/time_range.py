"""The range of dates and timestamps an input may hold: 0001-01-01 .. 9999-12-31 (UTC).

Why: Parquet's ``timestamp[us]`` holds any 64-bit count of microseconds, and Spark reads year
10000, year 0 or negative years without complaint; but Python's ``datetime`` (``dbsp show``,
the quality report), Delta's writer (``NaiveDate + TimeDelta overflowed``) and Spark SQL's own
documented range stop at these years. A value outside committed once would make every publish of
the view fail. So it is refused when read, on both engines, naming the file and the value: from
the Parquet footer's statistics when they hold it (no data read), else from the rows.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MIN_MICROS = -62135596800 * 10**6  # 0001-01-01T00:00:00Z
MAX_MICROS = 253402300799 * 10**6 + 999999  # 9999-12-31T23:59:59.999999Z
MIN_DAY, MAX_DAY = -719162, 2932896  # 0001-01-01, 9999-12-31 as days since 1970-01-01
RANGE = "0001-01-01 .. 9999-12-31"
_PER_UNIT = {"s": 10**6, "ms": 10**3, "us": 1, "ns": 1}


def is_time(t: pa.DataType) -> bool:
    return pa.types.is_timestamp(t) or pa.types.is_date32(t) or pa.types.is_date64(t)


def problem(name: str, value: str) -> str:
    """The refusal of a file whose column ``name`` holds ``value`` outside the range."""
    return (f"column {name} holds {value}, outside {RANGE}: Spark SQL, Delta tables and the CLI cannot "
            f"all represent it (fix the value, or declare the column a string or a long)")


def raw_outside(t: pa.DataType, low: int, high: int) -> str | None:
    """The first of the raw statistics ``low``/``high`` (physical values of type ``t``) outside
    the range, as text; None when both lie inside."""
    for raw in (low, high):
        micros = _micros(t, raw)
        if micros is not None and not MIN_MICROS <= micros <= MAX_MICROS:
            return _text(t, raw)
    return None


def _micros(t: pa.DataType, raw: int) -> int | None:
    if pa.types.is_timestamp(t):
        return raw // 1000 if t.unit == "ns" else raw * _PER_UNIT[t.unit]
    if pa.types.is_date32(t):
        return raw * 86_400 * 10**6
    if pa.types.is_date64(t):
        return raw * 1000
    return None


def _text(t: pa.DataType, raw: int) -> str:
    if pa.types.is_timestamp(t):
        return str(np.datetime64(int(raw), t.unit))
    if pa.types.is_date32(t):
        return str(np.datetime64(int(raw), "D"))
    return str(np.datetime64(int(raw), "ms"))


def outside_rows(column: "pa.ChunkedArray | pa.Array") -> tuple[int, str] | None:
    """(how many, an example) of the values of a date/timestamp column outside the range."""
    t = column.type
    if not is_time(t):
        return None
    unit = t.unit if pa.types.is_timestamp(t) else ("D" if pa.types.is_date32(t) else "ms")
    ints = pc.drop_null(pc.cast(column, pa.int64() if not pa.types.is_date32(t) else pa.int32()))
    raw = ints.to_numpy(zero_copy_only=False) if len(ints) else np.zeros(0, np.int64)  # (no float: exact)
    if not len(raw):
        return None
    per = {"s": 10**6, "ms": 10**3, "us": 1, "ns": 1, "D": 86_400 * 10**6}[unit]
    raw = raw.astype(np.int64)
    if unit == "ns":
        bad = np.zeros(len(raw), dtype=bool)  # nanoseconds reach 1677..2262 only
    else:
        bad = (raw < MIN_MICROS // per) | (raw > MAX_MICROS // per)
    if not bad.any():
        return None
    first: Any = raw[np.argmax(bad)]
    return int(bad.sum()), str(np.datetime64(int(first), unit))
