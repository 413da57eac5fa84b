"""Changing a circuit without replaying its history: the plan, and the step that applies it.

Why: an edit (a new view, another filter, a column more) changes the circuit's fingerprint, and
a full refresh replays every retained input file and recomputes every node, the ones the edit did
not touch too; once retention has pruned the files it cannot run at all. But the state already
holds what a rebuild needs. Every commit records each node's fingerprint (``ir/node_fingerprints``:
its definition and its inputs', transitively), so the edited circuit is compared with the
committed one node by node:

- **kept**: same id, same fingerprint: its state is kept and it steps incrementally on the change;
- **new** / **rebuilt**: no node of that id before / another definition: bootstrapped, i.e.
  evaluated as a first step over the integrated inputs the state keeps (a ``changes`` input's
  integral, a snapshot input's last snapshot, a cdc input's rows by key, each plus this step's
  change; ``recompute.py``), never over the input files, so it works after retention pruned
  them. A kept node upstream of a rebuilt one whose integral the state keeps (``I(x)`` of a
  join side, an aggregate's or a distinct's input) is not evaluated again: its value is that
  integral plus its change of this step, and nothing above it is read; other kept nodes upstream
  are evaluated again in that pass (from the integrals) but keep their own state;
- **removed**: a node of the committed circuit that is gone: its traces are dropped at this commit.

Views: a kept view's delta is its incremental delta; a new view's first delta is its whole value;
a rebuilt view's delta is new value - committed value (its history stays readable and a published
table stays right), or its whole value when its columns changed (its history restarts there); a
removed view's trace is dropped (its past deltas stay until retention, its published table is
left in place). An input whose rows nothing keeps (``append_only``) or whose integral dropped rows
below an event-time bound cannot feed a rebuilt node: the plan names it (``cannot``) and the step
falls back to a full refresh, which is refused when retention has removed files.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from spark_jobs.executor.sources.own_traces import input_trace
from spark_jobs.ir.node_fingerprints import node_fingerprints, owner
from spark_jobs.state.store import VIEW_TRACE_PREFIX, view_trace_id

if TYPE_CHECKING:
    from spark_jobs.runtime.circuit import CircuitRuntime
    from spark_jobs.state.manifest import Manifest

META_KEY = "node_fingerprints"
VIEW_STARTS = "view_starts"  # = spark_jobs.publish.VIEW_STARTS: views this change started again
APPLY_CHANGE = "apply_change"  # the mode of a step that applies a change
ON_CHANGE = ("refuse", "bootstrap")  # settings.on_change


def fingerprints(rt: "CircuitRuntime") -> dict[str, str]:
    """This circuit's node fingerprints (computed once per compiled circuit)."""
    key = id(rt.compiled)
    found = _FPS.get(key)
    if found is None or found[0] is not rt.compiled:
        found = (rt.compiled, node_fingerprints(rt.compiled.spec, rt.compiled.incremental))
        _FPS[key] = found
    return found[1]


_FPS: dict[int, tuple[Any, dict[str, str]]] = {}


def on_change(rt: "CircuitRuntime") -> str:
    """``settings.on_change`` of the circuit: refuse (default) or bootstrap."""
    return str(rt.compiled.spec.settings.get("on_change", "refuse"))


