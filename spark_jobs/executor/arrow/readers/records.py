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

from spark_jobs.executor.arrow.compiler import decimals
from spark_jobs.executor.arrow.compiler.sql_types import SparkType, decimal, to_arrow
from spark_jobs.spec.model import WEIGHT

from .file_checks import FileTally



def sql_type(dtype: Any) -> SparkType:
    """A declared column's type (a pyspark ``DataType`` of ``sources/spark_types.py``) as the Arrow
    engine's model of Spark's types, by its ``simpleString`` name."""
    name = dtype.simpleString()
    if name.startswith("decimal("):
        precision, scale = (int(x) for x in name[len("decimal("):-1].split(","))
        return decimal(precision, scale)
    return SparkType(name)


def arrow_type(t: SparkType) -> pa.DataType:
    """The Arrow type of a declared column (Spark's own mapping; timestamps in UTC)."""
    return pa.binary() if t.name == "binary" else to_arrow(t)


@dataclass
class FileRows:
    """The rows of one file: values per declared column, one weight per row, what failed."""

    tally: FileTally
    values: dict[str, list] = field(default_factory=dict)
    weights: list[int] = field(default_factory=list)

    @property
    def num_rows(self) -> int:
        return len(self.weights)


def column_array(values: Sequence[Any], t: SparkType) -> pa.Array:
    """An Arrow array of ``t`` from typed values (epoch days, epoch microseconds, unscaled decimals)."""
    if t.name == "date":
        return pa.array(values, pa.int32()).cast(pa.date32())
    if t.name in ("timestamp", "timestamp_ntz"):
        return pa.array(values, pa.int64()).cast(arrow_type(t))
    if t.is_decimal:
        ok = np.array([v is not None for v in values], dtype=bool)
        return decimals.from_unscaled([v or 0 for v in values], ok, t.precision, t.scale)
    return pa.array(values, arrow_type(t))


def to_table(parts: Sequence[FileRows], types: Mapping[str, SparkType], schema: pa.Schema) -> pa.Table:
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
