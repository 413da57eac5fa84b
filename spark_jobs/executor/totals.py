"""Running totals of linear aggregates (count, sum, avg): one layout and one arithmetic for both
engines.

Why one module: the totals a step appends to an ``aggregate_linear`` trace are read back by the
next step, which may run on the other engine; the column names, their meaning, the integer
arithmetic that makes them exact and the SQL that turns a group's totals into its output row
must be one definition. Engine-free (Python numbers and SQL strings): the Spark kernel
(``spark/aggregate.py`` with ``spark/exact_sum.py``, the same arithmetic as Spark SQL)
hands the SQL to Spark, the Arrow kernel (``arrow/aggregate.py``) adds the totals up in Python
with the functions below and gives the SQL to the expression compiler.

The layout (``spark/exact_sum.py`` documents it in full, with every refusal): per group the
group-by columns, then ``__rows`` (bigint, Σ w), then per *slot* ``j`` (the index of the first
count/sum/avg whose argument text, stripped, is this one) ``__c<j>`` (bigint, Σ w over rows whose
argument is not NULL) and, when a sum or avg reads the slot, the exact sum's parts
``__s<j>_<part>`` (``PARTS``, by family of Spark's SUM type: integer, decimal, split decimal, float).

An ``aggregate_insert_only`` row (inputs that only insert) holds the same totals, then per min/max
aggregate ``i`` its extremum so far ``__e<i>`` (in the argument's type; NULL: no non-NULL value).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Context, Decimal
from typing import Iterable, Sequence

ROWS = "__rows"

LIMB_BITS = 50
LIMBS = 5
LOWEST_EXP = -150  # limb k counts units of 2^(LOWEST_EXP + LIMB_BITS·k): 2^-150 ... 2^50
MAX_ABS_EXP = 100  # finite float/double values must have |x| < 2^100 (about 1.27e30)
TOTAL_LIMIT_EXP = 112  # a limb total must stay below 2^112 (finishing carries fit in 64 bits)
MAX_SPLIT_SCALE = 30  # split decimals up to this scale (beyond: refused with a message)
LIMB_HALF, LIMB_BASE = 1 << (LIMB_BITS - 1), 1 << LIMB_BITS

# the columns of an exact sum, in stored order, per family ("split": a decimal(p,s) with p >= 18
# and s >= 7, whose product with a weight Spark would round: integer part and fraction apart)
PARTS = {
    "integer": ("i",),
    "decimal": ("d",),
    "split": ("i", "f"),
    "float": tuple(f"l{k}" for k in range(LIMBS)) + ("nan", "pinf", "ninf"),
}

EXACT = Context(prec=200)  # Python decimals with room for every product and sum of 38-digit totals


def q(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def count_name(j: int) -> str:
    return f"__c{j}"


def extremum_name(i: int) -> str:
    """The state column of min/max aggregate ``i`` of an ``aggregate_insert_only`` node."""
    return f"__e{i}"


def sum_prefix(j: int) -> str:
    """The prefix of slot ``j``'s exact-sum columns (``__s<j>_<part>``)."""
    return f"__s{j}"


def is_split(precision: int, scale: int) -> bool:
    """A decimal argument whose exact sum keeps integer part and fraction apart."""
    return precision >= 18 and scale >= 7


def slots(aggs: Sequence[tuple[str, str, str | None, bool]]) -> dict[int, int]:
    """Linear aggregate index -> its slot (the first linear aggregate with the same argument)."""
    out: dict[int, int] = {}
    first: dict[str, int] = {}
    for i, (_, func, arg, distinct) in enumerate(aggs):
        if func in ("count", "sum", "avg") and not distinct and arg is not None:
            out[i] = first.setdefault(arg.strip(), i)
    return out


def finish_sql(func: str, arg: str | None, slot: int | None, integer_sum: bool, prefix: str = "") -> str:
    """SQL of a linear aggregate's value from its group's totals and finished sums: columns
    ``prefix + name`` of ``__rows``, ``__c<slot>``, ``__v<slot>`` (the sum in Spark's SUM type)
    and, for ``avg`` of an integer argument, ``__m<slot>`` (that sum as a double)."""
    if arg is None or slot is None:
        return q(prefix + ROWS)
    count = q(prefix + count_name(slot))
    if func == "count":
        return count
    if func == "sum":  # SUM of no non-null value is NULL
        return f"CASE WHEN {count} > 0 THEN {q(f'{prefix}__v{slot}')} END"
    kind = "m" if integer_sum else "v"
    return f"CASE WHEN {count} > 0 THEN {q(f'{prefix}__{kind}{slot}')} / {count} END"  # AVG


