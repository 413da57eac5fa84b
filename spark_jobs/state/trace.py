"""Spark-side mechanics of a trace: write one immutable directory, size it, read, consolidate.

No bookkeeping here (that is the manifest's job); these functions only move rows between
DataFrames and Parquet directories, and measure what was written without a Spark action
(Parquet footers via pyarrow) so a commit costs as few jobs as possible.
"""
from __future__ import annotations

import json
import math
from functools import reduce
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from spark_jobs.policy import StatePolicy
from spark_jobs.state.fs import FileSystem
from spark_jobs.state.manifest import KINDS, FileStat, TraceEntry

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

WEIGHT = "_weight"  # the Z-set multiplicity column (same name as spark_jobs.spec.model.WEIGHT)
# what a "sum" trace may total: exact types only. Float sums depend on the order of addition, so
# a compaction or a merge would change a total's last bits and a retraction rebuilt from it would
# no longer cancel the row it retracts (aggregates keep float sums as integer limbs: exact_sum).
_EXACT_NUMERIC = ("tinyint", "smallint", "int", "bigint", "decimal")  # dtypes names


def _col(name: str):
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def validate_columns(dtypes: Sequence[tuple[str, str]], kind: str, keys: Sequence[str]) -> None:
    """Reject a DataFrame (given as ``df.dtypes``) that cannot be this kind of trace, before
    anything is written."""
    columns = [c for c, _ in dtypes]
    schema_types = dict(dtypes)
    if kind not in KINDS:
        raise ValueError(f"trace kind {kind!r}: expected one of {', '.join(KINDS)}")
    missing = [k for k in keys if k not in columns]
    if missing:
        raise ValueError(f"trace keys {missing} are not columns of the DataFrame {list(columns)}")
    if kind == "zset" and WEIGHT not in columns:
        raise ValueError(f"a zset trace needs a {WEIGHT!r} column; got {list(columns)}")
    if kind == "sum":
        bad = [c for c in columns if c not in keys and schema_types[c].split("(")[0] not in _EXACT_NUMERIC]
        if bad:
            raise ValueError(f"a sum trace sums every non-key column exactly; {bad} are not integers or "
                             f"decimals (keys={list(keys)}; float totals would drift with the order of addition)")


def write_dir(df: "DataFrame", uri: str, policy: StatePolicy, *, sort_by: Sequence[str] = (),
              keys: Sequence[str] = (), rows: int | None = None) -> None:
    """Write ``df`` as a new Parquet directory (never overwriting).

    Small writes become one file. Large ones (``rows`` estimate above ``policy.rows_per_file``)
    are split by range of ``sort_by`` (files then cover disjoint key ranges) or by hash of
    ``keys``. Sorted files get small row groups (``policy.sorted_row_group_bytes``), compressed with
    ``policy.sorted_compression``: a key lookup (Spark's Parquet filter or ``state.lookup``) then
    reads and decodes a few narrow groups.
    """
    if rows is not None and rows > policy.rows_per_file:
        n = math.ceil(rows / policy.rows_per_file)
        if sort_by:
            df = df.repartitionByRange(n, *[_col(c) for c in sort_by])
        elif keys:
            df = df.repartition(n, *[_col(c) for c in keys])
        else:
            df = df.repartition(n)
    else:
        df = df.coalesce(1)
    writer_df = df.sortWithinPartitions(*[_col(c) for c in sort_by]) if sort_by else df
    writer = writer_df.write.mode("error")
    if sort_by:
        writer = (writer.option("parquet.block.size", policy.sorted_row_group_bytes)
                  .option("compression", policy.sorted_compression))
    writer.parquet(uri)


SLOT = "dbsp_slot"  # the partition column of a batch write (one value per trace)


def slot_dir(i: int) -> str:
    """The folder of slot ``i`` inside a batch folder (Spark's partition folder name)."""
    return f"{SLOT}={i}"


def slots_compatible(dfs: Sequence["DataFrame"]) -> bool:
    """Can these DataFrames share one batch write? (a column name means one type; no SLOT column)"""
    types: dict[str, str] = {}
    for df in dfs:
        for name, dtype in df.dtypes:
            if name == SLOT or types.setdefault(name, dtype) != dtype:
                return False
    return True


