"""Arithmetic (+ - * / div % pmod, unary minus, abs) with Spark's types, order and errors.

Types follow Spark's analyzer: integral operands widen to the wider integral type and overflow
at that width (ARITHMETIC_OVERFLOW); ``/`` divides doubles unless a decimal is involved;
``div`` gives a bigint; a decimal next to an integral widens the integral (to the digits of a
literal, ``decimal(10,0)`` for an int column, ...), next to a float or double it becomes a
double; decimal results get Spark's precision and scale (``resultDecimalType``) and its HALF_UP
rounding. Evaluation order: ``+ - *`` evaluate the right operand only where the left one is not
NULL; ``/ div % pmod`` evaluate the right one first, and raise DIVIDE_BY_ZERO (or
REMAINDER_BY_ZERO) only where both are non-NULL.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import decimals
from .casts import cast
from .runtime import ExpressionFailed, Node, Strict, fold, from_numpy, numbers, reads_columns
from .sql_types import (DOUBLE, LONG, NULL, NotCovered, SparkType, adjust_precision_scale, bounded, decimal_for,
                         decimal_for_literal, to_arrow, wider_numeric)

OPS = ("+", "-", "*", "/", "div", "%", "pmod")
_ARROW_CHECKED = {"+": "add_checked", "-": "subtract_checked", "*": "multiply_checked"}


@dataclass(frozen=True)
class Operand:
    """A compiled operand and, if it was written as an integral literal, its value (Spark types
    such a literal by its digits when the other operand is a decimal)."""

    node: Node
    literal: int | None = None


def result_decimal(op: str, a: SparkType, b: SparkType) -> SparkType:
    """``resultDecimalType`` of each operator (with ``allowPrecisionLoss``)."""
    p1, s1, p2, s2 = a.precision, a.scale, b.precision, b.scale
    if op in ("+", "-"):
        scale = max(s1, s2)
        return adjust_precision_scale(max(p1 - s1, p2 - s2) + scale + 1, scale)
    if op == "*":
        return adjust_precision_scale(p1 + p2 + 1, s1 + s2)
    if op == "/":
        scale = max(6, s1 + p2 + 1)
        return adjust_precision_scale(p1 - s1 + s2 + scale, scale)
    if op in ("%", "pmod"):
        scale = max(s1, s2)
        return adjust_precision_scale(min(p1 - s1, p2 - s2) + scale, scale)
    if op == "div":
        int_digits = p1 - s1 + s2
        return bounded(int_digits if int_digits else 1, 0)
    raise AssertionError(op)


def _as_decimal(o: Operand) -> Node:
    t = o.node.dtype
    if t.is_decimal:
        return o.node
    if o.literal is not None and t.name in ("smallint", "int", "bigint"):
        return cast(o.node, decimal_for_literal(o.literal))
    return cast(o.node, decimal_for(t))


def binary(op: str, left: Operand, right: Operand) -> Node:
    """``left op right`` typed and evaluated as Spark does."""
    lt, rt = left.node.dtype, right.node.dtype
    if lt == NULL and rt == NULL:
        raise NotCovered(f"NULL {op} NULL: Spark's type for it is not covered")
    if lt == NULL:
        left = Operand(cast(left.node, rt if rt.is_numeric else DOUBLE))
    elif rt == NULL:
        right = Operand(cast(right.node, lt if lt.is_numeric else DOUBLE))
    lt, rt = left.node.dtype, right.node.dtype
    if not (lt.is_numeric and rt.is_numeric):
        raise NotCovered(f"'{op}' on {lt} and {rt} is not covered (only numbers; dates use date_add/date_sub)")
    if (lt.is_decimal or rt.is_decimal) and not (lt.is_fractional or rt.is_fractional):
        return _decimal_op(op, _as_decimal(left), _as_decimal(right))
    if op == "/" or lt.is_decimal or rt.is_decimal:
        if op == "div":
            raise NotCovered("'div' of a float or double: Spark rejects it")
        a, b = cast(left.node, DOUBLE), cast(right.node, DOUBLE)
        common = DOUBLE
    else:
        common = LONG if op == "div" else wider_numeric(lt, rt)
        if op == "div" and (lt.is_fractional or rt.is_fractional):
            raise NotCovered("'div' of a float or double: Spark rejects it")
        a, b = cast(left.node, common), cast(right.node, common)
    if op in _ARROW_CHECKED:
        if op in ("+", "*") and common.is_integral:
            return _reassociated(op, common, a, b)
        return Strict(common, [a, b], _checked(op, common), name=op, kernel_fails=common.is_integral)
    return _divide_like(op, common, a, b)


def _reassociated(op: str, t: SparkType, a: Node, b: Node) -> Node:
    """Spark's ReorderAssociativeOperator (it runs in ANSI mode too): an integral chain of ``+``
    (or of ``*``) with more than one constant term is computed as the other terms, in order,
    then the constants folded into one, last. Overflow follows that shape."""
    def terms(node: Node) -> list[Node]:
        if isinstance(node, Strict) and node.name == op and node.dtype == t:
            return terms(node.args[0]) + terms(node.args[1])
        return [node]

    def chain(nodes: list[Node]) -> Node:
        node = nodes[0]
        for other in nodes[1:]:
            node = Strict(t, [node, other], _checked(op, t), name=op, kernel_fails=True)
        return node

    parts = terms(a) + terms(b)
    constants = [p for p in parts if not reads_columns(p)]
    if len(constants) < 2:
        return chain([a, b])
    folded = fold(chain(constants))
    others = [p for p in parts if reads_columns(p)]
    return chain(others + [folded]) if others else folded


def _checked(op: str, t: SparkType):
    name = _ARROW_CHECKED[op] if t.is_integral else _ARROW_CHECKED[op].replace("_checked", "")
    # Spark computes tinyint and smallint in int and checks the range after (another error class)
    condition = "BINARY_ARITHMETIC_OVERFLOW" if t.name in ("tinyint", "smallint") else "ARITHMETIC_OVERFLOW"

    def kernel(arrays, ok):
        try:
            return getattr(pc, name)(arrays[0], arrays[1])
        except pa.ArrowInvalid:
            raise ExpressionFailed(condition, f"{t} overflow in '{op}'") from None
    return kernel


def _divide_like(op: str, t: SparkType, a: Node, b: Node) -> Node:
    """``/ div % pmod`` on integral or floating values: divisor first, zero raises."""
    def kernel(arrays, ok):
        x, y = numbers(arrays[0]), numbers(arrays[1])
        zero = ok & (y == 0)
        if zero.any():
            if op in ("%", "pmod"):
                raise ExpressionFailed("REMAINDER_BY_ZERO", "Remainder by zero")
            raise ExpressionFailed("DIVIDE_BY_ZERO", "Division by zero")
        y = np.where(ok, y, 1).astype(y.dtype)
        x = np.where(ok, x, 0).astype(x.dtype)
        with np.errstate(all="ignore"):
            if op == "/":
                out = x / y
            elif op == "div":
                if (ok & (x == np.iinfo(np.int64).min) & (y == -1)).any():
                    raise ExpressionFailed("ARITHMETIC_OVERFLOW", "Overflow in integral divide")
                out = _java_div(x, y)
            elif op == "%":
                out = _java_rem(x, y, t)
            else:
                out = _java_pmod(x, y, t)
        return from_numpy(out, ok, pa.from_numpy_dtype(out.dtype)).cast(to_arrow(t if op != "div" else LONG))
    return Strict(t if op != "div" else LONG, [a, b], kernel, name=op, kernel_fails=True, order=(1, 0),
                  always_nullable=True)


def _java_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Java's integer ``/``: truncation toward zero."""
    q = np.floor_divide(x, y)
    return q + ((q < 0) & (q * y != x))


