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

import os
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_jobs.errors import DbspError
from spark_jobs.state.float_keys import canonical, canonical_value
from spark_jobs.state.fs import FileSystem, LocalFileSystem
from spark_jobs.state import stats_sidecar
from spark_jobs.state.rowgroups import FOOTERS, FileIndex, chunk_index
from spark_jobs.state.trace import WEIGHT


# rows decoded at once by a streamed lookup (``matching``): memory stays bounded, and each read
# is large enough for pyarrow's multi-threaded decode
SCAN_BATCH_ROWS = 262_144
# from this many probed integer keys on, a streamed lookup tests membership by binary search in
# one sorted array (``KeySet``); below, pyarrow's hash-set ``is_in`` is cheaper (measured)
SORTED_PROBE_KEYS = 65_536
# a read of fewer rows than this decodes on the calling thread: handing one small row group to
# pyarrow's thread pool cost more than decoding it (W1 SF10, a probe touching one group in each of
# 60 files: 31 -> 15 ms wall, 24 -> 15 ms CPU, with pre-buffering off as well)
THREADED_READ_ROWS = 65_536
# a cached lookup in a trace of more columns than this reads the probed column of the groups the
# statistics admit first, and decodes whole only those holding a probed key (``_holding``)
KEY_PASS_MIN_COLUMNS = 2
# a file's decoded groups are merged into one table for repeated lookups (``_merged_lookup``)
# while they hold at most this many rows (the merge is a copy of them)
MERGED_MAX_ROWS = 4_000_000