@dataclass
class ChangePlan:
    """How an edited circuit goes on from the committed state (see the module docstring)."""

    circuit: str
    timestep: int  # the last committed timestep
    recorded: bool  # the committed state recorded node fingerprints (else: every node is rebuilt)
    nodes: dict[str, str] = field(default_factory=dict)  # node id -> kept | new | rebuilt
    removed: list[str] = field(default_factory=list)  # node ids (owners of traces) no longer in the circuit
    views: dict[str, str] = field(default_factory=dict)  # view -> kept | new | rebuilt | reshaped | removed
    reads: dict[str, list[str]] = field(default_factory=dict)  # user node -> what its bootstrap reads
    inputs: dict[str, str] = field(default_factory=dict)  # input -> the trace its integral is read from
    cannot: list[str] = field(default_factory=list)  # why a node cannot be bootstrapped from state
    # kept node -> its kept integral's trace: the bootstrap reads it (+ the node's change) instead
    # of evaluating the node and what is above it again
    cuts: dict[str, str] = field(default_factory=dict)
    read_rows: int = 0  # rows of the integrals (inputs' and kept nodes') the bootstrap reads
    notes: list[str] = field(default_factory=list)  # what the user must do besides (a sink table to alter)
    keys: dict[str, tuple] = field(default_factory=dict)  # committed Z-set trace -> the keys it is sorted on

    def ids(self, *status: str) -> set[str]:
        return {n for n, s in self.nodes.items() if s in status}

    @property
    def targets(self) -> set[str]:
        """The nodes the bootstrap pass evaluates results of: new and rebuilt ones."""
        return self.ids("new", "rebuilt")

    def summary(self) -> str:
        """One sentence: what changed (for the refusal of a plain step)."""
        parts = [f"{s} view(s) {', '.join(sorted(v for v, x in self.views.items() if x == s))}"
                 for s in ("new", "rebuilt", "reshaped", "removed") if s in self.views.values()]
        count = {s: len(self.ids(s)) for s in ("kept", "new", "rebuilt")}
        what = "; ".join(parts) or "no view changed"
        return (f"{what} ({count['kept']} operator(s) kept, {count['new']} new, {count['rebuilt']} rebuilt, "
                f"{len(self.removed)} removed)")

    def lines(self, origins: Mapping[str, str]) -> list[str]:
        """What `dbsp plan-change` prints: per user node its status, and what each rebuild reads."""
        out = [f"circuit {self.circuit}: change against the state at timestep {self.timestep}"]
        if not self.recorded:
            out.append("  the committed state recorded no node fingerprints (written before they existed): "
                       "every node is rebuilt from the integrated inputs")
        by_origin: dict[str, set[str]] = {}
        for nid, status in self.nodes.items():
            by_origin.setdefault(origins.get(nid, nid), set()).add(status)
        for status in ("kept", "new", "rebuilt"):
            names = sorted(o for o, s in by_origin.items() if _origin_status(s) == status)
            out.append(f"  {status}: {', '.join(names) if names else '-'}")
        out.append(f"  removed: {', '.join(sorted(self.removed)) if self.removed else '-'}")
        out.append("  views: " + ", ".join(f"{v} {s}" for v, s in sorted(self.views.items())))
        for origin, reads in sorted(self.reads.items()):
            out.append(f"  {origin} reads: {'; '.join(reads)}")
        for note in self.notes:
            out.append(f"  note: {note}")
        for why in self.cannot:
            out.append(f"  cannot bootstrap: {why}")
        if self.cannot:
            out.append("  => `dbsp step --apply-change` falls back to a full refresh (refused if retention "
                       "removed input files)")
        else:
            out.append("  => apply with `dbsp step --apply-change` or `settings.on_change: bootstrap`")
        return out


def _origin_status(statuses: set[str]) -> str:
    if statuses == {"kept"}:
        return "kept"
    if statuses == {"new"}:
        return "new"
    return "rebuilt"


def plan_change(rt: "CircuitRuntime", manifest: "Manifest | None" = None) -> ChangePlan | None:
    """The plan of applying the circuit as it is now to the committed state; None when nothing
    is committed or the circuit did not change."""
    m = manifest if manifest is not None else rt.committed.manifest()
    if m is None or m.fingerprint == rt.compiled.fingerprint:
        return None
    circuit, spec = rt.compiled.incremental, rt.compiled.spec
    old = (m.meta or {}).get(META_KEY)
    now = fingerprints(rt)
    plan = ChangePlan(rt.name, m.timestep, isinstance(old, dict))
    plan.keys = {t: tuple(e.keys) for t, e in m.traces.items() if e.kind == "zset"}
    old = old if isinstance(old, dict) else {}
    for nid, fp in now.items():
        plan.nodes[nid] = "kept" if old.get(nid) == fp else ("rebuilt" if nid in old or _has_trace(m, circuit, nid)
                                                              else "new")
    gone = {nid for nid in old if nid not in circuit}
    gone |= {o for t in m.traces if not t.startswith(VIEW_TRACE_PREFIX)
             for o in [t.split("/", 1)[0]] if owner(circuit, t) is None and not _own_input_trace(spec, t)}
    plan.removed = sorted(gone)
    for view, nid in circuit.outputs.items():
        entry = m.traces.get(view_trace_id(view))
        if entry is None:
            plan.views[view] = "new"
        elif plan.nodes.get(nid) == "kept":
            plan.views[view] = "kept"
        else:
            plan.views[view] = "reshaped" if _columns(entry) not in (None, set(circuit[nid].columns)) else "rebuilt"
    for t in m.traces:
        if t.startswith(VIEW_TRACE_PREFIX) and t[len(VIEW_TRACE_PREFIX):] not in circuit.outputs:
            plan.views[t[len(VIEW_TRACE_PREFIX):]] = "removed"
    for view, status in sorted(plan.views.items()):
        sink = spec.outputs[view].sink if view in spec.outputs else None
        if status == "reshaped" and sink is not None:
            old_cols = sorted(_columns(m.traces[view_trace_id(view)]) or ())
            plan.notes.append(f"view {view} changes its columns ({', '.join(old_cols)} -> "
                              f"{', '.join(circuit[circuit.outputs[view]].columns)}): alter its PostgreSQL table "
                              f"{sink.table} to the new columns; its rows are then rewritten from the whole view")
    _plan_reads(rt, m, plan)
    _plan_resorts(circuit, m, plan)
    return plan


