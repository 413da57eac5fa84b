"""CAST (and the implicit casts Spark's type coercion inserts), with ANSI semantics.

Each covered (from, to) pair computes exactly what Spark's ``Cast`` computes, raising where it
raises (CAST_OVERFLOW, CAST_INVALID_INPUT, NUMERIC_VALUE_OUT_OF_RANGE). Pairs whose result Java
formats or parses differently from Python are refused at compile time (NotCovered): float and
double to string or decimal (Java's ``Double.toString`` digits), string to float/double or
timestamp, timestamp to string, numbers to and from datetimes.
"""
from __future__ import annotations

import re
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import decimals
from .calendar import MICROS_PER_DAY, format_date, parse_date, trim_bytes
from .runtime import ColumnRef, ExpressionFailed, Literal, Node, Strict, fold, from_numpy, numbers
from .sql_types import (BOOLEAN, DATE, DOUBLE, FLOAT, INTEGRAL_BOUNDS, NULL, STRING, TIMESTAMP, TIMESTAMP_NTZ,
                         NotCovered, SparkType, can_up_cast, decimal_for, to_arrow)

TRUE_STRINGS = frozenset({"t", "true", "y", "yes", "1"})
FALSE_STRINGS = frozenset({"f", "false", "n", "no", "0"})
# java.lang.Character.isWhitespace or isISOControl, by code point (UTF8String.trimAll).
_JAVA_SPACE = frozenset([*range(0x00, 0x21), *range(0x7F, 0xA0), 0x1680, *range(0x2000, 0x2007),
                         *range(0x2008, 0x200B), 0x2028, 0x2029, 0x205F, 0x3000])
_JAVA_TRIMMED = "".join(map(chr, range(0x21)))
_JAVA_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def overflow(value, src: SparkType, to: SparkType) -> ExpressionFailed:
    return ExpressionFailed("CAST_OVERFLOW", f"The value {value} of the type {str(src).upper()} cannot be cast "
                                             f"to {str(to).upper()} due to an overflow")


def invalid(value, to: SparkType) -> ExpressionFailed:
    return ExpressionFailed("CAST_INVALID_INPUT", f"The value {value!r} of the type \"STRING\" cannot be cast "
                                                  f"to {str(to).upper()} because it is malformed")


def trim_all(s: str) -> str:
    """``UTF8String.trimAll``: Java whitespace and ISO control characters off both ends."""
    start, end = 0, len(s)
    while start < end and ord(s[start]) in _JAVA_SPACE:
        start += 1
    while end > start and ord(s[end - 1]) in _JAVA_SPACE:
        end -= 1
    return s[start:end]


def known_compact(node: Node) -> bool | None:
    """Whether Spark holds this decimal expression's values as a long (``Decimal``'s compact
    form) or a BigDecimal, where that is known: columns of up to 18 digits are compact, wider
    columns and literals are not. It decides how Spark casts a decimal with a fraction to int."""
    if isinstance(node, ColumnRef):
        return node.dtype.precision <= 18
    if isinstance(node, Literal):
        return False
    return None


def force_nullable(src: SparkType, to: SparkType) -> bool:
    """``Cast.forceNullable``: Spark counts such a cast as nullable even on a non-NULL input, so
    its optimizer keeps ``CAST(x AS t) IS NULL`` (and evaluates ``x``)."""
    if src == to or to == STRING:
        return False
    if src == STRING:
        return True
    if src == TIMESTAMP and to.name in ("tinyint", "smallint", "int"):
        return True
    if src.is_fractional and to == TIMESTAMP:
        return True
    if to == DATE:
        return src != TIMESTAMP
    if src == DATE:
        return to != TIMESTAMP
    if to.is_decimal:
        return not _null_safe_to_decimal(src, to)
    return src.is_fractional and to.is_integral


def _null_safe_to_decimal(src: SparkType, to: SparkType) -> bool:
    """``Cast.canNullSafeCastToDecimal``: every value fits (a decimal needs strictly more integer
    digits, as a narrower scale could round up into one more)."""
    if src == BOOLEAN:
        return to.precision - to.scale >= 1
    if src.is_integral:
        need = decimal_for(src)
        return to.precision - to.scale >= need.precision and to.scale >= 0
    if src.is_decimal:
        return to.precision - to.scale > src.precision - src.scale
    return False