class TraceFiles:
    """The data files of one trace as of one committed timestep, read with pyarrow."""

    def __init__(self, fs: FileSystem, paths: Sequence[str], schema: pa.Schema,
                 sizes: Sequence[int] | None = None) -> None:
        """``sizes``: the files' sizes when the caller listed them (a remote file is then known
        by path and size without another call; a local one is always checked with ``stat``)."""
        self.fs, self.paths, self.schema = fs, list(paths), schema
        self._index = [self._footer(p, sizes[i] if sizes is not None else None) for i, p in enumerate(self.paths)]
        self._meta = _Footers(self._index)
        self._decoded: dict[tuple[int, int], pa.Table] = {}
        self._keys: dict[tuple[str, int, int], pa.ChunkedArray] = {}  # (column, file, group) -> that column (``_holding``)
        self._looked: dict[tuple[str, int], int] = {}  # (column, file) -> lookups so far (``_merged_lookup``)
        self._merges: dict[tuple[str, int], tuple[int, tuple[pa.Table, np.ndarray] | None]] = {}  # ``_merged``
        self.bytes_read = 0  # compressed bytes of the row groups decoded so far

    def _open(self, path: str):  # noqa: ANN202 - a file pyarrow reads
        """A file on this machine is memory-mapped: pyarrow then reads it without going through
        Python (a quarter faster than a Python file object on a 60M-row integral); any other
        through the store's file system."""
        if isinstance(self.fs, LocalFileSystem):
            return pa.memory_map(path)
        return self.fs.open_read(path)

    def _reader(self, fh, f: int, dictionary: Sequence[str] = ()) -> pq.ParquetFile:  # noqa: ANN001
        """A reader of file ``f`` with its cached footer. A memory-mapped file is not pre-buffered
        (its bytes are already addressable; pre-buffering only adds I/O-pool round trips)."""
        return pq.ParquetFile(fh, metadata=self._meta[f], read_dictionary=list(dictionary) or None,
                              pre_buffer=not isinstance(self.fs, LocalFileSystem))

    def _threads(self, f: int, groups: Sequence[int]) -> bool:
        """Decode ``groups`` of file ``f`` on pyarrow's threads? Only a read large enough to pay
        for the hand-off (``THREADED_READ_ROWS``)."""
        meta = self._meta[f]
        return sum(meta.row_group(g).num_rows for g in groups) >= THREADED_READ_ROWS

    def _footer(self, path: str, size: int | None) -> FileIndex:
        """The file's footer and statistics, read once per process (``rowgroups.FOOTERS``): a
        trace file is never modified. A local file is known by its size, inode and mtime too."""
        def read() -> pq.FileMetaData:
            with self._open(path) as fh:
                return pq.ParquetFile(fh).metadata

        if isinstance(self.fs, LocalFileSystem):
            st = os.stat(path)
            return FOOTERS.get(f"{path}\0{st.st_ino}\0{st.st_mtime_ns}", st.st_size, read,
                               lambda: stats_sidecar.read(path, st.st_size))
        if size is None:
            return FileIndex(read())
        return FOOTERS.get(path, size, read)

    def decoded_rows(self) -> int:
        """Rows decoded so far (kept for later lookups): what the lookups have cost in memory."""
        return sum(t.num_rows for t in self._decoded.values())

    def rows(self) -> int:
        """Rows in all files (from the footers)."""
        return sum(ix.num_rows for ix in self._index)

    def file_rows(self) -> list[int]:
        """Rows of each file (from the footers), in ``paths`` order."""
        return [ix.num_rows for ix in self._index]

    def admitting(self, column: str, values: "Sequence[object] | Probe") -> list[int]:
        """The files (indices in ``paths``) with a row group whose statistics admit one of
        ``values``: the others hold none of them (from the footers; nothing is read)."""
        present, want_null = _probe(values)
        return [f for f, groups in self._admitted_by_file(column, self._prunable(column, present), want_null,
                                                          (None, None), None, _memo(values)) if len(groups)]

    def admitting_files(self, column: str, values: "Sequence[object] | Probe") -> list[int]:
        """The files whose whole range of ``column`` (from their statistics) holds one of
        ``values``: a superset of ``admitting``'s, found with one binary search per file instead
        of two per row group. For a caller that searches each file by its own index (the bag
        check's digest sidecars): with SF10's 61 line-item files, admitting row groups one file
        at a time was a fifth of a 1,000-row change's check. A file whose statistics are missing
        or not integers or dates is admitted by its groups (``admitting``)."""
        present, want_null = _probe(values)
        if want_null or not present or not all(type(v) is int for v in present):
            return self.admitting(column, values)
        try:
            probe = np.array(present, dtype=np.int64)
        except OverflowError:
            return self.admitting(column, values)
        by_groups: list[int] = []
        spans = np.zeros((len(self._index), 2), dtype=np.int64)
        known = np.zeros(len(self._index), dtype=bool)
        for f, ix in enumerate(self._index):
            if ix.num_row_groups == 0:
                continue
            stats = ix.stats(column)
            span = stats.span if stats.kind == "int" else None
            if span is None:
                by_groups.append(f)
            else:
                spans[f], known[f] = span, True
        held = np.searchsorted(probe, spans[:, 1], "right") > np.searchsorted(probe, spans[:, 0], "left")
        out = [int(f) for f in np.flatnonzero(known & held)]
        if by_groups:
            memo = _memo(values)
            for f, groups in self._admitted_by_file(column, self._prunable(column, present), want_null,
                                                    (None, None), None, memo):
                if f in by_groups and len(groups):
                    out.append(f)
        return sorted(out)

    def max_of(self, column: str) -> int | None:
        """The largest value of an integer column, from statistics (read where they are missing)."""
        best: int | None = None
        for f, ix in enumerate(self._index):
            stats = ix.stats(column)
            for g in range(ix.num_row_groups):
                if stats.known[g]:
                    top = stats.values[g][1]
                else:
                    values = self._read(f, g).column(column)
                    top = pc.max(values).as_py() if len(values) else None
                if top is not None and (best is None or top > best):
                    best = int(top)
        return best

    def _admitted_by_file(self, column: str, present: list | None, want_null: bool,
                          iters: tuple[int | None, int | None], iter_column: str | None,
                          memo: dict | None = None) -> list[tuple[int, np.ndarray]]:
        """Per file, the row groups whose statistics admit a value of ``present`` (or a NULL)
        and the iteration range: the only ones a lookup reads. ``present`` None: every group
        (a scan by iteration only). ``memo``: ``present`` converted once for all files
        (``ColumnStats.admitted``)."""
        lo, hi = iters
        memo = {} if memo is None else memo
        out = []
        for f, ix in enumerate(self._index):
            if ix.num_row_groups == 0:
                continue
            mask = (np.ones(ix.num_row_groups, dtype=bool) if present is None
                    else ix.stats(column).admitted(present, want_null, memo))
            if iter_column is not None and (lo is not None or hi is not None):
                its = ix.stats(iter_column)
                if its.kind == "int":
                    known = np.flatnonzero(its.known)
                    outside = np.zeros(len(known), dtype=bool)
                    if lo is not None:
                        outside |= its.high < lo
                    if hi is not None:
                        outside |= its.low > hi
                    mask[known[outside]] = False
            out.append((f, np.flatnonzero(mask)))
        return out

    def _admitted(self, column: str, present: list | None, want_null: bool,
                  iters: tuple[int | None, int | None], iter_column: str | None,
                  memo: dict | None = None) -> list[tuple[int, int]]:
        """``_admitted_by_file`` as ``(file, group)`` pairs."""
        return [(f, g) for f, groups in self._admitted_by_file(column, present, want_null, iters, iter_column, memo)
                for g in groups.tolist()]

    def _prunable(self, column: str, present: list) -> list | None:
        """The probed values to prune row groups by their statistics; None (no pruning) for a
        float column: its statistics know no NaN, and -0.0 and 0.0 are one key (``float_keys``)."""
        return None if pa.types.is_floating(self.schema.field(column).type) else present

    def admitted_rows(self, column: str, values: Sequence[object]) -> int:
        """Rows a ``lookup`` of ``values`` would decode (from the footers; nothing is read)."""
        present, want_null = _probe(values)
        total = 0
        for f, groups in self._admitted_by_file(column, self._prunable(column, present), want_null, (None, None), None,
                                                _memo(values)):
            rows = self._index[f].stats(column).rows
            total += int(rows[groups].sum())
            total -= sum(int(rows[g]) for g in groups if (f, int(g)) in self._decoded) if self._decoded else 0
        return total

    def scan(self, iters: tuple[int | None, int | None], iter_column: str) -> pa.Table:
        """Every row whose iteration lies in ``iters`` (a lookup without a key: a product's)."""
        lo, hi = iters
        parts = self._read_groups(self._admitted(iter_column, None, False, iters, iter_column))
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

    def batches(self, rows: int, columns: "set[str] | None" = None, threads: int = 1) -> Iterator[pa.Table]:
        """Every row of every file as tables of about ``rows`` rows (the columns of ``schema``
        a file holds, only ``columns`` and the weight if given; not cast, nothing kept): a whole
        trace read with a few batches decoded at a time. ``threads``: files decoded at once (a
        trace's row groups are small, ~1,000 rows for lookups, so one file's decoding barely
        uses a second core; two files at once do)."""
        if threads <= 1 or len(self.paths) < 2:
            for f in range(len(self.paths)):
                yield from self._file_batches(f, rows, columns)
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads) as pool:
            pending = [pool.submit(list, self._file_batches(f, rows, columns)) for f in range(min(threads, len(self.paths)))]
            for f in range(len(self.paths)):
                done = pending.pop(0).result()
                if f + threads < len(self.paths):
                    pending.append(pool.submit(list, self._file_batches(f + threads, rows, columns)))
                yield from done

    def _file_batches(self, f: int, rows: int, columns: "set[str] | None") -> Iterator[pa.Table]:
        with self._open(self.paths[f]) as fh:
            reader = self._reader(fh, f)
            names = [n for n in self.schema.names if n in reader.schema_arrow.names
                     and (columns is None or n in columns or n == WEIGHT)]
            held: list[pa.RecordBatch] = []
            count = 0
            for batch in reader.iter_batches(batch_size=min(rows, THREADED_READ_ROWS), columns=names,
                                             use_threads=True):
                held.append(batch)
                count += batch.num_rows
                if count >= rows:
                    yield pa.Table.from_batches(held).combine_chunks()
                    held, count = [], 0
            if held:
                yield pa.Table.from_batches(held).combine_chunks()
        self.bytes_read += sum(self._index[f].group_bytes(g) for g in range(self._meta[f].num_row_groups))

    def lookup(self, column: str, values: Sequence[object], iters: tuple[int | None, int | None] = (None, None),
               iter_column: str | None = None, *, cache: bool = True) -> pa.Table:
        """Rows whose ``column`` is one of ``values`` (NULL matches NULL) and, with ``iter_column``,
        whose iteration lies in ``iters`` (inclusive; None = unbounded). Reads only the row groups
        whose statistics admit a probed value and the iteration range.

        ``cache`` False: the caller reads these groups once (the bag check of an integral nothing
        else in the circuit reads), so groups not decoded yet are decoded leanly and not kept
        (``_read_once``)."""
        present, want_null = _probe(values)
        lo, hi = iters
        groups = self._admitted(column, self._prunable(column, present), want_null, iters, iter_column, _memo(values))
        wanted = KeySet(present, want_null, self.schema.field(column).type)
        if cache and len(self.schema) > KEY_PASS_MIN_COLUMNS:
            groups = self._holding(groups, column, wanted)
        keyed = column if cache and len(self.schema) > KEY_PASS_MIN_COLUMNS else None  # ``_holding`` read it
        parts = self._read_groups(groups, keyed) if cache else self._read_once(groups, column, wanted)
        if not parts:
            return self.schema.empty_table()
        if cache and iter_column is None:
            merged = self._merged_lookup(groups, column, wanted)
            if merged is not None:
                return merged
        table = pa.concat_tables(parts)
        if cache and iter_column is None:  # the decoded groups of each sorted file: binary search
            files = [f for f, _ in groups]
            starts = [0] + [i for i in range(1, len(files)) if files[i] != files[i - 1]] + [len(files)]
            bounds = np.cumsum([0] + [p.num_rows for p in parts])
            taken = [_sorted_rows(table.column(column).slice(bounds[a], bounds[b] - bounds[a]), wanted)
                     for a, b in zip(starts, starts[1:])]
            if all(t is not None for t in taken):
                return table.take(pa.array(np.concatenate([t + bounds[a] for t, a in zip(taken, starts)])))
        keep = wanted.member(table.column(column))
        if iter_column is not None:
            it = table.column(iter_column)
            if lo is not None:
                keep = pc.and_(keep, pc.greater_equal(it, lo))
            if hi is not None:
                keep = pc.and_(keep, pc.less_equal(it, hi))
        return _compact(table.filter(keep))

    def _merged_lookup(self, groups: list[tuple[int, int]], column: str, wanted: "KeySet") -> pa.Table | None:
        """The rows of the (decoded) ``groups`` holding a probed key, searched in each file's
        decoded groups merged into one table (``_merged``), from a file's second lookup on; None
        when a file is looked up for the first time, is not one sorted integer run, holds too
        many decoded rows, or NULL is probed (the caller then searches group by group).

        Why: a loop looks the same trace up at every iteration (the edges, by the nodes whose
        distance changed); with most of a 1M-row file decoded in ~800 groups, each lookup of 2k
        keys concatenated 800 slices, converted 800 chunks and took rows from 800 chunks (8-12 ms;
        25 times in a step). Merged once per set of decoded groups, a lookup is a binary search
        and one take. Files are never modified and decoded groups never change, so a merge is
        stale only when more groups were decoded since: it is keyed by their count."""
        if wanted.want_null:
            return None
        found = []
        for f in dict.fromkeys(f for f, _ in groups):
            seen = self._looked[(column, f)] = self._looked.get((column, f), 0) + 1
            merged = self._merged(f, column) if seen >= 2 else None
            if merged is None:
                return None
            table, values = merged
            probes = _probe_numbers(wanted, table.schema.field(column).type)
            lo, hi = np.searchsorted(values, probes, "left"), np.searchsorted(values, probes, "right")
            held = lo < hi
            lo, hi = lo[held], hi[held]
            lengths = hi - lo
            starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(lo) else np.zeros(0, np.int64)
            at = (np.repeat(lo - starts, lengths) + np.arange(int(lengths.sum()))).astype(np.int64)
            found.append(table.take(pa.array(at)))
        return pa.concat_tables(found) if len(found) > 1 else found[0] if found else self.schema.empty_table()

    def _merged(self, f: int, column: str) -> tuple[pa.Table, np.ndarray] | None:
        """File ``f``'s decoded groups in file order as one table, and its ``column`` as numpy
        integers; None when that column is not one non-decreasing run of integers or dates
        without NULL (an unsorted file) or the file has more than ``MERGED_MAX_ROWS`` decoded."""
        have = sorted(g for ff, g in self._decoded if ff == f)
        cached = self._merges.get((column, f))
        if cached is not None and cached[0] == len(have):
            return cached[1]
        if sum(self._decoded[(f, g)].num_rows for g in have) > MERGED_MAX_ROWS:
            return None
        table = pa.concat_tables([self._decoded[(f, g)] for g in have]).combine_chunks()
        keys = table.column(column)
        dtype = keys.type
        merged = None
        if not keys.null_count and (pa.types.is_integer(dtype) or pa.types.is_date(dtype)):
            values = keys.cast(_number_type(dtype)).to_numpy() if len(keys) else np.zeros(0, np.int64)
            if len(values) < 2 or bool((values[1:] >= values[:-1]).all()):
                merged = (table, values)
        self._merges[(column, f)] = (len(have), merged)
        return merged

    def matching(self, column: str, values: Sequence[object], max_found: int,
                 batch_rows: int = SCAN_BATCH_ROWS) -> pa.Table:
        """Rows whose ``column`` is one of ``values`` (NULL matches NULL), streamed and nothing
        cached: for a probe of many keys spread over a large sorted trace, where ``lookup``
        would hold most of the trace in memory. The admitted row groups' ``column`` is read
        first (a sorted key column is small); only the groups where a probed value really occurs
        are then decoded whole, a few hundred thousand rows at a time (one multi-threaded read),
        keeping the matching rows. (10k deleted orders among 15M touch half of a lineitem
        integral's groups: the other half costs one column.) ``TooMany`` once more than
        ``max_found`` rows match (the caller leaves it to Spark)."""
        present, want_null = _probe(values)
        wanted = KeySet(present, want_null, self.schema.field(column).type)
        admitted = {f: groups.tolist() for f, groups in self._admitted_by_file(
            column, self._prunable(column, present), want_null, (None, None), None, _memo(values)) if len(groups)}
        parts, found = [], 0
        seen = _Density()  # over all files: a probe dense in the first files is dense in the next
        for f, groups in admitted.items():
            with self._open(self.paths[f]) as fh:
                reader = self._reader(fh, f, self._dictionary_columns(column))
                for hit in self._groups_holding(reader, f, groups, column, wanted, batch_rows, seen):
                    table = reader.read_row_groups(hit, columns=self.schema.names, use_threads=self._threads(f, hit))
                    keep = _kept(table, wanted.member(table.column(column)))
                    self.bytes_read += sum(self._index[f].group_bytes(g) for g in hit)
                    found += keep.num_rows
                    if found > max_found:
                        raise TooMany(f"more than {max_found} trace rows match")
                    if keep.num_rows:
                        parts.append(keep.cast(self.schema))
        return pa.concat_tables(parts) if parts else self.schema.empty_table()

    def _groups_holding(self, reader: pq.ParquetFile, f: int, groups: list[int], column: str,
                        wanted: "KeySet", batch_rows: int = SCAN_BATCH_ROWS,
                        seen: "_Density | None" = None) -> Iterator[list[int]]:
        """Those of ``groups`` whose ``column`` holds a value of ``wanted``, yielded in batches
        of about ``batch_rows`` rows (what one decode of whole groups holds in memory).

        Which groups hold a hit is found from that column alone, in one vectorized pass over a
        batch's keys. Once at least half of the groups examined held a hit (probes dense in
        the key range, e.g. 10k deleted orders over 13k groups of a sorted integral), the rest
        are yielded as admitted: reading their key column first would decode it twice. ``seen``
        counts the groups examined and held across the files of one lookup (SF10's line-item
        integral is 61 files: a key pass over each one's first batch cost a tenth of the check)."""
        at = chunk_index(self._meta[f], column)
        seen = _Density() if seen is None else seen
        hit: list[int] = []
        hit_rows = 0
        for part in _batches(self._meta[f], groups, batch_rows):
            if seen.dense():  # the key pass no longer pays
                yield part
                continue
            keys = reader.read_row_groups(part, columns=[column], use_threads=self._threads(f, part)).column(0)
            if at is not None:
                self.bytes_read += sum(self._meta[f].row_group(g).column(at).total_compressed_size for g in part)
            seen.examined += len(part)
            rows = pc.indices_nonzero(wanted.member(keys))
            if len(rows) == 0:
                continue
            ends = np.cumsum([self._meta[f].row_group(g).num_rows for g in part])
            for k in np.unique(np.searchsorted(ends, rows.to_numpy(), side="right")):
                g = part[int(k)]
                seen.held += 1
                hit.append(g)
                hit_rows += self._meta[f].row_group(g).num_rows
                if hit_rows >= batch_rows:
                    yield hit
                    hit, hit_rows = [], 0
        if hit:
            yield hit

    def _holding(self, groups: list[tuple[int, int]], column: str, wanted: "KeySet") -> list[tuple[int, int]]:
        """Those of ``groups`` (``(file, group)``) that are decoded already or whose ``column``
        holds a value of ``wanted``, found from that column alone (one read per file; the columns
        are kept for the step's later lookups). Why: statistics admit a group whenever a probed
        key lies within its min/max, and a probe of keys that mostly are absent (W1's deleted
        orders against the join integral of the BUILDING customers' open orders: one in ten is
        there) decoded every admitted group whole, up to the whole trace at SF1 and ten times that
        at SF10; the key column is a fraction of a group's decode."""
        todo: dict[int, list[int]] = {}
        for f, g in groups:
            if (f, g) not in self._decoded and (column, f, g) not in self._keys:
                todo.setdefault(f, []).append(g)
        for f, gs in todo.items():
            with self._open(self.paths[f]) as fh:
                keys = self._reader(fh, f).read_row_groups(gs, columns=[column], use_threads=self._threads(f, gs)).column(0)
            keys = keys.cast(self.schema.field(column).type)
            at, start = chunk_index(self._meta[f], column), 0
            for g in gs:
                rows = self._meta[f].row_group(g).num_rows
                self._keys[(column, f, g)] = keys.slice(start, rows)
                start += rows
                if at is not None:
                    self.bytes_read += self._meta[f].row_group(g).column(at).total_compressed_size
        unknown = [key for key in groups if key not in self._decoded]
        if not unknown:
            return groups
        by_file: dict[int, list[tuple[int, int]]] = {}
        for key in unknown:
            by_file.setdefault(key[0], []).append(key)
        held: set[tuple[int, int]] = set()
        for keys_of in by_file.values():  # a file's groups in order: one sorted run if the file is sorted
            ends = np.cumsum([len(self._keys[(column, f, g)]) for f, g in keys_of])
            together = pa.chunked_array([c for f, g in keys_of for c in self._keys[(column, f, g)].chunks],
                                        self.schema.field(column).type)
            at = _sorted_hits(together, ends, wanted)
            if at is None:  # not one sorted integer run: a membership test of every key
                hits = pc.indices_nonzero(wanted.member(together)).to_numpy(zero_copy_only=False)
                at = np.unique(np.searchsorted(ends, hits, side="right"))
            held.update(keys_of[int(k)] for k in at)
        return [key for key in groups if key in self._decoded or key in held]

    def _read_groups(self, groups: list[tuple[int, int]], column: str | None = None) -> list[pa.Table]:
        """The row groups ``(file, group)``, decoded once: those not yet decoded are read with
        one open and one ``read_row_groups`` per file, multi-threaded when large (a probe of a
        hundred keys reads a hundred groups; opening the file and decoding group by group was
        most of its cost), then kept per group like ``_read``'s. ``column``: a column whose
        chunks ``_holding`` decoded already; where it holds them for every group read from a
        file, only the other columns are decoded (the loop of ``iterate`` on 1M edges decoded
        ~16M key values twice in a 10-edge step)."""
        missing: dict[int, list[int]] = {}
        for f, g in groups:
            if (f, g) not in self._decoded and g not in missing.get(f, []):
                missing.setdefault(f, []).append(g)
        for f, wanted in missing.items():
            reuse = column is not None and len(self.schema) > 1 and all((column, f, g) in self._keys for g in wanted)
            if len(wanted) == 1 and not reuse:
                self._read(f, wanted[0])
                continue
            names = [n for n in self.schema.names if n != column] if reuse else self.schema.names
            with self._open(self.paths[f]) as fh:
                table = self._reader(fh, f).read_row_groups(wanted, columns=names,
                                                            use_threads=self._threads(f, wanted))
            at = chunk_index(self._meta[f], column) if reuse else None
            if reuse:
                keys = pa.chunked_array([c for g in wanted for c in self._keys[(column, f, g)].chunks],
                                        self.schema.field(column).type)
                table = table.append_column(self.schema.field(column), keys).select(self.schema.names)
            table, start = table.cast(self.schema), 0
            for g in wanted:
                rows = self._meta[f].row_group(g).num_rows
                self._decoded[(f, g)] = table.slice(start, rows)
                start += rows
                self.bytes_read += self._index[f].group_bytes(g)
                if at is not None:  # counted by ``_holding``
                    self.bytes_read -= self._meta[f].row_group(g).column(at).total_compressed_size
        return [self._decoded[key] for key in groups]

    def _dictionary_columns(self, but: str) -> list[str]:
        """The string and binary columns other than ``but``: decoded as dictionaries of their
        values they cost a fraction of their decode as plain strings (half of what a line-item
        group cost was its one-letter flag column); a column cast back takes only the rows kept."""
        return [f.name for f in self.schema if f.name != but and (
            pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
            or pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type))]

    def _read_once(self, groups: list[tuple[int, int]], column: str, wanted: "KeySet") -> list[pa.Table]:
        """The rows of ``groups`` (``(file, group)``) whose ``column`` is ``wanted``, for a lookup
        made once: groups decoded earlier are reused; the others are read with one ``read_row_groups``
        per file (multi-threaded when large), their string columns as dictionaries, filtered first and
        cast to the schema after (only the rows kept are turned into strings), and not kept."""
        parts: list[pa.Table] = []
        missing: dict[int, list[int]] = {}
        for f, g in groups:
            if (f, g) in self._decoded:
                parts.append(self._decoded[(f, g)])
            elif g not in missing.get(f, []):
                missing.setdefault(f, []).append(g)
        dictionary = self._dictionary_columns(column)
        read: list[pa.Table] = []
        for f, wanted_groups in missing.items():
            with self._open(self.paths[f]) as fh:
                read.append(self._reader(fh, f, dictionary).read_row_groups(
                    wanted_groups, columns=self.schema.names, use_threads=self._threads(f, wanted_groups)))
            self.bytes_read += sum(self._index[f].group_bytes(g) for g in wanted_groups)
        try:  # one membership test for all files (a probe touches a group in each of 60 files at SF10)
            together = [pa.concat_tables(read)] if len(read) > 1 else read
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # files of other writers (types, nullability)
            together = read
        for table in together:
            parts.append(_kept(table, wanted.member(table.column(column))).cast(self.schema))
        return parts

    def _read(self, f: int, g: int) -> pa.Table:
        if (f, g) not in self._decoded:
            with self._open(self.paths[f]) as fh:
                table = self._reader(fh, f).read_row_group(g, columns=self.schema.names,
                                                           use_threads=self._threads(f, [g]))
            self._decoded[(f, g)] = table.cast(self.schema)
            self.bytes_read += self._index[f].group_bytes(g)
        return self._decoded[(f, g)]


