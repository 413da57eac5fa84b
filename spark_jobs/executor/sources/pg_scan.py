"""What a PostgreSQL input has pending: the log position a step reads up to, as a consumed record.

A step of a ``postgres`` input reads the table's changes up to the server's flushed log position
at the time the step is planned. That position is the input's one pending "file"
(``discovery.InputFile``) named ``lsn/<16 hex digits>``, with ``base`` = the position the last
commit recorded (None before the first commit: the step takes a snapshot); the commit records it
as consumed, in the manifest, with the timestep, as every consumed file is recorded. Nothing is
pending while the log has not moved since the recorded position.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from spark_jobs.spec.model import InputSpec

from .discovery import InputFile, InputScan
from .identity import ConsumedRecords
from .pg_log import Source, advance, flush_position, lsn_text, position_name, position_of


def recorded_position(records: Iterable[dict]) -> int | None:
    """The newest position a commit recorded for the input, None before the first."""
    found = [p for r in records if (p := position_of(str(r.get("name", "")))) is not None]
    return max(found) if found else None


def scan_postgres(spec: InputSpec, records: ConsumedRecords, fingerprints: bool = True) -> InputScan:
    """The input's pending position (at most one), after moving the slot to the recorded position
    (a crash may have left it behind)."""
    last = recorded_position(records.by_name.values())
    with Source(spec) as src:
        upto = flush_position(src)
        if last is not None:
            try:
                advance(src, last)
            except Exception:  # noqa: BLE001 - no slot yet, or a server that refuses: the read copes
                pass
    item = InputFile(f"postgresql:{spec.source.connection}/{spec.source.table}@{lsn_text(upto)}", 0, 0.0,
                     position_name(upto))
    if last is None:
        pending = [replace(item, base=None)]
    elif upto > last:
        pending = [replace(item, base=last)]
    else:
        pending = []
    return InputScan(pending, records, [], [item], [], spec.name)


def advance_to(spec: InputSpec, records: Iterable[dict]) -> None:
    """Move the input's slot to the recorded position (after a commit)."""
    last = recorded_position(records)
    if last is None:
        return
    with Source(spec) as src:
        advance(src, last)
