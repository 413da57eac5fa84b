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
Otherwise only the tuples whose net change is negative are looked up, on the driver with pyarrow
(``state/lookup.py``: only the Parquet row groups whose statistics admit their first column's
values; the integral is kept sorted on its columns, so those groups are narrow). A change held on
the driver costs no Spark job; a larger one costs one (its net negative tuples, collected). When
those tuples are spread over most of a large integral (100k random deletes at SF10), the row
groups are streamed and only the matches kept (``TraceFiles.matching``): pyarrow reads them several
times faster than a Spark semi-join scans and hashes every row, and the semi-join's plan (a
broadcast of the tuples, a union, a ``limit`` that scales up partition by partition) cost five or
six jobs per input. The Spark semi-join stays for what the driver should not do: more tuples than
``execution.bag_check.max_tuples``, a lookup beyond ``driver_scan_rows``, or a cluster profile.
An in-process (Arrow) step checks its tables with the same driver-side code (``negative_tuples``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StructField, StructType

from spark_jobs.executor.spark import zset
from spark_jobs.executor.arrow.zsets import consolidate, group_sums
from spark_jobs.executor.engine import NotLocal
from spark_jobs.executor.spark.kernels import to_arrow
from spark_jobs.executor.spark.session import step_conf, temporary_conf
from spark_jobs.executor.spark.zset import WEIGHT, col
from spark_jobs.policy import BagCheckPolicy, ExecutionPolicy, NarrowPolicy
from spark_jobs.state import bag_index
from spark_jobs.state.float_keys import canonical
from spark_jobs.state.lookup import Probe, TooMany, TraceFiles

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
                   files: TraceFiles | None, policy: ExecutionPolicy, *, deleted: int = 0,
                   driver_scan: bool = False, cache: bool = True, secret: bytes | None = None) -> Negatives | None:
    """The tuples of ``delta`` whose integrated weight would go below zero, or None.

    ``integral`` is the input's integral before this step (None: empty) and ``files`` its
    Parquet files for driver-side lookups (None: not available). Call it only for a delta that
    has deletions; ``deleted`` is how many rows it deletes (bounds what a delta not held on the
    driver brings there). ``policy``: how large a change and a lookup the driver takes;
    ``driver_scan``: the driver may stream a large integral (a local profile); ``cache``: keep
    the row groups looked up for the circuit's own lookups (``negative_tuples``); ``secret``:
    the store's digest secret (``negative_tuples``).
    """
    try:
        return _on_driver(spark, delta, integral, files, policy, deleted, driver_scan, cache, secret)
    except NotLocal:
        return _on_spark(delta, integral)


def _as_spark_groups(table: pa.Table) -> pa.Table:
    """``table`` with its float columns ``_normalized``, so tuples compare as in Spark."""
    return pa.table([canonical(table.column(c)) for c in table.column_names], schema=table.schema)


def _tagged(table: pa.Table, cols: list[str], before: bool) -> pa.Table:
    zero = pa.array(np.zeros(table.num_rows, dtype=np.int64))  # not a Python list: 40k rows cost 10 ms
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


def negative_tuples(table: pa.Table, files: TraceFiles | None, policy: NarrowPolicy,
                    scan: BagCheckPolicy | None = None, *, cache: bool = True,
                    secret: bytes | None = None) -> pa.Table | None:
    """The tuples of the change ``table`` whose integrated weight would go below zero, on the
    driver: the input's columns, ``__before`` and ``__change``; None if there are none.

    ``files`` are the integral's trace files (None: the integral is empty). ``NotLocal`` if the
    lookup would be too big for the driver (``policy.max_keys`` / ``max_decoded_rows``, or with
    ``scan`` its streaming bounds) or has no column to look up by. ``cache``: keep the decoded
    row groups for the circuit's lookups of the same integral (a join reading the input as it
    is); False where nothing else reads it, so they are decoded once and leanly
    (``TraceFiles.lookup``). ``secret``: the store's digest secret; the files with a digest
    sidecar (``state/bag_index.py``) are then read by digest, and the step passes if every
    deletion is covered; if one is not, the exact check below decides.
    """
    table = _as_spark_groups(table)
    deleting = table.filter(pc.less(table.column(WEIGHT), 0))
    if deleting.num_rows == 0:
        return None
    cols = [c for c in table.column_names if c != WEIGHT]
    key = _lookup_column(deleting, cols)
    if key is not None and deleting.num_rows < table.num_rows:
        # a tuple whose net change is negative has a deleting row: only the rows sharing a deleting
        # row's key can be one (a change that is half inserts of new keys consolidates half the rows)
        table = table.filter(pc.is_in(table.column(key), value_set=pc.unique(deleting.column(key)), skip_nulls=False))
    net = consolidate(table)
    neg = net.filter(pc.less(net.column(WEIGHT), 0))
    if neg.num_rows == 0:
        return None
    parts = [_tagged(neg, cols, before=False)]
    if files is not None:
        if secret is not None and _passes_by_digest(neg, cols, files, policy, scan, cache, secret, parts):
            return None
        parts.append(_tagged(_found(neg, cols, files, policy, scan, cache), cols, before=True))
    return _bad(parts, cols)