def _number_type(dtype: pa.DataType) -> pa.DataType:
    """The integer type a date or integer key is searched as."""
    return pa.int32() if pa.types.is_date32(dtype) else pa.int64() if pa.types.is_date64(dtype) else dtype


def _probe_numbers(wanted: "KeySet", dtype: pa.DataType) -> np.ndarray:
    """The probed keys (no NULL) as numpy integers of ``dtype``'s search type."""
    return wanted.values.cast(_number_type(dtype)).to_numpy(zero_copy_only=False)


def _sorted_values(keys: pa.ChunkedArray, wanted: "KeySet") -> tuple[np.ndarray, np.ndarray] | None:
    """``keys`` and the probed keys as numpy integers when ``keys`` is one non-decreasing run of
    integers or dates without NULL and no NULL is probed (a sorted file's groups in order): they
    are then searched, not hashed key by key; None otherwise."""
    dtype = keys.type
    if wanted.want_null or keys.null_count or not (pa.types.is_integer(dtype) or pa.types.is_date(dtype)):
        return None
    base = _number_type(dtype)
    # one cast and one copy for all chunks (a decoded group is a chunk: a lookup in a 1M-row
    # trace cast ~700 chunks one by one, 23k casts in a 10-edge step of the loop on 1M edges)
    values = (keys if base == dtype else keys.cast(base)).to_numpy() if keys.num_chunks else np.zeros(0, np.int64)
    if len(values) > 1 and not bool((values[1:] >= values[:-1]).all()):
        return None
    return values, _probe_numbers(wanted, dtype)


