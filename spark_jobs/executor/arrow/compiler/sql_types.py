"""Spark's SQL types as the compiler sees them, their Arrow form, and Spark's coercion rules.

Why a model of its own: the value of an expression depends on its Spark type (``1 + 1.5`` is a
``decimal(3,1)``, ``int / int`` a ``double``, ``byte + byte`` overflows at 127), so the compiler
types every node exactly as Spark's analyzer does (ANSI mode, ``allowPrecisionLoss`` on) before
it picks a kernel. The Arrow types are the ones a Spark-written Parquet file has when pyarrow
reads it back (``timestamp`` is ``timestamp[us, tz=UTC]``, ``decimal(p,s)`` is ``decimal128``).
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from spark_jobs.errors import DbspError

MAX_PRECISION = 38
MINIMUM_ADJUSTED_SCALE = 6


class NotCovered(DbspError):
    """An expression (or part of one) the Arrow kernels do not evaluate exactly as Spark does.

    Raised at compile time only; the engine then runs that step on Spark and reports ``reason``.
    """

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class SparkType:
    """One Spark SQL type (``simpleString`` names; ``precision``/``scale`` for decimals)."""

    name: str
    precision: int = 0
    scale: int = 0

    def __str__(self) -> str:
        return f"decimal({self.precision},{self.scale})" if self.name == "decimal" else self.name

    @property
    def is_decimal(self) -> bool:
        return self.name == "decimal"

    @property
    def is_integral(self) -> bool:
        return self.name in _INTEGRAL_RANK

    @property
    def is_fractional(self) -> bool:  # float or double (binary floating point)
        return self.name in ("float", "double")

    @property
    def is_numeric(self) -> bool:
        return self.is_integral or self.is_fractional or self.is_decimal

    @property
    def is_datetime(self) -> bool:
        return self.name in ("date", "timestamp", "timestamp_ntz")


BOOLEAN = SparkType("boolean")
BYTE = SparkType("tinyint")
SHORT = SparkType("smallint")
INT = SparkType("int")
LONG = SparkType("bigint")
FLOAT = SparkType("float")
DOUBLE = SparkType("double")
STRING = SparkType("string")
DATE = SparkType("date")
TIMESTAMP = SparkType("timestamp")
TIMESTAMP_NTZ = SparkType("timestamp_ntz")
NULL = SparkType("void")

_INTEGRAL_RANK = {"tinyint": 0, "smallint": 1, "int": 2, "bigint": 3}
INTEGRAL_BOUNDS = {"tinyint": (-2**7, 2**7 - 1), "smallint": (-2**15, 2**15 - 1),
                   "int": (-2**31, 2**31 - 1), "bigint": (-2**63, 2**63 - 1)}
_NUMERIC_RANK = {"tinyint": 0, "smallint": 1, "int": 2, "bigint": 3, "float": 4, "double": 5}


def decimal(precision: int, scale: int) -> SparkType:
    if not 1 <= precision <= MAX_PRECISION or not 0 <= scale <= precision:
        raise NotCovered(f"decimal({precision},{scale}) is not a valid Spark decimal type")
    return SparkType("decimal", precision, scale)


def bounded(precision: int, scale: int) -> SparkType:
    """``DecimalType.bounded``: the type, with precision and scale capped at 38."""
    return decimal(min(precision, MAX_PRECISION), min(scale, MAX_PRECISION))


def adjust_precision_scale(precision: int, scale: int) -> SparkType:
    """``DecimalType.adjustPrecisionScale``: above 38 digits, give up fractional digits (keeping
    at least 6, or the original scale if smaller) before integer ones."""
    if precision <= MAX_PRECISION:
        return decimal(precision, scale)
    int_digits = precision - scale
    min_scale = min(scale, MINIMUM_ADJUSTED_SCALE)
    return decimal(MAX_PRECISION, max(MAX_PRECISION - int_digits, min_scale))


def decimal_for(t: SparkType) -> SparkType:
    """``DecimalType.forType``: the decimal an integral value widens to next to a decimal."""
    if t.is_decimal:
        return t
    digits = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 20}.get(t.name)
    if digits is None:
        raise NotCovered(f"{t} has no decimal form")
    return decimal(digits, 0)


def decimal_for_literal(value: int) -> SparkType:
    """``DecimalType.forLiteral`` of an int/bigint literal: just the digits it has."""
    return decimal(max(1, len(str(abs(value)))), 0)


def wider_decimal(a: SparkType, b: SparkType) -> SparkType:
    """``DecimalPrecision.widerDecimalType``: the integer digits and the scale of both; beyond 38
    digits the integer digits win (``boundedPreferIntegralDigits``, Spark 4)."""
    scale = max(a.scale, b.scale)
    precision = max(a.precision - a.scale, b.precision - b.scale) + scale
    if precision <= MAX_PRECISION:
        return decimal(precision, scale)
    return decimal(MAX_PRECISION, max(0, scale - (precision - MAX_PRECISION)))


def wider_numeric(a: SparkType, b: SparkType) -> SparkType:
    """The common type of two non-decimal numeric types (byte < short < int < long < float <
    double), except that a float next to an integral type is a double in ANSI mode."""
    if (a == FLOAT and b.is_integral) or (b == FLOAT and a.is_integral):
        return DOUBLE
    return a if _NUMERIC_RANK[a.name] >= _NUMERIC_RANK[b.name] else b


def can_up_cast(a: SparkType, b: SparkType) -> bool:
    """``Cast.canUpCast`` between numeric types: Spark's optimizer merges two such casts in a
    row into one (``SimplifyCasts``), so ``CAST(CAST(i AS FLOAT) AS DOUBLE)`` is exact."""
    if a == b:
        return True
    if a.is_decimal or b.is_decimal:  # into a decimal that holds every value; never out of one
        fa = decimal_for(a) if a.is_integral else a
        if not (fa.is_decimal and b.is_decimal):
            return False
        return b.precision - b.scale >= fa.precision - fa.scale and b.scale >= fa.scale
    return _NUMERIC_RANK[a.name] < _NUMERIC_RANK[b.name]


def common_type(types: list[SparkType], what: str) -> SparkType:
    """``findWiderCommonType`` for CASE, COALESCE, IN, greatest, ... (ANSI): NULL gives way to
    anything; numerics widen (decimals with ``wider_decimal``, float/double win over decimals);
    date widens to timestamp; every other mix is left to Spark."""
    result = NULL
    for t in types:
        result = _wider(result, t, what)
    return result


def _wider(a: SparkType, b: SparkType, what: str) -> SparkType:
    if a == b or b == NULL:
        return a
    if a == NULL:
        return b
    if a.is_numeric and b.is_numeric:
        if a.is_decimal or b.is_decimal:
            if a.is_fractional or b.is_fractional:
                return DOUBLE
            return wider_decimal(decimal_for(a), decimal_for(b))
        return wider_numeric(a, b)
    if {a.name, b.name} in ({"date", "timestamp"}, {"timestamp_ntz", "timestamp"}):
        return TIMESTAMP
    if {a.name, b.name} == {"date", "timestamp_ntz"}:
        return TIMESTAMP_NTZ
    raise NotCovered(f"{what} mixes {a} and {b}: Spark's implicit casts between them are not covered")


def from_arrow(t: pa.DataType, column: str) -> SparkType:
    """The Spark type of an input column of Arrow type ``t`` (as Spark reads it from Parquet)."""
    simple = {pa.bool_(): BOOLEAN, pa.int8(): BYTE, pa.int16(): SHORT, pa.int32(): INT, pa.int64(): LONG,
              pa.float32(): FLOAT, pa.float64(): DOUBLE, pa.string(): STRING, pa.large_string(): STRING,
              pa.date32(): DATE, pa.null(): NULL}
    if t in simple:
        return simple[t]
    if pa.types.is_decimal(t) and t.precision <= MAX_PRECISION:
        return decimal(t.precision, t.scale)
    if pa.types.is_timestamp(t) and t.unit == "us":
        return TIMESTAMP if t.tz is not None else TIMESTAMP_NTZ
    raise NotCovered(f"column {column!r} has Arrow type {t}, which the Arrow kernels do not read")


def to_arrow(t: SparkType) -> pa.DataType:
    """The Arrow type of a Spark type, as pyarrow reads the Parquet Spark writes."""
    if t.is_decimal:
        return pa.decimal128(t.precision, t.scale)
    return _ARROW[t.name]


_ARROW = {"boolean": pa.bool_(), "tinyint": pa.int8(), "smallint": pa.int16(), "int": pa.int32(),
          "bigint": pa.int64(), "float": pa.float32(), "double": pa.float64(), "string": pa.string(),
          "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"),
          "void": pa.null()}


def from_sql_name(name: str, params: list[int]) -> SparkType:
    """A type as written in ``CAST(x AS <type>)`` (sqlglot's names), or NotCovered."""
    key = name.upper()
    if key == "DECIMAL":
        p, s = (params + [10, 0][len(params):])[:2] if params else (10, 0)
        return decimal(p, s)
    found = _SQL_NAMES.get(key)
    if found is None or params:
        raise NotCovered(f"casts to {name.lower()}{tuple(params) if params else ''} are not covered")
    return found


_SQL_NAMES = {"BOOLEAN": BOOLEAN, "TINYINT": BYTE, "SMALLINT": SHORT, "INT": INT, "BIGINT": LONG,
              "FLOAT": FLOAT, "DOUBLE": DOUBLE, "TEXT": STRING, "DATE": DATE, "TIMESTAMPTZ": TIMESTAMP,
              "TIMESTAMPLTZ": TIMESTAMP, "TIMESTAMP": TIMESTAMP, "TIMESTAMPNTZ": TIMESTAMP_NTZ}
