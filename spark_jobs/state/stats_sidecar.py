"""A statistics sidecar per trace file: what a new process needs to admit row groups, without the footer.

Why: a lookup admits row groups by the min/max statistics of the probed column
(``rowgroups.ColumnStats``). A process starting a step (``dbsp step``, an Airflow task) had to
parse the footer of every file of every trace it looks up and walk each row group's statistics in
Python before its first lookup, whatever the change: on a while loop's state of 1M edges that was
most of a small step's fixed cost. So the in-process writer gives each key-sorted data file of
``MIN_GROUPS`` row groups or more (a trace's base, a compaction, a load) a sidecar
``_stats-<file>.arrow`` in the same directory: one row per row group (its rows and
compressed bytes) and, for each column whose statistics are integers, dates or strings, the
group's min, max, whether they are recorded and whether it may hold a NULL, as the footer says
(copied from it right after the write). Reading it is one small Arrow IPC file and a few array
conversions; the footer is then parsed only for a file whose row groups a lookup decodes.

Trust. A sidecar is derived from an immutable data file, written whole under a temporary name and
renamed into place before the commit fsyncs the directory (``sync_trees``) and publishes the
manifest, so a crash leaves it whole or absent. It is used only if its version, the data file's
name and size, the row-group count and the rows add up (``read``); anything else (absent, torn,
another file's, an older format, a column it does not hold, a file Spark wrote, a remote store)
falls back to the footer, as before. Spark ignores ``_``-prefixed files, and garbage collection
removes a sidecar with its directory.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.state.rowgroups import ColumnStats, column_stats

PREFIX = "_stats-"
VERSION = "1"
# a sorted file of fewer row groups gets no sidecar: its footer costs about as little to read
# (326 files of a 1M-edge loop's state, 21.5k groups: footers and one column's statistics
# 0.21-0.29 s, sidecars 0.09 s; a one-group delta's footer ~0.3 ms, as its sidecar) and writing
# one per delta cost a step of that loop 60-77 writes, 0.09-0.25 s (load 9-10)
MIN_GROUPS = 8
_EPOCH_ORDINAL = 719_163  # datetime.date(1970, 1, 1).toordinal(): date32 days -> ordinals


class Summary:
    """A file's row groups and the statistics of its integer, date and string columns (each
    column's arrays made when a lookup first asks for it: a step probes one or two of them)."""

    def __init__(self, table: pa.Table, kinds: dict[str, str], num_rows: int, footer_bytes: int) -> None:
        self.num_rows = num_rows
        self.rows = table.column("rows").to_numpy().astype(np.int64)  # rows per group
        self.bytes = table.column("bytes").to_numpy().astype(np.int64)  # compressed bytes per group
        self.footer_bytes = footer_bytes  # the footer's serialized size (what reading it would hold)
        self.nbytes = table.nbytes
        self._table, self._kinds = table, kinds

    def column(self, name: str) -> ColumnStats | None:
        """``name``'s statistics as ``rowgroups.column_stats`` gives them from the footer; None if
        the sidecar does not hold them (another type: the caller reads the footer)."""
        kind = self._kinds.get(name)
        return None if kind is None else _column(self._table, name, kind, self.rows)


def sidecar_path(data_path: str) -> str:
    folder, name = os.path.split(data_path)
    return os.path.join(folder, f"{PREFIX}{name}.arrow")


def _arrow_type(kind: str) -> pa.DataType:
    return {"int": pa.int64(), "date": pa.date32(), "str": pa.string()}[kind]


def large_enough(groups: int) -> bool:
    """Is a file of ``groups`` full row groups worth a sidecar? One of a few groups (a step's
    delta, an unsorted file) is as cheap to admit from its footer, and a sidecar would only add
    a write to every step. The one size rule of both writers (pyarrow's, Spark's)."""
    return groups >= MIN_GROUPS


def write_if_large(data_path: str) -> bool:
    """``write`` for a local file that is ``large_enough`` (one Spark wrote: its group count is
    known only from its footer); False otherwise."""
    meta = pq.read_metadata(data_path)
    return large_enough(meta.num_row_groups) and write(data_path, meta)


def write(data_path: str, meta: pq.FileMetaData | None = None) -> bool:
    """Write ``data_path``'s sidecar from its footer (a local file just written; ``meta``: that
    footer, if already read); False when it has no row group (nothing to admit)."""
    meta = pq.read_metadata(data_path) if meta is None else meta
    n = meta.num_row_groups
    if n == 0:
        return False
    first = meta.row_group(0)
    paths = [first.column(c).path_in_schema for c in range(first.num_columns)]
    data: dict[str, pa.Array] = {
        "rows": pa.array([meta.row_group(g).num_rows for g in range(n)], pa.int64()),
        "bytes": pa.array([sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
                           for rg in (meta.row_group(g) for g in range(n))], pa.int64()),
    }
    kinds: dict[str, str] = {}
    for path in paths:
        stats = column_stats(meta, path)
        if stats.kind not in ("int", "date", "str"):
            continue  # another type: a lookup by it reads the footer
        kinds[path] = stats.kind
        data[f"lo:{path}"] = pa.array([v[0] for v in stats.values], _arrow_type(stats.kind))
        data[f"hi:{path}"] = pa.array([v[1] for v in stats.values], _arrow_type(stats.kind))
        data[f"known:{path}"] = pa.array(stats.known, pa.bool_())
        data[f"nulls:{path}"] = pa.array(stats.nulls, pa.bool_())
    info = {"version": VERSION, "file": os.path.basename(data_path), "size": str(os.path.getsize(data_path)),
            "rows": str(meta.num_rows), "footer": str(meta.serialized_size), "kinds": json.dumps(kinds)}
    table = pa.table(data).replace_schema_metadata({f"dbsp.{k}": v for k, v in info.items()})
    final = sidecar_path(data_path)
    tmp = os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.tmp")
    with pa.OSFile(tmp, "wb") as sink:
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=max(1, n))
    os.replace(tmp, final)  # whole or absent; the commit fsyncs it with the data files
    return True


