"""Proleptic Gregorian calendar arithmetic on day numbers (days since 1970-01-01), vectorized.

Spark's dates are ``java.time.LocalDate`` epoch days over the whole int range, far beyond what
Python's ``datetime`` holds (years 1..9999), so conversions are done here with integer formulas
(civil-from-days and back) on numpy arrays, and strings are parsed and printed the way Spark's
``stringToDate`` and its ``uuuu-MM-dd`` formatter do.
"""
from __future__ import annotations

import numpy as np

MICROS_PER_DAY = 86_400_000_000
MICROS_PER_SECOND = 1_000_000


def civil(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(year, month, day) of epoch day numbers (int64 arithmetic, proleptic Gregorian)."""
    z = days.astype(np.int64) + 719468
    era = np.floor_divide(z, 146097)
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = np.where(mp < 10, mp + 3, mp - 9)
    y = np.where(m <= 2, y + 1, y)
    return y, m, d


def days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Epoch day numbers of (year, month, day) (the inverse of ``civil``)."""
    y = np.asarray(y, dtype=np.int64) - (np.asarray(m) <= 2)
    m = np.asarray(m, dtype=np.int64)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    mp = np.where(m > 2, m - 3, m + 9)
    doy = (153 * mp + 2) // 5 + np.asarray(d, dtype=np.int64) - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def is_leap(y: np.ndarray) -> np.ndarray:
    return (y % 4 == 0) & ((y % 100 != 0) | (y % 400 == 0))


def days_in_month(y: np.ndarray, m: np.ndarray) -> np.ndarray:
    base = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])[m]
    return base + ((m == 2) & is_leap(y))


def day_of_year(days: np.ndarray) -> np.ndarray:
    y, _, _ = civil(days)
    return days - days_from_civil(y, np.ones_like(y), np.ones_like(y)) + 1


def format_date(days: int) -> str:
    """One day number as Spark prints a date (``uuuu-MM-dd``: a sign beyond four year digits)."""
    y, m, d = (int(v[0]) for v in civil(np.array([days])))
    if 0 <= y <= 9999:
        year = f"{y:04d}"
    elif y > 9999:
        year = f"+{y}"
    else:
        year = f"-{-y:04d}"
    return f"{year}-{m:02d}-{d:02d}"


# Bytes Spark trims around a date or number string (``isWhitespaceOrISOControl`` on a signed
# byte: ASCII whitespace and control characters; bytes of multi-byte characters never).
TRIMMED_BYTES = frozenset(range(0x00, 0x21)) | {0x7F}


def trim_bytes(raw: bytes) -> bytes:
    start, end = 0, len(raw)
    while start < end and raw[start] in TRIMMED_BYTES:
        start += 1
    while end > start and raw[end - 1] in TRIMMED_BYTES:
        end -= 1
    return raw[start:end]


def parse_date(text: str) -> int | None:
    """Spark's ``stringToDate``: ``[+-]yyyy[y..]``, ``-[m]m``, ``-[d]d``, then anything after a
    space or ``T``; trimmed; None where Spark finds no date."""
    raw = trim_bytes(text.encode("utf-8"))
    if not raw:
        return None
    segments = [1, 1, 1]
    sign, i, j, value, digits = 1, 0, 0, 0, 0
    if raw[0] in (0x2D, 0x2B):
        sign = -1 if raw[0] == 0x2D else 1
        j = 1

    def valid_digits(segment: int, n: int) -> bool:
        return (segment == 0 and 4 <= n <= 7) or (segment != 0 and 0 < n <= 2)

    while j < len(raw) and i < 3 and raw[j] not in (0x20, 0x54):
        b = raw[j]
        if i < 2 and b == 0x2D:
            if not valid_digits(i, digits):
                return None
            segments[i] = value
            value, digits, i = 0, 0, i + 1
        elif 0x30 <= b <= 0x39:
            value, digits = value * 10 + (b - 0x30), digits + 1
        else:
            return None
        j += 1
    if not valid_digits(i, digits):
        return None
    if i < 2 and j < len(raw):
        return None
    segments[i] = value
    year, month, day = sign * segments[0], segments[1], segments[2]
    if not 1 <= month <= 12 or not 1 <= day <= int(days_in_month(np.array([year]), np.array([month]))[0]):
        return None
    days = int(days_from_civil(np.array([year]), np.array([month]), np.array([day]))[0])
    return days if -2**31 <= days < 2**31 else None  # localDateToDays: toIntExact, else no date


def parse_timestamp_literal(text: str) -> int | None:
    """A ``TIMESTAMP '...'`` literal without a zone, as microseconds since the epoch in UTC:
    ``yyyy-[m]m-[d]d[( |T)[h]h:[m]m[:[s]s[.ffffff]]]``; None for any other form (zones,
    time-only, more than six fraction digits), which stays with Spark."""
    import re

    m = re.fullmatch(r"(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,6}))?)?)?",
                     text.strip(" "))
    if not m:
        return None
    year, month, day = int(m[1]), int(m[2]), int(m[3])
    hour, minute, second = int(m[4] or 0), int(m[5] or 0), int(m[6] or 0)
    micros = int((m[7] or "").ljust(6, "0") or 0)
    if not 1 <= month <= 12 or not 1 <= day <= int(days_in_month(np.array([year]), np.array([month]))[0]):
        return None
    if hour > 23 or minute > 59 or second > 59:
        return None
    days = int(days_from_civil(np.array([year]), np.array([month]), np.array([day]))[0])
    return days * MICROS_PER_DAY + ((hour * 60 + minute) * 60 + second) * MICROS_PER_SECOND + micros
