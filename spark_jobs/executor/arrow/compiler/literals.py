"""Literals as Spark's parser types them, and the coercion rules that depend on a literal.

``1`` is an int (a bigint, then a decimal, as it grows), ``1.5`` a ``decimal(2,1)``, ``1e3`` and
``1.5D`` doubles, ``1L``/``1S``/``1Y`` bigint/smallint/tinyint, ``1.5BD`` a decimal, ``1.5F`` a
float (rounded once, as ``Float.parseFloat`` does). Next to a decimal, an integral literal is
typed by its digits (``DecimalType.forLiteral``); an integral expression compared with a decimal
literal is compared with its floor or ceiling, or becomes a constant when the literal is beyond
the long range (``DecimalPrecision``).
"""
from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
from sqlglot import exp

from . import logic
from .arithmetic import Operand
from .casts import cast
from .runtime import Literal, Node
from .sql_types import (BOOLEAN, BYTE, DOUBLE, FLOAT, INT, INTEGRAL_BOUNDS, LONG, SHORT, NotCovered, decimal,
                         decimal_for_literal)


def unparen(e: exp.Expression) -> exp.Expression:
    while isinstance(e, exp.Paren):
        e = e.this
    return e


def typed_literal(e: exp.Expression) -> bool:
    return isinstance(e, (exp.Cast, exp.TryCast)) and e.meta.get("literal") is not None


def is_number(e: exp.Expression) -> bool:
    return (isinstance(e, exp.Literal) and not e.is_string) or typed_literal(e)


def is_literal_syntax(e: exp.Expression) -> bool:
    return is_number(e) or (isinstance(e, exp.Neg) and is_number(unparen(e.this)))


def _exact(text: str) -> tuple[int, int]:
    """(unscaled, scale) of a decimal text as ``java.math.BigDecimal`` reads it."""
    mantissa, _, exponent = text.lower().partition("e")
    whole, _, frac = mantissa.partition(".")
    return int((whole + frac) or "0"), len(frac) - int(exponent or 0)


def _decimal_type_of(unscaled: int, scale: int) -> tuple[int, int, int]:
    """Spark's ``DecimalType`` of a BigDecimal literal, and its unscaled value at that scale."""
    if scale < 0:
        unscaled, scale = unscaled * 10 ** (-scale), 0
    precision = max(len(str(abs(unscaled))) if unscaled else 1, scale)
    if precision > 38:
        raise NotCovered("a decimal literal of more than 38 digits (Spark rejects it)")
    return unscaled, precision, scale


def number_literal(text: str, negative: bool) -> Literal:
    sign = -1 if negative else 1
    low = text.lower()
    if "e" in low:
        value = sign * float(text)
        if not np.isfinite(value):
            raise NotCovered(f"the literal {text} is out of the double range (Spark rejects it)")
        return Literal(DOUBLE, value)
    if "." in low:
        unscaled, scale = _exact(text)
        unscaled, precision, scale = _decimal_type_of(sign * unscaled, scale)
        return Literal(decimal(precision, scale), Decimal(f"{unscaled}E{-scale}"))
    value = sign * int(text)
    for t in (INT, LONG):
        lo, hi = INTEGRAL_BOUNDS[t.name]
        if lo <= value <= hi:
            return Literal(t, value)
    unscaled, precision, _ = _decimal_type_of(value, 0)
    return Literal(decimal(precision, 0), Decimal(unscaled))


def suffixed_literal(text: str, suffix: str, negative: bool) -> Literal:
    """``1L``, ``1S``, ``1Y``, ``1.5D``, ``1.5F``, ``1.5BD`` as Spark's parser types them."""
    sign = -1 if negative else 1
    if suffix in ("L", "S", "Y"):
        if not text.isdigit():
            raise NotCovered(f"the literal {text}{suffix} (Spark rejects it)")
        t = {"L": LONG, "S": SHORT, "Y": BYTE}[suffix]
        lo, hi = INTEGRAL_BOUNDS[t.name]
        value = sign * int(text)
        if not lo <= value <= hi:
            raise NotCovered(f"the literal {text}{suffix} is out of range (Spark rejects it)")
        return Literal(t, value)
    if suffix == "D":
        value = sign * float(text)
        if not np.isfinite(value):
            raise NotCovered(f"the literal {text}D is out of the double range (Spark rejects it)")
        return Literal(DOUBLE, value)
    if suffix == "F":
        return Literal(FLOAT, float(sign * float32_of(text)))
    if suffix == "BD":
        unscaled, scale = _exact(text)
        unscaled, precision, scale = _decimal_type_of(sign * unscaled, scale)
        return Literal(decimal(precision, scale), Decimal(f"{unscaled}E{-scale}"))
    raise NotCovered(f"the literal suffix {suffix!r} is not covered")


def float32_of(text: str) -> np.float32:
    """The float nearest to a decimal text (``Float.parseFloat``: one rounding, not two)."""
    exact = Fraction(text)
    guess = np.float32(float(exact))
    if not np.isfinite(guess):
        raise NotCovered(f"the literal {text}F is out of the float range (Spark rejects it)")
    best = guess
    for candidate in (np.nextafter(guess, np.float32(-np.inf)), np.nextafter(guess, np.float32(np.inf))):
        if not np.isfinite(candidate):
            continue
        d_best, d_cand = abs(Fraction(float(best)) - exact), abs(Fraction(float(candidate)) - exact)
        if d_cand < d_best or (d_cand == d_best and int(candidate.view(np.uint32)) % 2 == 0):
            best = candidate
    return best


def decimal_literal(e: exp.Expression) -> Decimal | None:
    """The value of a decimal-typed literal as written (``1.5``, ``1.5BD``, a 20-digit integer)."""
    core, negative = unparen(e), False
    if isinstance(core, exp.Neg):
        core, negative = unparen(core.this), True
    if isinstance(core, exp.Literal) and not core.is_string:
        lit = number_literal(str(core.this), negative)
    elif typed_literal(core) and core.meta["literal"] == "BD":
        digits = core.this.this if isinstance(core.this, exp.Literal) else core.this.name
        lit = suffixed_literal(digits, "BD", negative)
    else:
        return None
    return lit.value if lit.dtype.is_decimal else None


def integral_vs_decimal_literal(op: str, left: Operand, right: Operand, left_dec: Decimal | None,
                                 right_dec: Decimal | None) -> Node | None:
    """``DecimalPrecision``'s rewrite of an integral expression compared with a decimal literal:
    compare with its floor or ceiling, or a constant when it is beyond the long range."""
    lo, hi = INTEGRAL_BOUNDS["bigint"]
    if left.node.dtype.is_integral and right_dec is not None:
        column, value, op_on_column = left.node, right_dec, op
    elif right.node.dtype.is_integral and left_dec is not None:
        column, value = right.node, left_dec
        op_on_column = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
    else:
        return None
    if op_on_column not in ("<", "<=", ">", ">="):
        return None
    if value < lo:
        return Literal(BOOLEAN, op_on_column in (">", ">="))
    if value > hi:
        return Literal(BOOLEAN, op_on_column in ("<", "<="))
    bound = math.floor(value) if op_on_column in (">", "<=") else math.ceil(value)
    return logic.comparison(op_on_column, column, Literal(LONG, int(bound)))


def decimal_side(this: Operand, other: Operand) -> Node:
    """An integral literal compared with a decimal is typed by its digits (``forLiteral``)."""
    if this.literal is not None and other.node.dtype.is_decimal and this.node.dtype.name in ("smallint", "int",
                                                                                               "bigint"):
        return cast(this.node, decimal_for_literal(this.literal))
    return this.node