def _java_pmod(x: np.ndarray, y: np.ndarray, t: SparkType) -> np.ndarray:
    """Spark's ``pmod``: ``r = x % y; r < 0 ? (r + y) % y : r``, in Java's int or long arithmetic
    (byte and short are computed as int, and wrap as Java wraps)."""
    if t.is_integral:
        work = np.int64 if t.name == "bigint" else np.int32
        x, y = x.astype(work), y.astype(work)
    r = _java_rem(x, y, t)
    fix = r < 0
    if fix.any():
        r = np.where(fix, _java_rem((r + y).astype(r.dtype), y, t), r)
    return r


def _java_rem(x: np.ndarray, y: np.ndarray, t: SparkType) -> np.ndarray:
    """Java's ``%``: the sign of the dividend (C ``fmod`` for floating point); x % -1 is 0."""
    if t.is_fractional:
        return np.fmod(x, y)
    safe_y = np.where(y == -1, 1, y)
    return np.where(y == -1, 0, np.fmod(x, safe_y)).astype(x.dtype)


_ARROW_EXACT = {"+": pc.add, "-": pc.subtract, "*": pc.multiply}


def _unadjusted_precision(op: str, a: SparkType, b: SparkType) -> int:
    if op == "*":
        return a.precision + b.precision + 1
    scale = max(a.scale, b.scale)
    return max(a.precision - a.scale, b.precision - b.scale) + scale + 1


