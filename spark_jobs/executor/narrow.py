"""Narrow operator state to the rows a small change can touch, on the driver, before Spark sees it.

Why: a small step looks state up by the keys of its change. Handed to Spark, that lookup is a scan
of the whole trace inside the step's job (a filter on the keys skips little there: an ``IN`` list
of random keys reaches Parquet as one min-max range, and as a list of equalities it made a 30M-row
sorted scan slower, 3.2 s against 1.6 s), so the step grew with the state. Yet the keys a change
can carry are often known on the driver without running anything: the input changes are held
there, a filter or a renaming keeps a column's values, a plus unites them, and a join term's output
column comes from one of its sides (``candidates``). With those keys, ``Narrowing`` reads only the
Parquet row groups of the trace files whose statistics admit them (``state.lookup``; traces are
written sorted on their lookup key) and gives Spark a local relation of the rows found, which it
joins inside the step's job without a scan and broadcasts without a job of its own.

Whenever something is unknown (a computed column, a change not on the driver, too many keys, a
key type whose statistics are not trusted here, an unsorted trace whose row groups would all be
read) the state is left as it was: narrowing only ever replaces a superset filter.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession

from spark_jobs.executor.zset import col, empty_like
from spark_jobs.state.lookup import TraceFiles

MAX_KEYS = 50_000  # more candidate keys than this: narrowing would cost more than it saves
MAX_DECODED_ROWS = 2_000_000  # a lookup that would decode more trace rows is left to Spark
# Spark types whose Parquet min/max statistics order like their Python values
KEY_TYPES = frozenset({"tinyint", "smallint", "int", "bigint", "string", "date"})

Keys = frozenset
# A runtime Spark conf key: "false" turns narrowing off (``bench.run --ab`` measures its effect)
ENABLED_CONF = "spark.dbsp.narrowState"


def narrowing_enabled(spark: SparkSession) -> bool:
    return (spark.conf.get(ENABLED_CONF, "true") or "true").lower() != "false"


def local_values(df: DataFrame, column: str) -> Keys | None:
    """The values of ``column`` in a driver-local DataFrame (a projection of a local relation is
    folded at planning: no Spark job); None if there are more than ``MAX_KEYS``."""
    values = frozenset(r[0] for r in df.select(col(column)).collect())
    return values if len(values) <= MAX_KEYS else None


def table_values(table: pa.Table, column: str) -> Keys | None:
    """``local_values`` of a pyarrow Table."""
    values = frozenset(pc.unique(table.column(column)).to_pylist())
    return values if len(values) <= MAX_KEYS else None


@dataclass
class Narrowing:
    """One step's driver-side lookups; the trace files' footers are read once per trace."""

    spark: SparkSession
    files_of: Callable[[str], "TraceFiles | None"]
    _files: dict[str, "TraceFiles | None"] = field(default_factory=dict)
    lookups: int = 0  # how many lookups were narrowed this step (for tests and profiles)

    def lookup(self, trace_id: str, state: DataFrame, column: str, values: Keys
               ) -> tuple[DataFrame, pa.Table] | None:
        """The rows of trace ``trace_id`` (read by Spark as ``state``) whose ``column`` is one of
        ``values`` (NULL matches NULL): a local relation with ``state``'s schema, and the same rows
        as a Table. None when the lookup would decode more than ``MAX_DECODED_ROWS`` rows or the
        trace has no files."""
        if trace_id not in self._files:
            self._files[trace_id] = self.files_of(trace_id)
        files = self._files[trace_id]
        if files is None or column not in files.schema.names:
            return None
        if files.admitted_rows(column, list(values)) > MAX_DECODED_ROWS:
            return None
        table = files.lookup(column, list(values)).select(state.columns)
        self.lookups += 1
        if table.num_rows == 0:
            return empty_like(state), table
        return self.spark.createDataFrame(table, schema=state.schema), table


def key_type(df: DataFrame, column: str) -> str | None:
    """``column``'s Spark type name if narrowing may look it up, else None."""
    dtype = dict(df.dtypes).get(column)
    return dtype if dtype in KEY_TYPES else None
