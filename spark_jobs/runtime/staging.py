"""Values handed from one task of a DAG run to the next, in the cheapest durable form.

A stage task's results (the deltas other stages read, its state updates, its view deltas) must
survive the task's process: the next task may run in another process, after a retry. When the
results of one stage are small (``execution.local_change_rows`` rows together), ONE Spark job brings them
all to this process as Arrow, and pyarrow writes each as a Parquet file: no write job, no count
job (rows and weights are summed by pyarrow), and the task that reads them back turns them into
a local relation, which costs no job either (on Spark Connect the rows travel in the plan).
Larger results are written by Spark, one job each, and read back by Spark.

Works on classic sessions and on Spark Connect: only the public DataFrame API is used.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_jobs.spec.model import WEIGHT
from spark_jobs.state.arrow_fs import locate
from spark_jobs.state.layout import safe_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.runtime.circuit import CircuitRuntime

ARROW, SPARK = "arrow", "spark"  # how a value was staged


@dataclass(frozen=True)
class Staged:
    """One staged value: where it is, how it was written, and what it holds."""

    path: str  # a Parquet file (arrow) or a Parquet directory (spark)
    form: str  # ARROW | SPARK
    schema: str  # the Spark schema as JSON: read back with exactly these types
    rows: int | None = None  # rows in the file (None: not counted, large)
    inserted: int | None = None  # sum of positive weights (Z-sets only)
    deleted: int | None = None  # sum of |negative weights|

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> "Staged":
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})  # type: ignore[arg-type]


# ---- one job for many frames ------------------------------------------------------------------
def collect_tables(spark: "SparkSession", frames: Mapping[str, "DataFrame"], max_rows: int,
                   counts: Mapping[str, "DataFrame"] | None = None, max_extra_rows: int = 1_000
                   ) -> tuple[dict[str, pa.Table] | None, dict[str, int]]:
    """``frames`` as Arrow tables, and the row count of each of ``counts``, in ONE Spark job
    (``executor.spark.local_relations.collect_arrow``); ``(None, counts)`` when the frames hold more than
    ``max_rows`` rows together (the caller then writes them with Spark). ``max_extra_rows``:
    ``execution.collect_extra_rows``, one row per count."""
    from spark_jobs.executor.spark.local_relations import collect_arrow

    extras = {n: df.groupBy().count() for n, df in (counts or {}).items()}
    tables, small = collect_arrow(spark, frames, max_rows, extras, max_extra_rows)
    found = {n: int(t.column(0)[0].as_py()) if t.num_rows else 0 for n, t in small.items()}
    return tables, found


# ---- writing and reading -----------------------------------------------------------------------
def weight_totals(table: pa.Table) -> tuple[int | None, int | None]:
    """(inserted, deleted) of a Z-set table; (None, None) when it has no weight column."""
    if WEIGHT not in table.column_names:
        return None, None
    w = table.column(WEIGHT)
    ins = pc.sum(pc.if_else(pc.greater(w, 0), w, 0)).as_py() or 0
    dels = pc.sum(pc.if_else(pc.less(w, 0), pc.negate(w), 0)).as_py() or 0
    return int(ins), int(dels)


def write_table(table: pa.Table, path: str, schema_json: str) -> Staged:
    """Write an Arrow table as one Parquet file (pyarrow; no Spark job)."""
    loc = locate(path)
    parent = loc.inner.rsplit("/", 1)[0]
    loc.fs.create_dir(parent, recursive=True)
    with loc.fs.open_output_stream(loc.inner) as out:
        pq.write_table(table, out)
    ins, dels = weight_totals(table)
    return Staged(path, ARROW, schema_json, table.num_rows, ins, dels)


def write_frame(df: "DataFrame", path: str, uri: str) -> Staged:
    """Write a large DataFrame with Spark (one job); not counted."""
    df.write.mode("overwrite").parquet(uri)
    return Staged(path, SPARK, df.schema.json())


def read_table(path: str) -> pa.Table:
    loc = locate(path)
    with loc.fs.open_input_file(loc.inner) as fh:
        return pq.read_table(fh)


def read_value_table(staged: Staged) -> pa.Table:
    """A staged value as a pyarrow table with the Arrow types of its staged Spark schema (what
    the in-process engine and the store's pyarrow writes expect), however it was staged: one
    Parquet file (arrow) or a directory Spark wrote."""
    from spark_jobs.state.arrow_trace import arrow_schema

    schema = arrow_schema(staged.schema)
    if staged.form == ARROW:
        table = read_table(staged.path)
    else:
        loc = locate(staged.path)
        table = pq.read_table(loc.inner, filesystem=loc.fs) if loc.fs.get_file_info(loc.inner).type.name != "NotFound" \
            else schema.empty_table()
    return table.select(schema.names).cast(schema) if table.schema != schema else table


def spark_schema(schema_json: str):
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(schema_json))


def to_frame(spark: "SparkSession", table: pa.Table, schema_json: str) -> "DataFrame":
    """A local relation of an Arrow table, with the Spark types it was staged with."""
    from spark_jobs.executor.spark.local_relations import from_arrow

    return from_arrow(spark, table, spark_schema(schema_json))


def read_staged(spark: "SparkSession", staged: Staged, uri: str) -> "DataFrame":
    """A staged value as a DataFrame: a local relation (arrow) or a Parquet scan (spark)."""
    if staged.form == ARROW:
        return to_frame(spark, read_table(staged.path), staged.schema)
    return spark.read.schema(spark_schema(staged.schema)).parquet(uri)


# ---- where a run's staged values live ---------------------------------------------------------------
# Under the state root, on the store's file system (local, hdfs://, s3a://, ...); files first, the
# JSON that lists them (plan, journals) last and atomically.
def staging_root(rt: "CircuitRuntime") -> str:
    return rt.committed.fs.join(rt.committed.root, "staging")


def run_dir(rt: "CircuitRuntime", run_id: str) -> str:
    return rt.committed.fs.join(staging_root(rt), safe_name(run_id))


def journal_path(rt: "CircuitRuntime", run_id: str, stage: str) -> str:
    return rt.committed.fs.join(run_dir(rt, run_id), "journal", f"{stage}.json")


def write_json(rt: "CircuitRuntime", path: str, data: dict) -> None:
    """Write JSON atomically: a reader sees the old file or the whole new one."""
    rt.committed.fs.publish_text(path, json.dumps(data, indent=1, default=str), tmp_prefix=".tmp-")


def read_json(rt: "CircuitRuntime", path: str) -> dict | None:
    fs = rt.committed.fs
    return json.loads(fs.read_text(path)) if fs.exists(path) else None
