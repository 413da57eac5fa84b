"""Math functions: round/bround, floor/ceil, sign, sqrt, isnan, nanvl.

``round`` is HALF_UP and ``bround`` HALF_EVEN, on integral and decimal values with Spark's
result types; on float and double Spark rounds the digits of Java's ``Double.toString``, which
Python's shortest repr does not always reproduce (Java 17), so those stay with Spark. ``floor``
and ``ceil`` of a double are bigint (saturating, NaN gives 0), of a decimal ``decimal(p-s+1,0)``.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from . import decimals
from .casts import cast, java_to_long
from .logic import Case
from .runtime import ExpressionFailed, Literal, Node, Strict, from_numpy, numbers
from .sql_types import BOOLEAN, DOUBLE, FLOAT, INTEGRAL_BOUNDS, LONG, NULL, NotCovered, bounded, decimal


def _round_unscaled(value: int, drop: int, half_even: bool) -> int:
    if drop <= 0:
        return value * 10 ** (-drop)
    unit = 10 ** drop
    q, r = divmod(abs(value), unit)
    if 2 * r > unit or (2 * r == unit and (not half_even or q % 2 == 1)):
        q += 1
    return -q if value < 0 else q


def round_node(child: Node, scale_node: Node | None, half_even: bool) -> Node:
    name = "bround" if half_even else "round"
    if scale_node is None:
        places = 0
    elif isinstance(scale_node, Literal) and scale_node.dtype.is_integral and scale_node.value is not None:
        places = int(scale_node.value)
    else:
        raise NotCovered(f"{name} with a scale that is not an integer literal is not covered")
    t = child.dtype
    if t.is_fractional:
        raise NotCovered(f"{name} of a {t}: Spark rounds the digits of Java's Double.toString, which Python "
                         "cannot reproduce for every value")
    if t.is_integral:
        if places >= 0:  # the value unchanged, but still Spark's Round (always nullable, its own key)
            return Strict(t, [child], lambda arrays, ok: arrays[0], name=f"{name}:{places}", always_nullable=True)
        lo, hi = INTEGRAL_BOUNDS[t.name]

        def integral(arrays, ok):
            out = []
            for v, k in zip(numbers(arrays[0]).tolist(), ok):
                r = _round_unscaled(v, -places, half_even) * 10 ** (-places) if k else 0
                if k and not lo <= r <= hi:
                    raise ExpressionFailed("ARITHMETIC_OVERFLOW", f"{t} overflow in {name}")
                out.append(r)
            return from_numpy(np.array(out, dtype=np.int64), ok, pa.int64()).cast(child.arrow_type)
        return Strict(t, [child], integral, name=f"{name}:{places}", kernel_fails=True, always_nullable=True)
    if not t.is_decimal:
        raise NotCovered(f"{name} of a {t} value is not covered")
    p, s = t.precision, t.scale
    if places < 0:
        out_type = decimal(min(max(p - s + 1, -places + 1), 38), 0)
    else:
        new_scale = min(s, places)
        out_type = decimal(min(p - s + 1 + new_scale, 38), new_scale)

    def dec(arrays, ok):
        out = []
        for v, k in zip(decimals.unscaled(arrays[0]), ok):
            if not k:
                out.append(0)
                continue
            if places >= 0:
                out.append(_round_unscaled(v, s - out_type.scale, half_even))
                continue
            r = _round_unscaled(v, s - places, half_even) * 10 ** (-places)
            if decimals.digits(r) > out_type.precision:
                raise ExpressionFailed("DECIMAL_PRECISION_EXCEEDS_MAX_PRECISION",
                                       f"{name}: {r} has more than {out_type.precision} digits")
            out.append(r)
        return decimals.from_unscaled(out, ok, out_type.precision, out_type.scale)
    return Strict(out_type, [child], dec, name=f"{name}:{places}", kernel_fails=places < 0,
                  always_nullable=True)


def floor_ceil(child: Node, ceil: bool) -> Node:
    t = child.dtype
    if t.is_integral or t == NULL:
        return cast(child, LONG)
    if t.is_fractional:
        x = cast(child, DOUBLE)
        fn = np.ceil if ceil else np.floor
        return Strict(LONG, [x], lambda arrays, ok: from_numpy(java_to_long(fn(numbers(arrays[0], 0.0))), ok,
                                                                pa.int64()), name="ceil" if ceil else "floor")
    if t.is_decimal:
        if t.scale == 0:
            return child
        out_type = bounded(t.precision - t.scale + 1, 0)
        unit = 10 ** t.scale

        def dec(arrays, ok):
            vals = decimals.unscaled(arrays[0])
            out = [(-((-v) // unit) if ceil else v // unit) if k else 0 for v, k in zip(vals, ok)]
            return decimals.from_unscaled(out, ok, out_type.precision, 0)
        return Strict(out_type, [child], dec, name="ceil" if ceil else "floor")
    raise NotCovered(f"{'ceil' if ceil else 'floor'} of a {t} value is not covered")


def _as_double(child: Node, name: str) -> Node:
    if not (child.dtype.is_numeric or child.dtype == NULL):
        raise NotCovered(f"{name} of a {child.dtype} value is not covered")
    return cast(child, DOUBLE)


def sign(child: Node) -> Node:
    x = _as_double(child, "sign")

    def kernel(arrays, ok):
        v = numbers(arrays[0], 0.0)
        return from_numpy(np.where(v > 0, 1.0, np.where(v < 0, -1.0, v)), ok, pa.float64())
    return Strict(DOUBLE, [x], kernel, name="sign")


def sqrt(child: Node) -> Node:
    x = _as_double(child, "sqrt")

    def kernel(arrays, ok):
        with np.errstate(invalid="ignore"):
            return from_numpy(np.sqrt(numbers(arrays[0], 0.0)), ok, pa.float64())
    return Strict(DOUBLE, [x], kernel, name="sqrt")


class IsNaN(Strict):
    """``isnan(x)``: FALSE (never NULL) for a NULL ``x``."""

    def evaluate(self, batch):
        import pyarrow.compute as pc
        return pc.fill_null(super().evaluate(batch), False)


def isnan(child: Node) -> Node:
    t = child.dtype
    if not (t.is_fractional or t.is_integral or t == NULL):
        raise NotCovered(f"isnan of a {t} value is not covered")
    node = IsNaN(BOOLEAN, [cast(child, DOUBLE) if not t.is_fractional else child],
                 lambda arrays, ok: from_numpy(np.isnan(numbers(arrays[0], 0.0).astype(np.float64)), ok, pa.bool_()),
                 name="isnan")
    node.nullable = False
    return node


def nanvl(left: Node, right: Node) -> Node:
    """``nanvl(a, b)``: ``b`` where ``a`` is NaN (evaluated only there), else ``a``."""
    for side in (left, right):
        if not (side.dtype.is_numeric or side.dtype == NULL):
            raise NotCovered(f"nanvl of a {side.dtype} value is not covered")
    lt, rt = left.dtype, right.dtype
    if FLOAT in (lt, rt) and not lt == rt == FLOAT:
        raise NotCovered("nanvl of a float and another type is not covered")
    t = FLOAT if lt == FLOAT else DOUBLE
    left, right = cast(left, t), cast(right, t)
    return Case([(isnan(left), right)], left)
