"""The in-process side of a trace: write, read and consolidate Parquet directories with pyarrow.

Why: a small step that runs in-process (no Spark job) must still commit through the same store:
files first, the manifest last, atomically. These functions are the pyarrow counterparts of
``trace.py``'s Spark ones and keep the layout Spark writes (one directory per write, ``part-*``
Parquet files, the trace's Spark schema in the manifest, sorted files with small row groups), so
either engine reads what the other wrote.
"""
from __future__ import annotations

import functools
import json
import uuid
from decimal import Decimal
from typing import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_jobs.errors import EXIT_REFUSED, DbspError
from spark_jobs.policy import StatePolicy
from spark_jobs.state import stats_sidecar
from spark_jobs.state.fs import FileSystem, sidecars_apply
from spark_jobs.state.manifest import KINDS, FileStat

WEIGHT = "_weight"  # the Z-set multiplicity column (same name as spark_jobs.spec.model.WEIGHT)


@functools.lru_cache(maxsize=256)
def spark_schema_json(schema: pa.Schema) -> str:
    """The Spark schema (JSON, as a manifest records it) of a table's Arrow schema (remembered:
    pyspark's type conversions cost a millisecond a trace, at every step)."""
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import StructField, StructType

    fields = from_arrow_schema(schema, prefer_timestamp_ntz=True).fields
    return StructType([StructField(f.name, f.dataType, True) for f in fields]).json()


@functools.lru_cache(maxsize=256)
def arrow_schema(schema_json: str) -> pa.Schema:
    """The Arrow schema of a trace's recorded Spark schema (all columns nullable; remembered)."""
    from pyspark.sql.types import StructType

    return arrow_of(StructType.fromJson(json.loads(schema_json)))


def arrow_of(spark_schema) -> pa.Schema:  # noqa: ANN001 - a pyspark StructType
    """The Arrow schema of a Spark schema, as Spark's own Arrow conversion maps it (timestamps in
    UTC, the profiles' session time zone), every column nullable."""
    from pyspark.sql.pandas.types import to_arrow_schema

    s = to_arrow_schema(spark_schema, timezone="UTC")
    return pa.schema([f.with_nullable(True) for f in s])


