"""The bag check: no input tuple's integrated weight may go below zero.

A `changes` input describes a bag: every tuple is there some number of times, never fewer than
zero. A delete of a row that was never inserted (or of more copies than exist) would leave a
negative weight in the integral for good: a `distinct` drops the tuple while an `aggregate` still
counts it (-1), and a later real insert cancels against it and never shows. So before a step is
evaluated, the tuples whose net change is negative are looked up in the input's integral as of
the previous timestep (the trace ``I(x)`` the incremental circuit keeps for every `changes`
input, shared with the joins and distincts that read the same stream) and the step is refused
(or, by the circuit's choice, the excess deletions are quarantined) if ``before + change < 0``.

Why here, on the input deltas before the circuit runs, and not as an IR node beside
``distinct_h``: the outcome decides whether the step runs at all (refuse) or which delta every
operator reads (quarantine), and it must name the files and rows to the user; an operator deep in
the circuit could do neither before other operators had consumed the delta. The integral itself is
an ordinary integrator of the IR, so its state is shared, compacted and committed like any other.

Cost: nothing for a step of inserts only (the caller knows from its counts, no lookup at all).
Otherwise only the tuples whose net change is negative are looked up: on the driver with pyarrow
when the change is held there (``state/lookup.py`` reads only the Parquet row groups whose
statistics admit their first column's values; no Spark job), else in one Spark job (a semi-join of
those tuples with the integral). An in-process (Arrow) step checks its tables with the same
driver-side code (``negative_tuples``); the sizes come from the execution policy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from spark_jobs.executor import zset
from spark_jobs.executor.arrow.zsets import consolidate
from spark_jobs.executor.kernels import NotLocal
from spark_jobs.executor.kernels.spark import to_arrow
from spark_jobs.executor.zset import WEIGHT, col
from spark_jobs.policy import ExecutionPolicy, NarrowPolicy
from spark_jobs.state.lookup import TraceFiles

MAX_EXAMPLES = 5
MAX_COLLECTED = 1_000  # violating tuples brought to the driver by the Spark path (the rest are counted)
BEFORE, CHANGE = "__before", "__change"


@dataclass
class Negatives:
    """Tuples that the step's deletions would take below zero.

    ``bad`` has the input's columns, ``__before`` (the integrated weight before the step) and
    ``__change`` (the step's net change, < 0); ``count`` is how many tuples (at least, when it
    exceeds ``MAX_COLLECTED``); ``examples`` are a few of them as dicts.
    """

    count: int
    examples: list[dict[str, Any]]
    bad: DataFrame
    on_driver: bool

    @property
    def columns(self) -> list[str]:
        return [c for c in self.bad.columns if c not in (BEFORE, CHANGE)]

    @property
    def excess(self) -> DataFrame:
        """The deletions beyond what exists: the input's columns and ``_weight = before + change``."""
        return self.bad.select(*[col(c) for c in self.columns],
                               (F.col(BEFORE) + F.col(CHANGE)).cast("long").alias(WEIGHT))

    def correction(self) -> DataFrame:
        """What cancels the excess deletions (``-excess``): added to the delta, the integral of
        each tuple ends at zero instead of below it."""
        return zset.negate(self.excess)


def find_negatives(spark: SparkSession, delta: DataFrame, integral: DataFrame | None,
                   files: TraceFiles | None, policy: ExecutionPolicy) -> Negatives | None:
    """The tuples of ``delta`` whose integrated weight would go below zero, or None.

    ``integral`` is the input's integral before this step (None: empty) and ``files`` its
    Parquet files for driver-side lookups (None: not available). Call it only for a delta that
    has deletions. ``policy``: how large a change and a lookup the driver takes.
    """
    try:
        return _on_driver(spark, delta, integral, files, policy)
    except NotLocal:
        return _on_spark(delta, integral)