def read(data_path: str, size: int) -> Summary | None:
    """``data_path``'s summary from its sidecar, or None (no sidecar, or one that does not hold
    for this file of ``size`` bytes: the caller then reads the footer)."""
    try:  # Python's open: most files have no sidecar, and a missing one costs a few microseconds
        with open(sidecar_path(data_path), "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    try:
        return _summary(pa.ipc.open_file(pa.py_buffer(data)).read_all(), os.path.basename(data_path), size)
    except (pa.ArrowException, ValueError, KeyError, TypeError):
        return None


def _summary(table: pa.Table, name: str, size: int) -> Summary | None:
    info = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    if (info.get("dbsp.version") != VERSION or info.get("dbsp.file") != name
            or int(info.get("dbsp.size", -1)) != size):
        return None
    kinds = json.loads(info["dbsp.kinds"])
    if not isinstance(kinds, dict) or not all(k in ("int", "date", "str") for k in kinds.values()):
        return None
    summary = Summary(table, kinds, int(info["dbsp.rows"]), int(info["dbsp.footer"]))
    if len(summary.rows) == 0 or len(summary.bytes) != len(summary.rows) or int(summary.rows.sum()) != summary.num_rows:
        return None
    return summary


def _column(table: pa.Table, column: str, kind: str, rows: np.ndarray) -> ColumnStats:
    """One column's ``ColumnStats``, as ``rowgroups.column_stats`` makes it from the footer."""
    lo, hi = table.column(f"lo:{column}"), table.column(f"hi:{column}")
    if lo.type != _arrow_type(kind) or hi.type != _arrow_type(kind):
        raise TypeError(f"sidecar column {column!r}: {lo.type}, expected {kind}")
    known = table.column(f"known:{column}").to_numpy(zero_copy_only=False).astype(bool)
    nulls = table.column(f"nulls:{column}").to_numpy(zero_copy_only=False).astype(bool)
    if not (len(known) == len(nulls) == len(rows)):
        raise ValueError(f"sidecar column {column!r}: {len(known)} groups, expected {len(rows)}")
    at = np.flatnonzero(known)
    if lo.null_count or hi.null_count:
        if (lo.is_null().to_numpy(zero_copy_only=False)[at].any()
                or hi.is_null().to_numpy(zero_copy_only=False)[at].any()):
            raise ValueError(f"sidecar column {column!r}: a recorded group without min/max")
    values = _Pairs(lo, hi, known)
    if kind == "str":
        los, his = lo.to_pylist(), hi.to_pylist()
        low = np.array([los[g] for g in at], dtype=object)
        high = np.array([his[g] for g in at], dtype=object)
    else:
        if kind == "date":
            lo, hi = lo.cast(pa.int32()), hi.cast(pa.int32())
        low = lo.fill_null(0).to_numpy()[at].astype(np.int64)  # no NaN detour: exact int64
        high = hi.fill_null(0).to_numpy()[at].astype(np.int64)
        if kind == "date":
            low, high = low + _EPOCH_ORDINAL, high + _EPOCH_ORDINAL
    return ColumnStats(rows, known, nulls, kind, low, high, values)  # type: ignore[arg-type]


class _Pairs(Sequence):
    """``ColumnStats.values`` (min, max per group as Python values; (None, None) where not
    recorded), made only if something asks (a probe of another type, ``max_of``): the arrays
    serve every other admission."""

    def __init__(self, lo: pa.ChunkedArray, hi: pa.ChunkedArray, known: np.ndarray) -> None:
        self._args: tuple | None = (lo, hi, known)
        self._list: list[tuple[object, object]] = []

    def _made(self) -> list[tuple[object, object]]:
        if self._args is not None:
            lo, hi, known = self._args
            self._list = [(a, b) if k else (None, None) for a, b, k in zip(lo.to_pylist(), hi.to_pylist(), known)]
            self._args = None
        return self._list

    def __getitem__(self, i):  # noqa: ANN001, ANN204
        return self._made()[i]

    def __len__(self) -> int:
        return len(self._made())

    def __eq__(self, other: object) -> bool:
        return self._made() == (list(other) if isinstance(other, (list, tuple, Sequence)) else other)
