"""A step recomputed from the integrated inputs instead of evaluating Q^Δ on the change.

Why: a step's incremental cost follows its change, a recompute's its inputs; past some change
size (a bulk reload, a large correction) evaluating Q once over the inputs is cheaper than Q^Δ
over the change (``cost.py`` decides). The result must be the same timestep: the view deltas
committed are ``Q(I(x) + Δx) - Q(I(x))`` (new view minus the committed one), and every trace is
replaced by the value a first step over the integrated inputs writes, in the same transaction
as the views, so the next (incremental) step reads the state it would have read anyway.

The integrated inputs are what the state already keeps, never input files read again:

- a ``changes`` input: its integral ``I(x)``, which the incremental circuit keeps for the bag
  check (``ir.incrementalize.bag_integrals``);
- a ``snapshots`` input: its last snapshot (``snapshot:<input>``);
- a ``cdc`` input: its current rows by key (``keyed:<input>``).

An input without such a trace (``append_only``: nothing keeps its rows), or whose integral is
bounded by event time (rows no future change reaches were dropped, so the integral is no longer
the input), cannot be recomputed: ``CannotRecompute`` says why and the step stays incremental.
Nor can a circuit with a stream operator of its own (``integrate``, ``delay``, ``differentiate``
as nodes): its views depend on the past timesteps' changes, not only on the integrated inputs,
so Q over them would commit a wrong delta.
Phases 1-3 (read, late rows, bag check) run as for an incremental step, on the change.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from spark_jobs.errors import DbspError
from spark_jobs.executor.sources.own_traces import input_trace

if TYPE_CHECKING:
    from spark_jobs.runtime.circuit import CircuitRuntime


class CannotRecompute(DbspError):
    """This circuit's views cannot be recomputed from its state (the reason says why); the step
    runs incrementally instead (never reaches the user: ``why_not`` turns it into a reason)."""


class NoState:
    """The state a recompute evaluates from: none (every operator starts empty), without Spark."""

    def read(self, node_id: str) -> None:
        return None

    def trace_files(self, node_id: str) -> None:
        return None

    def bytes_read(self) -> int:
        return 0


def integral_traces(rt: "CircuitRuntime") -> dict[str, str]:
    """Input name -> the trace holding its integral; ``CannotRecompute`` when one has none."""
    from spark_jobs.ir.bounds import state_bounds
    from spark_jobs.ir.incrementalize import bag_integrals

    from spark_jobs.ir.operator import STREAM, operator

    for node in rt.compiled.query:  # the circuit as written (the incremental one adds integrators)
        op = operator(node.op)
        if op.linearity == STREAM and not op.in_body_only:
            raise CannotRecompute(f"node {node.origin or node.id!r} is a stream operator ({node.op}): its view "
                                  "depends on past timesteps, not only on the integrated inputs")
    spec, circuit = rt.compiled.spec, rt.compiled.incremental
    bags = bag_integrals(circuit)
    bounded = state_bounds(circuit)
    out: dict[str, str] = {}
    for name, inp in spec.inputs.items():
        own = input_trace(inp)
        if own is not None:
            out[name] = own[0]
        elif inp.kind == "changes" and name in bags:
            out[name] = bags[name]
        else:
            what = "append_only" if inp.kind == "append_only" else f"{inp.kind or 'its kind of'}"
            raise CannotRecompute(f"input {name} ({what}) keeps no integral of its rows")
        if out[name] in bounded:
            raise CannotRecompute(f"input {name}'s integral is bounded by event time ({bounded[out[name]].describe()}): "
                                  f"rows it dropped cannot be recomputed")
    return out


def why_not(rt: "CircuitRuntime") -> str | None:
    """Why this circuit cannot be recomputed (None: it can), checked on the committed state too."""
    try:
        traces = integral_traces(rt)
    except CannotRecompute as exc:
        return str(exc)
    m = rt.committed.manifest()
    for name, trace in traces.items():
        entry = m.traces.get(trace) if m is not None else None
        if entry is not None and entry.dropped_below:
            return f"input {name}'s integral dropped rows below its event-time bound"
    return None


def input_rows(rt: "CircuitRuntime") -> int:
    """Rows of the integrated inputs as the committed manifest lists them (physical rows: a
    trace's deltas not yet compacted count too); 0 when a circuit keeps no integral."""
    try:
        traces = integral_traces(rt)
    except CannotRecompute:
        return 0
    m = rt.committed.manifest()
    if m is None:
        return 0
    return sum(m.traces[t].rows for t in traces.values() if t in m.traces)


def integrate(rt: "CircuitRuntime", engine: Any, deltas: Mapping[str, Any], state: Any
              ) -> tuple[dict[str, Any], dict[str, tuple]]:
    """Each input's integral after this step (its committed integral plus its checked change,
    consolidated, on ``engine``), and every input's own trace (snapshots, cdc): a recompute
    replaces them all with the integrated values."""
    spec = rt.compiled.spec
    values = {name: engine.integrate(name, trace, deltas.get(name), state)
              for name, trace in integral_traces(rt).items()}
    own = {name: t for name, t in ((n, input_trace(i)) for n, i in spec.inputs.items()) if t is not None}
    return values, own


def appended(rt: "CircuitRuntime", writes: Sequence[Any], changes: Mapping[str, Any]) -> list[Any]:
    """A recompute's state writes on Spark with each input's integral (and own trace)
    *appended* the step's checked change instead of replaced by the integrated value, as the
    in-process recompute does (``recompute_arrow.py``).

    Why: the new integral is the committed one plus the change, which is exactly what an
    incremental step appends; rewriting it whole re-sorted and re-wrote every input row: a W1
    SF 0.2 recomputed step on a cluster rewrote its ~1.7M integrated input rows in 9 jobs. The
    traces hold the same Z-set either way (the tests compare them with an incremental run's); the
    trace's own deltas are merged and compacted by the store's usual rules. A write of no change
    (an input without files this step) appends nothing but keeps the trace listed as written
    (``drop_unwritten``)."""
    inputs = {trace: name for name, trace in integral_traces(rt).items()}
    out = []
    for w in writes:
        name = inputs.get(w.trace)
        if name is None or not w.replace:
            out.append(w)
            continue
        out.append(dataclasses.replace(w, value=_spark_change(changes.get(name), w.value), replace=False))
    return out


def _spark_change(change: Any, integral: Any) -> Any:
    """An input's checked change (a DataFrame or None) with the columns and types of its
    ``integral`` (a column added since the integral was written: NULL), no Spark job."""
    from spark_jobs.executor.spark import zset

    if change is None:
        return integral.sparkSession.createDataFrame([], integral.schema)
    return zset.conformed(change, integral.schema.fields, cast=True)


__all__ = ["CannotRecompute", "NoState", "appended", "input_rows", "integral_traces", "integrate", "why_not"]
