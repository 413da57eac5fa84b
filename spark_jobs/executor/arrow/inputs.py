"""An input's change for one step, read in-process: the counterpart of ``runtime/inputs.read_input``
on Spark, with the same values and the same refusals.

``read_input(spec, files, state, policy)`` serves every kind and format:

- ``changes`` and ``append_only``: the files' rows with their weights (``parquet_files``,
  ``csv_files``, ``json_files``), weight-0 rows dropped, not consolidated;
- ``snapshots``: the newest snapshot minus the input's last one (``D``, against the trace
  ``snapshot:<name>``), consolidated;
- ``cdc``: the records applied by key against the trace ``keyed:<name>`` (``cdc_records``);
- ``delta``: the table's change between the consumed version and the newest (``delta_tables``),
  consolidated.

Every file is checked as Spark's reader checks it; ``InputRefused`` names every refused file of
the input with its reason, in the Spark path's words (the ``Check`` objects of
``sources/formats.py`` and the driver-side header and footer checks are shared code). What the
in-process readers cannot read exactly as Spark does raises ``NotLocal`` before anything is
written, and the step runs on Spark (``coverage.unsupported`` says it before reading, for
options and types).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.executor.sources import InputFile, InputRefused, spark_schema
from spark_jobs.executor.sources.discovery import data_files, exists, file_format
from spark_jobs.executor.sources import time_range
from spark_jobs.executor.sources.formats import Declared, time_check
from spark_jobs.executor.sources.own_traces import input_trace, is_snapshot, keyed_trace, snapshot_trace
from spark_jobs.executor.sources.reading import declared
from spark_jobs.executor.sources.schema_check import UnreadableFile, column_problems, csv_header, header_problems
from spark_jobs.policy import ExecutionPolicy
from spark_jobs.spec.model import WEIGHT, InputSpec
from spark_jobs.state.arrow_trace import arrow_of
from spark_jobs.state.lookup import TraceFiles

from .readers import cdc_records, csv_files, delta_tables, json_files, parquet_files
from .readers.coverage import unsupported
from .readers.records import arrow_type, sql_type, to_table
from .readers.sizes import change_rows
from .zsets import consolidate, negate

__all__ = ["ArrowInputChange", "change_rows", "read_changes", "read_input", "schema", "unsupported"]


class TraceSource(Protocol):
    """Committed traces as the in-process step reads them (``step_types.StoreReader``)."""

    def trace_files(self, node_id: str) -> TraceFiles | None: ...


@dataclass
class ArrowInputChange:
    """What an input contributes to a step: its change (None: no file arrived), the input's own
    trace the change is appended to (``own_traces.input_trace``), cdc records of unknown keys
    ignored and counted, and the bytes of input files read."""

    table: pa.Table | None
    trace: tuple[str, tuple[str, ...]] | None = None
    unknown_keys: int = 0
    bytes_read: int = 0


def schema(spec: InputSpec) -> pa.Schema:
    """The declared columns and the int64 weight, as Arrow types (Spark's own mapping)."""
    return arrow_of(spark_schema(spec))


def _target(d: Declared) -> pa.Schema:
    """The Arrow schema of a declaration's columns and the weight."""
    return pa.schema([(c, arrow_type(sql_type(t))) for c, t in d.types.items()] + [(WEIGHT, pa.int64())])


def read_files(spec: InputSpec, files: Sequence[InputFile], d: Declared, json_reader=None
               ) -> list[tuple[InputFile, pa.Table]]:
    """Each file's rows as a table of the declared columns and ``_weight``, every check passed;
    else ``InputRefused`` naming every refused file (a file of another format too), as
    ``reading.checked_groups``."""
    assert spec.source is not None
    fmt = spec.source.reader_format
    problems = [(f.path, f"a {file_format(f.path)} file in a {spec.source.format} source")
                for f in files if file_format(f.path) != fmt]
    target = _target(d)
    out = []
    for f in files:
        if file_format(f.path) != fmt:
            continue
        table, reasons = _read_file(f, fmt, d, target, json_reader)
        problems += [(f.path, r) for r in reasons]
        if table is not None and not reasons:
            out.append((f, table))
    if problems:
        raise InputRefused(problems, spec.name)
    return out


def _read_file(f: InputFile, fmt: str, d: Declared, target: pa.Schema, json_reader) -> tuple[pa.Table | None, list[str]]:
    if fmt == "parquet":
        return parquet_files.read_file(f.path, d, target)
    if fmt == "csv":
        try:
            header = csv_header(f.path, d.options)
        except UnreadableFile as exc:
            return None, [str(exc)]
        if header is None:
            return None, []  # an empty file holds no rows
        reasons = header_problems(header) or column_problems(dict.fromkeys(header), d.types, d.allow_weight)
        if reasons:
            return None, reasons
        rows = csv_files.read_file(f.path, header, d)
    else:
        rows = (json_reader or json_files.read_file)(f.path, d)
    reasons = rows.tally.reasons()
    types = {c: sql_type(t) for c, t in d.types.items()}
    if reasons:
        return None, reasons
    table = to_table([rows], types, target)
    for c in d.types:  # dates and timestamps within 0001-01-01 .. 9999-12-31, as the Spark readers check
        if c in table.column_names and (out := time_range.outside_rows(table.column(c))) is not None:
            reasons.append(time_check(c).describe(*out))
    return (None, reasons) if reasons else (table, [])


def _union(parts: Sequence[tuple[InputFile, pa.Table]], target: pa.Schema) -> pa.Table:
    if not parts:
        return target.empty_table()
    table = pa.concat_tables([t for _, t in parts])
    zero = pc.equal(table.column(WEIGHT), 0)
    # filtering copies every column: a load's change (SF10's 60M line items) would be held twice
    return table.filter(pc.invert(zero)) if pc.any(zero).as_py() else table


def read_changes(spec: InputSpec, files: Sequence[InputFile]) -> tuple[pa.Table, int]:
    """The union of the files' changes (declared columns, declared types, then ``_weight``; weight
    0 dropped, not consolidated) and the bytes read; ``InputRefused`` naming every bad file."""
    parts = read_files(spec, files, declared(spec, allow_weight=True))
    return _union(parts, schema(spec)), sum(f.size for f, _ in parts)


def read_snapshot(spec: InputSpec, item: InputFile) -> tuple[pa.Table, int]:
    """A full snapshot (a file, or a folder of data files) as a Z-set of +1 rows, and its bytes."""
    if not exists(item.path):
        raise InputRefused([(item.path, "the snapshot disappeared before it was read")], spec.name)
    parts = read_files(spec, data_files(item.path), declared(spec, allow_weight=False))
    return _union(parts, schema(spec)), sum(f.size for f, _ in parts)


def snapshot_delta(new: pa.Table, previous: TraceFiles | None) -> pa.Table:
    """``D``: the new snapshot minus the previous value (the snapshot trace), consolidated."""
    if previous is None:
        return consolidate(new)
    old = previous.read_all()
    old = old.select(new.column_names).cast(new.schema)
    return consolidate(pa.concat_tables([new, negate(old)]))


def read_input(spec: InputSpec, files: Sequence[InputFile], state: TraceSource,
               policy: ExecutionPolicy | None = None) -> ArrowInputChange:
    """Read (and check) the files of one input as the Spark step does (``runtime/inputs.read_input``)."""
    if not files:
        return ArrowInputChange(None)
    trace = input_trace(spec)
    if is_snapshot(spec):
        newest, nbytes = read_snapshot(spec, files[-1])
        return ArrowInputChange(snapshot_delta(newest, state.trace_files(snapshot_trace(spec.name))), trace,
                                bytes_read=nbytes)
    if spec.kind == "cdc":
        return _cdc_change(spec, files, state.trace_files(keyed_trace(spec.name)), policy or ExecutionPolicy(), trace)
    if spec.kind == "delta":
        change = read_delta(spec, files)
        return ArrowInputChange(change.table, bytes_read=change.bytes_read)
    if spec.kind == "postgres":
        from .readers import postgres_tables

        pg = postgres_tables.read_change(spec, files[-1], state.trace_files(keyed_trace(spec.name)),
                                         policy or ExecutionPolicy())
        return ArrowInputChange(pg.table, trace)
    table, nbytes = read_changes(spec, files)
    return ArrowInputChange(table, bytes_read=nbytes)


def read_delta(spec: InputSpec, files: Sequence[InputFile]) -> "delta_tables.DeltaChange":
    """A Delta input's change up to the newest of its pending commit files (a scan lists one)."""
    d = declared(spec, allow_weight=False)
    return delta_tables.read_change(spec, files[-1], d, _target(d))


def _cdc_change(spec: InputSpec, files: Sequence[InputFile], keyed: TraceFiles | None, policy: ExecutionPolicy,
                trace) -> ArrowInputChange:
    d = cdc_records.declaration(spec)
    parts = read_files(spec, files, d, cdc_records.envelope_reader(spec))
    nbytes = sum(f.size for f, _ in parts)
    records = cdc_records.with_order(parts, spec)
    if records is None:  # files without a record
        return ArrowInputChange(schema(spec).empty_table(), trace, bytes_read=nbytes)
    old = cdc_records.old_rows(spec, records, keyed, policy)
    delta, unknown = cdc_records.apply_records(spec, records, old)
    policy_name = spec.source.cdc.unknown_key  # type: ignore[union-attr]
    if policy_name == "refuse" and unknown:
        raise cdc_records.unknown_refusal(spec, d.types, unknown)
    counted = len(unknown) if policy_name == "count" else 0
    return ArrowInputChange(delta.select(schema(spec).names).cast(schema(spec)), trace, counted, nbytes)
