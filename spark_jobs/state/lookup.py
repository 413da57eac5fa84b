"""Key lookups in a trace's Parquet files without Spark: only the row groups a probe touches.

Why: a small change looks up a few keys of a large trace, many times in one timestep (every
iteration of a recursive scope). A Spark job per lookup costs a fixed ~0.2-0.5 s whatever it
reads; reading the footers once and then only the row groups whose min/max statistics of the
lookup column can hold a probed value costs milliseconds. A trace compacted with ``sort_by`` on
its key (small row groups, see ``StatePolicy.sorted_row_group_bytes``) has narrow row groups, so a probe
reads few of them; an unsorted file still works, it is just read whole (once: decoded row groups
are kept for the lifetime of the ``TraceFiles``, one timestep).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_jobs.state.fs import FileSystem


@dataclass(frozen=True)
class _Group:
    """One row group of one file and the statistics that decide whether a probe reads it."""

    file: int
    index: int
    low: object  # min of the lookup column (None: unknown, always read)
    high: object
    nulls: bool  # may hold a NULL in the lookup column
    iter_low: int | None  # min/max of the iteration column (None: unknown)
    iter_high: int | None


class TraceFiles:
    """The data files of one trace as of one committed timestep, read with pyarrow."""

    def __init__(self, fs: FileSystem, paths: Sequence[str], schema: pa.Schema) -> None:
        self.fs, self.paths, self.schema = fs, list(paths), schema
        self._meta = [self._footer(p) for p in self.paths]
        self._groups: dict[tuple[str, str | None], list[_Group]] = {}
        self._decoded: dict[tuple[int, int], pa.Table] = {}
        self.bytes_read = 0  # compressed bytes of the row groups decoded so far

    def _footer(self, path: str) -> pq.FileMetaData:
        with self.fs.open_read(path) as fh:
            return pq.ParquetFile(fh).metadata

    def decoded_rows(self) -> int:
        """Rows decoded so far (kept for later lookups): what the lookups have cost in memory."""
        return sum(t.num_rows for t in self._decoded.values())

    def rows(self) -> int:
        """Rows in all files (from the footers)."""
        return sum(m.num_rows for m in self._meta)

    def max_of(self, column: str) -> int | None:
        """The largest value of an integer column, from statistics (read where they are missing)."""
        best: int | None = None
        for f, meta in enumerate(self._meta):
            for g in range(meta.num_row_groups):
                stats = _stats(meta, g, column)
                if stats is None:
                    values = self._read(f, g).column(column)
                    top = pc.max(values).as_py() if len(values) else None
                else:
                    top = stats[1]
                if top is not None and (best is None or top > best):
                    best = int(top)
        return best

    def _admitted(self, column: str, present: list, want_null: bool, iters: tuple[int | None, int | None],
                  iter_column: str | None) -> list[_Group]:
        """The row groups whose statistics admit a value of ``present`` (or a NULL) and the
        iteration range: the only ones a lookup reads."""
        lo, hi = iters
        out = []
        for g in self._groups_of(column, iter_column):
            if iter_column is not None and g.iter_low is not None:
                if (lo is not None and g.iter_high < lo) or (hi is not None and g.iter_low > hi):
                    continue
            if not (want_null and g.nulls) and not _admits(present, g.low, g.high):
                continue
            out.append(g)
        return out

    def admitted_rows(self, column: str, values: Sequence[object]) -> int:
        """Rows a ``lookup`` of ``values`` would decode (from the footers; nothing is read)."""
        present, want_null = _probe(values)
        return sum(self._meta[g.file].row_group(g.index).num_rows
                   for g in self._admitted(column, present, want_null, (None, None), None)
                   if (g.file, g.index) not in self._decoded)

    def scan(self, iters: tuple[int | None, int | None], iter_column: str) -> pa.Table:
        """Every row whose iteration lies in ``iters`` (a lookup without a key: a product's)."""
        lo, hi = iters
        parts = [self._read(g.file, g.index) for g in self._groups_of(iter_column, iter_column)
                 if g.iter_low is None or not ((lo is not None and g.iter_high < lo) or (hi is not None and g.iter_low > hi))]
        if not parts:
            return self.schema.empty_table()
        table = pa.concat_tables(parts)
        it, keep = table.column(iter_column), None
        for cond in ([pc.greater_equal(it, lo)] if lo is not None else []) + ([pc.less_equal(it, hi)] if hi is not None else []):
            keep = cond if keep is None else pc.and_(keep, cond)
        return table if keep is None else table.filter(keep)

    def read_all(self) -> pa.Table:
        """Every row of every file (decoded row groups are kept, as for lookups)."""
        parts = [self._read(f, g) for f, meta in enumerate(self._meta) for g in range(meta.num_row_groups)]
        return pa.concat_tables(parts) if parts else self.schema.empty_table()

    def lookup(self, column: str, values: Sequence[object], iters: tuple[int | None, int | None] = (None, None),
               iter_column: str | None = None) -> pa.Table:
        """Rows whose ``column`` is one of ``values`` (NULL matches NULL) and, with ``iter_column``,
        whose iteration lies in ``iters`` (inclusive; None = unbounded). Reads only the row groups
        whose statistics admit a probed value and the iteration range."""
        present, want_null = _probe(values)
        lo, hi = iters
        parts = [self._read(g.file, g.index) for g in self._admitted(column, present, want_null, iters, iter_column)]
        if not parts:
            return self.schema.empty_table()
        table = pa.concat_tables(parts)
        keep = pc.is_in(table.column(column), value_set=pa.array(present + ([None] if want_null else []),
                                                                   table.schema.field(column).type),
                        skip_nulls=not want_null)
        if iter_column is not None:
            it = table.column(iter_column)
            if lo is not None:
                keep = pc.and_(keep, pc.greater_equal(it, lo))
            if hi is not None:
                keep = pc.and_(keep, pc.less_equal(it, hi))
        return table.filter(keep)

    def _groups_of(self, column: str, iter_column: str | None) -> list[_Group]:
        key = (column, iter_column)
        if key not in self._groups:
            out = []
            for f, meta in enumerate(self._meta):
                for g in range(meta.num_row_groups):
                    stats = _stats(meta, g, column)
                    its = _stats(meta, g, iter_column) if iter_column else None
                    low, high, nulls = stats if stats is not None else (None, None, True)
                    out.append(_Group(f, g, low, high, nulls, *(its[:2] if its else (None, None))))
            self._groups[key] = out
        return self._groups[key]

    def _read(self, f: int, g: int) -> pa.Table:
        if (f, g) not in self._decoded:
            with self.fs.open_read(self.paths[f]) as fh:
                table = pq.ParquetFile(fh, metadata=self._meta[f]).read_row_group(g, columns=self.schema.names)
            self._decoded[(f, g)] = table.cast(self.schema)
            rg = self._meta[f].row_group(g)
            self.bytes_read += sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
        return self._decoded[(f, g)]


def _probe(values: Sequence[object]) -> tuple[list, bool]:
    """The probed values sorted without NULL, and whether NULL was probed."""
    present = sorted({v for v in values if v is not None})
    return present, len(present) < len(set(values))


def _stats(meta: pq.FileMetaData, g: int, column: str) -> tuple[object, object, bool] | None:
    """(min, max, may hold NULL) of a column in a row group; None when not recorded."""
    rg = meta.row_group(g)
    for c in range(rg.num_columns):
        chunk = rg.column(c)
        if chunk.path_in_schema != column:
            continue
        s = chunk.statistics
        if s is None or not s.has_min_max:
            return None
        return s.min, s.max, (s.null_count is None or s.null_count > 0)
    return None


def _admits(present: list, low: object, high: object) -> bool:
    """Does the closed range [low, high] hold one of the sorted ``present`` values?"""
    if low is None or high is None:
        return True
    try:
        k = bisect.bisect_left(present, low)
    except TypeError:  # statistics of another type than the values (e.g. bytes): read it
        return True
    return k < len(present) and present[k] <= high
