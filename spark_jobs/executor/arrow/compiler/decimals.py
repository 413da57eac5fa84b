"""Exact decimal arithmetic as Spark's ``Decimal`` does it, on unscaled Python integers.

Spark computes a decimal result exactly (``java.math.BigDecimal``), rounds it HALF_UP to the
result type's scale and raises NUMERIC_VALUE_OUT_OF_RANGE when it has more digits than the
precision allows. Two steps round twice, as Java does: a product is first rounded to 38
significant digits (``MathContext(38, HALF_UP)``), a quotient to 38 decimal places. Values move
between Arrow and Python as unscaled integers read from (and written to) the decimal128 buffer.
"""
from __future__ import annotations

from decimal import Decimal
from typing import Sequence

import numpy as np
import pyarrow as pa

from .runtime import ExpressionFailed

MAX_DIGITS = 38


def unscaled(arr: pa.Array) -> list[int]:
    """The unscaled integers of a decimal128 array (0 in NULL rows)."""
    if len(arr) == 0:
        return []
    raw = np.frombuffer(arr.buffers()[1], dtype="<u8")[2 * arr.offset: 2 * (arr.offset + len(arr))]
    lo = raw[0::2].tolist()
    hi = raw[1::2].view(np.int64).tolist()
    return [(h << 64) | l for l, h in zip(lo, hi)]


def unscaled_int64(arr: pa.Array) -> np.ndarray:
    """The low 64 bits of each unscaled value: the value itself for precision <= 18."""
    if len(arr) == 0:
        return np.zeros(0, dtype=np.int64)
    raw = np.frombuffer(arr.buffers()[1], dtype="<i8")[2 * arr.offset: 2 * (arr.offset + len(arr))]
    return raw[0::2].copy()


def from_unscaled(values: Sequence[int], ok: np.ndarray, precision: int, scale: int) -> pa.Array:
    """A decimal128(precision, scale) array of unscaled integers, NULL where not ``ok``."""
    data = b"".join(int(v if k else 0).to_bytes(16, "little", signed=True) for v, k in zip(values, ok))
    validity = None
    if not ok.all():
        validity = pa.py_buffer(np.packbits(ok.astype(np.uint8), bitorder="little").tobytes())
    return pa.Array.from_buffers(pa.decimal128(precision, scale), len(values), [validity, pa.py_buffer(data)],
                                 null_count=int((~ok).sum()))


def round_half_up(value: int, drop: int) -> int:
    """``value / 10**drop`` rounded half away from zero (Java's HALF_UP)."""
    if drop <= 0:
        return value * 10 ** (-drop)
    unit = 10 ** drop
    q, r = divmod(abs(value), unit)
    if 2 * r >= unit:
        q += 1
    return -q if value < 0 else q


def rescale(value: int, scale: int, to_scale: int) -> int:
    return round_half_up(value, scale - to_scale)


def digits(value: int) -> int:
    return len(str(abs(value))) if value else 1


def check(value: int, precision: int, scale: int) -> int:
    """``value`` (at ``scale``) if it fits ``decimal(precision, scale)``; Spark's overflow error if not."""
    if abs(value) >= 10 ** precision:
        raise ExpressionFailed("NUMERIC_VALUE_OUT_OF_RANGE",
                               f"{format_unscaled(value, scale)} cannot be represented as "
                               f"Decimal({precision}, {scale})")
    return value


def to_precision(value: int, scale: int, precision: int, to_scale: int) -> int:
    """``Decimal.toPrecision(p, s, HALF_UP)`` with ANSI overflow."""
    return check(rescale(value, scale, to_scale), precision, to_scale)


def round_significant(value: int, scale: int, significant: int = MAX_DIGITS) -> tuple[int, int]:
    """``value`` rounded HALF_UP to ``significant`` digits (``MathContext``): (value, scale)."""
    extra = digits(value) - significant
    while extra > 0:
        value, scale = round_half_up(value, extra), scale - extra
        extra = digits(value) - significant
    return value, scale


def divide(a: int, sa: int, b: int, sb: int) -> tuple[int, int]:
    """``a / b`` rounded HALF_UP to 38 decimal places (``BigDecimal.divide(b, 38, HALF_UP)``)."""
    shift = MAX_DIGITS - sa + sb
    num = a * 10 ** shift if shift >= 0 else a
    den = b if shift >= 0 else b * 10 ** (-shift)
    q, r = divmod(abs(num), abs(den))
    if 2 * r >= abs(den):
        q += 1
    return (-q if (num < 0) != (den < 0) else q), MAX_DIGITS


def integral_quotient(a: int, sa: int, b: int, sb: int) -> int:
    """``divideToIntegralValue(b, MathContext(38))``: the quotient truncated toward zero."""
    s = max(sa, sb)
    num, den = a * 10 ** (s - sa), b * 10 ** (s - sb)
    q = abs(num) // abs(den)
    if digits(q) > MAX_DIGITS:
        raise ExpressionFailed("ARITHMETIC_OVERFLOW", "Division impossible (quotient of more than 38 digits)")
    return -q if (num < 0) != (den < 0) else q


def remainder(a: int, sa: int, b: int, sb: int) -> tuple[int, int]:
    """``BigDecimal.remainder(b, MathContext(38))``: ``a - trunc(a / b) * b``, at the larger scale."""
    s = max(sa, sb)
    num, den = a * 10 ** (s - sa), b * 10 ** (s - sb)
    q = integral_quotient(a, sa, b, sb)
    return num - q * den, s


def exact_decimal(value: int, scale: int) -> Decimal:
    """A ``decimal.Decimal`` equal to ``value * 10**-scale`` (no context rounding)."""
    return Decimal(f"{value}E{-scale}")


def format_unscaled(value: int, scale: int) -> str:
    """Plain decimal notation (``BigDecimal.toPlainString``) of an unscaled value."""
    sign = "-" if value < 0 else ""
    text = str(abs(value))
    if scale <= 0:
        return sign + text + "0" * (-scale)
    text = text.rjust(scale + 1, "0")
    return f"{sign}{text[:-scale]}.{text[-scale:]}"
