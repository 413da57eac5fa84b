"""Committed views and view deltas read with pyarrow: no Spark, no JVM.

Why: reading a committed view (``dbsp show``, ``status``, publishing the views after a commit)
needs only the manifests and a few Parquet files. Starting Spark for that cost 5-9 s; pyarrow
reads a small view in milliseconds. The store's own ``FileSystem`` opens the files, so this
works on every root the store works on (local paths, and HDFS/S3/... through ``arrow_fs``).
Which directories make a view is the store's decision (``StateStore.view_dirs``/``delta_dirs``);
this module only reads and consolidates them.
"""
from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_jobs.state.trace import WEIGHT

if TYPE_CHECKING:
    from spark_jobs.state.store import StateStore

_SIMPLE: dict[str, pa.DataType] = {
    "boolean": pa.bool_(), "byte": pa.int8(), "short": pa.int16(), "integer": pa.int32(),
    "long": pa.int64(), "float": pa.float32(), "double": pa.float64(), "string": pa.string(),
    "binary": pa.binary(), "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")


def arrow_type(spark_type: Any) -> pa.DataType | None:
    """The Arrow type of a Spark type in its JSON form (None: not one a view column uses here)."""
    if isinstance(spark_type, str):
        if spark_type in _SIMPLE:
            return _SIMPLE[spark_type]
        m = _DECIMAL.match(spark_type)
        return pa.decimal128(int(m.group(1)), int(m.group(2))) if m else None
    return None


def arrow_schema(schema_json: str | None) -> pa.Schema | None:
    """The Arrow schema of a Spark schema JSON (a manifest's trace schema); None if unknown."""
    if not schema_json:
        return None
    fields = []
    for f in json.loads(schema_json).get("fields", []):
        t = arrow_type(f.get("type"))
        if t is None:
            return None
        fields.append(pa.field(f["name"], t, nullable=bool(f.get("nullable", True))))
    return pa.schema(fields)


def read_rels(store: "StateStore", rels: list[str], schema: pa.Schema | None) -> pa.Table | None:
    """The union of the Parquet files of some root-relative directories (None: no directory)."""
    if not rels:
        return None
    parts = []
    for rel in rels:
        for path, _size in store.fs.data_files(store.layout.abs(rel)):
            # ParquetFile, not read_table (that imports pandas); no threads: a CLI command ends
            # right after this, and Arrow's reader threads alive at exit can abort the process
            # ("terminate called without an active exception", apache/arrow#34314; seen once here)
            with store.fs.open_read(path) as fh:
                table = pq.ParquetFile(fh, pre_buffer=False).read(
                    columns=schema.names if schema is not None else None, use_threads=False)
            parts.append(table.cast(schema) if schema is not None else table)
    if not parts:
        return schema.empty_table() if schema is not None else None
    return pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]


def consolidate(table: pa.Table) -> pa.Table:
    """One row per distinct tuple with its summed weight, zero weights dropped (columns in order).

    Sorted, then runs of equal tuples (NULLs equal, as in a GROUP BY) summed with a cumulative
    sum. Only Arrow compute kernels on arrays: pyarrow imports pandas (1-2 s here) for its query
    engine (``group_by``), for Python scalars and lists (``pa.scalar``, ``pa.array``) and for
    ``to_numpy``, and a CLI command that reads a view must stay well under a second."""
    data = [c for c in table.column_names if c != WEIGHT]
    if table.num_rows == 0:
        return table.select(data + [WEIGHT])
    ordered = table.take(pc.sort_indices(table, sort_keys=[(c, "ascending") for c in data]))
    weight = ordered.column(WEIGHT).combine_chunks().cast(pa.int64())
    true = pc.is_valid(weight.slice(0, 1))  # [True], made without a Python scalar
    differs = None
    for c in data:
        col = ordered.column(c).combine_chunks()
        d = _differs(col.slice(1), col.slice(0, len(col) - 1))
        differs = d if differs is None else pc.or_(differs, d)
    if differs is None:  # no data column: one tuple
        differs = pc.is_null(weight.slice(1))
    ends = pc.indices_nonzero(pa.concat_arrays([differs, true]))  # last row of each run
    running = pc.take(pc.cumulative_sum(weight), ends)
    zero = pc.subtract(running.slice(0, 1), running.slice(0, 1))
    sums = pc.subtract(running, pa.concat_arrays([zero, running.slice(0, len(running) - 1)]))
    out = ordered.take(ends).select(data).append_column(pa.field(WEIGHT, pa.int64()), sums)
    return out.filter(pc.not_equal(sums, pc.subtract(sums, sums)))


def _differs(a: pa.Array, b: pa.Array) -> pa.Array:
    """Element-wise: a[i] is not b[i], where two NULLs are the same (never NULL itself)."""
    both = pc.and_(pc.is_valid(a), pc.is_valid(b))
    return pc.or_(pc.and_kleene(pc.not_equal(a, b), both), pc.xor(pc.is_null(a), pc.is_null(b)))


def read_view(store: "StateStore", view: str, t: int | None = None) -> pa.Table | None:
    """The view at committed timestep t (latest if None), consolidated; None if never written."""
    table = read_rels(store, store.view_dirs(view, t), arrow_schema(store.view_schema(view)))
    return None if table is None else consolidate(table)


def read_delta(store: "StateStore", view: str, t: int) -> pa.Table | None:
    """The view's change committed at timestep t, consolidated; None when it was empty."""
    table = read_rels(store, store.delta_dirs(view, t), arrow_schema(store.view_schema(view)))
    return None if table is None else consolidate(table)
