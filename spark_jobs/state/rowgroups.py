"""Which row groups of a Parquet file can hold a probed value: footers and statistics kept per
process, tested for all groups at once.

Why: a key lookup must not cost in proportion to the state. A sorted integral of 60M rows has
13k row groups and a 12 MB footer; reading that footer and walking its groups' statistics in
Python at every lookup cost more than decoding the few groups a 100-row change touches (and
grew 10x from SF1 to SF10). Trace files are immutable (each write makes a new ``t<t>-<uuid>``
directory; nothing committed is modified), so a footer read once stays true for the life of the
process: it is kept, up to ``FOOTER_CACHE_BYTES`` of serialized footers (least recently used
first out), and each column's statistics are gathered once per file into arrays, so admitting
groups for a probe is two binary searches per group in numpy instead of a Python loop.
"""
from __future__ import annotations

import datetime
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Callable

import numpy as np
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from spark_jobs.state.stats_sidecar import Summary

# serialized footer bytes kept per process (a 60M-row sorted integral's footer is ~12 MB)
FOOTER_CACHE_BYTES = 512 * 1024 * 1024


@dataclass
class ColumnStats:
    """One column's statistics over the row groups of one file.

    ``low``/``high`` hold the min/max of the groups whose statistics are recorded (``known``),
    as int64 (integers, dates as day numbers) or objects (strings); ``kind`` says which
    (None: another type, admitted by comparing Python values one group at a time)."""

    rows: np.ndarray  # rows per group
    known: np.ndarray  # bool: min/max recorded
    nulls: np.ndarray  # bool: may hold a NULL
    kind: str | None  # "int" | "date" | "str" | None
    low: np.ndarray
    high: np.ndarray
    values: list[tuple[object, object]]  # (min, max) per group as Python values (None: unknown)

    def admitted(self, present: list, want_null: bool, memo: dict | None = None) -> np.ndarray:
        """A bool per group: may it hold one of the sorted ``present`` values (or a NULL, when
        ``want_null``)? Groups without statistics are always admitted.

        ``memo``: ``present`` converted per statistics kind, kept by the caller across the files
        of one lookup (converting 10k probed keys in Python for each of SF10's 61 files was a
        tenth of a 100k-row change's bag check, and grew with the file count)."""
        mask = ~self.known
        if want_null:
            mask = mask | self.nulls
        if not present or not self.known.any():
            return mask
        if memo is None:
            probe = _as_kind(present, self.kind)
        else:
            if self.kind not in memo:
                memo[self.kind] = _as_kind(present, self.kind)
            probe = memo[self.kind]
        if probe is None:
            hit = np.array([_admits(present, lo, hi) for lo, hi in self.values], dtype=bool)
            return mask | hit
        known = np.flatnonzero(self.known)
        first = np.searchsorted(probe, self.low, side="left")
        past = np.searchsorted(probe, self.high, side="right")
        mask = mask.copy()
        mask[known] |= past > first
        return mask


    @cached_property
    def span(self) -> tuple[int, int] | None:
        """The file's smallest and largest value of an integer or date column (day numbers), when
        every group records them; None otherwise (the caller then admits by groups). Computed
        once per file: the bag check asks it of every file of an integral at every step."""
        if self.kind not in ("int", "date") or not len(self.known) or not self.known.all():
            return None
        return int(self.low.min()), int(self.high.max())


def _kind(values: list[tuple[object, object]]) -> str | None:
    """The array kind every recorded min/max fits (None: compare as Python values)."""
    seen = {type(v) for pair in values for v in pair if v is not None}
    if not seen:
        return None
    if seen <= {int}:
        return "int"
    if seen == {datetime.date}:
        return "date"
    if seen == {str}:
        return "str"
    return None


def _as_kind(values: list, kind: str | None) -> np.ndarray | None:
    """``values`` as an array comparable with the statistics of ``kind``; None if some value is
    of another type (the caller then compares Python values)."""
    if kind == "int" and all(type(v) is int for v in values):
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            return None
    if kind == "date" and all(type(v) is datetime.date for v in values):
        return np.array([v.toordinal() for v in values], dtype=np.int64)
    if kind == "str" and all(type(v) is str for v in values):
        return np.array(values, dtype=object)
    return None


def _admits(present: list, low: object, high: object) -> bool:
    """Does the closed range [low, high] hold one of the sorted ``present`` values?"""
    import bisect

    if low is None or high is None:
        return True
    try:
        k = bisect.bisect_left(present, low)
    except TypeError:  # statistics of another type than the values (e.g. bytes): read it
        return True
    return k < len(present) and present[k] <= high


def chunk_index(meta: pq.FileMetaData, column: str) -> int | None:
    """Where ``column``'s chunk sits in this file's row groups (the same in every group)."""
    if meta.num_row_groups == 0:
        return None
    rg = meta.row_group(0)
    return next((c for c in range(rg.num_columns) if rg.column(c).path_in_schema == column), None)


