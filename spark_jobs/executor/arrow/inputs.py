"""Read a step's input files with pyarrow, as a Z-set table, with the checks Spark's reader applies.

The same rules as ``executor/sources`` (Parquet footers compared with the declared schema, lossless
widenings only, declared non-null columns checked, ``_weight`` integral and non-null, +1 without
one and within +-2^31-1, rows of weight 0 dropped), the same refusal (``InputRefused``, every refused file of the step
with its reason), and the same values: columns cast to the declared types. Only what the
in-process engine takes is read here: ``changes`` sources in Parquet; any other input makes the
step run on Spark (``unsupported``).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_jobs.executor.sources import InputFile, InputRefused, spark_schema
from spark_jobs.executor.sources.discovery import file_format, locate
from spark_jobs.executor.sources.formats import MAX_WEIGHT, WEIGHT_DELETE, WEIGHT_RANGE, weight_range_problems
from spark_jobs.executor.sources.schema_check import UnreadableFile, column_problems, read_parquet_footer
from spark_jobs.executor.sources.spark_types import declared_types
from spark_jobs.spec.model import WEIGHT, InputSpec
from spark_jobs.state.arrow_trace import arrow_of


def unsupported(spec: InputSpec) -> str | None:
    """Why this input cannot be read in-process (None: it can)."""
    source = spec.source
    if source is None:
        return f"input {spec.name!r} has no source"
    if source.kind == "cdc":  # records folded into changes by key, against the input's keyed trace
        return f"input {spec.name!r} is a cdc source: its records are applied by key on Spark"
    if source.kind not in ("changes", "append_only") or source.format != "parquet":
        return f"input {spec.name!r} is a {source.kind} source in {source.format}: read by Spark"
    if source.options:
        return f"input {spec.name!r} sets reader options: read by Spark"
    return None


def schema(spec: InputSpec) -> pa.Schema:
    """The declared columns and the int64 weight, as Arrow types (Spark's own mapping)."""
    return arrow_of(spark_schema(spec))


def footer_rows(files: Sequence[InputFile]) -> int | None:
    """Rows of Parquet change files from their footers (no data read); None if unreadable."""
    total = 0
    for f in files:
        loc = locate(f.path)
        try:
            with loc.fs.open_input_file(loc.inner) as fh:
                total += pq.ParquetFile(fh).metadata.num_rows
        except (pa.ArrowException, OSError):
            return None
    return total


def read_changes(spec: InputSpec, files: Sequence[InputFile]) -> tuple[pa.Table, int]:
    """The union of the files' changes (declared columns, declared types, then ``_weight``; weight
    0 dropped, not consolidated) and the bytes read; ``InputRefused`` naming every bad file."""
    target = schema(spec)
    declared = declared_types(spec)
    not_null = spec.not_null
    problems: list[tuple[str, str]] = []
    tables, read = [], 0
    for f in files:
        if file_format(f.path) != "parquet":
            problems.append((f.path, f"a {file_format(f.path)} file in a parquet source"))
            continue
        try:
            footer = read_parquet_footer(f.path)
        except UnreadableFile as exc:
            problems.append((f.path, str(exc)))
            continue
        found = {fld.name: fld.dataType for fld in footer.schema}
        found.update({name: None for name in footer.null_counts if name not in found})
        reasons = list(footer.problems) + column_problems(found, declared, True)
        reasons += weight_range_problems(footer.weight_range if WEIGHT in found else None)
        if reasons:
            problems.extend((f.path, r) for r in reasons)
            continue
        loc = locate(f.path)
        try:
            with loc.fs.open_input_file(loc.inner) as fh:
                raw = pq.read_table(fh, columns=[c for c in [*declared, WEIGHT] if c in found])
        except (pa.ArrowException, OSError) as exc:  # corrupt pages behind a valid footer: as Spark says it
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            problems.append((f.path, f"cannot be read although its header or footer looked valid (corrupt data?): "
                                     f"{first}"))
            continue
        read += f.size
        reasons = _row_problems(raw, {c: spec.null_reason(c) for c in not_null}, spec.kind == "append_only")
        if reasons:
            problems.extend((f.path, r) for r in reasons)
            continue
        tables.append(_typed(raw, target))
    if problems:
        raise InputRefused(problems, spec.name)
    if not tables:
        return target.empty_table(), read
    table = pa.concat_tables(tables)
    return table.filter(pc.not_equal(table.column(WEIGHT), 0)), read


def _row_problems(raw: pa.Table, not_null: Mapping[str, str], inserts_only: bool = False) -> list[str]:
    """The row checks Spark's reader applies: declared non-null columns, and the weight (no
    negative one in an append_only source)."""
    reasons = []
    for c, why in not_null.items():
        n = raw.column(c).null_count
        if n:
            reasons.append(f"column {c} {why} but has {n} null value(s)")
    if WEIGHT in raw.column_names and raw.column(WEIGHT).null_count:
        reasons.append(f"column _weight has {raw.column(WEIGHT).null_count} null value(s); "
                       "leave the column out for +1")
    if WEIGHT in raw.column_names:
        w = raw.column(WEIGHT)
        out = pc.filter(w, pc.or_(pc.greater(w, MAX_WEIGHT), pc.less(w, -MAX_WEIGHT)))
        if len(out):
            reasons.append(WEIGHT_RANGE.describe(len(out), out[0].as_py()))
        deletes = pc.filter(w, pc.less(w, 0)) if inserts_only else []
        if len(deletes):
            reasons.append(WEIGHT_DELETE.describe(len(deletes), deletes[0].as_py()))
    return reasons


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