def _normalized(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Floats as Spark groups them: -0.0 is 0.0 and every NaN is one NaN."""
    if not pa.types.is_floating(column.type):
        return column
    zeroed = pc.if_else(pc.equal(column, 0), pa.scalar(0.0, column.type), column)
    return pc.if_else(pc.is_nan(zeroed), pa.scalar(float("nan"), column.type), zeroed)


def _as_spark_groups(table: pa.Table) -> pa.Table:
    """``table`` with its float columns ``_normalized``, so tuples compare as in Spark."""
    return pa.table([_normalized(table.column(c)) for c in table.column_names], schema=table.schema)


def _tagged(table: pa.Table, cols: list[str], before: bool) -> pa.Table:
    zero = pa.array([0] * table.num_rows, pa.int64())
    w = table.column(WEIGHT).cast(pa.int64())
    return pa.table([table.column(c) for c in cols] + ([w, zero] if before else [zero, w]),
                    names=cols + [BEFORE, CHANGE])


def _lookup_column(table: pa.Table, cols: list[str]) -> str | None:
    """The first column whose values Parquet statistics and ``is_in`` compare exactly (integers,
    strings, dates: not floats, whose -0.0/NaN Spark groups differently); the integral is sorted
    on its first columns, so the first such column is usually the one its row groups are cut on."""
    for c in cols:
        t = table.schema.field(c).type
        if pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_date(t):
            return c
    return None


def negative_tuples(table: pa.Table, files: TraceFiles | None, policy: NarrowPolicy) -> pa.Table | None:
    """The tuples of the change ``table`` whose integrated weight would go below zero, on the
    driver: the input's columns, ``__before`` and ``__change``; None if there are none.

    ``files`` are the integral's trace files (None: the integral is empty). ``NotLocal`` if the
    lookup would be too big for the driver (``policy.max_keys`` / ``max_decoded_rows``) or has no
    column to look up by.
    """
    net = consolidate(_as_spark_groups(table))
    neg = net.filter(pc.less(net.column(WEIGHT), 0))
    if neg.num_rows == 0:
        return None
    cols = [c for c in neg.column_names if c != WEIGHT]
    parts = [_tagged(neg, cols, before=False)]
    if files is not None:
        key = _lookup_column(neg, cols)
        if key is None or key not in files.schema.names:
            raise NotLocal("the integral has no column to look up on the driver")
        keys = pc.unique(neg.column(key)).to_pylist()
        if len(keys) > policy.max_keys or files.admitted_rows(key, keys) > policy.max_decoded_rows:
            raise NotLocal("the lookup is too big for the driver")
        found = files.lookup(key, keys).select(cols + [WEIGHT])
        found = _as_spark_groups(found.cast(pa.schema([neg.schema.field(c) for c in cols] + [found.schema.field(WEIGHT)])))
        parts.append(_tagged(found, cols, before=True))
    total = pa.concat_tables(parts, promote_options="permissive")
    sums = total.group_by(cols, use_threads=False).aggregate([(BEFORE, "sum"), (CHANGE, "sum")])
    b, c = sums.column(f"{BEFORE}_sum"), sums.column(f"{CHANGE}_sum")
    bad = sums.filter(pc.and_(pc.less(c, 0), pc.less(pc.add(b, c), 0)))
    return bad.rename_columns(cols + [BEFORE, CHANGE]) if bad.num_rows else None


def _on_driver(spark: SparkSession, delta: DataFrame, integral: DataFrame | None,
               files: TraceFiles | None, policy: ExecutionPolicy) -> Negatives | None:
    if integral is not None and files is None:
        raise NotLocal("the integral has no files to look up on the driver")
    bad = negative_tuples(to_arrow(delta, policy.local_change_rows), files if integral is not None else None,
                          policy.narrow)
    if bad is None:
        return None
    cols = bad.column_names[:-2]
    examples = [{**{k: row[k] for k in cols}, "before": row[BEFORE], "change": row[CHANGE]}
                for row in bad.slice(0, MAX_EXAMPLES).to_pylist()]
    schema = StructType([delta.schema[c] for c in cols] + [StructField(BEFORE, LongType()), StructField(CHANGE, LongType())])
    return Negatives(bad.num_rows, examples, spark.createDataFrame(bad, schema=schema), True)


def _on_spark(delta: DataFrame, integral: DataFrame | None) -> Negatives | None:
    """The same on Spark: one job, which brings at most ``MAX_COLLECTED`` violating tuples back."""
    cols = zset.data_columns(delta)
    neg = zset.consolidate(delta).where(col(WEIGHT) < 0)
    zero = F.lit(0).cast("long")
    parts = neg.select(*[col(c) for c in cols], zero.alias(BEFORE), col(WEIGHT).alias(CHANGE))
    if integral is not None:
        looked = zset.restrict(integral.select(*[col(c) for c in cols], col(WEIGHT)), neg, cols, cols)
        parts = parts.unionByName(looked.select(*[col(c) for c in cols], col(WEIGHT).cast("long").alias(BEFORE),
                                                zero.alias(CHANGE)))
    sums = parts.groupBy(*[col(c) for c in cols]).agg(F.sum(BEFORE).alias(BEFORE), F.sum(CHANGE).alias(CHANGE))
    bad = sums.where((F.col(CHANGE) < 0) & (F.col(BEFORE) + F.col(CHANGE) < 0))
    rows = bad.limit(MAX_COLLECTED + 1).collect()
    if not rows:
        return None
    examples = [{**{k: r[k] for k in cols}, "before": r[BEFORE], "change": r[CHANGE]} for r in rows[:MAX_EXAMPLES]]
    return Negatives(len(rows), examples, bad, False)
