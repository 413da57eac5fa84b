"""A DataFrame whose JVM plan is made the first time Spark needs it; its schema is known before.

Why: a small step on Spark reads every state trace its circuit names, yet with the change held on
the driver most of those reads are only asked their columns: a join side or an aggregate's
state is narrowed on the driver to the rows the change can touch (``narrow.py``; the read is only
the schema of the local relation that replaces it), and an integrator's value (old state plus the
change) has no reader in the step (its delay reads the committed trace). Making each read cost the
JVM a data source resolution: listing the trace's directories, checking each path exists (a pool
of threads per read), and analysing the relation; on W1 (8 traces) that was ~8% of a step.
A ``LazyFrame`` holds the schema (the manifest's, as Spark reads it back: every column
nullable) and builds its JVM DataFrame on first use of ``_jdf``: anything that reads data or
derives a plan from it gets the real read, at the moment it needs it.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from pyspark.sql import SparkSession
from pyspark.sql.classic.dataframe import DataFrame
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType


class LazyFrame(DataFrame):
    """A classic-session DataFrame built by ``build()`` (a JVM Dataset) at first use; its
    ``schema`` (and so ``columns`` and ``dtypes``) is ``schema`` without asking the JVM."""

    def __init__(self, spark: SparkSession, build: Callable[[], Any], schema: StructType) -> None:
        self._build: Callable[[], Any] | None = build
        self._built: Any = None
        super().__init__(None, spark)  # type: ignore[arg-type]  # (the setter below keeps None)
        self.__dict__["schema"] = schema  # DataFrame.schema is a cached_property: this is its cache

    @property  # type: ignore[override]
    def _jdf(self) -> Any:
        if self._built is None and self._build is not None:
            build, self._build = self._build, None
            self._built = build()
        return self._built

    @_jdf.setter
    def _jdf(self, value: Any) -> None:
        self._built = value

    @property
    def materialized(self) -> bool:
        """Has Spark been asked for this DataFrame's plan yet?"""
        return self._build is None

    def select_later(self, names: Sequence[str]) -> "LazyFrame":
        """``select(names)`` (plain column names), lazily: the selected fields of the schema."""
        from spark_jobs.executor.spark.zset import select_names

        fields = {f.name: f for f in self.schema.fields}
        names = tuple(names)
        spark = self.sparkSession
        return LazyFrame(spark, lambda: select_names(DataFrame(self._jdf, spark), names)._jdf,
                         StructType([fields[n] for n in names]))


def pending(df: Any) -> bool:
    """Is ``df`` a LazyFrame not built yet?"""
    return isinstance(df, LazyFrame) and not df.materialized


def selectable(df: Any, names: Sequence[str]) -> bool:
    """Can ``names`` be selected from a pending ``df`` lazily (each a column of it, once)?"""
    return pending(df) and bool(names) and len(set(names)) == len(names) and set(names) <= set(df.columns)


def as_read(schema: StructType) -> StructType:
    """``schema`` as Spark's file sources read it back: every field nullable, nested too
    (Spark's ``StructType.asNullable`` of a user-given schema)."""
    return StructType([StructField(f.name, _nullable(f.dataType), True, f.metadata) for f in schema.fields])


def _nullable(dtype: DataType) -> DataType:
    if isinstance(dtype, StructType):
        return as_read(dtype)
    if isinstance(dtype, ArrayType):
        return ArrayType(_nullable(dtype.elementType), True)
    if isinstance(dtype, MapType):
        return MapType(_nullable(dtype.keyType), _nullable(dtype.valueType), True)
    return dtype
