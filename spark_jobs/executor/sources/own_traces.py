"""The trace an input keeps of its own (both engines read and append it the same way).

A ``snapshots`` input keeps its last snapshot (``D`` subtracts it from the next one); a ``cdc``
input keeps its current rows sorted by key (a record looks its old row up by key). A step appends
the input's change to that trace with its other writes, so the trace is the input's integral.
"""
from __future__ import annotations

from spark_jobs.spec.model import InputSpec


def snapshot_trace(input_name: str) -> str:
    """The trace holding the last snapshot of a `snapshots` input (D needs it)."""
    return f"snapshot:{input_name}"


def keyed_trace(input_name: str) -> str:
    """The trace holding a `cdc` input's integral, sorted by its key (changes look old rows up)."""
    return f"keyed:{input_name}"


def is_snapshot(spec: InputSpec) -> bool:
    return spec.source is not None and spec.source.kind == "snapshots"


def input_trace(spec: InputSpec) -> tuple[str, tuple[str, ...]] | None:
    """(trace, sort columns) an input keeps of its own, or None: its integral, which its change is
    appended to (a snapshot input's last snapshot; a cdc input's rows, sorted by key)."""
    if is_snapshot(spec):
        return snapshot_trace(spec.name), ()
    if spec.kind in ("cdc", "postgres"):  # a postgres table's rows, found by key as cdc records find them
        return keyed_trace(spec.name), tuple(spec.key)
    return None