def cast(child: Node, to: SparkType, timezone: str = "UTC") -> Node:
    """``CAST(child AS to)`` in ANSI mode, or NotCovered for a pair not covered."""
    src = child.dtype
    if src == to:
        return child
    if src == NULL:
        return Literal(to, None)
    if isinstance(child, Strict) and child.name.startswith("cast:") and src.is_numeric and to.is_numeric:
        inner = child.args[0]
        if inner.dtype.is_numeric and can_up_cast(inner.dtype, src) and can_up_cast(src, to):
            return cast(inner, to, timezone)  # SimplifyCasts
    kernel, fails = _kernel(child, src, to, timezone)
    node = Strict(to, [child], lambda arrays, ok: kernel(arrays[0], ok), name=f"cast:{to}", kernel_fails=fails,
                  always_nullable=force_nullable(src, to))
    return fold(node) if isinstance(child, Literal) else node


def _kernel(child: Node, src: SparkType, to: SparkType, timezone: str):
    arrow_to = to_arrow(to)
    zoned = {src.name, to.name} & {"timestamp"} and {src.name, to.name} & {"date", "timestamp_ntz"}
    if zoned and timezone.upper() not in ("UTC", "Z", "GMT", "+00:00", "ETC/UTC"):
        raise NotCovered(f"CAST between {src} and {to} depends on the session time zone ({timezone}); "
                         "the Arrow kernels cover UTC only")
    if to == BOOLEAN:
        if src.is_numeric:
            if src.is_decimal:
                return (lambda a, ok: pc.not_equal(a, pa.scalar(0, pa.decimal128(src.precision, src.scale)))), False
            return (lambda a, ok: pc.not_equal(a.cast(pa.float64()) if src.is_fractional else a, 0)), False
        if src == STRING:
            return _string_to_boolean, True
    if to.is_integral:
        lo, hi = INTEGRAL_BOUNDS[to.name]
        if src.is_integral or src == BOOLEAN:
            if src == BOOLEAN or INTEGRAL_BOUNDS[src.name][1] <= hi:
                return (lambda a, ok: a.cast(arrow_to)), False
            return _integral_narrowing(src, to, lo, hi), True
        if src.is_fractional:
            return _fraction_to_integral(src, to, lo, hi), True
        if src.is_decimal:
            return _decimal_to_integral(child, src, to, lo, hi), True
        if src == STRING:
            return _string_to_integral(to, lo, hi), True
    if to.is_fractional:
        if src.is_integral or src == BOOLEAN or (src == FLOAT and to == DOUBLE) or (src == DOUBLE and to == FLOAT):
            return (lambda a, ok: a.cast(arrow_to, safe=False)), False
        if src.is_decimal and to == DOUBLE:
            return _decimal_to_double(src), False
    if to.is_decimal:
        if src.is_integral or src == BOOLEAN:
            return _exact_to_decimal(to), True
        if src.is_decimal:
            return _decimal_to_decimal(src, to), True
        if src == STRING:
            return _string_to_decimal(to), True
    if to == STRING:
        if src.is_integral:
            return (lambda a, ok: a.cast(pa.string())), False
        if src == BOOLEAN:
            return (lambda a, ok: pc.if_else(a, "true", "false")), False
        if src.is_decimal:
            return (lambda a, ok: pa.array([decimals.format_unscaled(v, src.scale) if k else None
                                            for v, k in zip(decimals.unscaled(a), ok)], pa.string())), False
        if src == DATE:
            return (lambda a, ok: pa.array([format_date(v) if k else None
                                            for v, k in zip(numbers(a.cast(pa.int32())).tolist(), ok)],
                                           pa.string())), False
    if to == DATE:
        if src == STRING:
            return _string_to_date, True
        if src in (TIMESTAMP, TIMESTAMP_NTZ):
            return (lambda a, ok: pa.array(np.floor_divide(numbers(a.cast(pa.int64())), MICROS_PER_DAY)
                                           .astype(np.int32), pa.int32(), mask=~ok).cast(pa.date32())), False
    if to in (TIMESTAMP, TIMESTAMP_NTZ):
        if src == DATE:
            return _date_to_timestamp(arrow_to), True
        if src in (TIMESTAMP, TIMESTAMP_NTZ):
            return (lambda a, ok: a.cast(pa.int64()).cast(arrow_to)), False
    raise NotCovered(f"CAST from {src} to {to} is not covered (Java and Python format, parse or round "
                     "these differently, or Spark rejects it)")


def _integral_narrowing(src: SparkType, to: SparkType, lo: int, hi: int):
    def kernel(a: pa.Array, ok: np.ndarray) -> pa.Array:
        v = numbers(a)
        bad = ok & ((v < lo) | (v > hi))
        if bad.any():
            raise overflow(int(v[bad][0]), src, to)
        return a.cast(to_arrow(to), safe=False)
    return kernel


