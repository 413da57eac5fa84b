"""A PostgreSQL input's change for one step (``sources/pg_log.py`` reads; this applies), in-process.

The table's changes become keyed change records and are applied by the ``cdc`` machinery
(``cdc_records.old_rows`` / ``apply_records``) against the input's keyed integral
(``keyed:<input>``): per key the last change wins (insert and update replace the row, delete
removes it; an update or delete of a key the input does not hold is ignored, which is what makes
the overlap between the first snapshot and the slot harmless). An UPDATE that changes the key is
a delete of the old key and an insert of the new one. A TRUNCATE, or a table whose declared
columns changed, stops the input with a message.
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
    conv = {c: converter(t.simpleString()) for c, t in declared_types(spec).items()}
    return {c: (None if row is None or row.get(c) is None else conv[c](row[c])) for c in conv}


def _changes_as_records(src: Source, spec: InputSpec, key: Sequence[str], since: int, upto: int
                        ) -> list[tuple[str, dict[str, Any]]]:
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
    out: list[tuple[str, dict[str, Any]]] = []
    for ch in decoded.changes:
        if ch.kind == "insert":
            out.append(("insert", ch.new or {}))
        elif ch.kind == "delete":
            out.append(("delete", ch.old or {}))
        else:
            new = dict(ch.new or {})
            if any(v is UNCHANGED for v in new.values()):
                if ch.old is None or any(ch.old.get(c) is UNCHANGED for c, v in new.items() if v is UNCHANGED):
                    raise src.refuse("an UPDATE left a large (TOASTed) value unchanged, which the log does not "
                                     "carry: set REPLICA IDENTITY FULL on the table so the old values come with it")
                new = {c: (ch.old[c] if v is UNCHANGED else v) for c, v in new.items()}
            if ch.old is not None and any(ch.old.get(k) != new.get(k) for k in key):
                out.append(("delete", ch.old))
                out.append(("insert", new))
            else:
                out.append(("update", new))
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
            records = [(kind, _typed(spec, row)) for kind, row in raw]
            how = "replication"
    kspec = _keyed(spec, key)
    table = _records(spec, records, f"{spec.source.table}@{item.name}")
    target = pa.schema([(c, arrow_type(sql_type(t))) for c, t in declared_types(spec).items()]
                       + [(WEIGHT, pa.int64())])
    if not records:
        return PgChange(target.empty_table(), 0, how, upto)
    old = cdc_records.old_rows(kspec, table, keyed, policy)
    delta, _unknown = cdc_records.apply_records(kspec, table, old)
    return PgChange(delta.select(target.names).cast(target), len(records), how, upto)
