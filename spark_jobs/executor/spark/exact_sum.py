"""Exact running totals for SUM and AVG, so a retraction cancels bit for bit.

Why: an incremental aggregate emits a group's old row with weight -1, rebuilt from the running
totals in its state, and the view holds the row emitted earlier. Floating-point addition is not
associative: totals added up in another order (a compaction, a tier merge, Spark's partial sums)
end in other last bits, the -1 row then differs from the row in the view and never cancels (the
demo's circuit stuck at its 5th step). So no running total is a float. Every total is an integer
or a decimal, whose sums do not depend on the order of addition, and the value shown is a fixed
function of the total (``finish``): the row rebuilt at step t+1 is the row emitted at step t.

- integers: the weighted sum as ``decimal(38,0)`` (no overflow inside; the result is checked
  against ``bigint``, the type Spark's ``sum`` gives);
- decimals ``(p, s)``: the weighted sum as ``decimal(38,s)``; when Spark's product of the value
  and the weight would round (``p >= 18`` and ``s >= 7``), the integer part and the fraction are
  summed apart, each exactly;
- float/double: each finite value ``x`` with ``|x| < 2^100`` is cut into five integer **limbs**
  ``c_k = rint(x·2^(150-50k)) - 2^50·rint(x·2^(100-50k))`` (k = 0..3), ``c_4 = rint(x·2^-50)``,
  so that ``x = Σ c_k·2^(50k-150)`` exactly whenever ``|x| >= 2^-98`` (a smaller value is rounded
  to a multiple of 2^-150); ``c_k·weight`` is summed as ``decimal(38,0)``. ``+inf``, ``-inf`` and
  ``NaN`` are counted apart and decide the result as IEEE addition does. The value is then
  ``finish_limbs``: carries make the totals balanced base-2^50 digits (each exact as a double),
  added from the least significant up, in that fixed order: within one unit in the last place of
  the exact sum of the values, and the same on every engine that follows IEEE 754.

Only integer/decimal arithmetic, ``rint`` and power-of-two scaling are used, never a string, so an
Arrow kernel can compute the same bits: ``float_limbs`` and ``finish_limbs`` (in
``executor/totals.py``, shared with the Arrow kernel) are the reference in plain Python; the SQL
builders here must agree with them bit for bit (tested).

**The stored layout (the contract another engine, e.g. an Arrow kernel, must write and read).**
An ``aggregate_linear`` node's state is a "sum" trace: rows of running totals that add up column
by column (several rows per group are fine; compaction sums them and drops all-zero rows). A row
is the group-by columns (input types), then, in this order (``aggregate._Totals``):

- ``__rows`` bigint: Σ w (the group's row count; the group exists while it is > 0);
- per *slot* ``j`` in ascending order (``j`` = index in the node's aggregate list of the first
  count/sum/avg whose argument text, stripped, is this one; ``count(*)`` has no slot):
  ``__c<j>`` bigint: Σ w over rows whose argument is not NULL; then, if a ``sum``/``avg`` reads
  the slot, its ``ExactSum`` columns, named ``__s<j>_<part>``, by family of Spark's sum type:
  - integer (``bigint`` sum): ``_i`` decimal(38,0) = Σ x·w;
  - decimal(p,s): ``_d`` decimal(38,s) = Σ x·w; when p >= 18 and s >= 7: ``_i`` decimal(38,0) =
    Σ (x - x % 1)·w and ``_f`` decimal(38,s) = Σ (x % 1)·w (``%`` truncates: the fraction has x's
    sign);
  - float/double: ``_l0`` ... ``_l4`` decimal(38,0) = Σ c_k·w (``float_limbs``; a float argument
    is widened to double first), then ``_nan``, ``_pinf``, ``_ninf`` bigint = Σ w over NaN, +inf,
    -inf. A finite |x| >= 2^100 is refused (``ValueRefused``), never stored.
  A NULL argument adds 0 to every column but ``__rows``.

The shown values: ``sum`` is NULL when ``__c<j>`` = 0; else integer: the total as bigint (refused
outside it); decimal: the total cast to Spark's sum type (split: ``_i + _f``); float: NaN if
``_nan`` > 0 or both infinity counts > 0, else ±inf if one is > 0, else ``finish_limbs`` of the
five limb totals. ``avg`` = that sum / ``__c<j>`` (doubles: IEEE division; decimals: Spark's
decimal division and result type, then a cast to the type of Spark's ``avg``), except for
integers, where the numerator is ``finish_limbs([_i, 0, 0], lowest_exp=0)`` (the exact integer as
a double) divided as doubles.
Two engines agree bit for bit when they store the same integers and finish them with the same
``finish_limbs`` fold (digits from the least significant limb up, in double arithmetic). A sum of
only ``-0.0`` values shows ``0.0``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pyspark.sql.types import DataType, DecimalType, DoubleType, FloatType

from spark_jobs.executor.refusal import ValueRefused, raise_sql
from spark_jobs.executor.totals import (LIMB_BASE, LIMB_BITS, LIMB_HALF, LIMBS, LOWEST_EXP, MAX_ABS_EXP,
                                        MAX_SPLIT_SCALE, TOTAL_LIMIT_EXP, FloatTotal, finish_limbs, float_limbs,
                                        is_split)

__all__ = ["LIMBS", "LIMB_BITS", "LOWEST_EXP", "MAX_ABS_EXP", "Column", "ExactSum", "FloatTotal", "family",
           "finish_limbs", "finish_limbs_sql", "float_limbs"]


# ---- the same arithmetic as Spark SQL ------------------------------------------------------

def _double(v: float) -> str:
    """A double literal that parses to exactly ``v`` (shortest round-trip repr)."""
    return repr(float(v)).upper() + "D"


def _decimal(n: int) -> str:
    """An exact decimal literal of the integer ``n``."""
    return f"{n}BD"


_INF, _NINF, _NAN = "CAST('Infinity' AS DOUBLE)", "CAST('-Infinity' AS DOUBLE)", "CAST('NaN' AS DOUBLE)"
_D38 = "DECIMAL(38,0)"


def finish_limbs_sql(totals: Sequence[str], lowest_exp: int, label: str) -> str:
    """SQL of ``finish_limbs`` over the ``decimal(38,0)`` totals ``totals`` (a fold, in order)."""
    limit = _decimal(1 << TOTAL_LIMIT_EXP)
    too_big = " OR ".join(f"abs({t}) >= {limit}" for t in totals)
    digit = f"(pmod(__t + __a.c + {LIMB_HALF}, {LIMB_BASE}) - {LIMB_HALF})"
    fold = (f"aggregate(array({', '.join(f'CAST({t} AS {_D38})' for t in totals)}), "
            f"named_struct('c', CAST(0 AS BIGINT), 'v', CAST(0 AS DOUBLE), 'u', {_double(2.0 ** lowest_exp)}), "
            f"(__a, __t) -> named_struct('c', CAST((__t + __a.c - {digit}) div {LIMB_BASE} AS BIGINT), "
            f"'v', __a.v + CAST({digit} AS DOUBLE) * __a.u, 'u', __a.u * {_double(2.0 ** LIMB_BITS)}), "
            f"__a -> __a.v + CAST(__a.c AS DOUBLE) * __a.u)")
    refuse = raise_sql(f"{label}: the running total exceeds 2^{TOTAL_LIMIT_EXP} units; it cannot be "
                       f"finished exactly", "DOUBLE")
    return f"CASE WHEN {too_big} THEN {refuse} ELSE {fold} END"


@dataclass(frozen=True)
class Column:
    """One accumulator column: the sum over rows of ``term`` (SQL, already weighted). ``can_overflow``:
    whether its sum can leave its type at all (a limb times a weight stays below 2^113, so the
    limbs' sums would need ~10^4 rows of the largest values and weights: they are not checked)."""

    name: str
    term: str
    type: str  # SQL type name
    can_overflow: bool = True


def family(sum_type: DataType) -> str:
    """How the total of a sum with Spark result type ``sum_type`` is kept."""
    if isinstance(sum_type, (DoubleType, FloatType)):
        return "float"
    if isinstance(sum_type, DecimalType):
        return "decimal"
    if sum_type.simpleString() == "bigint":
        return "integer"
    raise ValueError(f"sum over {sum_type.simpleString()} is not supported (numbers only)")


@dataclass(frozen=True)
class ExactSum:
    """The exact running total of ``sum(x)`` for one argument: its accumulator columns (named
    ``<slot>_...``, over the pre-projected argument column ``x``) and the SQL that finishes them
    into Spark's native sum type (``value``) or into the numerator of ``avg`` (``avg_numerator``).

    ``arg_type`` is the argument's type, ``sum_type`` the type Spark's ``sum`` gives for it;
    ``label`` names the aggregate in refusal messages; ``weight`` is the weight column (SQL).
    """

    slot: str
    x: str
    arg_type: DataType
    sum_type: DataType
    label: str
    weight: str

    @property
    def family(self) -> str:
        return family(self.sum_type)

    @property
    def _split(self) -> bool:
        """A decimal whose product with a weight Spark would round (it keeps 38 digits, and
        at least 6 of scale): summed as integer part and fraction."""
        t = self.arg_type
        return isinstance(t, DecimalType) and is_split(t.precision, t.scale)

    def _name(self, part: str) -> str:
        return f"{self.slot}_{part}"

    def columns(self) -> list[Column]:
        f = self.family
        if f == "float":
            return self._float_columns()
        if f == "integer":  # |x|, |weight| < 2^63: the product stays below 2^126 < 10^38, exact
            term = f"CASE WHEN {self.x} IS NULL THEN 0 ELSE CAST({self.x} AS DECIMAL(20,0)) * CAST({self.weight} AS DECIMAL(20,0)) END"
            return [Column(self._name("i"), term, _D38)]
        return self._decimal_columns()

    # -- float/double --------------------------------------------------------------------
    def _float_columns(self) -> list[Column]:
        x, w = self.x, self.weight
        big = _double(2.0 ** MAX_ABS_EXP)
        refuse = raise_sql(f"{self.label}: the value ", _D38, f"CAST({x} AS STRING)",
                           f"' is too large for an exact sum of doubles (|x| < 2^{MAX_ABS_EXP}, "
                           f"about {2.0 ** MAX_ABS_EXP:.3g}, is supported)'")
        scaled = [f"rint({x} * {_double(2.0 ** -(LOWEST_EXP + LIMB_BITS * k))})" for k in range(LIMBS)]
        cols = []
        for k in range(LIMBS):
            limb = scaled[k] if k == LIMBS - 1 else f"({scaled[k]} - {scaled[k + 1]} * {_double(2.0 ** LIMB_BITS)})"
            # |limb| <= 2^50 and |weight| < 2^63: the product stays below 2^113 < 10^38, exact
            term = f"CAST(CAST({limb} AS BIGINT) AS DECIMAL(20,0)) * CAST({w} AS DECIMAL(20,0))"
            # NaN and ±inf fail both tests (Spark orders NaN above every number): they add 0 here
            overflow = f" WHEN abs({x}) <= 1.7976931348623157E308D THEN {refuse}" if k == LIMBS - 1 else ""
            cols.append(Column(self._name(f"l{k}"), f"CASE WHEN abs({x}) < {big} THEN {term}{overflow} ELSE 0 END",
                               _D38, can_overflow=False))
        cols += [Column(self._name("nan"), f"CASE WHEN isnan({x}) THEN {w} ELSE 0 END", "BIGINT"),
                 Column(self._name("pinf"), f"CASE WHEN {x} = {_INF} THEN {w} ELSE 0 END", "BIGINT"),
                 Column(self._name("ninf"), f"CASE WHEN {x} = {_NINF} THEN {w} ELSE 0 END", "BIGINT")]
        return cols

    def _float_value(self, prefix: str) -> str:
        nan, pinf, ninf = (f"`{prefix}{self._name(p)}`" for p in ("nan", "pinf", "ninf"))
        limbs = [f"`{prefix}{self._name(f'l{k}')}`" for k in range(LIMBS)]
        return (f"CASE WHEN {nan} > 0 OR ({pinf} > 0 AND {ninf} > 0) THEN {_NAN} "
                f"WHEN {pinf} > 0 THEN {_INF} WHEN {ninf} > 0 THEN {_NINF} "
                f"ELSE {finish_limbs_sql(limbs, LOWEST_EXP, self.label)} END")

    # -- integers and decimals -------------------------------------------------------------
    def _times_weight(self, integer: str) -> str:
        """``integer · weight`` as decimal(38,0) for an integer of up to 38 digits: exact (scale 0
        is never rounded); an overflow past 38 digits is refused."""
        product = f"try_multiply({integer}, CAST({self.weight} AS DECIMAL(20,0)))"
        refuse = raise_sql(f"{self.label}: a value times its weight exceeds 38 digits", _D38)
        return f"CASE WHEN {integer} IS NULL THEN 0 ELSE CAST(coalesce({product}, {refuse}) AS {_D38}) END"

    def _decimal_columns(self) -> list[Column]:
        t: DecimalType = self.arg_type  # type: ignore[assignment]
        s = t.scale
        wide = f"DECIMAL(38,{s})"
        if not self._split:
            product = f"try_multiply({self.x}, CAST({self.weight} AS DECIMAL(20,0)))"
            refuse = raise_sql(f"{self.label}: a value times its weight exceeds {wide}", wide)
            term = f"CASE WHEN {self.x} IS NULL THEN 0 ELSE CAST(coalesce({product}, {refuse}) AS {wide}) END"
            return [Column(self._name("d"), term, wide)]
        if s > MAX_SPLIT_SCALE:
            raise ValueRefused(f"{self.label}: exact sums of decimal({t.precision},{s}) are not supported "
                               f"(scale above {MAX_SPLIT_SCALE}); cast the argument to a smaller scale")
        integer = self._times_weight(f"CAST({self.x} - {self.x} % 1 AS {_D38})")
        digits = 37 - s  # decimal(s,s) × decimal(37-s,0) stays within 38 digits: exact
        fraction = f"CAST({self.x} % 1 AS DECIMAL({s},{s}))"
        w = self.weight
        times = f"{fraction} * CAST({w} AS DECIMAL({digits},0))"
        if digits < 19:  # a weight may not fit: ±1 always works, larger weights up to 10^digits
            refuse = raise_sql(f"{self.label}: weight ", wide, f"CAST({w} AS STRING)",
                               f"' is too large for an exact sum of decimal({t.precision},{s})'")
            times = (f"CASE WHEN {w} = 1 THEN {fraction} WHEN {w} = -1 THEN -{fraction} "
                     f"WHEN abs({w}) < {_decimal(10 ** digits)} THEN {times} ELSE {refuse} END")
        term = f"CASE WHEN {self.x} IS NULL THEN 0 ELSE CAST({times} AS {wide}) END"
        return [Column(self._name("i"), integer, _D38), Column(self._name("f"), term, wide)]

    def _in_range(self, total: str, digits: int, sql_type: str) -> str:
        """``total`` cast to ``sql_type`` if below 10^digits in magnitude, else a refusal."""
        refuse = raise_sql(f"{self.label}: the sum overflows {sql_type.lower()}", sql_type)
        if digits >= 38:
            return f"CAST({total} AS {sql_type})"
        return f"CASE WHEN abs({total}) < {_decimal(10 ** digits)} THEN CAST({total} AS {sql_type}) ELSE {refuse} END"

    def value(self, prefix: str = "") -> str:
        """SQL of the sum, in Spark's native sum type, from columns ``prefix + name``."""
        f = self.family
        if f == "float":
            return self._float_value(prefix)
        if f == "integer":
            total = f"`{prefix}{self._name('i')}`"
            refuse = raise_sql(f"{self.label}: the sum overflows bigint", "BIGINT")
            return (f"CASE WHEN {total} BETWEEN -9223372036854775808 AND 9223372036854775807 "
                    f"THEN CAST({total} AS BIGINT) ELSE {refuse} END")
        out: DecimalType = self.sum_type  # type: ignore[assignment]
        target = f"DECIMAL({out.precision},{out.scale})"
        if not self._split:
            return self._in_range(f"`{prefix}{self._name('d')}`", out.precision - out.scale, target)
        s = out.scale
        i, fr = f"`{prefix}{self._name('i')}`", f"`{prefix}{self._name('f')}`"
        lim = _decimal(10 ** (37 - s))
        refuse = raise_sql(f"{self.label}: the sum exceeds {37 - s} integer digits, the exact range of "
                           f"sums of decimal({self.arg_type.precision},{s})", f"DECIMAL(38,{s})")  # type: ignore[attr-defined]
        joined = (f"CASE WHEN abs({i}) < {lim} AND abs({fr}) < {lim} THEN "
                  f"CAST({i} AS DECIMAL({37 - s},0)) + CAST({fr} AS DECIMAL(37,{s})) ELSE {refuse} END")
        return self._in_range(joined, out.precision - s, target)

    def avg_numerator(self, prefix: str = "") -> str:
        """SQL of the sum as ``avg`` divides it: a double for integer and float arguments (as
        Spark's ``avg``), the native decimal sum for decimals."""
        if self.family == "integer":
            zero = f"CAST(0 AS {_D38})"
            return finish_limbs_sql([f"`{prefix}{self._name('i')}`", zero, zero], 0, self.label)
        return self.value(prefix)