def java_to_long(x: np.ndarray) -> np.ndarray:
    """Java's ``(long) double``: toward zero, saturating, NaN to 0."""
    out = np.zeros(len(x), dtype=np.int64)
    finite = ~np.isnan(x)
    big = finite & (x >= 2.0 ** 63)
    small = finite & (x <= -2.0 ** 63)
    mid = finite & ~big & ~small
    out[mid] = np.trunc(x[mid]).astype(np.int64)
    out[big] = np.iinfo(np.int64).max
    out[small] = np.iinfo(np.int64).min
    return out


def _fraction_to_integral(src: SparkType, to: SparkType, lo: int, hi: int):
    def kernel(a: pa.Array, ok: np.ndarray) -> pa.Array:
        x = numbers(a.cast(pa.float64()), 0.0)
        with np.errstate(invalid="ignore"):
            fits = (np.floor(x) <= float(hi)) & (np.ceil(x) >= float(lo))
        bad = ok & ~fits
        if bad.any():
            raise overflow(repr(float(x[bad][0])), src, to)
        return from_numpy(java_to_long(np.where(ok, x, 0.0)), ok, pa.int64()).cast(to_arrow(to), safe=False)
    return kernel


def _decimal_to_integral(child: Node, src: SparkType, to: SparkType, lo: int, hi: int):
    through_double = False
    if to.name != "bigint" and src.scale > 0:
        compact = known_compact(child)
        if compact is None:
            raise NotCovered(f"CAST of a computed {src} to {to}: Spark truncates it exactly or through a double "
                             "depending on how the value is held, which is not known here")
        through_double = not compact

    def kernel(a: pa.Array, ok: np.ndarray) -> pa.Array:
        out = np.zeros(len(a), dtype=np.int64)
        for i, (v, k) in enumerate(zip(decimals.unscaled(a), ok)):
            if not k:
                continue
            if through_double:
                d = float(Fraction(v, 10 ** src.scale))
                if not (np.floor(d) <= hi and np.ceil(d) >= lo):
                    raise overflow(decimals.format_unscaled(v, src.scale) + "BD", src, to)
                out[i] = int(d)
                continue
            t = abs(v) // 10 ** src.scale
            t = -t if v < 0 else t
            if not lo <= t <= hi:
                raise overflow(decimals.format_unscaled(v, src.scale) + "BD", src, to)
            out[i] = t
        return from_numpy(out, ok, pa.int64()).cast(to_arrow(to))
    return kernel


def integral_text(s: str, to: SparkType) -> int | None:
    """``UTF8String.toLongExact`` (``toIntExact`` for the narrower types, then their range): the
    value of a trimmed ``[+-]digits`` string that fits ``to``; None where Spark's cast fails."""
    lo, hi = INTEGRAL_BOUNDS[to.name]
    if len(s) <= 18 and s.isascii() and s.isdigit():  # the common case: plain ASCII digits, nothing to trim
        value = int(s)
        return value if value <= hi else None
    raw = trim_bytes(s.encode("utf-8"))
    body = raw[1:] if raw[:1] in (b"-", b"+") else raw
    if not body or not body.isdigit():  # bytes.isdigit: ASCII digits only
        return None
    if len(body.lstrip(b"0")) > 19:  # past any long (and past what int() parses: 4,300 digits)
        return None
    value = -int(body) if raw[:1] == b"-" else int(body)
    return value if lo <= value <= hi else None


def _string_to_integral(to: SparkType, lo: int, hi: int):
    def parse(s: str) -> int:
        value = integral_text(s, to)
        if value is None:
            raise invalid(s, to)
        return value

    def kernel(a: pa.Array, ok: np.ndarray) -> pa.Array:
        out = [parse(s) if k else 0 for s, k in zip(a.to_pylist(), ok)]
        return from_numpy(np.array(out, dtype=np.int64), ok, pa.int64()).cast(to_arrow(to))
    return kernel


def _decimal_to_double(src: SparkType):
    def kernel(a: pa.Array, ok: np.ndarray) -> pa.Array:
        if src.precision <= 15:
            # |unscaled| < 2**53 and 10**scale are exact doubles: one IEEE division rounds
            # correctly, as BigDecimal.doubleValue does
            low = decimals.unscaled_int64(a)
            return from_numpy(low.astype(np.float64) / float(10 ** src.scale), ok, pa.float64())
        unit = 10 ** src.scale
        out = [float(Fraction(v, unit)) if k else 0.0 for v, k in zip(decimals.unscaled(a), ok)]
        return from_numpy(np.array(out, dtype=np.float64), ok, pa.float64())
    return kernel