def write_slots(dfs: Sequence["DataFrame"], uri: str) -> None:
    """Write several DataFrames with ONE Spark job, ``dfs[i]`` to ``uri/dbsp_slot=i/``.

    They are unioned over the union of their columns (a column a DataFrame lacks is NULL in its
    rows) and written partitioned by slot, one file per slot. Reading a slot with its own schema
    (as traces are read) sees only its own columns. For delta-sized writes: one task writes all.
    """
    from pyspark.sql import functions as F

    fields: dict[str, object] = {}
    for df in dfs:
        for f in df.schema.fields:
            fields.setdefault(f.name, f.dataType)
    parts = []
    for i, df in enumerate(dfs):
        have = set(df.columns)
        parts.append(df.select(*[_col(c) if c in have else F.lit(None).cast(t).alias(c)  # type: ignore[arg-type]
                                 for c, t in fields.items()], F.lit(i).alias(SLOT)))
    union = reduce(lambda a, b: a.unionByName(b), parts)
    union.coalesce(1).write.mode("error").partitionBy(SLOT).parquet(uri)


def dir_stats(fs: FileSystem, path: str, spark: "SparkSession | Callable[[], SparkSession]", uri: str) -> FileStat:
    """Rows and bytes of a written directory, from Parquet footers (no Spark job; ``spark``, or a
    function giving it, serves only where pyarrow cannot read the store)."""
    files = fs.data_files(path)
    size = sum(s for _, s in files)
    try:
        import pyarrow.parquet as pq

        rows = 0
        for full, _ in files:
            with fs.open_read(full) as fh:
                rows += pq.ParquetFile(fh).metadata.num_rows
    except (ImportError, NotImplementedError):
        rows = _session(spark).read.parquet(uri).count() if files else 0
    return FileStat(rows=rows, bytes=size)


def _session(spark: "SparkSession | Callable[[], SparkSession]") -> "SparkSession":
    return spark() if callable(spark) else spark


def weight_totals(fs: FileSystem, path: str, spark: "SparkSession | Callable[[], SparkSession]",
                  uri: str) -> tuple[int, int]:
    """(sum of positive weights, sum of |negative weights|) of a Z-set directory."""
    files = fs.data_files(path)
    try:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        ins = dels = 0
        for full, _ in files:
            with fs.open_read(full) as fh:
                w = pq.ParquetFile(fh).read(columns=[WEIGHT]).column(WEIGHT)
            ins += pc.sum(pc.if_else(pc.greater(w, 0), w, 0)).as_py() or 0
            dels -= pc.sum(pc.if_else(pc.less(w, 0), w, 0)).as_py() or 0
        return int(ins), int(dels)
    except (ImportError, NotImplementedError):
        from pyspark.sql import functions as F

        w = _col(WEIGHT)
        row = _session(spark).read.parquet(uri).agg(
            F.sum(F.when(w > 0, w).otherwise(0)), F.sum(F.when(w < 0, -w).otherwise(0))).first()
        return int(row[0] or 0), int(row[1] or 0)


def read_dirs(spark: "SparkSession", uris: Iterable[str], schema_json: str | None) -> "DataFrame":
    """The union of several Parquet directories (their files are read as one relation).

    On a classic session the JVM gets the paths as one string it splits itself, and the schema
    as a JVM object kept per schema: 4 Py4J round trips whatever the number of directories
    (PySpark sends a list element by element: a trace of 30 directories cost ~40)."""
    uris = list(uris)
    connect = type(spark).__module__.startswith("pyspark.sql.connect")  # no JVM in this process
    jvm = None if connect else spark._jvm  # type: ignore[attr-defined]
    if jvm is None or not uris or any("\n" in u for u in uris):  # Spark Connect, or an odd path
        reader = spark.read
        if schema_json:
            from pyspark.sql.types import StructType

            reader = reader.schema(StructType.fromJson(json.loads(schema_json)))
        return reader.parquet(*uris)
    from pyspark.sql import DataFrame

    jsession = spark._jsparkSession  # type: ignore[attr-defined]
    jreader = jsession.read()
    if schema_json:
        jreader = jreader.schema(_jvm_kept(spark, ("schema", schema_json), lambda: jsession.parseDataType(schema_json)))
    split = _jvm_kept(spark, ("newline",), lambda: jvm.java.util.regex.Pattern.compile("\n"))
    return DataFrame(jreader.parquet(split.split("\n".join(uris))), spark)


_JVM_KEPT: dict[tuple, tuple] = {}


def _jvm_kept(spark: "SparkSession", key: tuple, build: Callable[[], object]) -> object:
    """A JVM object built once per session's JVM (a schema, a pattern): reused by every read."""
    owner = spark._jsparkSession  # type: ignore[attr-defined]
    found = _JVM_KEPT.get(key)
    if found is None or found[0] is not owner:
        if len(_JVM_KEPT) > 256:
            _JVM_KEPT.clear()
        found = _JVM_KEPT[key] = (owner, build())
    return found[1]


