"""Parquet input files read with pyarrow, with the checks Spark's reader applies
(``formats.plan_parquet``): footers compared with the declared schema (lossless widenings only),
declared non-null columns, ``_weight`` integral, non-null and within +-2^31-1 (no negative one in
an append_only source), values a column must be one of; columns cast to the declared types."""
from __future__ import annotations

import re
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_jobs.executor.sources.discovery import locate
from spark_jobs.executor.sources.formats import (MAX_WEIGHT, WEIGHT_DELETE, WEIGHT_NULL, WEIGHT_RANGE, Declared,
                                                 one_of_check, null_check, time_check, utf8_problem,
                                                 weight_range_problems)
from spark_jobs.executor.sources import time_range
from spark_jobs.executor.sources.schema_check import UnreadableFile, column_problems, read_parquet_footer
from spark_jobs.spec.model import WEIGHT


def footer_rows(paths: Sequence[str]) -> int | None:
    """Rows of Parquet files from their footers (no data read); None if one is unreadable."""
    total = 0
    for path in paths:
        loc = locate(path)
        try:
            with loc.fs.open_input_file(loc.inner) as fh:
                total += pq.ParquetFile(fh).metadata.num_rows
        except (pa.ArrowException, OSError):
            return None
    return total


def read_file(path: str, d: Declared, target: pa.Schema) -> tuple[pa.Table | None, list[str]]:
    """One file as a table of ``target`` (declared columns, then the weight), or the reasons it
    is refused."""
    try:
        footer = read_parquet_footer(path)
    except UnreadableFile as exc:
        return None, [str(exc)]
    found = {fld.name: fld.dataType for fld in footer.schema}
    found.update({name: None for name in footer.null_counts if name not in found})
    has_weight = d.allow_weight and WEIGHT in found
    reasons = list(footer.problems) + column_problems(found, d.types, d.allow_weight)
    must_hold = list(d.not_null) + ([WEIGHT] if has_weight else [])
    for c in must_hold:  # what the footer's statistics prove, as plan_parquet reads them
        n = footer.null_counts.get(c)
        if n:
            reasons.append(WEIGHT_NULL.describe(n, None) if c == WEIGHT else _null_check(d, c).describe(n, None))
    reasons += weight_range_problems(footer.weight_range if has_weight else (0, 0))
    if reasons:
        return None, reasons
    loc = locate(path)
    try:
        with loc.fs.open_input_file(loc.inner) as fh:
            raw = pq.read_table(fh, columns=[c for c in [*d.types, WEIGHT] if c in found])
    except (pa.ArrowException, OSError) as exc:  # corrupt pages behind a valid footer: as Spark says it
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None, [f"cannot be read although its header or footer looked valid (corrupt data?): {first}"]
    reasons = _row_problems(raw, d)
    return (None, reasons) if reasons else (_typed(raw, target), [])


def _null_check(d: Declared, c: str):
    return null_check(c, *([d.null_reasons[c]] if c in d.null_reasons else []))


def _least(values: pa.ChunkedArray | pa.Array) -> str:
    """Spark's ``min`` of the values as strings (the example a refusal shows)."""
    return min(str(v) for v in values.to_pylist())


def _row_problems(raw: pa.Table, d: Declared) -> list[str]:
    reasons = []
    for c in d.not_null:
        n = raw.column(c).null_count
        if n:
            reasons.append(_null_check(d, c).describe(n, None))
    for c, values in d.one_of.items():
        col = raw.column(c)
        bad = pc.filter(col, pc.and_(pc.is_valid(col), pc.invert(pc.is_in(col.cast(pa.string()), pa.array(values)))))
        if len(bad):
            reasons.append(one_of_check(c, values).describe(len(bad), _least(bad.cast(pa.string()))))
    for c in d.types:  # strings that are UTF-8 (as _parquet_group's refusal)
        if c in raw.column_names and pa.types.is_string(raw.column(c).type) and (row := _not_utf8(raw.column(c))) is not None:
            reasons.append(utf8_problem(c, row))
    for c in d.types:  # dates and timestamps within 0001-01-01 .. 9999-12-31 (as plan_parquet)
        if c in raw.column_names and (out := time_range.outside_rows(raw.column(c))) is not None:
            reasons.append(time_check(c).describe(*out))
    if WEIGHT not in raw.column_names:
        return reasons
    w = raw.column(WEIGHT)
    if w.null_count:
        reasons.append(WEIGHT_NULL.describe(w.null_count, None))
    out = pc.filter(w, pc.or_(pc.greater(w, MAX_WEIGHT), pc.less(w, -MAX_WEIGHT)))
    if len(out):
        reasons.append(WEIGHT_RANGE.describe(len(out), _least(out)))
    if d.inserts_only:
        deletes = pc.filter(w, pc.less(w, 0))
        if len(deletes):
            reasons.append(WEIGHT_DELETE.describe(len(deletes), _least(deletes)))
    return reasons


def _not_utf8(column: pa.ChunkedArray) -> int | None:
    """The first row whose bytes are not UTF-8 (pyarrow reads Parquet strings unchecked), or None."""
    offset = 0
    for chunk in column.chunks:
        try:
            chunk.validate(full=True)
        except pa.ArrowInvalid as exc:
            found = re.search(r"string index (\d+)", str(exc))
            return offset + int(found.group(1)) if found else offset
        offset += len(chunk)
    return None


def _typed(raw: pa.Table, target: pa.Schema) -> pa.Table:
    """Declared columns cast to their types (lossless widenings, checked above), then the weight."""
    columns = []
    for f in target:
        if f.name == WEIGHT:
            w = raw.column(WEIGHT) if WEIGHT in raw.column_names else pa.array([1] * raw.num_rows, pa.int64())
            columns.append(w.cast(pa.int64()))
        else:
            col = raw.column(f.name)
            if pa.types.is_dictionary(col.type):
                col = col.cast(col.type.value_type)
            columns.append(col.cast(f.type))
    return pa.Table.from_arrays(columns, schema=target)