def column_stats(meta: pq.FileMetaData, column: str) -> ColumnStats:
    """Gather ``column``'s statistics from every row group of ``meta`` (once per file)."""
    n = meta.num_row_groups
    at = chunk_index(meta, column)
    rows = np.fromiter((meta.row_group(g).num_rows for g in range(n)), dtype=np.int64, count=n)
    known = np.zeros(n, dtype=bool)
    nulls = np.ones(n, dtype=bool)
    values: list[tuple[object, object]] = [(None, None)] * n
    if at is not None:
        for g in range(n):
            s = meta.row_group(g).column(at).statistics
            if s is None or not s.has_min_max:
                continue
            known[g] = True
            nulls[g] = s.null_count is None or s.null_count > 0
            values[g] = (s.min, s.max)
    kind = _kind([values[g] for g in np.flatnonzero(known)])
    lows = [values[g][0] for g in np.flatnonzero(known)]
    highs = [values[g][1] for g in np.flatnonzero(known)]
    if kind == "date":
        lows, highs = [d.toordinal() for d in lows], [d.toordinal() for d in highs]  # type: ignore[union-attr]
    dtype = np.int64 if kind in ("int", "date") else object
    try:
        low, high = np.array(lows, dtype=dtype), np.array(highs, dtype=dtype)
    except OverflowError:  # an unsigned 64-bit value past int64: compare as Python values
        kind, low, high = None, np.array(lows, dtype=object), np.array(highs, dtype=object)
    return ColumnStats(rows, known, nulls, kind, low, high, values)


class FileIndex:
    """A file's footer and the statistics of the columns looked up in it so far.

    Made from the file's footer, or from its statistics sidecar (``Summary``): then the footer
    is read only when something needs it (a read of the file's row groups, or a column the
    sidecar does not hold), so a new process admits row groups without parsing every footer."""

    def __init__(self, meta: pq.FileMetaData | None = None, *, summary: "Summary | None" = None,
                 read: Callable[[], pq.FileMetaData] | None = None) -> None:
        if meta is None and (summary is None or read is None):
            raise ValueError("a FileIndex needs a footer, or a summary and a way to read the footer")
        self._meta, self._summary, self._read_meta = meta, summary, read
        self._columns: dict[str, ColumnStats] = {}
        self._lock = threading.RLock()
        self._bytes: dict[int, int] = {}

    @property
    def meta(self) -> pq.FileMetaData:
        """The footer (read now if the index was made from a sidecar)."""
        if self._meta is None:
            with self._lock:
                if self._meta is None:
                    self._meta = self._read_meta()  # type: ignore[misc]
        return self._meta

    @property
    def footer_read(self) -> bool:
        """Has this index parsed the file's footer?"""
        return self._meta is not None

    @property
    def num_row_groups(self) -> int:
        return len(self._summary.rows) if self._summary is not None else self.meta.num_row_groups

    @property
    def num_rows(self) -> int:
        return self._summary.num_rows if self._summary is not None else self.meta.num_rows

    @property
    def footprint(self) -> int:
        """Bytes this index stands for in the process's cache (the footer's, read or not)."""
        if self._summary is not None:
            return self._summary.footer_bytes + self._summary.nbytes
        return self.meta.serialized_size

    def group_bytes(self, group: int) -> int:
        """Compressed bytes of a row group's column chunks (what decoding it whole reads), summed
        once per group: walking the footer's chunks in Python at every decoded group cost a
        twentieth of a lookup, and summing every group of a file at its first lookup cost a
        lookup of a few groups in a 1M-row trace of 730 groups 5 ms (a tenth of a second for the
        first step of a loop on 1M edges)."""
        if self._summary is not None:
            return int(self._summary.bytes[group])
        found = self._bytes.get(group)
        if found is None:
            rg = self.meta.row_group(group)
            found = self._bytes[group] = sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
        return found

    def stats(self, column: str) -> ColumnStats:
        with self._lock:
            found = self._columns.get(column)
            if found is None:
                held = self._summary.column(column) if self._summary is not None else None
                found = self._columns[column] = held if held is not None else column_stats(self.meta, column)
            return found


class _Footers:
    """The process's footers, least recently used first out past ``FOOTER_CACHE_BYTES``."""

    def __init__(self) -> None:
        self._items: OrderedDict[tuple[str, int], FileIndex] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, path: str, size: int, read: Callable[[], pq.FileMetaData],
            summary: Callable[[], "Summary | None"] | None = None) -> FileIndex:
        """The file's index: cached, else made from its sidecar (``summary``, when it gives one
        that holds) or its footer (``read``)."""
        key = (path, size)
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
        held = summary() if summary is not None else None
        index = FileIndex(summary=held, read=read) if held is not None else FileIndex(read())
        with self._lock:
            if key not in self._items:
                self._items[key] = index
                self._bytes += index.footprint
                while self._bytes > FOOTER_CACHE_BYTES and len(self._items) > 1:
                    _, old = self._items.popitem(last=False)
                    self._bytes -= old.footprint
            return self._items[key]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0


FOOTERS = _Footers()
