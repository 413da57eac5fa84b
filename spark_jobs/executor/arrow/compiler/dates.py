"""Date and timestamp functions on day numbers and microseconds (UTC session time zone).

A ``date`` is days since 1970-01-01 (int32), a ``timestamp`` microseconds since the epoch in UTC
(int64); fields come from the proleptic Gregorian calendar (``calendar.py``), as Spark's
``java.time`` does. Functions that take a date accept a timestamp (cast to its UTC date) or a
string (cast as CAST does, raising on a malformed one). A ``timestamp`` (with local time zone)
depends on the session time zone; only UTC is covered.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa

from . import calendar
from .casts import cast
from .runtime import Batch, ExpressionFailed, Literal, Node, Strict, from_numpy, numbers
from .sql_types import DATE, INT, NULL, STRING, TIMESTAMP, TIMESTAMP_NTZ, NotCovered, SparkType, decimal

_FIELDS = {
    "year": ("y", "year", "years", "yr", "yrs"),
    "quarter": ("quarter", "qtr"),
    "month": ("month", "mon", "mons", "months"),
    "week": ("week", "w", "weeks"),
    "day": ("day", "d", "days", "dayofmonth"),
    "dayofweek": ("dayofweek", "dow"),
    "dayofweek_iso": ("dayofweek_iso", "dow_iso"),
    "doy": ("doy", "dayofyear"),
    "hour": ("hour", "h", "hours", "hr", "hrs"),
    "minute": ("minute", "m", "min", "mins", "minutes"),
    "second": ("second", "s", "sec", "seconds", "secs"),
}
FIELD_NAMES = {alias: field for field, aliases in _FIELDS.items() for alias in aliases}
FUNCTION_FIELDS = {"year": "year", "quarter": "quarter", "month": "month", "day": "day", "dayofmonth": "day",
                   "dayofweek": "dayofweek", "weekday": "weekday", "dayofyear": "doy", "weekofyear": "week",
                   "hour": "hour", "minute": "minute", "second": "second_int"}
_TIME_FIELDS = ("hour", "minute", "second", "second_int")


def _utc_only(t: SparkType, timezone: str, what: str) -> None:
    if t == TIMESTAMP and timezone.upper() not in ("UTC", "Z", "GMT", "+00:00", "ETC/UTC"):
        raise NotCovered(f"{what} of a timestamp depends on the session time zone ({timezone}); only UTC is covered")


def as_date(node: Node, what: str, timezone: str) -> Node:
    """A date argument: dates as they are; timestamps and strings cast as Spark casts them."""
    t = node.dtype
    if t in (DATE, NULL, STRING, TIMESTAMP, TIMESTAMP_NTZ):
        _utc_only(t, timezone, what)
        return cast(node, DATE, timezone)
    raise NotCovered(f"{what} of a {t} value is not covered")


def as_timestamp(node: Node, what: str, timezone: str) -> Node:
    t = node.dtype
    if t in (TIMESTAMP, TIMESTAMP_NTZ):
        _utc_only(t, timezone, what)
        return node
    if t in (DATE, NULL):
        _utc_only(TIMESTAMP, timezone, what)
        return cast(node, TIMESTAMP, timezone)
    raise NotCovered(f"{what} of a {t} value is not covered")


def _days(arr: pa.Array) -> np.ndarray:
    return numbers(arr.cast(pa.int32())).astype(np.int64)


# Dates this close to the int range's ends (years beyond +-5.8 million) are left to Spark: there
# ``trunc``, ``last_day`` and ``add_months`` wrap around or raise depending on how each one does
# its int arithmetic. Raising here makes the engine run the step on Spark.
_EDGE_DAYS = 2**31 - 1 - 400


def _calendar_days(arr: pa.Array, ok: np.ndarray, what: str) -> np.ndarray:
    days = _days(arr)
    if (ok & (np.abs(days) > _EDGE_DAYS)).any():
        raise ExpressionFailed("DATETIME_OVERFLOW", f"{what} of a date beyond +-5.8 million years")
    return days


def _micros(arr: pa.Array) -> np.ndarray:
    return numbers(arr.cast(pa.int64()))


def date_field(field: str, days: np.ndarray) -> np.ndarray:
    y, m, d = calendar.civil(days)
    if field == "year":
        return y
    if field == "month":
        return m
    if field == "day":
        return d
    if field == "quarter":
        return (m - 1) // 3 + 1
    if field == "dayofweek":  # 1 = Sunday
        return (days + 4) % 7 + 1
    if field == "dayofweek_iso":  # 1 = Monday
        return (days + 3) % 7 + 1
    if field == "weekday":  # 0 = Monday
        return (days + 3) % 7
    if field == "doy":
        return calendar.day_of_year(days)
    if field == "week":  # ISO week of the year
        thursday = days - (days + 3) % 7 + 3
        return (calendar.day_of_year(thursday) - 1) // 7 + 1
    raise AssertionError(field)


def field_of(field: str, source: Node, timezone: str, extract: bool = False) -> Node:
    """``year(d)``, ``hour(ts)``, ``extract(field FROM x)``, ... (int; ``EXTRACT(SECOND ...)`` is
    ``decimal(8,6)``)."""
    if field in _TIME_FIELDS:
        ts = as_timestamp(source, field, timezone)
        if field == "second" and extract:
            def seconds(arrays, ok):
                return _micro_seconds(np.mod(_micros(arrays[0]), 60 * calendar.MICROS_PER_SECOND), ok)
            return Strict(decimal(8, 6), [ts], seconds, name="extract:second")
        unit = {"hour": 3600, "minute": 60, "second": 1, "second_int": 1}[field] * calendar.MICROS_PER_SECOND
        modulo = {"hour": 24, "minute": 60, "second": 60, "second_int": 60}[field]

        def clock(arrays, ok):
            return from_numpy(np.floor_divide(_micros(arrays[0]), unit) % modulo, ok, pa.int64()).cast(pa.int32())
        return Strict(INT, [ts], clock, name=field)
    d = as_date(source, field, timezone)
    return Strict(INT, [d], lambda arrays, ok: from_numpy(date_field(field, _days(arrays[0])), ok, pa.int64())
                  .cast(pa.int32()), name=field)


def _micro_seconds(us: np.ndarray, ok: np.ndarray) -> pa.Array:
    from .decimals import from_unscaled
    return from_unscaled(us.tolist(), ok, 8, 6)


def date_add(name: str, start: Node, days: Node, timezone: str) -> Node:
    """``date_add``/``date_sub``: int days added in Java int arithmetic (wrapping, as Spark does)."""
    start = as_date(start, name, timezone)
    if days.dtype.name not in ("tinyint", "smallint", "int") and days.dtype != NULL:
        raise NotCovered(f"{name} with a {days.dtype} number of days is not covered")
    days = cast(days, INT)
    sign = -1 if name == "date_sub" else 1

    def kernel(arrays, ok):
        d, n = _days(arrays[0]), _days(arrays[1])
        out = (d + sign * n + 2**31) % 2**32 - 2**31
        return from_numpy(out.astype(np.int32), ok, pa.int32()).cast(pa.date32())
    return Strict(DATE, [start, days], kernel, name=name)


def datediff(end: Node, start: Node, timezone: str) -> Node:
    end, start = as_date(end, "datediff", timezone), as_date(start, "datediff", timezone)
    return Strict(INT, [end, start], lambda arrays, ok: from_numpy(
        (_days(arrays[0]) - _days(arrays[1])).astype(np.int32), ok, pa.int32()), name="datediff")


_TRUNC_DATE = {"year": "year", "yyyy": "year", "yy": "year", "quarter": "quarter", "month": "month", "mm": "month",
               "mon": "month", "week": "week"}
_TRUNC_TIME = {**_TRUNC_DATE, "day": "day", "dd": "day", "hour": "hour", "minute": "minute", "second": "second",
               "millisecond": "millisecond", "microsecond": "microsecond"}


def _truncate_days(level: str, days: np.ndarray) -> np.ndarray:
    y, m, _ = calendar.civil(days)
    one = np.ones_like(y)
    if level == "year":
        return calendar.days_from_civil(y, one, one)
    if level == "quarter":
        return calendar.days_from_civil(y, (m - 1) // 3 * 3 + 1, one)
    if level == "month":
        return calendar.days_from_civil(y, m, one)
    if level == "week":  # back to Monday
        return days - (days + 3) % 7
    return days


def trunc(date: Node, unit: Node, timezone: str) -> Node:
    """``trunc(date, fmt)``: a date; NULL for a format Spark does not know."""
    date = as_date(date, "trunc", timezone)
    level = _unit(unit, _TRUNC_DATE, "trunc")
    if level is None:
        return UnknownUnit(DATE, date)
    return Strict(DATE, [date], lambda arrays, ok: _to_date(
        _truncate_days(level, _calendar_days(arrays[0], ok, "trunc")), ok, "trunc"),
        name=f"trunc:{level}", kernel_fails=True, always_nullable=True)


def date_trunc(unit: Node, ts: Node, timezone: str) -> Node:
    """``date_trunc(fmt, ts)``: a timestamp; NULL for a format Spark does not know."""
    ts = cast(as_timestamp(ts, "date_trunc", timezone), TIMESTAMP, timezone)  # its result is a TIMESTAMP
    level = _unit(unit, _TRUNC_TIME, "date_trunc")
    if level is None:
        return UnknownUnit(ts.dtype, ts)
    sub_day = {"hour": 3600 * calendar.MICROS_PER_SECOND, "minute": 60 * calendar.MICROS_PER_SECOND,
               "second": calendar.MICROS_PER_SECOND, "millisecond": 1000, "microsecond": 1,
               "day": calendar.MICROS_PER_DAY}
    arrow_type = ts.arrow_type

    def kernel(arrays, ok):
        us = _micros(arrays[0])
        if level in sub_day:
            step = sub_day[level]
            out = np.floor_divide(us, step) * step
        else:
            days = np.floor_divide(us, calendar.MICROS_PER_DAY)
            out = _truncate_days(level, days) * calendar.MICROS_PER_DAY
        return from_numpy(out, ok, pa.int64()).cast(arrow_type)
    return Strict(ts.dtype, [ts], kernel, name=f"date_trunc:{level}", always_nullable=True)


@dataclass
class UnknownUnit(Node):
    """``trunc``/``date_trunc`` with a unit Spark does not know: NULL on every row, its input never
    evaluated; not a literal (Spark does not fold it unless the input is constant)."""

    dtype: SparkType
    source: Node

    def children(self) -> Sequence[Node]:
        return (self.source,)

    def evaluate(self, batch: Batch) -> pa.Array:
        return pa.nulls(batch.num_rows, self.arrow_type)


def _unit(unit: Node, known: dict[str, str], what: str) -> str | None:
    if not isinstance(unit, Literal) or unit.dtype not in (STRING, NULL):
        raise NotCovered(f"{what} with a unit that is not a string literal is not covered")
    if unit.value is None:
        return None
    return known.get(str(unit.value).strip().lower())


def _to_date(days: np.ndarray, ok: np.ndarray, what: str, exact: bool = False) -> pa.Array:
    """Day numbers as a date array. Beyond the int range ``add_months`` raises (Spark's
    ``toIntExact``), ``trunc`` and ``last_day`` wrap around (``toEpochDay.toInt``)."""
    if exact and (ok & ((days < -2**31) | (days > 2**31 - 1))).any():
        raise ExpressionFailed("ARITHMETIC_OVERFLOW", f"integer overflow in {what}")
    wrapped = (np.where(ok, days, 0) + 2**31) % 2**32 - 2**31
    return from_numpy(wrapped.astype(np.int32), ok, pa.int32()).cast(pa.date32())


def last_day(date: Node, timezone: str) -> Node:
    date = as_date(date, "last_day", timezone)

    def kernel(arrays, ok):
        y, m, _ = calendar.civil(_calendar_days(arrays[0], ok, "last_day"))
        return _to_date(calendar.days_from_civil(y, m, calendar.days_in_month(y, m)), ok, "last_day")
    return Strict(DATE, [date], kernel, name="last_day", kernel_fails=True)


def add_months(date: Node, months: Node, timezone: str) -> Node:
    """``add_months``: ``LocalDate.plusMonths`` (the day is clamped to the month's last day)."""
    date = as_date(date, "add_months", timezone)
    if months.dtype.name not in ("tinyint", "smallint", "int") and months.dtype != NULL:
        raise NotCovered(f"add_months with a {months.dtype} number of months is not covered")
    months = cast(months, INT)

    def kernel(arrays, ok):
        y, m, d = calendar.civil(_calendar_days(arrays[0], ok, "add_months"))
        total = y * 12 + (m - 1) + _days(arrays[1])
        ny, nm = np.floor_divide(total, 12), np.mod(total, 12) + 1
        nd = np.minimum(d, calendar.days_in_month(ny, nm))
        return _to_date(calendar.days_from_civil(ny, nm, nd), ok, "add_months", exact=True)
    return Strict(DATE, [date, months], kernel, name="add_months", kernel_fails=True)