def _held_ranges(keys: pa.ChunkedArray, wanted: "KeySet") -> tuple[np.ndarray, np.ndarray] | None:
    """For each probed key that ``keys`` holds, where its run starts and ends in ``keys`` (by
    binary search, ``_sorted_values``); None when ``keys`` is not one sorted run."""
    found = _sorted_values(keys, wanted)
    if found is None:
        return None
    values, probes = found
    lo, hi = np.searchsorted(values, probes, "left"), np.searchsorted(values, probes, "right")
    held = lo < hi
    return lo[held], hi[held]


def _sorted_hits(keys: pa.ChunkedArray, ends: np.ndarray, wanted: "KeySet") -> np.ndarray | None:
    """The indices of the row groups holding a probed key (``ends``: where each group's keys end
    in ``keys``), by binary search (``_held_ranges``); None when ``keys`` is not one sorted run.
    A probe costs O(k log n), not a hash lookup of each of the n keys."""
    ranges = _held_ranges(keys, wanted)
    if ranges is None:
        return None
    lo, hi = ranges
    if not len(lo):
        return np.zeros(0, dtype=np.int64)
    first = np.searchsorted(ends, lo, side="right")  # a run of one key may span groups
    last = np.searchsorted(ends, hi - 1, side="right")
    marks = np.zeros(len(ends) + 1, dtype=np.int64)
    np.add.at(marks, first, 1)
    np.add.at(marks, last + 1, -1)
    return np.flatnonzero(np.cumsum(marks)[:-1] > 0)