def consolidate(df: "DataFrame", kind: str, keys: Sequence[str] = ()) -> "DataFrame":
    """The value a trace denotes, one row per tuple (zset) or per key (sum), zeros dropped.

    A sum trace's columns are integers and decimals (``validate_columns``): their sums are exact,
    so the order in which Spark adds the parts up does not change a total.

    Column types and order are preserved (sums are cast back), so a compacted base has the
    schema of the deltas it replaces.
    """
    from pyspark.sql import functions as F

    types = {f.name: f.dataType for f in df.schema.fields}
    if kind == "zset":
        data = [c for c in df.columns if c != WEIGHT]
        out = (df.groupBy(*[_col(c) for c in data])
               .agg(F.sum(_col(WEIGHT)).cast(types[WEIGHT]).alias(WEIGHT))
               .where(_col(WEIGHT) != 0))
    elif kind == "sum":
        values = [c for c in df.columns if c not in keys]
        aggs = [F.sum(_col(c)).cast(types[c]).alias(c) for c in values]
        out = df.groupBy(*[_col(k) for k in keys]).agg(*aggs) if aggs else df.select(
            *[_col(k) for k in keys]).distinct()
        if values:
            nonzero = [F.coalesce(_col(c), F.lit(0)) != 0 for c in values]
            out = out.where(reduce(lambda a, b: a | b, nonzero))
    else:
        raise ValueError(f"trace kind {kind!r}: expected one of {', '.join(KINDS)}")
    return out.select(*[_col(c) for c in df.columns])


def drop_below(df: "DataFrame", below: Sequence[tuple[str, int]]) -> "DataFrame":
    """``df`` without the rows whose every ``column`` is below its ``us`` (µs since the epoch: a
    state bound, ``Transaction.bound``); a NULL time keeps its row."""
    if not below:
        return df
    from pyspark.sql import functions as F

    dead = reduce(lambda a, b: a & b, [F.unix_micros(_col(c).cast("timestamp")) < F.lit(int(us)) for c, us in below])
    return df.where(F.coalesce(~dead, F.lit(True)))


def delta_merge(entry: TraceEntry, fanout: int) -> list[str]:
    """The delta directories to merge into one (empty: none due): the smallest size tier that
    holds ``fanout`` deltas (``StatePolicy.delta_fanout``; tier = floor(log_fanout(rows))).

    A big base with tiny deltas takes thousands of steps to reach ``compact_fraction``; without
    merges every step added a directory to read (files, tasks, and past 32 paths a
    parallel-listing job per read). Each row is rewritten about log_fanout(total/first size) times, so
    the cost stays proportional to the changes, and a trace keeps at most ``fanout - 1`` timesteps'
    deltas per tier. A tier is full when ``fanout`` *timesteps* wrote into it: a step run in
    sub-steps (``runtime/chunks.py``) writes one delta per sub-step, and counting those apart
    filled the tiers n times as fast (W1 SF10, 4M rows in 2 sub-steps: a 7M-row merge the whole
    step would not have done); all of a full tier's deltas are merged."""
    tiers: dict[int, list[tuple[int, str]]] = {}
    for t, d in entry.deltas:
        rows = entry.files[d].rows if d in entry.files else 0
        tiers.setdefault(int(math.log(max(rows, 1), fanout)), []).append((t, d))
    return next(([d for _, d in deltas] for _, deltas in sorted(tiers.items())
                 if len({t for t, _ in deltas}) >= fanout), [])


def needs_compaction(entry: TraceEntry, fraction: float) -> bool:
    """Compact when the deltas outweigh ``fraction`` of the base (amortized O(delta) writes).

    With a base: at least 2 deltas and delta bytes > fraction * base bytes. Without one, the
    largest delta stands for the base: an initial load is one big delta, and compacting it at
    the next small steps would rewrite the whole state for a few changed rows. Except for a
    sorted trace: its deltas may be unsorted (a batch write), and the key lookups that made it
    sorted skip row groups only in a base written by compaction, so it gets one at 4 deltas.
    """
    n = len(entry.deltas)
    if entry.base:
        return n >= 2 and entry.delta_bytes > fraction * entry.base_bytes
    if entry.sort_by:
        return n >= 4
    sizes = [entry.files[d].bytes if d in entry.files else 0 for _, d in entry.deltas]
    return n >= 2 and sum(sizes) - max(sizes) > fraction * max(sizes)
