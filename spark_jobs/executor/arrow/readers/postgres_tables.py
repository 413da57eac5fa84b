"""A PostgreSQL input's change for one step (``sources/pg_log.py`` reads; this applies), in-process.

The table's changes become keyed change records and are applied by the ``cdc`` machinery
(``cdc_records.old_rows`` / ``apply_records``) against the input's keyed integral
(``keyed:<input>``): per key the last change wins (insert and update replace the row, delete
removes it; an update or delete of a key the input does not hold is ignored, which is what makes
the overlap between the first snapshot and the slot harmless). An UPDATE that changes the key is
a delete of the old key and an insert of the new one. A value an UPDATE left out (an unchanged
TOASTed value) is the one the key's row held (``_fill_unchanged``). A TRUNCATE, or a table whose
declared columns changed, stops the input with a message.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import pyarrow as pa

from spark_jobs.executor.sources import InputFile
from spark_jobs.executor.sources.cdc import KIND, OP
from spark_jobs.executor.sources.checks import FILE_COL
from spark_jobs.executor.sources.pg_log import (UNCHANGED, Source, columns_of, converter, decode, ensure_slot,
                                                 peek, position_of, schema_problems, snapshot, the_key)
from spark_jobs.executor.sources.spark_types import declared_types
from spark_jobs.policy import ExecutionPolicy
from spark_jobs.spec.model import WEIGHT, CdcOptions, InputSpec
from spark_jobs.state.lookup import TraceFiles

from . import cdc_records
from .records import arrow_type, sql_type


@dataclass
class PgChange:
    table: pa.Table
    rows: int  # records read (snapshot rows or row changes)
    how: str  # "snapshot" | "replication"
    position: int


def _keyed(spec: InputSpec, key: Sequence[str]) -> InputSpec:
    """The spec the cdc machinery applies records with: the key found, unknown keys ignored."""
    return replace(spec, key=tuple(key), source=replace(spec.source, cdc=CdcOptions(unknown_key="ignore")))


def _records(spec: InputSpec, rows: list[tuple[str, dict[str, Any]]], where: str) -> pa.Table:
    types = declared_types(spec)
    columns = {c: pa.array([r.get(c) for _, r in rows], arrow_type(sql_type(t))) for c, t in types.items()}
    table = pa.table(columns)
    table = table.append_column(OP, pa.array([k for k, _ in rows], pa.string()))
    table = table.append_column(FILE_COL, pa.array([where] * len(rows), pa.string()))
    table = table.append_column(cdc_records.POS, pa.array(range(len(rows)), pa.int64()))
    return table.append_column(KIND, pa.array([k for k, _ in rows], pa.string()))


def _typed(spec: InputSpec, row: dict[str, Any] | None) -> dict[str, Any]:
    """The row's declared columns converted from text (``UNCHANGED`` kept: filled in later)."""
    conv = {c: converter(t.simpleString()) for c, t in declared_types(spec).items()}
    out: dict[str, Any] = {}
    for c in conv:
        v = None if row is None else row.get(c)
        out[c] = v if v is None or v is UNCHANGED else conv[c](v)
    return out


def _changes_as_records(src: Source, spec: InputSpec, key: Sequence[str], since: int, upto: int
                        ) -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    """(kind, row, the old key's row for the insert half of a key change, else None), in log order."""
    decoded = decode(peek(src, upto), since, upto)
    if decoded.truncated:
        raise src.refuse("the table was TRUNCATEd: a truncate is not read as deletes; rebuild the views from "
                         "the table as it is now (`dbsp step --full-refresh`)")
    table = spec.source.table
    for name, cols in decoded.relations.values():
        found = {c for c, _ in cols}
        missing = [c for c in spec.column_names if c not in found]
        if name == table and missing:
            raise src.refuse(f"the table's columns changed (no column {', '.join(missing)} any more): the input "
                             f"stops here; change the circuit's schema and rebuild (`dbsp step --full-refresh`)")
    out: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
    for ch in decoded.changes:
        if ch.kind == "insert":
            out.append(("insert", ch.new or {}, None))
        elif ch.kind == "delete":
            out.append(("delete", ch.old or {}, None))
        else:
            new = dict(ch.new or {})
            if ch.full and ch.old is not None:  # the whole old row carries a value the new one leaves out
                new = {c: (ch.old[c] if v is UNCHANGED and ch.old.get(c, UNCHANGED) is not UNCHANGED else v)
                       for c, v in new.items()}
            if ch.old is not None and any(ch.old.get(k) != new.get(k) for k in key):
                out.append(("delete", ch.old, None))
                out.append(("insert", new, ch.old))
            else:
                out.append(("update", new, None))
    return out


