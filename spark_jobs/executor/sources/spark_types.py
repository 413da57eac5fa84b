"""Declared column types as Spark types, and which file types may stand in for them.

The spec validator accepts primitive Spark SQL type names only (plus decimal(p,s) and
char/varchar), so this parser is pure Python: ``spark_schema`` must work before any Spark
session exists (tests and the evaluator build empty Z-sets from it).
"""
from __future__ import annotations

import re

from pyspark.sql.types import (BinaryType, BooleanType, ByteType, DataType, DateType, DecimalType,
                               DoubleType, FloatType, IntegerType, LongType, NullType, ShortType,
                               StringType, StructField, StructType, TimestampNTZType, TimestampType)

from spark_jobs.spec.model import WEIGHT, InputSpec

_SIMPLE: dict[str, DataType] = {
    "boolean": BooleanType(), "tinyint": ByteType(), "byte": ByteType(),
    "smallint": ShortType(), "short": ShortType(), "int": IntegerType(), "integer": IntegerType(),
    "bigint": LongType(), "long": LongType(), "float": FloatType(), "real": FloatType(),
    "double": DoubleType(), "string": StringType(), "date": DateType(),
    "timestamp": TimestampType(), "timestamp_ltz": TimestampType(), "timestamp_ntz": TimestampNTZType(),
    "binary": BinaryType(), "decimal": DecimalType(10, 0), "dec": DecimalType(10, 0),
    "numeric": DecimalType(10, 0),
}
_DECIMAL = re.compile(r"^(?:decimal|dec|numeric)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)$", re.IGNORECASE)
_CHAR = re.compile(r"^(?:var)?char\s*\(\s*\d+\s*\)$", re.IGNORECASE)

# Integral types by width, and how many decimal digits their largest value has.
_INTEGRAL_RANK = {ByteType: 1, ShortType: 2, IntegerType: 3, LongType: 4}
_INTEGRAL_DIGITS = {ByteType: 3, ShortType: 5, IntegerType: 10, LongType: 19}
_EXACT_IN_FLOAT = (ByteType, ShortType)                # fit a float's 24-bit mantissa
_EXACT_IN_DOUBLE = (ByteType, ShortType, IntegerType, FloatType)  # fit a double's 53 bits


def parse_type(text: str) -> DataType:
    """The Spark type of a declared type name (char/varchar read as string)."""
    t = text.strip()
    simple = _SIMPLE.get(t.lower())
    if simple is not None:
        return simple
    if m := _DECIMAL.match(t):
        return DecimalType(int(m.group(1)), int(m.group(2) or 0))
    if _CHAR.match(t):
        return StringType()
    raise ValueError(f"unknown column type {text!r}")


def declared_types(spec: InputSpec) -> dict[str, DataType]:
    """Column name -> Spark type, in declared order."""
    return {c.name: parse_type(c.type) for c in spec.columns}


def spark_schema(spec: InputSpec, with_weight: bool = True) -> StructType:
    """The declared schema (nullability as declared), plus the long ``_weight`` column."""
    fields = [StructField(c.name, parse_type(c.type), c.nullable) for c in spec.columns]
    if with_weight:
        fields.append(StructField(WEIGHT, LongType(), False))
    return StructType(fields)


def type_label(dt: DataType) -> str:
    """The name a user writes in the YAML (long, not bigint)."""
    names = {LongType: "long", IntegerType: "int", ShortType: "short", ByteType: "byte",
             TimestampType: "timestamp", TimestampNTZType: "timestamp_ntz"}
    return names.get(type(dt), dt.simpleString())


def is_integral(dt: DataType) -> bool:
    return type(dt) in _INTEGRAL_RANK


def widens(found: DataType, declared: DataType) -> bool:
    """True when every value of ``found`` is exactly a value of ``declared`` (lossless upcast).

    Also accepted: a column of null type (pyarrow writes one for an all-null column), and
    timestamp_ntz -> timestamp (pandas writes naive timestamps; they are read as wall-clock time
    in the session time zone).
    """
    if found == declared or isinstance(found, NullType):
        return True
    f, d = type(found), type(declared)
    if f in _INTEGRAL_RANK and d in _INTEGRAL_RANK:
        return _INTEGRAL_RANK[f] <= _INTEGRAL_RANK[d]
    if d is FloatType:
        return f in _EXACT_IN_FLOAT
    if d is DoubleType:
        return f in _EXACT_IN_DOUBLE
    if d is DecimalType:
        whole = declared.precision - declared.scale
        if f in _INTEGRAL_DIGITS:
            return _INTEGRAL_DIGITS[f] <= whole
        if f is DecimalType:
            return found.scale <= declared.scale and found.precision - found.scale <= whole
        return False
    return f is TimestampNTZType and d is TimestampType
