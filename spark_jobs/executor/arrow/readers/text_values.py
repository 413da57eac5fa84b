"""Strings as Spark's ``try_cast`` reads them, value by value: what a CSV field becomes on the
Spark path (``sources/formats._parse_csv_value``) and how Spark's JSON reader reads dates and
timestamps written as strings.

Each function returns the value (in the form ``arrow_columns`` builds arrays from: epoch days,
epoch microseconds, unscaled decimals) or None where Spark's cast gives NULL. Where the result
depends on what Python cannot know exactly as the JVM does (a time zone region's rules, the
current date of a time-only timestamp), ``NotLocal`` sends the step to Spark instead of guessing.
The integral, decimal, boolean and date grammars are the expression compiler's
(``arrow/compiler/casts.py``, ``calendar.py``), so a CSV value and a ``CAST`` agree.
"""
from __future__ import annotations

import math
import re
from fractions import Fraction

from spark_jobs.executor.arrow.compiler import decimals
from spark_jobs.executor.arrow.compiler.calendar import MICROS_PER_SECOND, days_from_civil, days_in_month, parse_date, trim_bytes
from spark_jobs.executor.arrow.compiler.casts import boolean_text, decimal_text, integral_text
from spark_jobs.executor.arrow.compiler.runtime import ExpressionFailed
from spark_jobs.executor.arrow.compiler.sql_types import INTEGRAL_BOUNDS, SparkType
from spark_jobs.executor.engine import NotLocal

import numpy as np

__all__ = ["boolean_text", "date_text", "decimal_value", "double_text", "exact_decimal_value", "float_text",
           "integral_text", "java_trim", "timestamp_text"]

# java.lang.Double.valueOf's grammar (ASCII digits; a trailing f/F/d/D type suffix allowed)
_JAVA_FLOAT = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
    r"|0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?\d+)[fFdD]?)", re.ASCII)
# Cast.processFloatingPointSpecialLiterals, tried when Double.valueOf fails
_PLAIN_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_SPECIAL = {"inf": math.inf, "+inf": math.inf, "infinity": math.inf, "+infinity": math.inf,
            "-inf": -math.inf, "-infinity": -math.inf, "nan": math.nan}
_FLOAT32_MAX = Fraction((2 ** 24 - 1) * 2 ** 104)
_FLOAT32_OVER = Fraction(2 ** 128)  # where rounding to nearest reaches infinity


_JAVA_TRIMMED = "".join(map(chr, range(0x21)))


def java_trim(s: str) -> str:
    """``java.lang.String.trim``: every character up to U+0020 off both ends."""
    return s.strip(_JAVA_TRIMMED)


def _java_number(text: str) -> Fraction | float | None:
    """The exact value of a ``Double.valueOf`` string (a float for NaN and the infinities)."""
    if not _JAVA_FLOAT.fullmatch(text):
        return None
    if len(text) > 1000:
        raise NotLocal("a number of more than 1,000 characters in a text file: Spark reads it")
    body = text[:-1] if text[-1] in "fFdD" else text  # after the digits (or a hex exponent): a type suffix
    sign = -1 if body.startswith("-") else 1
    body = body.lstrip("+-")
    if body == "NaN":
        return math.nan
    if body == "Infinity":
        return sign * math.inf
    if body[:2].lower() == "0x":
        mantissa, _, exponent = body[2:].lower().partition("p")
        whole, _, frac = mantissa.partition(".")
        value = Fraction(int((whole + frac) or "0", 16), 16 ** len(frac)) * Fraction(2) ** int(exponent)
        return sign * value
    return sign * Fraction(body)


def double_text(s: str) -> float | None:
    """Spark's string -> double: ``Double.valueOf`` (trimmed, correctly rounded, type suffixes and
    hexadecimal allowed), else ``inf``/``infinity``/``nan`` in any case; None otherwise."""
    text = java_trim(s)
    if _PLAIN_DECIMAL.fullmatch(text):
        return float(text)  # correctly rounded, as Java's: the common case, without the exact value
    value = _java_number(text)
    if value is None:
        return _SPECIAL.get(text.lower()) if text.isascii() else None
    if isinstance(value, float):
        return value
    try:
        out = float(value)  # Fraction -> float rounds to nearest, ties to even
    except OverflowError:
        out = math.inf if value > 0 else -math.inf
    return math.copysign(out, -1.0) if out == 0 and text.lstrip().startswith("-") else out


def float_text(s: str) -> float | None:
    """Spark's string -> float: ``Float.valueOf``, the exact value rounded once to 32 bits."""
    text = java_trim(s)
    if _PLAIN_DECIMAL.fullmatch(text):
        d = float(text)
        f = np.float32(d)
        if float(f) == d or not _is_float32_midpoint(d, f):
            return float(f)  # rounding through the double is exact unless it lands on a midpoint
    value = _java_number(text)
    if value is None:
        return _SPECIAL.get(text.lower()) if text.isascii() else None
    if isinstance(value, float):
        return value
    negative = value < 0 or (value == 0 and text.startswith("-"))
    out = _nearest_float32(abs(value))
    return -out if negative else out