def _plan_resorts(circuit: Any, m: "Manifest", plan: ChangePlan) -> None:
    """Kept integrals the edited circuit looks up by other keys (a new reader): rewritten whole
    at the change (``_resorted``), so read whole too."""
    from spark_jobs.executor.evaluate import state_keys

    for nid, status in plan.nodes.items():
        entry = m.traces.get(nid)
        node = circuit[nid]
        if status != "kept" or node.op != "integrate" or entry is None or entry.kind != "zset":
            continue
        keys = tuple(state_keys(circuit, node))
        if tuple(entry.keys) != keys:
            plan.notes.append(f"kept {nid} is looked up by other columns now ({', '.join(keys)}): rewritten whole "
                              f"({entry.rows:,} rows), sorted on them")
            plan.read_rows += entry.rows


def _has_trace(m: "Manifest", circuit: Any, nid: str) -> bool:
    return any(owner(circuit, t) == nid for t in m.traces)


def _own_input_trace(spec: Any, trace: str) -> bool:
    return any((own := input_trace(inp)) is not None and own[0] == trace for inp in spec.inputs.values())


def _columns(entry: Any) -> set[str] | None:
    if not entry.schema:
        return None
    return {f["name"] for f in json.loads(entry.schema).get("fields", []) if f["name"] != "_weight"}


def _not_null_added(inp: Any, entry: Any) -> list[str]:
    """Columns the input declares NOT NULL that its committed integral lacks (added by the edit:
    its old rows would read NULL where NULL is not allowed)."""
    held = _columns(entry)
    if held is None:
        return []
    return [c.name for c in inp.columns if c.name not in held and not c.nullable]


def bootstrap_targets(plan: ChangePlan, circuit: Any) -> set[str]:
    """Nodes whose value the bootstrap pass needs: new and rebuilt nodes, and the node of every
    view that is not kept (a new view of a kept node starts with its whole value)."""
    return plan.targets | {circuit.outputs[v] for v, s in plan.views.items() if s not in ("kept", "removed")}


def bootstrap_nodes(circuit: Any, targets: set[str], cuts: Mapping[str, str]) -> set[str]:
    """The nodes the bootstrap pass evaluates for ``targets``: they and what they read,
    transitively, except kept nodes whose integral is read instead (``cuts``) and what is above
    them (unless another path needs it)."""
    seen: set[str] = set()
    todo = list(targets)
    while todo:
        nid = todo.pop()
        if nid in seen or nid in cuts or nid not in circuit:
            continue
        seen.add(nid)
        todo.extend(circuit[nid].inputs)
    return seen


def _kept_integrals(circuit: Any, plan: ChangePlan, m: "Manifest") -> dict[str, str]:
    """Kept node -> the trace of its integral ``I(node)``, where that integral is kept, committed
    and whole (not bounded by event time): the node's value at this step is that integral plus
    its change, so a bootstrap needs nothing above it. Inputs' integrals are read as inputs."""
    out: dict[str, str] = {}
    for node in circuit:
        if node.op != "integrate" or len(node.inputs) != 1:
            continue
        source = node.inputs[0]
        entry = m.traces.get(node.id)
        if (circuit[source].op != "input" and plan.nodes.get(source) == "kept" and plan.nodes.get(node.id) == "kept"
                and entry is not None and not entry.dropped_below):
            out[source] = node.id
    return out


