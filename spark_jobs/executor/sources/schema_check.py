"""Checks that need no Spark job: a file's columns and types from a Parquet footer or a CSV
header, compared with the declared schema; and, for a refused JSON line, a reason a person can act on.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.types import (BinaryType, BooleanType, ByteType, DataType, DateType, DecimalType,
                               DoubleType, FloatType, IntegerType, LongType, NullType, ShortType,
                               StringType, StructField, StructType, TimestampNTZType, TimestampType)

from spark_jobs.errors import DbspError
from spark_jobs.spec.model import WEIGHT

from . import time_range
from .discovery import locate, open_text_head
from .spark_types import is_integral, type_label, widens


class UnreadableFile(DbspError):
    """The file cannot be read as its format at all; the message is the reason."""


MAX_NAMED = 10  # a refusal names at most this many columns of one kind, then counts the rest
MAX_NAME_CHARS = 80


def name_list(names: Sequence[str], limit: int = MAX_NAMED) -> str:
    """``a, b, c`` for a few names; the first ``limit`` and how many more for a long list (a CSV
    header of 100,000 columns must not make a 6 MB message)."""
    shown = [n if len(n) <= MAX_NAME_CHARS else n[:MAX_NAME_CHARS] + "..." for n in names[:limit]]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f" and {more:,} more" if more > 0 else "")


def column_problems(found: Mapping[str, DataType | None], declared: Mapping[str, DataType],
                    allow_weight: bool) -> list[str]:
    """Why a file's columns (types None = unknown, as in CSV) do not fit the declared ones."""
    extra = [n for n in found if n not in declared and not (allow_weight and n == WEIGHT)]
    reasons = []
    lowered = {e.lower(): e for e in reversed(extra)}
    for name in declared:
        if name not in found:
            twin = lowered.get(name.lower())
            hint = f" (the file has {twin}: names are case-sensitive)" if twin else ""
            reasons.append(f"missing column {name}{hint}")
    if len(extra) > MAX_NAMED:
        reasons.append(f"{len(extra):,} unexpected columns: {name_list(extra)} (declared: {name_list(list(declared))})")
        extra = []
    for name in extra:
        hint = " (a snapshot has no _weight: each row counts once)" if name == WEIGHT else ""
        reasons.append(f"unexpected column {name}{hint}")
    for name, ftype in found.items():
        if ftype is None:
            continue
        if name in declared and not widens(ftype, declared[name]):
            reasons.append(f"column {name} has type {type_label(ftype)} but the schema says "
                           f"{type_label(declared[name])}")
        elif name == WEIGHT and allow_weight and not is_integral(ftype):
            reasons.append(f"column _weight has type {type_label(ftype)} but must be an integer "
                           "type (byte, short, int or long)")
    return reasons


# ---- Parquet ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ParquetFooter:
    """What the footer says: columns as Spark reads them, and per-column null counts if known."""

    schema: StructType
    null_counts: dict[str, int | None]
    problems: tuple[str, ...]  # columns Spark cannot read at all
    weight_range: tuple[int, int] | None = None  # min and max of _weight from statistics, if known
    times_known: bool = True  # every date/timestamp column's range is in the statistics (``time_range``)


_UNSIGNED = {pa.uint8(): ShortType(), pa.uint16(): IntegerType(), pa.uint32(): LongType(),
             pa.uint64(): DecimalType(20, 0)}