def _sorted_rows(keys: pa.ChunkedArray, wanted: "KeySet") -> np.ndarray | None:
    """The positions of ``keys`` holding a probed key, ascending, by binary search
    (``_held_ranges``); None when ``keys`` is not one sorted run (the caller tests each key)."""
    ranges = _held_ranges(keys, wanted)
    if ranges is None:
        return None
    lo, hi = ranges
    lengths = hi - lo
    if not len(lo):
        return np.zeros(0, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return (np.repeat(lo - starts, lengths) + np.arange(int(lengths.sum()))).astype(np.int64)


class _Density:
    """Row groups a streamed lookup examined by their key column, and how many held a probed key."""

    def __init__(self) -> None:
        self.examined = self.held = 0

    def dense(self) -> bool:
        """At least half held one: reading the key column first no longer pays."""
        return self.examined > 0 and self.held * 2 >= self.examined


def _compact(table: pa.Table) -> pa.Table:
    """A lookup's rows in one chunk when they are few: filtered out of many decoded row groups
    they hold a chunk per group, most of them empty, and every Arrow call after pays per chunk
    (an Acero group-by of 419 rows in 228 chunks: 2 ms; in one chunk 0.05 ms, combining them
    0.07 ms). The loop of ``iterate`` consolidates and joins such rows at every iteration."""
    if table.num_rows > SCAN_BATCH_ROWS or not table.num_columns or table.column(0).num_chunks <= 1:
        return table
    return table.combine_chunks()


def _kept(table: pa.Table, keep: pa.BooleanArray | pa.ChunkedArray) -> pa.Table:
    """The rows of ``table`` where ``keep`` (never NULL) is true, taken by index: a table read with
    dictionary columns holds one chunk per row group in those columns and one in the others, and
    ``Table.filter`` over such mixed chunking cost 13x a ``take`` (1M line items in 871 groups:
    21 ms -> 1.6 ms; a tenth of a 100k-row change's bag check)."""
    return table.take(pc.indices_nonzero(keep))


def _batches(meta: pq.FileMetaData, groups: list[int], rows: int) -> Iterator[list[int]]:
    """``groups`` in consecutive batches of about ``rows`` rows (at least one group each)."""
    batch: list[int] = []
    n = 0
    for g in groups:
        batch.append(g)
        n += meta.row_group(g).num_rows
        if n >= rows:
            yield batch
            batch, n = [], 0
    if batch:
        yield batch


def _order(value: object) -> tuple:
    """A sort key for probed values: NaN last (``sorted`` with NaN is no order at all)."""
    return (1, 0) if isinstance(value, float) and value != value else (0, value)


class Probe:
    """Probed values made once (sorted, canonical, without NULL) for several calls: a lookup
    asks ``admitted_rows`` first, then ``lookup`` or ``matching``, with the same keys (making
    100k keys cost a third of a second of Python each time)."""

    def __init__(self, values: Sequence[object]) -> None:
        self.present, self.want_null = _probe(values)
        self.memo: dict = {}  # ``present`` per statistics kind (``ColumnStats.admitted``), made once

    def __len__(self) -> int:
        return len(self.present) + int(self.want_null)


def _memo(values: "Sequence[object] | Probe") -> dict:
    """Where the probed values' conversions for the statistics are kept: with a ``Probe``, across
    its calls; else for one call."""
    return values.memo if isinstance(values, Probe) else {}


def _probe(values: "Sequence[object] | Probe") -> tuple[list, bool]:
    """The probed values sorted without NULL, and whether NULL was probed."""
    if isinstance(values, Probe):
        return values.present, values.want_null
    if all(type(v) is int for v in values):  # integer keys (the usual): canonical, ordered as they are
        return sorted(set(values)), False
    keys = {canonical_value(v) for v in values}  # Spark's float equality: one NaN, one zero
    present = sorted((v for v in keys if v is not None), key=_order)
    return present, None in keys


class KeySet:
    """The probed keys of a streamed lookup, tested against batch after batch of a trace.

    ``pc.is_in`` builds its hash table from the value set at every call: with 100k probed keys
    that was most of a 1M-row change's bag check (W1 SF10: 290 batches, 15 s -> 6 s). From
    ``SORTED_PROBE_KEYS`` integer or date keys on, they are kept as one sorted numpy array and
    tested with a binary search per value; fewer keys (``is_in`` is faster there), and other
    types, use ``is_in``. NULL matches NULL only when it was probed."""

    def __init__(self, present: list, want_null: bool, dtype: pa.DataType,
                 sorted_from: int = SORTED_PROBE_KEYS) -> None:
        self.want_null = want_null
        self.values = canonical(pa.array(present + ([None] if want_null else []), dtype))
        self.sorted: np.ndarray | None = None
        if (pa.types.is_integer(dtype) or pa.types.is_date(dtype)) and len(present) >= sorted_from:
            base = _number_type(dtype)
            self.base = base
            self.sorted = np.sort(pa.array(present, dtype).cast(base).to_numpy(zero_copy_only=False))

    def member(self, keys: pa.Array | pa.ChunkedArray) -> pa.BooleanArray:
        """True where ``keys`` holds a probed key (never NULL)."""
        if self.sorted is None:
            return pc.fill_null(pc.is_in(canonical(keys), value_set=self.values, skip_nulls=not self.want_null), False)
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
        values = pc.fill_null(keys.cast(self.base), 0).to_numpy(zero_copy_only=False)
        found = np.zeros(len(values), dtype=bool)
        if len(self.sorted):
            at = np.minimum(np.searchsorted(self.sorted, values), len(self.sorted) - 1)
            found = self.sorted[at] == values
        if keys.null_count:
            nulls = pc.is_null(keys).to_numpy(zero_copy_only=False)
            found = np.where(nulls, self.want_null, found)
        return pa.array(found, pa.bool_())


class _Footers:
    """The footers of a ``TraceFiles``' files by index, each parsed when first asked for (an index
    made from a statistics sidecar reads its footer only for a read of the file)."""

    def __init__(self, index: list[FileIndex]) -> None:
        self._index = index

    def __getitem__(self, f: int) -> pq.FileMetaData:
        return self._index[f].meta

    def __iter__(self) -> Iterator[pq.FileMetaData]:
        return (ix.meta for ix in self._index)

    def __len__(self) -> int:
        return len(self._index)


class TooMany(DbspError):
    """A streamed lookup found more rows than its caller allows."""