def _plan_reads(rt: "CircuitRuntime", m: "Manifest", plan: ChangePlan) -> None:
    """What each bootstrapped user node reads, and the inputs that cannot feed it."""
    from spark_jobs.ir.incrementalize import bag_integrals

    circuit, spec = rt.compiled.incremental, rt.compiled.spec
    bags = bag_integrals(circuit)
    targets = bootstrap_targets(plan, circuit)
    if not targets:
        return
    for name, inp in spec.inputs.items():
        own = input_trace(inp)
        trace = own[0] if own is not None else bags.get(name) if inp.kind == "changes" else None
        if trace is not None:
            plan.inputs[name] = trace
    integrals = _kept_integrals(circuit, plan, m)
    by_origin: dict[str, set[str]] = {}
    for nid in targets:
        by_origin.setdefault(circuit[nid].origin or nid, set()).add(nid)
    blocked: set[str] = set()
    read: dict[str, int] = {}  # trace -> rows, each integral counted once
    for origin, nids in sorted(by_origin.items()):
        reads = []
        above = bootstrap_nodes(circuit, nids, integrals)
        cuts = {i: integrals[i] for n in above for i in circuit[n].inputs if i in integrals}
        cuts.update({n: integrals[n] for n in nids if n in integrals})
        plan.cuts.update(cuts)
        for nid, trace in sorted(cuts.items()):
            rows = m.traces[trace].rows
            read[trace] = rows
            reads.append(f"kept {circuit[nid].origin or nid}: its integral {trace} ({rows:,} rows) + this step's change")
        for node in (circuit[i] for i in sorted(above) if circuit[i].op == "input"):
            name = node.param("name") or node.id
            trace = plan.inputs.get(name)
            entry = m.traces.get(trace) if trace else None
            consumed = bool(((m.inputs or {}).get(name) or {}).get("consumed"))
            if not consumed and (trace is None or entry is None):
                reads.append(f"input {name}: its pending files (nothing of it committed yet)")
            elif trace is None or entry is None:
                what = spec.inputs[name].kind or "its kind"
                reads.append(f"input {name}: nothing ({what}: no integral kept)")
                blocked.add(f"input {name} ({what}) keeps no integral of its rows: {origin} cannot be "
                            f"bootstrapped from state")
            elif entry.dropped_below:
                reads.append(f"input {name}: its integral {trace}, bounded by event time")
                blocked.add(f"input {name}'s integral dropped rows below its event-time bound: {origin} "
                            f"cannot be bootstrapped from state")
            elif (added := _not_null_added(spec.inputs[name], entry)):
                reads.append(f"input {name}: nothing (new NOT NULL column(s) {', '.join(added)})")
                blocked.add(f"input {name} gained NOT NULL column(s) {', '.join(added)} its committed rows have no "
                            f"value for: {origin} cannot be bootstrapped from state (declare them nullable)")
            else:
                read[trace] = entry.rows
                reads.append(f"input {name}: integral {trace} ({entry.rows:,} rows) + this step's change")
        kept_above = sorted({circuit[i].origin or i for i in above if plan.nodes.get(i) == "kept"
                             and circuit[i].op not in ("input", "integrate", "delay")
                             and (circuit[i].origin or i) != origin} - set(spec.inputs))
        if kept_above:
            reads.append(f"evaluates kept {', '.join(kept_above)} again from those (their state is kept)")
        plan.reads[origin] = reads
    plan.cannot = sorted(blocked)
    plan.read_rows = sum(read.values())


# ---- applying it -----------------------------------------------------------------------------
@dataclass
class Applied:
    """What the bootstrap step computed: view deltas and state updates (the recipe commits them)."""

    outputs: dict[str, Any]
    writes: list[Any]
    notes: list[str]