def _exact_to_decimal(to: SparkType):
    def kernel(a: pa.Array, ok: np.ndarray) -> pa.Array:
        try:  # exact, and Arrow checks each value against the precision
            return a.cast(pa.int64()).cast(pa.decimal128(38, 0)).cast(to_arrow(to))
        except pa.ArrowInvalid:
            pass  # some value overflows: the exact path below raises Spark's error
        ints = numbers(a.cast(pa.int64())).tolist()
        out = [decimals.check(v * 10 ** to.scale, to.precision, to.scale) if k else 0 for v, k in zip(ints, ok)]
        return decimals.from_unscaled(out, ok, to.precision, to.scale)
    return kernel


def _decimal_to_decimal(src: SparkType, to: SparkType):
    def kernel(a: pa.Array, ok: np.ndarray) -> pa.Array:
        if to.scale >= src.scale:  # no rounding: Arrow rescales exactly and checks the precision
            try:
                return a.cast(to_arrow(to))
            except pa.ArrowInvalid:
                pass  # an overflow: the exact path below raises Spark's error
        out = [decimals.to_precision(v, src.scale, to.precision, to.scale) if k else 0
               for v, k in zip(decimals.unscaled(a), ok)]
        return decimals.from_unscaled(out, ok, to.precision, to.scale)
    return kernel


def decimal_text(s: str) -> tuple[int, int] | None:
    """A trimmed ``java.math.BigDecimal`` string as (unscaled value, scale); None where Spark's
    cast finds no number."""
    text = s.strip(_JAVA_TRIMMED)  # java.lang.String.trim
    if not _JAVA_DECIMAL.fullmatch(text):
        return None
    mantissa, _, exponent = text.replace("E", "e").partition("e")
    if len(exponent.lstrip("+-")) > 9:
        return None
    whole, _, frac = mantissa.lstrip("+-").partition(".")
    if len((whole + frac).lstrip("0")) > 1000:  # int() reads 4,300 digits at most: Spark decides these
        raise ExpressionFailed("NUMERIC_VALUE_OUT_OF_RANGE", f"a decimal string of {len(whole + frac)} digits")
    value = int((whole + frac) or "0")  # int() reads any Unicode decimal digit, as Java does
    value = -value if mantissa.startswith("-") else value
    return value, len(frac) - int(exponent or 0)


def _string_to_decimal(to: SparkType):
    def parse(s: str) -> int:
        parsed = decimal_text(s)
        if parsed is None:
            raise invalid(s, to)
        value, scale = parsed
        if decimals.digits(value) - scale > decimals.MAX_DIGITS:
            raise ExpressionFailed("NUMERIC_VALUE_OUT_OF_RANGE", f"{s!r} is out of the decimal range")
        return decimals.to_precision(value, scale, to.precision, to.scale)

    def kernel(a: pa.Array, ok: np.ndarray) -> pa.Array:
        out = [parse(s) if k else 0 for s, k in zip(a.to_pylist(), ok)]
        return decimals.from_unscaled(out, ok, to.precision, to.scale)
    return kernel


def boolean_text(s: str) -> bool | None:
    """Spark's string -> boolean: t/true/y/yes/1 and f/false/n/no/0, any case, trimmed; None otherwise."""
    word = trim_all(s).lower()
    return True if word in TRUE_STRINGS else False if word in FALSE_STRINGS else None


def _string_to_boolean(a: pa.Array, ok: np.ndarray) -> pa.Array:
    out = []
    for s, k in zip(a.to_pylist(), ok):
        if not k:
            out.append(None)
            continue
        value = boolean_text(s)
        if value is None:
            raise invalid(s, BOOLEAN)
        out.append(value)
    return pa.array(out, pa.bool_())


def _string_to_date(a: pa.Array, ok: np.ndarray) -> pa.Array:
    out = []
    for s, k in zip(a.to_pylist(), ok):
        if not k:
            out.append(0)
            continue
        days = parse_date(s)
        if days is None:
            raise invalid(s, DATE)
        out.append(days)
    return from_numpy(np.array(out, dtype=np.int32), ok, pa.int32()).cast(pa.date32())


def _date_to_timestamp(arrow_to: pa.DataType):
    def kernel(a: pa.Array, ok: np.ndarray) -> pa.Array:
        days = numbers(a.cast(pa.int32())).astype(np.int64)
        if (ok & (np.abs(days) > (2**63 - 1) // MICROS_PER_DAY)).any():
            raise ExpressionFailed("DATETIME_OVERFLOW", "long overflow converting a date to a timestamp")
        return from_numpy(days * MICROS_PER_DAY, ok, pa.int64()).cast(arrow_to)
    return kernel