def _found(neg: pa.Table, cols: list[str], files: TraceFiles, policy: NarrowPolicy,
           scan: BagCheckPolicy | None, cache: bool) -> pa.Table:
    """The integral's rows sharing ``neg``'s lookup key, as ``neg``'s columns and types."""
    found = _padded(_integral_rows(neg, cols, files, policy, scan, cache), neg.schema).select(cols + [WEIGHT])
    return _as_spark_groups(found.cast(pa.schema([neg.schema.field(c) for c in cols] + [found.schema.field(WEIGHT)])))


def _passes_by_digest(neg: pa.Table, cols: list[str], files: TraceFiles, policy: NarrowPolicy,
                      scan: BagCheckPolicy | None, cache: bool, secret: bytes, change: list[pa.Table]) -> bool:
    """Does every tuple of ``neg`` keep a weight >= 0, counting the integral's copies by digest in
    the files that have a sidecar and exactly in the others? True is final (a digest collision
    could only wrongly add copies, with probability below 2^-80: ``bag_index``); False says only
    that the exact check must decide. Without any sidecar, False at once (nothing read twice)."""
    key = _lookup_column(neg, cols)
    if key is None or key != bag_index.key_column(neg.schema, cols) or neg.column(key).null_count:
        return False
    # only the files whose statistics' range holds a deleted key: the others hold none of them
    # (a 100-row change falls in a few of SF10's 61 line-item files); each sidecar is then
    # searched by its own sorted keys, so the files' row groups need not be admitted one by one
    bag_index.forget_others(files.paths)
    near = files.admitting_files(key, Probe(pc.unique(neg.column(key)).to_pylist()))
    rows = files.file_rows()
    try:
        weights, missing = bag_index.before([files.paths[i] for i in near], [rows[i] for i in near], neg, cols, key,
                                            secret)
    except (bag_index.Unsupported, pa.ArrowException):
        return False
    if near and len(missing) == len(near):
        return False
    plain = [near[i] for i in missing]
    counted = neg.select(cols).append_column(BEFORE, pa.array(weights, pa.int64())).append_column(
        CHANGE, pa.array(np.zeros(neg.num_rows, dtype=np.int64)))
    parts = change + [counted]
    if plain:
        rest = TraceFiles(files.fs, [files.paths[i] for i in plain], files.schema)
        parts.append(_tagged(_found(neg, cols, rest, policy, scan, cache), cols, before=True))
    return _bad(parts, cols) is None


def _bad(parts: list[pa.Table], cols: list[str]) -> pa.Table | None:
    """The tuples whose summed ``__change`` is negative and takes ``__before + __change`` below
    zero, from tagged tables (``_tagged``)."""
    total = pa.concat_tables(parts, promote_options="permissive")
    sums = group_sums(total, cols, [BEFORE, CHANGE])
    b, c = sums.column(f"{BEFORE}_sum"), sums.column(f"{CHANGE}_sum")
    bad = sums.filter(pc.and_(pc.less(c, 0), pc.less(pc.add_checked(b, c), 0)))
    return bad.rename_columns(cols + [BEFORE, CHANGE]) if bad.num_rows else None


def _padded(found: pa.Table, schema: pa.Schema) -> pa.Table:
    """An integral written before a column was added to its input: NULL in that column (what the
    rows of an input mean after the change, ``runtime/change.py``)."""
    for f in schema:
        if f.name not in found.column_names:
            found = found.append_column(f.name, pa.nulls(found.num_rows, f.type))
    return found


def _integral_rows(neg: pa.Table, cols: list[str], files: TraceFiles, policy: NarrowPolicy,
                   scan: BagCheckPolicy | None, cache: bool = True) -> pa.Table:
    """The integral's rows that share ``neg``'s first comparable column value (a superset of its
    tuples): looked up (decoded row groups kept) when that stays within the narrowing bounds, else
    streamed within ``scan``'s bounds; ``NotLocal`` beyond them."""
    key = _lookup_column(neg, cols)
    if key is None or key not in files.schema.names:
        raise NotLocal("the integral has no column to look up on the driver")
    keys = Probe(pc.unique(neg.column(key)).to_pylist())
    decoded = files.admitted_rows(key, keys)
    if len(keys) <= policy.max_keys and decoded <= policy.max_decoded_rows:
        return files.lookup(key, keys, cache=cache)
    if scan is None or len(keys) > scan.max_tuples or decoded > scan.driver_scan_rows:
        raise NotLocal("the lookup is too big for the driver")
    try:
        return files.matching(key, keys, scan.max_found_rows)
    except TooMany as exc:
        raise NotLocal(f"the lookup is too big for the driver: {exc}") from None