def _spark_type(at: pa.DataType, physical: str | None) -> DataType:
    """The type Spark's Parquet reader gives a column (raises ValueError if it refuses it)."""
    from pyspark.sql.pandas.types import from_arrow_type

    if pa.types.is_dictionary(at):
        at = at.value_type
    if physical == "INT96":
        return TimestampType()
    if pa.types.is_timestamp(at):
        if at.unit == "ns":
            raise ValueError("nanosecond timestamps cannot be read by Spark; write microseconds "
                             "(pandas: to_parquet(..., coerce_timestamps='us'))")
        return TimestampType() if at.tz else TimestampNTZType()
    if pa.types.is_null(at):
        return NullType()
    if at in _UNSIGNED:
        return _UNSIGNED[at]
    if pa.types.is_large_string(at) or pa.types.is_string_view(at):
        return StringType()
    if pa.types.is_large_binary(at) or pa.types.is_binary_view(at):
        return BinaryType()
    try:
        return from_arrow_type(at, prefer_timestamp_ntz=True)
    except Exception:
        raise ValueError(f"Parquet type {at} cannot be read by Spark") from None


def read_parquet_footer(path: str) -> ParquetFooter:
    """Schema and null statistics from the footer alone (no Spark job, no data pages read)."""
    loc = locate(path)
    try:
        with loc.fs.open_input_file(loc.inner) as fh:
            pf = pq.ParquetFile(fh)
            leaves = {pf.schema.column(i).path: i for i in range(len(pf.schema))}
            physical = {p: pf.schema.column(i).physical_type for p, i in leaves.items()}
            fields, problems, nulls = [], [], {}
            for f in pf.schema_arrow:
                try:
                    fields.append(StructField(f.name, _spark_type(f.type, physical.get(f.name)), True))
                except ValueError as exc:
                    problems.append(f"column {f.name}: {exc}")
                nulls[f.name] = _null_count(pf.metadata, leaves.get(f.name))
            weights = _int_range(pf.metadata, leaves.get(WEIGHT))
            times_known = True
            for f in pf.schema_arrow:
                if time_range.is_time(f.type):
                    bounds = _raw_range(pf.metadata, leaves.get(f.name))
                    if bounds is None:
                        times_known = False  # the rows are checked instead
                    elif (value := time_range.raw_outside(f.type, *bounds)) is not None:
                        problems.append(time_range.problem(f.name, value))
    except (pa.ArrowException, OSError) as exc:
        raise UnreadableFile(f"not a readable Parquet file ({exc})") from None
    return ParquetFooter(StructType(fields), nulls, tuple(problems), weights, times_known)


def _raw_range(md: pq.FileMetaData, leaf: int | None) -> tuple[int, int] | None:
    """(min, max) physical values of an integer-backed column (dates, timestamps) over all row
    groups, from the raw statistics (a year-10000 value has no Python datetime); None if unknown."""
    if leaf is None:
        return None
    low, high = None, None
    for r in range(md.num_row_groups):
        stats = md.row_group(r).column(leaf).statistics
        if stats is None or not stats.has_min_max or stats.physical_type not in ("INT32", "INT64"):
            return None
        low = stats.min_raw if low is None else min(low, stats.min_raw)
        high = stats.max_raw if high is None else max(high, stats.max_raw)
    return (low, high) if low is not None else (0, 0)


def _int_range(md: pq.FileMetaData, leaf: int | None) -> tuple[int, int] | None:
    """(min, max) of an integer column over all row groups; None if any group lacks them."""
    if leaf is None:
        return None
    low, high = None, None
    for r in range(md.num_row_groups):
        stats = md.row_group(r).column(leaf).statistics
        if stats is None or not stats.has_min_max:
            return None
        if not isinstance(stats.min, int) or not isinstance(stats.max, int):
            return None
        low = stats.min if low is None else min(low, stats.min)
        high = stats.max if high is None else max(high, stats.max)
    return (low, high) if low is not None else (0, 0)


def _null_count(md: pq.FileMetaData, leaf: int | None) -> int | None:
    """Nulls of a top-level primitive column summed over row groups; None if any group lacks it."""
    if leaf is None:
        return None
    total = 0
    for r in range(md.num_row_groups):
        stats = md.row_group(r).column(leaf).statistics
        if stats is None or not stats.has_null_count:
            return None
        total += stats.null_count
    return total


# ---- CSV -------------------------------------------------------------------------------------