def _fill_unchanged(src: Source, kspec: InputSpec, records: list[tuple[str, dict[str, Any]]],
                    priors: list[dict[str, Any] | None], keyed: TraceFiles | None, policy: ExecutionPolicy,
                    where: str) -> list[tuple[str, dict[str, Any]]]:
    """Each value an UPDATE left out (an unchanged TOASTed value: pgoutput sends a marker, not the
    value) taken from the key's row as it stands just before that update (the old key's, when the
    update changed the key: ``priors``): the row an earlier change of this step wrote, else the
    committed row of the input's keyed integral. A key held by neither is refused (the value is
    nowhere to be read)."""
    clean = [(k, {c: (None if v is UNCHANGED else v) for c, v in row.items()}) for k, row in records]
    committed = cdc_records.old_rows(kspec, _records(kspec, clean, where), keyed, policy)
    key = list(kspec.key)
    current: dict[tuple, dict[str, Any]] = {}
    for row, w in zip(committed.select(list(kspec.column_names)).to_pylist(), committed.column(WEIGHT).to_pylist()):
        if w > 0:
            current[tuple(row[k] for k in key)] = row
    gone: dict[tuple, dict[str, Any]] = {}  # rows just deleted: the old half of a key change
    out = []
    for (kind, row), prior in zip(records, priors):
        k = tuple(row[c] for c in key)
        if kind == "delete":
            if k in current:
                gone[k] = current.pop(k)
        else:
            if any(v is UNCHANGED for v in row.values()):
                at = k if prior is None else tuple(prior[c] for c in key)
                held = current.get(at) if prior is None else gone.get(at, current.get(at))
                if held is None:
                    raise src.refuse("an UPDATE left a large (TOASTed) value unchanged, which the log does not "
                                     "carry, of a row this input does not hold; set REPLICA IDENTITY FULL on the "
                                     "table so the old values come with it")
                row = {c: (held[c] if v is UNCHANGED else v) for c, v in row.items()}
            current[k] = row
        out.append((kind, row))
    return out


def read_change(spec: InputSpec, item: InputFile, keyed: TraceFiles | None, policy: ExecutionPolicy) -> PgChange:
    """The input's change up to the position of ``item`` (a snapshot when ``item.base`` is None)."""
    upto = position_of(item.name)
    assert upto is not None, item.name
    with Source(spec) as src:
        key = the_key(src)
        problems = schema_problems(spec, columns_of(src))
        if problems:
            raise src.refuse("; ".join(problems))
        if item.base is None:
            ensure_slot(src)  # before the snapshot: every change after it is in the slot
            rows, _ = snapshot(src)
            records = [("upsert", r) for r in rows]
            how = "snapshot"
        else:
            ensure_slot(src)
            raw = _changes_as_records(src, spec, key, item.base, upto)
            records = [(kind, _typed(spec, row)) for kind, row, _ in raw]
            how = "replication"
    kspec = _keyed(spec, key)
    if any(v is UNCHANGED for _, row in records for v in row.values()):
        priors = [None if prior is None else _typed(spec, prior) for _, _, prior in raw]
        records = _fill_unchanged(src, kspec, records, priors, keyed, policy, f"{spec.source.table}@{item.name}")
    table = _records(spec, records, f"{spec.source.table}@{item.name}")
    target = pa.schema([(c, arrow_type(sql_type(t))) for c, t in declared_types(spec).items()]
                       + [(WEIGHT, pa.int64())])
    if not records:
        return PgChange(target.empty_table(), 0, how, upto)
    old = cdc_records.old_rows(kspec, table, keyed, policy)
    delta, _unknown = cdc_records.apply_records(kspec, table, old)
    return PgChange(delta.select(target.names).cast(target), len(records), how, upto)