def dtypes(schema: pa.Schema) -> list[tuple[str, str]]:
    """``DataFrame.dtypes`` of a table: (name, Spark type name) per column."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return [(f.name, f.dataType.simpleString()) for f in from_arrow_schema(schema, prefer_timestamp_ntz=True).fields]


def write_dir(fs: FileSystem, path: str, table: pa.Table, policy: StatePolicy, *,
              sort_by: Sequence[str] = (), each_file: Callable[[str, pa.Table], None] | None = None) -> FileStat:
    """Write ``table`` as a new Parquet directory (the counterpart of ``trace.write_dir``).

    Unsorted: one file per ``policy.rows_per_file`` rows. With ``sort_by``: sorted (NULLs first,
    as Spark), in row groups of about ``policy.sorted_row_group_bytes`` and at most
    ``policy.sorted_row_group_rows`` rows, compressed with
    ``policy.sorted_compression`` (none by default: a lookup decodes whole groups), as ONE file
    written ``rows_per_file`` rows at a time (the same memory bound). Why one file: a lookup
    reads row groups, and every extra file of a key-sorted directory only adds its own
    admission, open and read call to each lookup that touches it (split at 1M rows, SF10's
    integrals were 8-61 files, and a 1,000-row W1 step's lookups touched most of them: the step
    grew with the state's file count, not with the rows it read).

    ``each_file(path, rows)`` is called after each file is written, with the rows written there
    (a bag integral's digest sidecar, ``bag_index``); such a sorted write keeps one file per
    ``rows_per_file`` rows, so that no file's rows are ever held whole."""
    order = None  # the sorted order, taken one chunk at a time: a sorted copy of a load's whole
    group_rows = None  # table (60M line items at SF10) would double the step's memory
    if sort_by and table.num_rows:
        try:
            order = pc.sort_indices(table, [(c, "ascending", "at_start") for c in sort_by])
        except (pa.ArrowTypeError, pa.ArrowNotImplementedError):
            order = None  # a key pyarrow cannot order (an array or map): written as it is, read whole
    chunk = max(1, policy.rows_per_file)
    if order is not None:
        per_row = max(1, table.nbytes // table.num_rows)
        group_rows = min(max(1024, policy.sorted_row_group_bytes // per_row),
                         max(1, policy.sorted_row_group_rows))
        chunk = max(1, chunk // group_rows) * group_rows  # whole row groups per chunk
        if each_file is None:
            return _write_sorted_file(fs, path, table, order, chunk, group_rows, policy.sorted_compression)
    size = 0
    codec = "snappy" if order is None else policy.sorted_compression
    for i, start in enumerate(range(0, max(table.num_rows, 1), chunk)):
        part = table.slice(start, chunk) if order is None else table.take(order.slice(start, chunk))
        full = _data_file(fs, path, i, codec)
        with fs.open_write(full) as fh:
            pq.write_table(part, fh, compression=codec, row_group_size=group_rows)
        if each_file is not None:
            each_file(full, part)
        _summarize(fs, full, part.num_rows, group_rows)
        size += _file_bytes(fs, path, full)
    return FileStat(rows=table.num_rows, bytes=size)


def _data_file(fs: FileSystem, path: str, index: int, codec: str) -> str:
    """A new data file's path in ``path``, named as Spark names its part files."""
    return fs.join(path, f"part-{index:05d}-{uuid.uuid4()}-c000{'' if codec == 'none' else '.' + codec}.parquet")


def _summarize(fs: FileSystem, full: str, rows: int, group_rows: int | None) -> None:
    """Give a sorted data file written on this machine its statistics sidecar
    (``stats_sidecar``) when it is ``large_enough`` (counted in full groups of ``group_rows``):
    a new process then admits its row groups without parsing its footer."""
    if sidecars_apply(fs) and group_rows and stats_sidecar.large_enough(rows // group_rows):
        stats_sidecar.write(full)


def _file_bytes(fs: FileSystem, path: str, full: str) -> int:
    return sum(s for f, s in fs.data_files(path) if f == full)


def _write_sorted_file(fs: FileSystem, path: str, table: pa.Table, order: pa.Array, chunk: int,
                       group_rows: int, codec: str) -> FileStat:
    """``table`` in ``order`` as one Parquet file in ``path``, ``chunk`` rows taken at a time."""
    full = _data_file(fs, path, 0, codec)
    with fs.open_write(full) as fh:
        with pq.ParquetWriter(fh, table.schema, compression=codec) as writer:
            for start in range(0, table.num_rows, chunk):
                writer.write_table(table.take(order.slice(start, chunk)), row_group_size=group_rows)
    _summarize(fs, full, table.num_rows, group_rows)
    return FileStat(rows=table.num_rows, bytes=_file_bytes(fs, path, full))


def read_dirs(fs: FileSystem, paths: Sequence[str], schema: pa.Schema) -> pa.Table:
    """Every row of several Parquet directories, as ``schema``."""
    parts = []
    for path in paths:
        for full, _ in fs.data_files(path):
            with fs.open_read(full) as fh:
                parts.append(_read_columns(fh, schema.names).cast(schema))
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _read_columns(fh, names: list[str]) -> pa.Table:
    """One file's ``names`` columns, through its footer alone: ``pq.read_table`` builds a dataset
    for it, about 0.3 ms more per file, and a merge of a step's small deltas reads several files
    per trace. A column the file lacks raises (``pa.ArrowInvalid``, as ``read_table`` does;
    ``ParquetFile.read`` would leave it out)."""
    f = pq.ParquetFile(fh)
    have = set(f.schema_arrow.names)
    if missing := [c for c in names if c not in have]:
        raise pa.ArrowInvalid(f"No match for FieldRef.Name({missing[0]}) in the file's columns {sorted(have)}")
    return f.read(columns=names)


def weight_totals(table: pa.Table) -> tuple[int, int]:
    """(sum of positive weights, sum of |negative weights|) of a Z-set table."""
    w = table.column(WEIGHT)
    ins = pc.sum(pc.if_else(pc.greater(w, 0), w, 0)).as_py() or 0
    dels = pc.sum(pc.if_else(pc.less(w, 0), w, 0)).as_py() or 0
    return int(ins), -int(dels)


def drop_below(table: pa.Table, below: Sequence[tuple[str, int]]) -> pa.Table:
    """``trace.drop_below`` on a table: rows whose every ``column`` is below its µs are dropped."""
    if not below or table.num_rows == 0:
        return table
    dead = None
    for column, us in below:
        values = table.column(column)
        micros = pc.cast(pc.cast(values, pa.timestamp("us", tz=values.type.tz)), pa.int64())
        term = pc.fill_null(pc.less(micros, int(us)), False)
        dead = term if dead is None else pc.and_(dead, term)
    return table.filter(pc.invert(dead))


class WeightOverflow(DbspError, ValueError):
    """A trace's weights of one tuple add up beyond a bigint (Arrow's sum would wrap around)."""
    exit_code = EXIT_REFUSED
    retryable = False


def _check_weight_sums(table: pa.Table, group: list[str]) -> None:
    """Refuse a consolidation whose weight sums leave -(2^63-1)..2^63-1 (``executor/weights.py``
    checks every step's own arithmetic; this is the same range for the trace's compaction)."""
    bounds = pc.min_max(table.column(WEIGHT)).as_py()
    biggest = max(abs(bounds["min"] or 0), abs(bounds["max"] or 0))
    if biggest * table.num_rows <= 2**63 - 1:
        return
    exact = table.select(group).append_column(WEIGHT, table.column(WEIGHT).cast(pa.decimal128(38, 0)))
    sums = exact.group_by(group, use_threads=False).aggregate([(WEIGHT, "sum")])
    total = sums.column(f"{WEIGHT}_sum")
    bad = pc.or_(pc.greater(total, 2**63 - 1), pc.less(total, -(2**63 - 1)))
    if pc.any(bad).as_py():
        at = pc.index(bad, True).as_py()
        row = {c: sums.column(c)[at].as_py() for c in group}
        raise WeightOverflow(f"the weights of one row add up to {total[at].as_py()}, outside the weight range "
                             f"-{2**63 - 1}..{2**63 - 1}: {row!r:.300}")


def consolidate(table: pa.Table, kind: str, keys: Sequence[str] = ()) -> pa.Table:
    """The value a trace denotes, one row per tuple (zset) or per key (sum), zeros dropped; the
    counterpart of ``trace.consolidate`` (column types and order preserved)."""
    if kind not in KINDS:
        raise ValueError(f"trace kind {kind!r}: expected one of {', '.join(KINDS)}")
    group = [c for c in table.column_names if c != WEIGHT] if kind == "zset" else list(keys)
    values = [WEIGHT] if kind == "zset" else [c for c in table.column_names if c not in keys]
    if table.num_rows == 0:
        return table
    if not group:  # a global "sum" trace: one row of totals
        # each total in its column's type (a Python Decimal's inferred precision may not hold it)
        sums = pa.table({c: pa.array([pc.sum(table.column(c)).as_py()], table.schema.field(c).type) for c in values})
    else:
        if kind == "zset":
            _check_weight_sums(table, group)
        sums = table.group_by(group, use_threads=False).aggregate([(c, "sum") for c in values])
        sums = sums.rename_columns([c[:-4] if c.endswith("_sum") and c[:-4] in values else c
                                    for c in sums.column_names])
    out = sums.select(table.column_names)
    keep = None
    for c in values:
        dtype = out.schema.field(c).type  # a zero of the column's type (an int64 0 cast to a
        zero = pa.scalar(Decimal(0) if pa.types.is_decimal(dtype) else 0, dtype)  # decimal needs 19+s digits)
        nonzero = pc.not_equal(pc.fill_null(out.column(c), zero), zero)
        keep = nonzero if keep is None else pc.or_(keep, nonzero)
    if keep is not None:
        out = out.filter(keep)
    return out.cast(table.schema)


def _exact_first(dtype: pa.DataType) -> bool:
    """A column whose equal values hash and compare equal (no NaN, no -0.0 vs 0.0)."""
    return (pa.types.is_integer(dtype) or pa.types.is_date(dtype) or pa.types.is_timestamp(dtype)
            or pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_boolean(dtype))


def settle(table: pa.Table, kind: str, keys: Sequence[str] = ()) -> pa.Table:
    """A merge of a zset trace's deltas with every cancellation netted out, but only the rows
    that can cancel grouped: the rows sharing their first column with a row of negative weight
    (a tuple whose rows all weigh > 0 cannot cancel; it may stay as several rows, which every
    reader sums, as it sums a tuple's rows across a trace's files). Zero weights are dropped.

    Why: grouping every column of a merge was about half of it (7M line-item rows: 4.3 s of
    ~9 s, 2026-11-30), and a tier merge lands on one step: at W1 SF10 the 2M-row step that merged
    ~6.9M line-item rows took 1.3-2x its neighbours. A "sum" trace, a first column that is not
    exact (floats: NaN, -0.0) or a table without negative rows that are few go through
    ``consolidate`` as before."""
    if kind != "zset" or table.num_rows == 0 or not table.column_names or table.column_names[0] == WEIGHT \
            or not _exact_first(table.schema.field(0).type):
        return consolidate(table, kind, keys)
    weight = table.column(WEIGHT)
    negative = pc.less(weight, 0)
    first = table.column(0)
    touched = pc.fill_null(pc.is_in(first, value_set=pc.unique(first.filter(negative)), skip_nulls=False), False)
    rest = table.filter(pc.and_(pc.invert(touched), pc.not_equal(weight, 0)))
    if rest.num_rows == table.num_rows:
        return table
    return pa.concat_tables([rest, consolidate(table.filter(touched), kind, keys)])