HEADER_BYTES = 1 << 20  # a header is read from this much of the file's start

def csv_header(path: str, options: Mapping[str, Any]) -> list[str] | None:
    """The column names in the first record of a CSV file; None for an empty (0-byte) file."""
    try:
        head = open_text_head(path, HEADER_BYTES)
    except (pa.ArrowException, OSError, EOFError) as exc:
        raise UnreadableFile(f"cannot read the file ({exc})") from None
    if not head:
        return None
    if len(head) >= HEADER_BYTES and b"\n" not in head and b"\r" not in head:
        fields = head.count(b",") + 1
        raise UnreadableFile(f"its header line is longer than {HEADER_BYTES >> 20} MiB (at least {fields:,} "
                             f"fields before the cut): not a CSV file of the declared columns")
    encoding = str(options.get("encoding") or options.get("charset") or "utf-8")
    if encoding.lower().replace("-", "") == "utf8":
        encoding = "utf-8-sig"  # drop a byte-order mark
    try:
        text = head.decode(encoding, errors="replace")
    except LookupError:
        raise UnreadableFile(f"unknown encoding {encoding!r}") from None
    sep = str(options.get("sep") or options.get("delimiter") or ",")
    sep = "\t" if sep == "\\t" else sep
    if len(sep) != 1:
        return text.splitlines()[0].split(sep) if text.strip() else []
    quote = str(options.get("quote", '"')) or None
    try:
        return next(csv.reader(io.StringIO(text), delimiter=sep, quotechar=quote), [])
    except csv.Error as exc:  # e.g. a NUL byte: not a text file
        raise UnreadableFile(f"not a readable CSV file: its header cannot be parsed ({exc})") from None


def header_problems(header: list[str]) -> list[str]:
    seen, dups = set(), {}
    for name in header:
        if name in seen:
            dups[name] = None
        seen.add(name)
    if len(dups) > MAX_NAMED:
        return [f"{len(dups):,} duplicate columns in the header: {name_list(list(dups))}"]
    return [f"duplicate column {n} in the header" for n in dups]


# ---- JSON lines ------------------------------------------------------------------------------

_INT_RANGE = {ByteType: 8, ShortType: 16, IntegerType: 32, LongType: 64}


def _json_fits(value: Any, dt: DataType) -> bool:
    if value is None:
        return True
    t = type(dt)
    if t in _INT_RANGE:
        bits = _INT_RANGE[t] - 1
        return isinstance(value, int) and not isinstance(value, bool) and -(1 << bits) <= value < (1 << bits)
    if t in (FloatType, DoubleType, DecimalType):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t is BooleanType:
        return isinstance(value, bool)
    if t in (DateType, TimestampType, TimestampNTZType, BinaryType):
        return isinstance(value, str)
    return True


MAX_JSON_DEPTH = 1000  # Spark's JSON parser (Jackson's StreamReadConstraints) refuses deeper nesting


def json_depth(line: str) -> int:
    """How deep a line nests ``[``/``{`` outside strings, without recursion (``json.loads`` of a
    line nested 100,000 deep raises RecursionError), in its first MiB of text."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in line[:1 << 20]:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def diagnose_json_line(line: str, declared: Mapping[str, DataType]) -> str:
    """Why Spark flagged a JSON line as corrupt, as precisely as the line allows."""
    depth = json_depth(line)
    if depth > MAX_JSON_DEPTH:
        return (f"a line nests JSON arrays or objects {depth:,} levels deep (the reader follows at most "
                f"{MAX_JSON_DEPTH})")
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return "a line is not valid JSON"
    if not isinstance(obj, dict):
        return "a line is not a JSON object"
    for name, value in obj.items():
        if name in declared and not _json_fits(value, declared[name]):
            return (f"column {name} has value {json.dumps(value)[:80]} which is not a valid "
                    f"{type_label(declared[name])}")
    return "a line does not match the schema (a value is not of its column's type or format)"