def compute(rt: "CircuitRuntime", engine: Any, plan: ChangePlan, deltas: Mapping[str, Any],
            own: Mapping[str, tuple], state: Any, say: Any) -> Applied:
    """Phase 4 of a step that applies ``plan``: kept nodes step incrementally on ``deltas`` with
    their state; new and rebuilt nodes are evaluated as a first step over the integrated inputs."""
    from spark_jobs.runtime.recipe import state_writes
    from spark_jobs.runtime.recompute import NoState

    circuit, spec = rt.compiled.incremental, rt.compiled.spec
    kept = plan.ids("kept")
    targets = bootstrap_targets(plan, circuit)
    say(f"applying the change: {len(kept)} operator(s) kept, {len(targets)} bootstrapped from the state")
    incr = engine.evaluate(deltas, state, first_step=False, full=False, only=kept)
    kept_inputs = {n for n in kept if circuit[n].op == "input"}
    kept_own = {name: t for name, t in own.items() if name in kept_inputs}
    writes = [_resorted(w, plan, engine, state) for w in state_writes(rt, incr, deltas, kept_own, False)]
    outputs = {v: d for v, d in incr.outputs.items() if plan.views.get(v) == "kept"}
    notes = []
    if targets:
        # kept nodes whose integral the state keeps: their value is that integral + their change
        values = {nid: engine.integral(trace, incr.values[nid], state) for nid, trace in sorted(plan.cuts.items())}
        needed = bootstrap_nodes(circuit, targets, plan.cuts)
        names = {circuit[i].param("name") or i for i in needed if circuit[i].op == "input"}
        integrated = {name: engine.integrate(name, plan.inputs[name], deltas.get(name), state)
                      if name in plan.inputs else deltas.get(name) for name in sorted(names)}
        integrated = {k: v for k, v in integrated.items() if v is not None}
        rec = engine.evaluate(integrated, NoState(), first_step=True, full=False, only=needed,
                              external=values.__getitem__)
        for w in state_writes(rt, rec, integrated, {}, True):
            if owner(circuit, w.trace) in plan.targets:
                writes.append(w)
        for v, status in plan.views.items():
            if status in ("kept", "removed"):
                continue
            nid = circuit.outputs[v]
            value = rec.engine.consolidate(values[nid]) if nid in values else rec.outputs[v]
            outputs[v] = value if status in ("new", "reshaped") else engine.view_delta(v, value)
            notes.append({"new": f"view {v} is new: its first delta is its whole value",
                          "reshaped": f"view {v} changed its columns: its delta is its whole new value "
                                      f"(its history restarts at this timestep)",
                          "rebuilt": f"view {v} changed: bootstrapped from the state, its delta is new - old"}[status])
    # own traces (snapshots, cdc rows) of inputs whose definition changed: replaced by their
    # integral (old rows padded with NULL for an added column)
    for name, inp in spec.inputs.items():
        trace = input_trace(inp)
        if trace is not None and name not in kept_inputs and name in plan.inputs:
            from spark_jobs.runtime.recipe import Write

            value = engine.integrate(name, trace[0], deltas.get(name), state)
            writes.append(Write(trace[0], value, "zset", (), tuple(trace[1]), True))
    for v, status in plan.views.items():
        if status == "removed":
            notes.append(f"view {v} is no longer in the circuit: its state is dropped (its published table, "
                         f"if any, is left in place)")
    return Applied(outputs, writes, notes)


def _resorted(w: Any, plan: ChangePlan, engine: Any, state: Any) -> Any:
    """A kept Z-set trace the edited circuit looks up by other keys (a new reader of an input's
    integral, e.g. an aggregate grouping it by its own columns) cannot take an append sorted on
    them: it is rewritten whole (its committed value + this step's append), sorted on the new keys."""
    from spark_jobs.runtime.recipe import Write

    old = plan.keys.get(w.trace)
    if w.replace or w.kind != "zset" or old is None or old == tuple(w.keys):
        return w
    return Write(w.trace, engine.integral(w.trace, w.value, state), w.kind, w.keys, w.sort_by, True, w.row_group_bytes)


class GateState:
    """The committed state as the quality gate of a change reads it: a reshaped view has no old
    value to compare its delta with (its history restarts)."""

    def __init__(self, state: Any, plan: ChangePlan) -> None:
        self.state = state
        self.hidden = {view_trace_id(v) for v, s in plan.views.items() if s == "reshaped"}

    def read(self, node_id: str) -> Any:
        return None if node_id in self.hidden else self.state.read(node_id)

    def trace_files(self, node_id: str) -> Any:
        return None if node_id in self.hidden else self.state.trace_files(node_id)

    def bytes_read(self) -> int:
        return self.state.bytes_read()


def drop_replaced(txn: Any, rt: "CircuitRuntime", plan: ChangePlan, written: set[str]) -> None:
    """At the commit of a change: drop the traces of removed nodes, of rebuilt nodes the
    bootstrap did not write again, of removed and reshaped views, and of removed inputs."""
    circuit, spec = rt.compiled.incremental, rt.compiled.spec
    previous = txn.previous.traces if txn.previous is not None else {}
    for trace_id in list(previous):
        if trace_id in written:
            continue
        if trace_id.startswith(VIEW_TRACE_PREFIX):
            if plan.views.get(trace_id[len(VIEW_TRACE_PREFIX):]) in ("removed", "reshaped"):
                txn.drop(trace_id)
            continue
        node = owner(circuit, trace_id)
        if node is not None:
            if plan.nodes.get(node) != "kept":
                txn.drop(trace_id)
        elif not _own_input_trace(spec, trace_id):
            txn.drop(trace_id)


__all__ = ["APPLY_CHANGE", "Applied", "ChangePlan", "GateState", "META_KEY", "ON_CHANGE", "bootstrap_nodes",
           "bootstrap_targets", "compute",
           "drop_replaced", "fingerprints", "on_change", "plan_change"]