# ---- the arithmetic in plain Python: the reference both engines reproduce -------------------

def float_limbs(x: float) -> tuple[int, ...]:
    """The ``LIMBS`` integer limbs of a finite ``x`` with ``|x| < 2^100`` (``round`` is rint:
    half to even; multiplying by a power of two is exact)."""
    if not math.isfinite(x) or abs(x) >= 2.0 ** MAX_ABS_EXP:
        raise ValueError(f"{x!r} has no limbs: expected a finite value below 2^{MAX_ABS_EXP}")
    scaled = [round(x * 2.0 ** -(LOWEST_EXP + LIMB_BITS * k)) for k in range(LIMBS)]
    return tuple(scaled[k] - (scaled[k + 1] << LIMB_BITS) for k in range(LIMBS - 1)) + (scaled[-1],)


def finish_limbs(totals: Sequence[int], lowest_exp: int = LOWEST_EXP) -> float:
    """The double for ``Σ totals[k]·2^(lowest_exp + 50k)``: carries turn the totals into digits
    ``|d| <= 2^49`` (exact as doubles), added from the least significant up."""
    carry, value, unit = 0, 0.0, 2.0 ** lowest_exp
    for total in totals:
        y = total + carry
        digit = (y + LIMB_HALF) % LIMB_BASE - LIMB_HALF  # Python's % is a floor modulo, as Spark's pmod
        carry = (y - digit) >> LIMB_BITS
        value = value + float(digit) * unit
        unit = unit * 2.0 ** LIMB_BITS
    return value + float(carry) * unit


@dataclass
class FloatTotal:
    """The exact running total of a float/double sum: limb totals and counts of the specials."""

    limbs: list[int]
    nan: int = 0
    pos_inf: int = 0
    neg_inf: int = 0

    @classmethod
    def of(cls, weighted: Iterable[tuple[float | None, int]]) -> "FloatTotal":
        """The total of ``(value, weight)`` pairs (None values do not count)."""
        total = cls([0] * LIMBS)
        for x, w in weighted:
            total.add(x, w)
        return total

    def add(self, x: float | None, w: int) -> None:
        if x is None:
            return
        if math.isnan(x):
            self.nan += w
        elif math.isinf(x):
            if x > 0:
                self.pos_inf += w
            else:
                self.neg_inf += w
        else:
            self.limbs = [t + c * w for t, c in zip(self.limbs, float_limbs(x))]

    def value(self) -> float:
        """The sum as IEEE addition of the values would treat infinities and NaN; else
        ``finish_limbs``."""
        return finish_float(self.limbs, self.nan, self.pos_inf, self.neg_inf)


def finish_float(limbs: Sequence[int], nan: int, pos_inf: int, neg_inf: int) -> float:
    """A float sum from its stored totals (NaN, then infinities, decide first)."""
    if nan > 0 or (pos_inf > 0 and neg_inf > 0):
        return math.nan
    if pos_inf > 0:
        return math.inf
    if neg_inf > 0:
        return -math.inf
    return finish_limbs(limbs)


def float_terms(x: float | None, w: int) -> tuple[int, ...] | None:
    """The ``PARTS["float"]`` terms a row adds (None: ``x`` is finite and too large: refused)."""
    if x is None:
        return (0,) * (LIMBS + 3)
    if math.isnan(x):
        return (0,) * LIMBS + (w, 0, 0)
    if math.isinf(x):
        return (0,) * LIMBS + ((0, w, 0) if x > 0 else (0, 0, w))
    if abs(x) >= 2.0 ** MAX_ABS_EXP:
        return None
    return tuple(c * w for c in float_limbs(x)) + (0, 0, 0)


def split_terms(x: Decimal | None, w: int) -> tuple[Decimal, Decimal]:
    """The ``PARTS["split"]`` terms a row adds: (integer part)·w and (fraction)·w; ``%`` keeps
    the dividend's sign, as Spark's does."""
    if x is None:
        return Decimal(0), Decimal(0)
    fraction = EXACT.remainder(x, Decimal(1))
    return EXACT.multiply(EXACT.subtract(x, fraction), w), EXACT.multiply(fraction, w)