def _is_float32_midpoint(d: float, f: np.float32) -> bool:
    """Whether the double ``d`` lies exactly halfway between ``f`` and a neighbouring float32."""
    if not np.isfinite(f):
        return True
    other = np.nextafter(f, np.float32(np.inf) if d > float(f) else np.float32(-np.inf))
    return np.isfinite(other) and Fraction(d) * 2 == Fraction(float(f)) + Fraction(float(other))


def _nearest_float32(x: Fraction) -> float:
    """The float32 nearest to ``x >= 0`` (ties to even), as a Python float."""
    if x >= _FLOAT32_OVER - Fraction(2 ** 103):  # at or past MAX + half an ulp: infinity
        return math.inf if x > _FLOAT32_MAX + Fraction(2 ** 103) or x == _FLOAT32_MAX + Fraction(2 ** 103) else float(_FLOAT32_MAX)
    guess = np.float32(float(x))
    best = None
    for cand in (np.nextafter(guess, np.float32(0)), guess, np.nextafter(guess, np.float32(np.inf))):
        if not np.isfinite(cand):
            continue
        dist = abs(Fraction(float(cand)) - x)
        if best is None or dist < best[0] or (dist == best[0] and _even(cand) and not _even(best[1])):
            best = (dist, cand)
    return float(best[1])


def _even(f: np.float32) -> bool:
    return int(np.array(f, dtype=np.float32).view(np.uint32)) % 2 == 0


def integral_value(s: str, to: SparkType) -> int | None:
    return integral_text(s, to)


def decimal_parts(s: str) -> tuple[int, int] | None:
    """``decimal_text`` (a BigDecimal string as unscaled value and scale), ``NotLocal`` for a
    string of more digits than Python's int() reads."""
    try:
        return decimal_text(s)
    except ExpressionFailed as exc:
        raise NotLocal(f"{exc.detail}: Spark reads it") from None


def decimal_value(s: str, precision: int, scale: int) -> int | None:
    """Spark's string -> decimal(precision, scale) as an unscaled integer: rounded HALF_UP to the
    scale, None where it does not parse or does not fit."""
    parsed = decimal_parts(s)
    if parsed is None:
        return None
    value, at = parsed
    if decimals.digits(value) - at > decimals.MAX_DIGITS:
        return None
    rounded = decimals.rescale(value, at, scale)
    return rounded if abs(rounded) < 10 ** precision else None


def exact_decimal_value(s: str, precision: int, scale: int) -> int | None:
    """The CSV reader's decimal: Spark's cast, refused (None) where it rounded away digits, as
    ``formats._parse_csv_value`` compares it with a cast to ``decimal(38, 38 - integer digits)``."""
    value = decimal_value(s, precision, scale)
    wide_scale = 38 - (precision - scale)
    wide = decimal_value(s, 38, wide_scale)
    if value is None or wide is None:
        return None
    return value if value * 10 ** (wide_scale - scale) == wide else None


def date_text(s: str) -> int | None:
    """Spark's string -> date (``stringToDate``) as days since 1970-01-01; None if not a date."""
    return parse_date(s)


# ---- timestamps -----------------------------------------------------------------------------

_UTC_NAMES = ("UTC", "GMT", "UT", "Z")
_OFFSET = re.compile(r"([+-])(\d{1,2})(?::?(\d{2})(?::?(\d{2}))?)?")
_REGION = re.compile(r"[A-Za-z][A-Za-z0-9~/._+-]+")


def _offset_seconds(text: str) -> int | None:
    """``ZoneOffset.of``: +h, +hh, +hh:mm, +hhmm, +hh:mm:ss, +hhmmss up to 18:00; None if invalid."""
    m = _OFFSET.fullmatch(text)
    if not m or (len(m[2]) == 1 and m[3] is not None):
        return None
    if m[3] is not None and ":" in text and text.count(":") != (1 if m[4] is None else 2):
        return None
    hours, minutes, seconds = int(m[2]), int(m[3] or 0), int(m[4] or 0)
    if hours > 18 or minutes > 59 or seconds > 59:
        return None
    total = hours * 3600 + minutes * 60 + seconds
    if total > 18 * 3600:
        return None
    return -total if m[1] == "-" else total


