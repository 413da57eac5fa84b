"""A full refresh: every state rebuilt from the retained input files, under the circuit as it is now.

It is how a circuit is changed (a new filter, another aggregate, a new or dropped view): the
committed state was built by the old definition (its fingerprint differs), so the refresh starts
from no state at all, reads every input file still in place, and commits the new fingerprint.
Readers of the view deltas stay right: the delta a refresh commits for a view is the new view
minus the old one. A view that is new starts from empty; a view whose columns changed cannot be
subtracted from, so its delta is the whole new view (its trace starts again); a view that is no
longer in the circuit is dropped (its past deltas stay under ``outputs/``). Each case is said in
the step's notes.
"""
from __future__ import annotations

import json
from typing import Mapping

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from spark_jobs.executor.spark import zset
from spark_jobs.state.store import VIEW_TRACE_PREFIX, view_trace_id


class EmptyState:
    """The state a full refresh starts from: none at all."""

    def read(self, node_id: str) -> DataFrame | None:
        return None

    def trace_files(self, node_id: str) -> None:
        return None

    def bytes_read(self) -> int:
        """Nothing is looked up in no state (``StoreReader.bytes_read``)."""
        return 0


def _shape(schema: StructType) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def old_view(store, view: str, new: DataFrame) -> DataFrame | None:
    """The committed value of ``view`` if it has the same columns and types as ``new``, else None."""
    m = store.manifest()
    entry = m.traces.get(view_trace_id(view)) if m is not None else None
    if entry is None or not entry.schema:
        return None
    if _shape(StructType.fromJson(json.loads(entry.schema))) != _shape(new.schema):
        return None
    return store.read_view(view)


def view_delta(store, view: str, new: DataFrame) -> DataFrame:
    """What a refresh commits as ``view``'s change: new view - old view (the new view if there
    is no comparable old one)."""
    old = old_view(store, view, new)
    return new if old is None else zset.consolidate(zset.plus(new, zset.negate(old)))


def schemas(view_schemas: Mapping[str, str]) -> dict[str, StructType]:
    """Each view's schema from its JSON (``Work.view_schemas``: whichever engine computed it)."""
    return {view: StructType.fromJson(json.loads(text)) for view, text in view_schemas.items()}


def forget_consumed(txn) -> None:
    """A refresh reads every retained file again and records exactly those as consumed."""
    for name in list(txn.previous.inputs if txn.previous is not None else {}):
        txn.set_consumed(name, [])


def start(txn, store, new_views: Mapping[str, StructType]) -> list[str]:
    """Drop every trace of the previous timestep that the refresh does not carry on: all operator
    state, and the view traces of views that are gone or whose columns changed. Returns notes."""
    notes = []
    previous = txn.previous.traces if txn.previous is not None else {}
    for trace_id, entry in list(previous.items()):
        if not trace_id.startswith(VIEW_TRACE_PREFIX):
            txn.drop(trace_id)
            continue
        view = trace_id[len(VIEW_TRACE_PREFIX):]
        if view not in new_views:
            txn.drop(trace_id)
            notes.append(f"view {view} is no longer in the circuit: dropped (its past deltas stay readable "
                         f"with `dbsp show --delta`)")
        elif entry.schema and _shape(StructType.fromJson(json.loads(entry.schema))) != _shape(new_views[view]):
            txn.drop(trace_id)
            notes.append(f"view {view} changed its columns: its delta at this timestep is the whole new "
                         f"view, not new minus old")
    for view in new_views:
        if view_trace_id(view) not in previous and previous:
            notes.append(f"view {view} is new: it starts from empty")
    return notes