def _decimal_op(op: str, a: Node, b: Node) -> Node:
    ta, tb = a.dtype, b.dtype
    rt = result_decimal(op, ta, tb)
    sa, sb = ta.scale, tb.scale
    if op in _ARROW_EXACT and _unadjusted_precision(op, ta, tb) <= 38:
        # Spark's result type needs no adjustment: the exact result always fits it, and Arrow's
        # decimal128 kernels compute exactly that (same precision and scale rules).
        arrow_fn = _ARROW_EXACT[op]
        return Strict(rt, [a, b], lambda arrays, ok: arrow_fn(arrays[0], arrays[1]), name=op)

    def one(x: int, y: int) -> int:
        if op == "+":
            s = max(sa, sb)
            return decimals.to_precision(x * 10 ** (s - sa) + y * 10 ** (s - sb), s, rt.precision, rt.scale)
        if op == "-":
            s = max(sa, sb)
            return decimals.to_precision(x * 10 ** (s - sa) - y * 10 ** (s - sb), s, rt.precision, rt.scale)
        if op == "*":
            v, s = decimals.round_significant(x * y, sa + sb)
            return decimals.to_precision(v, s, rt.precision, rt.scale)
        if op == "/":
            v, s = decimals.divide(x, sa, y, sb)
            return decimals.to_precision(v, s, rt.precision, rt.scale)
        if op == "div":
            q = decimals.integral_quotient(x, sa, y, sb)
            decimals.check(q, rt.precision, 0)
            return ((q + 2**63) % 2**64) - 2**63  # Decimal.toLong of a BigDecimal keeps the low 64 bits
        v, s = decimals.remainder(x, sa, y, sb)
        if op == "pmod" and v < 0:
            s2 = max(s, sb)
            v, s = decimals.remainder(v * 10 ** (s2 - s) + y * 10 ** (s2 - sb), s2, y, sb)
        return decimals.to_precision(v, s, rt.precision, rt.scale)

    def kernel(arrays, ok):
        if op in _ARROW_EXACT and _unadjusted_precision(op, ta, tb) <= 76:
            fast = _rounded_in_decimal256(op, arrays[0], arrays[1], sa + sb if op == "*" else max(sa, sb), rt)
            if fast is not None:
                return fast
        xs, ys = decimals.unscaled(arrays[0]), decimals.unscaled(arrays[1])
        if op in ("/", "div", "%", "pmod"):
            for y, k in zip(ys, ok):
                if k and y == 0:
                    if op in ("%", "pmod"):
                        raise ExpressionFailed("REMAINDER_BY_ZERO", "Remainder by zero")
                    raise ExpressionFailed("DIVIDE_BY_ZERO", "Division by zero")
        out = [one(x, y) if k else 0 for x, y, k in zip(xs, ys, ok)]
        if op == "div":
            return from_numpy(np.array(out, dtype=np.int64), ok, pa.int64())
        return decimals.from_unscaled(out, ok, rt.precision, rt.scale)

    order = (1, 0) if op in ("/", "div", "%", "pmod") else None
    return Strict(LONG if op == "div" else rt, [a, b], kernel, name=op, kernel_fails=True, order=order,
                  always_nullable=order is not None)


