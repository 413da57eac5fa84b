"""Rows read from text files (CSV, JSON lines) as typed Python values, and their Arrow columns.

A text reader turns each file into ``FileRows``: every declared column's values in the form
``text_values`` gives them (epoch days, epoch microseconds, unscaled decimals), the rows'
weights, and the file's ``FileTally`` of failed checks. ``to_table`` makes the Z-set table the
Spark path's ``zset_of`` makes: declared columns in declared order, ``_weight``, weight-0 rows
dropped.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.types import (BinaryType, BooleanType, ByteType, DataType, DateType, DecimalType, DoubleType,
                               FloatType, IntegerType, LongType, ShortType, StringType, TimestampNTZType,
                               TimestampType)

from spark_jobs.executor.arrow_expr import decimals
from spark_jobs.spec.model import WEIGHT

from .file_checks import FileTally

_PLAIN = {BooleanType: pa.bool_(), ByteType: pa.int8(), ShortType: pa.int16(), IntegerType: pa.int32(),
          LongType: pa.int64(), FloatType: pa.float32(), DoubleType: pa.float64(), StringType: pa.string(),
          BinaryType: pa.binary()}


@dataclass
class FileRows:
    """The rows of one file: values per declared column, one weight per row, what failed."""

    tally: FileTally
    values: dict[str, list] = field(default_factory=dict)
    weights: list[int] = field(default_factory=list)

    @property
    def num_rows(self) -> int:
        return len(self.weights)


def column_array(values: Sequence[Any], dtype: DataType) -> pa.Array:
    """An Arrow array of ``dtype`` (Spark's Arrow mapping, timestamps in UTC) from typed values."""
    plain = _PLAIN.get(type(dtype))
    if plain is not None:
        return pa.array(values, plain)
    if isinstance(dtype, DateType):
        return pa.array(values, pa.int32()).cast(pa.date32())
    if isinstance(dtype, TimestampType):
        return pa.array(values, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    if isinstance(dtype, TimestampNTZType):
        return pa.array(values, pa.int64()).cast(pa.timestamp("us"))
    if isinstance(dtype, DecimalType):
        ok = np.array([v is not None for v in values], dtype=bool)
        return decimals.from_unscaled([v or 0 for v in values], ok, dtype.precision, dtype.scale)
    raise TypeError(f"no Arrow column for {dtype.simpleString()}")  # the spec admits no other type


def to_table(parts: Sequence[FileRows], types: Mapping[str, DataType], schema: pa.Schema) -> pa.Table:
    """The union of the files' rows as a Z-set table of ``schema`` (declared columns, then the
    weight); rows of weight 0 dropped, not consolidated."""
    rows = [p for p in parts if p.num_rows]
    columns = []
    for f in schema:
        if f.name == WEIGHT:
            weights = [w for p in rows for w in p.weights]
            columns.append(pa.array(weights, pa.int64()))
        else:
            columns.append(column_array([v for p in rows for v in p.values[f.name]], types[f.name]))
    table = pa.Table.from_arrays(columns, schema=schema) if columns else schema.empty_table()
    weights = np.asarray(table.column(WEIGHT).to_numpy(zero_copy_only=False))
    return table if (weights != 0).all() else table.filter(pa.array(weights != 0))