def zone_offset(name: str) -> int | None:
    """Seconds east of UTC of a zone written after a timestamp (Spark's ``getZoneId``): UTC and
    its aliases, fixed offsets, ``UTC+h`` and the like; None where Spark finds no zone (the
    timestamp is then NULL). A region (``Europe/Paris``) or a short id (``PST``) raises
    ``NotLocal``: its rules are the JVM's time zone database."""
    text = re.sub(r"([+-])(\d):", r"\g<1>0\2:", name, count=1)  # Spark 2's +h:mm
    text = re.sub(r"([+-])(\d\d):(\d)$", r"\1\2:0\3", text, count=1)  # and +hh:m
    if text in _UTC_NAMES:
        return 0
    if text[:1] in "+-":
        return _offset_seconds(text)
    for prefix in ("UTC", "GMT", "UT"):
        if text.startswith(prefix) and text[len(prefix):len(prefix) + 1] in ("+", "-"):
            return _offset_seconds(text[len(prefix):])
    if _REGION.fullmatch(text):
        raise NotLocal(f"a timestamp names the time zone {name!r}: its rules are the JVM's (read by Spark)")
    return None


def _split_timestamp(raw: bytes, lead: int) -> tuple[list[int], str | None, bool] | None:
    """``parseTimestampString`` of the trimmed bytes (``lead``: how many were trimmed in front):
    the segments (year, month, day, hour, minute, second, micros), the zone text and whether the
    string is a time only; None where Spark finds no timestamp."""
    def valid(segment: int, n: int) -> bool:
        if segment == 6:
            return True
        if segment == 0:
            return 4 <= n <= 6
        if segment == 7:
            return n <= 2
        return 0 < n <= 2

    segments = [1, 1, 1, 0, 0, 0, 0, 0, 0]
    i = value = digits = fraction_digits = 0
    tz: str | None = None
    just_time, year_sign = False, None
    j, end = 0, len(raw)
    if raw[0] in (0x2D, 0x2B):
        year_sign = -1 if raw[0] == 0x2D else 1
        j = 1
    while j < end:
        b = raw[j]
        if not 0x30 <= b <= 0x39:
            if j + lead == 0 and b == 0x54:  # 'T' first (Spark compares the untrimmed index): a time only
                just_time = True
                i += 3
            elif i < 2:
                if b == 0x2D:
                    if not valid(i, digits):
                        return None
                    segments[i], value, digits, i = value, 0, 0, i + 1
                elif i == 0 and b == 0x3A and year_sign is None:
                    just_time = True
                    if not valid(3, digits):
                        return None
                    segments[3], value, digits, i = value, 0, 0, 4
                else:
                    return None
            elif i == 2:
                if b not in (0x20, 0x54):
                    return None
                if not valid(i, digits):
                    return None
                segments[i], value, digits, i = value, 0, 0, i + 1
            elif i in (3, 4):
                if b != 0x3A or not valid(i, digits):
                    return None
                segments[i], value, digits, i = value, 0, 0, i + 1
            elif i in (5, 6):
                if not valid(i, digits):
                    return None
                segments[i], value, digits, i = value, 0, 0, i + 1
                if not (b == 0x2E and i == 6):
                    tz = raw[j:end].decode("utf-8", "replace")
                    j = end - 1
                    if i == 6:
                        i += 1
            else:
                if i < len(segments) and b in (0x3A, 0x20):
                    if not valid(i, digits):
                        return None
                    segments[i], value, digits, i = value, 0, 0, i + 1
                else:
                    return None
        else:
            if i == 6:
                fraction_digits += 1
            if i != 6 or digits < 6:
                value = value * 10 + (b - 0x30)
            digits += 1
        j += 1
    if not valid(i, digits):
        return None
    segments[i] = value
    while fraction_digits < 6:
        segments[6] *= 10
        fraction_digits += 1
    segments[0] *= year_sign or 1
    return segments, tz, just_time


def timestamp_text(s: str, *, zoned: bool = True, allow_zone: bool = True) -> int | None:
    """Spark's string -> timestamp (``stringToTimestamp`` in a UTC session; ``zoned=False``:
    ``timestamp_ntz``, whose zone is read and ignored, or refused with ``allow_zone=False``) as
    microseconds since the epoch; None where Spark gives NULL."""
    full = s.encode("utf-8")
    raw = trim_bytes(full)
    if not raw:
        return None
    parsed = _split_timestamp(raw, full.index(raw[:1]))
    if parsed is None:
        return None
    seg, tz, just_time = parsed
    offset = 0
    if tz is not None:
        offset = zone_offset(java_trim(tz))
        if offset is None:
            return None
        if not zoned and not allow_zone:
            return None
    if just_time:
        if not zoned:
            return None
        raise NotLocal("a timestamp holds a time without a date: Spark dates it today, in its own clock")
    year, month, day, hour, minute, second, micros = seg[:7]
    if not 1 <= month <= 12 or not 1 <= day <= int(days_in_month(np.array([year]), np.array([month]))[0]):
        return None
    if hour > 23 or minute > 59 or second > 59:
        return None
    days = int(days_from_civil(np.array([year]), np.array([month]), np.array([day]))[0])
    seconds = days * 86_400 + hour * 3600 + minute * 60 + second - (offset if zoned else 0)
    out = seconds * MICROS_PER_SECOND + micros
    return out if INTEGRAL_BOUNDS["bigint"][0] <= out <= INTEGRAL_BOUNDS["bigint"][1] else None