def _scala_negate(v: int, t: SparkType) -> int:
    """``Decimal.unary_-`` of a value held as a BigDecimal: Scala's ``BigDecimal`` negates within
    its default MathContext (34 digits, HALF_EVEN), then the value is set back to the type's
    scale, which can overflow (``-(-99999999999999999999.999999999999999999)`` raises)."""
    extra = decimals.digits(v) - 34
    if extra > 0:
        unit = 10 ** extra
        q, r = divmod(abs(v), unit)
        if 2 * r > unit or (2 * r == unit and q % 2 == 1):
            q += 1
        v = (-q if v < 0 else q) * unit
    return decimals.check(-v, t.precision, t.scale)


def _rounded_in_decimal256(op: str, x: pa.Array, y: pa.Array, exact_scale: int, rt: SparkType) -> pa.Array | None:
    """``x op y`` for a result type Spark adjusted (more than 38 digits): computed exactly in
    decimal256, rounded HALF_UP once to the result's scale. None (use the exact Python path) when
    a product has more than 38 significant digits (Spark rounds those to 38 first, then to the
    scale: two roundings) or a value overflows the result (Spark's error comes from that path)."""
    exact = _ARROW_EXACT[op](x.cast(pa.decimal256(x.type.precision, x.type.scale)),
                             y.cast(pa.decimal256(y.type.precision, y.type.scale)))
    if op == "*":
        limit = pa.scalar(decimals.exact_decimal(10 ** decimals.MAX_DIGITS, exact_scale),
                          pa.decimal256(76, exact_scale))
        if not pc.all(pc.less(pc.abs(exact), limit)).as_py() in (True, None):
            return None
    rounded = pc.round(exact, ndigits=rt.scale, round_mode="half_towards_infinity")
    try:
        return rounded.cast(pa.decimal128(rt.precision, rt.scale))
    except pa.ArrowInvalid:
        return None


def negate(child: Node) -> Node:
    """Unary minus: integral overflow raises; floats negate; decimals as ``_scala_negate``."""
    return _sign_op(child, "negative", lambda v, t: _scala_negate(v, t), pc.negate_checked)


def absolute(child: Node) -> Node:
    """``abs``: as unary minus on the negative values."""
    return _sign_op(child, "abs", lambda v, t: _scala_negate(v, t) if v < 0 else v, pc.abs_checked)


def _sign_op(child: Node, name: str, on_decimal, arrow_fn) -> Node:
    t = child.dtype
    if not t.is_numeric:
        raise NotCovered(f"{name} of a {t} value is not covered")
    if t.is_decimal and t.precision <= 34:  # exact (no Scala rounding below 35 digits)
        return Strict(t, [child], lambda arrays, ok: arrow_fn(arrays[0]), name=name)
    if t.is_decimal:
        def dec(arrays, ok):
            values = [on_decimal(v, t) if k else 0 for v, k in zip(decimals.unscaled(arrays[0]), ok)]
            return decimals.from_unscaled(values, ok, t.precision, t.scale)
        return Strict(t, [child], dec, name=name, kernel_fails=t.precision > 34)

    def kernel(arrays, ok):
        try:
            return arrow_fn(arrays[0])
        except pa.ArrowInvalid:
            raise ExpressionFailed("ARITHMETIC_OVERFLOW", f"{t} overflow in {name}") from None
    return Strict(t, [child], kernel, name=name, kernel_fails=t.is_integral)