def _change_on_driver(delta: DataFrame, policy: ExecutionPolicy, deleted: int) -> pa.Table:
    """The change as a pyarrow table: all of it when it is held on the driver (no job), else its
    net negative tuples, collected by one Spark job when the step deletes at most
    ``bag_check.max_tuples`` rows (there cannot be more such tuples than deleted rows)."""
    if zset.is_local(delta):
        return to_arrow(delta, policy.local_change_rows)
    if deleted <= 0 or deleted > policy.bag_check.max_tuples:
        raise NotLocal("the change's deletions are not bounded for the driver")
    negatives = zset.consolidate(delta).where(col(WEIGHT) < 0)
    with step_conf(delta.sparkSession, True):  # a bounded aggregation: one job, no adaptive stages
        table = negatives.toArrow()
    return table.cast(to_arrow_schema(negatives.schema, timezone="UTC"))


def _on_driver(spark: SparkSession, delta: DataFrame, integral: DataFrame | None, files: TraceFiles | None,
               policy: ExecutionPolicy, deleted: int, driver_scan: bool, cache: bool = True,
               secret: bytes | None = None) -> Negatives | None:
    if integral is not None and files is None:
        raise NotLocal("the integral has no files to look up on the driver")
    bad = negative_tuples(_change_on_driver(delta, policy, deleted), files if integral is not None else None,
                          policy.narrow, policy.bag_check if driver_scan else None, cache=cache, secret=secret)
    if bad is None:
        return None
    cols = bad.column_names[:-2]
    examples = [{**{k: row[k] for k in cols}, "before": row[BEFORE], "change": row[CHANGE]}
                for row in bad.slice(0, MAX_EXAMPLES).to_pylist()]
    schema = StructType([delta.schema[c] for c in cols] + [StructField(BEFORE, LongType()), StructField(CHANGE, LongType())])
    return Negatives(bad.num_rows, examples, spark.createDataFrame(bad, schema=schema), True)


def _on_spark(delta: DataFrame, integral: DataFrame | None) -> Negatives | None:
    """The same on Spark: a semi-join of the integral with the delta's deleting rows, summed with
    the delta per tuple; at most ``MAX_COLLECTED`` violating tuples come back.

    The integral is restricted by the rows of negative weight as they are (a superset of the
    tuples whose net change is negative: such a tuple has one), and the net change is summed
    from the whole delta in the same aggregation, so the delta is not consolidated twice; and the
    ``limit`` reads every partition at once (Spark otherwise tries 1, then 4, 16... partitions, a
    job each, when fewer rows than the limit exist, the usual case)."""
    cols = zset.data_columns(delta)
    zero = F.lit(0).cast("long")
    parts = delta.select(*[col(c) for c in cols], zero.alias(BEFORE), col(WEIGHT).cast("long").alias(CHANGE))
    if integral is not None:
        deleting = delta.where(col(WEIGHT) < 0)
        types = dict(delta.dtypes)  # a column added since the integral was written: NULL in its rows
        held = integral.select(*[col(c) if c in integral.columns else F.lit(None).cast(types[c]).alias(c)
                                 for c in cols], col(WEIGHT))
        looked = zset.restrict(held, deleting, cols, cols)
        parts = parts.unionByName(looked.select(*[col(c) for c in cols], col(WEIGHT).cast("long").alias(BEFORE),
                                                zero.alias(CHANGE)))
    sums = parts.groupBy(*[col(c) for c in cols]).agg(zset.checked_sum(BEFORE, cols).alias(BEFORE),
                                                     zset.checked_sum(CHANGE, cols).alias(CHANGE))
    bad = sums.where((F.col(CHANGE) < 0) & (F.col(BEFORE) + F.col(CHANGE) < 0))
    with temporary_conf(delta.sparkSession, {"spark.sql.limit.initialNumPartitions": str(2 ** 20)}):
        rows = bad.limit(MAX_COLLECTED + 1).collect()
    if not rows:
        return None
    examples = [{**{k: r[k] for k in cols}, "before": r[BEFORE], "change": r[CHANGE]} for r in rows[:MAX_EXAMPLES]]
    return Negatives(len(rows), examples, bad, False)
