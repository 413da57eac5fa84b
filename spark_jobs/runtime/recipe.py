"""One timestep, one recipe: the order of its phases, written once for every path.

A timestep is always the same phases, in the same order:

1. **inputs**: read each input's pending files as a change (an input that keeps a trace of its
   own, snapshots and cdc, also hands its change to that trace); every refused file of the step
   is reported at once;
2. **clock**: the late rows of timed inputs are counted and left out (or refuse the step);
3. **bag check**: deletes of rows an input never held are refused or quarantined;
4. **evaluate** Q^Δ on the changes and the committed state;
5. **quality gate** on the view deltas (and declared input expectations);
6. **commit**: state updates, view deltas, consumed files, watermarks, state bounds, metadata,
   then the manifest, atomically (``commit``);
7. **after the commit**: the quality report is marked committed, feeds are written, views are
   published, retention runs (``after_commit``).

What differs between paths is only *where* phases 1-5 run, and that is the ``StepEngine`` a
path passes: ``engines.SparkSteps`` (DataFrames) or ``engines.ArrowSteps`` (pyarrow tables in
this process). `dbsp step` runs every phase in one process (``compute`` then ``commit``); a DAG
run splits them into tasks (``timestep.py``: the plan chooses the files, the stage tasks run
phases 1-4 for their operators, ``check`` phase 5, ``commit`` phases 6-7), and each task calls
the same functions here. So a concern of the commit (a manifest key, a bound, a counter) is
written once, in ``commit``, and holds on every path.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from spark_jobs.executor.sources import InputFile, InputRefused
from spark_jobs.runtime.bag import Quarantined, announce
from spark_jobs.runtime.event_time import StepClock, describe as describe_late
from spark_jobs.runtime.state_bounds import bound_state
from spark_jobs.runtime.step_types import InputReport, StepReport
from spark_jobs.state.failpoints import failpoint

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from spark_jobs.quality import GateReport
    from spark_jobs.runtime.circuit import CircuitRuntime
    from spark_jobs.runtime.inputs import InputChange
    from spark_jobs.state.manifest import Manifest
    from spark_jobs.state.store import Transaction

Progress = Callable[[str], None]
MODES = ("incremental", "full_refresh", "recompute", "apply_change")


class StepEngine(Protocol):
    """Where phases 1-5 of a timestep run: the engine-specific half of the recipe.

    Values (changes, view deltas, state updates) are the engine's: Spark DataFrames or pyarrow
    tables. A method the engine cannot serve raises ``NotLocal`` before anything is written."""

    name: str  # "spark" | "arrow"

    def read_input(self, name: str, files: Sequence[InputFile], state: Any) -> "InputChange":
        """Phase 1 for one input: its change (None when no file arrived), own trace, bytes read."""

    def count(self, clock: StepClock, deltas: dict[str, Any], files: Mapping[str, Sequence[InputFile]]
              ) -> dict[str, tuple[int, int]]:
        """Phase 2: leave the late rows out of ``deltas`` (in place, counted on ``clock``) and
        return each change's (rows inserted, rows deleted)."""

    def check_bags(self, timestep: int, deltas: dict[str, Any], deleted: Mapping[str, int],
                   files: Mapping[str, Sequence[InputFile]], state: Any) -> list[Quarantined]:
        """Phase 3: refuse (``InputRefused``) or quarantine deletes below zero (``deltas`` in place)."""

    def evaluate(self, deltas: Mapping[str, Any], state: Any, *, first_step: bool, full: bool,
                 only: Any = None, external: Any = None) -> Any:
        """Phase 4: the ``StepResult`` of Q^Δ (``only``/``external``: one stage of a DAG run)."""

    def view_delta(self, view: str, new: Any) -> Any:
        """A full refresh's or a recompute's change of a view: new value minus the committed one
        (where comparable)."""

    def integrate(self, name: str, trace: str, change: Any, state: Any) -> Any:
        """A recompute's input ``name``: its committed integral (trace ``trace``) plus ``change``."""

    def integral(self, trace: str, change: Any, state: Any) -> Any:
        """A kept node's value after this step, for a change's bootstrap: its committed integral
        (trace ``trace``) plus its ``change`` of this step."""

    def settle(self, outputs: dict[str, Any], writes: list["Write"], checked: dict[str, Any]
               ) -> tuple[dict[str, Any], list["Write"], dict[str, Any]]:
        """The view deltas, state updates and the input changes the gate checks, as the gate and
        the writes read them: each computed once (Spark: a small step's all at once, to this
        process as Arrow tables, so the gate and the writes run no job)."""

    def gate(self, timestep: int, outputs: Mapping[str, Any], deltas: Mapping[str, Any],
             full: bool, late: Sequence[Any], state: Any) -> "GateReport":
        """Phase 5: the quality gate; raises ``QualityGateFailed`` on a failed `fail` check."""

    def schema_json(self, value: Any) -> str:
        """A value's Spark schema as JSON (staging, refresh)."""

    def release(self) -> None:
        """Drop what the engine cached for the step (after the writes)."""


# ---- what a timestep commits --------------------------------------------------------------------
@dataclass
class Write:
    """One state update: ``value`` appended to trace ``trace`` (or replacing it)."""

    trace: str
    value: Any  # a DataFrame or a pyarrow table
    kind: str = "zset"
    keys: tuple[str, ...] = ()
    sort_by: tuple[str, ...] = ()
    replace: bool = False
    row_group_bytes: int = 0  # the trace's own row-group size (``StateUpdate.row_group_bytes``)


@dataclass
class Work:
    """Everything one timestep commits, whichever path and engine computed it."""

    timestep: int
    clock: StepClock
    engine: str
    engine_reason: str
    mode: str = "incremental"
    writes: list[Write] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)  # view -> consolidated delta
    consumed: dict[str, list[dict]] = field(default_factory=dict)  # input -> records of the files read
    records: dict[str, list[dict]] = field(default_factory=dict)  # consumed records a scan rewrote
    unknown_keys: dict[str, int] = field(default_factory=dict)  # cdc records of unknown keys, per input
    quarantined: dict[str, dict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    run_id: str | None = None
    bytes_read: int | None = None
    batched: bool = False  # Spark: write every delta-sized value in one job
    view_schemas: dict[str, str] = field(default_factory=dict)  # full refresh: each view's schema JSON
    # why this mode (the cost model's choice: ``cost.choose``), its estimate, the sizes it saw
    mode_reason: str = ""
    estimate: Any = None  # ``cost.Estimate`` (None: not estimated)
    change_rows: int | None = None
    input_rows: int | None = None
    started: float = field(default_factory=time.perf_counter)  # what ``meta.cost.seconds`` measures from
    change: Any = None  # ``change.ChangePlan`` of a step that applies an edit of the circuit

    @property
    def full(self) -> bool:
        return self.mode == "full_refresh"

    @property
    def recompute(self) -> bool:
        """Recomputed from the integrated inputs (``recompute.py``), committed as view deltas."""
        return self.mode == "recompute"


def bag_index_traces(rt: "CircuitRuntime") -> list[str]:
    """The integrals whose files get digest sidecars (``state/bag_index.py``): those only the bag
    check reads (W1's: its inputs are filtered and projected before their joins)."""
    from spark_jobs.ir.incrementalize import bag_integrals, bag_only

    circuit = rt.compiled.incremental
    return [i for i in bag_integrals(circuit).values() if bag_only(circuit, i)]


def commit(rt: "CircuitRuntime", txn: "Transaction", work: Work) -> "Manifest":
    """Phase 6: write ``work`` into ``txn`` and publish the manifest (the commit point).

    The one place that decides what a committed timestep records: every path comes here."""
    from spark_jobs.runtime import change, refresh
    from spark_jobs.runtime.inputs import count_unknown_keys, record_input_paths, source_paths

    if txn.timestep != work.timestep:
        raise RuntimeError(f"timestep {work.timestep} was computed, but the store is at {txn.timestep - 1}")
    txn.index_bags(bag_index_traces(rt))
    spec = rt.compiled.spec
    if work.full:
        refresh.forget_consumed(txn)  # a refresh records exactly the files it read again
        work.notes += refresh.start(txn, rt.store, refresh.schemas(work.view_schemas))
    if work.recompute:  # every trace is rewritten: one a first step over the integrals does not write is gone
        drop_unwritten(txn, work)
    if work.change is not None:  # an edit applied: removed and rebuilt nodes' old traces are gone
        change.drop_replaced(txn, rt, work.change, {w.trace for w in work.writes})
        started = sorted(v for v, s in work.change.views.items() if s in ("new", "reshaped"))
        if started:  # their published tables get the whole view in one commit (publish.restart_of)
            txn.set_meta(change.VIEW_STARTS, {v: work.timestep for v in started})
    for name, records in work.records.items():
        txn.set_consumed(name, records)
    record_input_paths(txn, source_paths(spec.inputs))  # so a later step can say an input's folder moved
    for name, records in work.consumed.items():
        txn.consume(name, records)
    for name in spec.inputs:
        restart = work.full and spec.inputs[name].kind == "cdc"
        count_unknown_keys(txn, name, int(work.unknown_keys.get(name, 0)), restart=restart)
    work.clock.commit(txn)  # every timed input's watermark and late rows
    bound_state(txn, rt.compiled.incremental, work.clock)  # state no later row can reach: dropped
    if all_tables(work):  # nothing here needs Spark: compactions and merges by pyarrow too (up to a size)
        txn.in_process = True
    write_values(txn, work.writes, work.outputs, batched=work.batched)
    failpoint("mid_step")
    txn.set_meta("mode", work.mode)
    txn.set_meta(change.META_KEY, change.fingerprints(rt))  # what a later edit keeps (runtime/change.py)
    txn.set_meta("engine", work.engine)
    txn.set_meta("engine_reason", work.engine_reason)
    if work.run_id is not None:
        txn.set_meta("run_id", work.run_id)
    if work.bytes_read is not None:
        txn.set_meta("bytes_read", int(work.bytes_read))
    if work.quarantined:
        txn.set_meta("quarantined", work.quarantined)
    record_cost(txn, work, rt.config.policy.cost.history)
    return txn.commit(collect=False)  # garbage collection: in phase 7 (``after_commit``)


def drop_unwritten(txn: "Transaction", work: Work) -> None:
    """A recompute's state is exactly what a first step over the integrated inputs writes: drop
    every operator trace of the previous timestep it does not write (view traces stay: the view
    deltas are appended to them)."""
    from spark_jobs.state.store import VIEW_TRACE_PREFIX

    written = {w.trace for w in work.writes}
    previous = txn.previous.traces if txn.previous is not None else {}
    for trace_id in list(previous):
        if not trace_id.startswith(VIEW_TRACE_PREFIX) and trace_id not in written:
            txn.drop(trace_id)


def record_cost(txn: "Transaction", work: Work, keep: int) -> None:
    """``meta.cost``: what this step cost (mode, engine, sizes, seconds until now) and the history
    the cost model fits its rates to (``cost.record``). A full refresh and a step of unknown size
    carry the history on without a record of their own."""
    from spark_jobs.runtime import cost

    previous = txn.previous.meta if txn.previous is not None else None
    if work.full or work.change is not None or work.change_rows is None or work.input_rows is None:
        history = cost.history_of(previous)
        if history:
            txn.set_meta("cost", {"mode": work.mode, "engine": work.engine, "reason": work.mode_reason,
                                  "history": [s.to_list() for s in history[-max(1, keep):]]})
        return
    mode = "recompute" if txn.previous is None else work.mode  # a load evaluates Q over its inputs
    sample = cost.Sample(mode, work.engine, int(work.change_rows), int(work.input_rows),
                         time.perf_counter() - work.started)
    txn.set_meta("cost", dict(cost.record(previous, sample, keep, work.estimate, work.mode_reason), mode=work.mode))


def all_tables(work: Work) -> bool:
    """Is every value ``work`` writes a pyarrow table (the commit needs no Spark session)?"""
    import pyarrow as pa

    return all(isinstance(v, pa.Table) for v in [*(w.value for w in work.writes), *work.outputs.values()])


def write_values(txn: "Transaction", writes: Sequence[Write], outputs: Mapping[str, Any], *,
                 batched: bool) -> None:
    """State updates and view deltas into ``txn``: pyarrow tables written by pyarrow, DataFrames
    by Spark (the delta-sized ones of a small step in one job: ``batched``)."""
    import pyarrow as pa

    appends = []
    for w in writes:
        if isinstance(w.value, pa.Table):
            write = txn.replace_table if w.replace else txn.append_table
            write(w.trace, w.value, kind=w.kind, keys=w.keys, sort_by=w.sort_by, row_group_bytes=w.row_group_bytes)
        elif w.replace:
            txn.replace(w.trace, w.value, kind=w.kind, keys=w.keys, sort_by=w.sort_by,
                        row_group_bytes=w.row_group_bytes)
        else:
            appends.append((w.trace, w.value, w.kind, w.keys, w.sort_by, w.row_group_bytes))
    frames = {}
    for view, value in outputs.items():
        if isinstance(value, pa.Table):
            txn.write_output_table(view, value)
        else:
            frames[view] = value
    if appends or frames:
        txn.write_deltas(appends, frames, batched=batched)


@dataclass
class Published:
    """What phase 7 did: the publish report, retention's note (if anything was removed), and
    the seconds of its parts (for the benchmark)."""

    report: Any
    retention: str | None
    phases: dict[str, float] = field(default_factory=dict)


def after_commit(rt: "CircuitRuntime", manifest: "Manifest", say: Progress | None = None, *,
                 strict: bool = False, cleanup: Callable[[], None] | None = None) -> Published:
    """Phase 7, after the manifest (and again by a retried DAG commit, which may have crashed
    anywhere in it): the quality report says its timestep committed, ``feed: true`` views get
    their change files, ``cleanup`` runs (a DAG run's staging), the state's garbage is collected
    (old manifests and the trace files only they list: not part of the commit, which returns
    sooner), the views are published, then retention (after publishing: it keeps the deltas a
    table has not caught up with).
    ``strict``: a view that failed to publish raises (a DAG task fails and is retried); else it
    stays committed and the next run repairs its table."""
    from spark_jobs.publish import publish_views
    from spark_jobs.quality import mark_committed
    from spark_jobs.runtime.feeds import publish_feeds
    from spark_jobs.runtime.quality_gate import quality_dir
    from spark_jobs.runtime.retention import after_commit as retention

    started = time.perf_counter()
    if any(i.kind == "postgres" for i in rt.compiled.spec.inputs.values()):
        from spark_jobs.runtime.inputs import advance_slots

        advance_slots(rt.compiled.spec.inputs, manifest)  # the positions this commit recorded are applied
    mark_committed(quality_dir(rt), manifest.timestep)
    publish_feeds(rt, manifest)
    if cleanup is not None:
        cleanup()
    collect_garbage(rt)
    fed = time.perf_counter()
    if say is not None:
        say(f"timestep {manifest.timestep}: publishing views")
    report = publish_views(rt, progress=say)
    if strict:
        report.raise_if_failed()
    sink_outputs(rt, say, strict)
    published = time.perf_counter()
    note = retention(rt)
    return Published(report, note, {"feeds": round(fed - started, 3), "publish": round(published - fed, 3),
                                    "retention": round(time.perf_counter() - published, 3)})


def collect_garbage(rt: "CircuitRuntime") -> None:
    """The store's garbage collection after a commit; a failure is logged, never raised (the
    commit stands, and the next commit or ``begin`` removes what is left)."""
    try:
        rt.store.collect_garbage()
    except OSError as exc:
        log.warning("state garbage collection after the commit failed (%s); the next step retries", exc)


def sink_outputs(rt: "CircuitRuntime", say: Progress | None, strict: bool) -> None:
    """Database sinks (``outputs.<view>.sink``) brought to the last commit, each timestep in one
    transaction with its progress row; a failure raises with ``strict`` (a DAG commit task is
    retried), else it is said and the next step or commit catches up."""
    if not any(o.sink is not None for o in rt.compiled.spec.outputs.values()):
        return
    from spark_jobs.errors import DbspError
    from spark_jobs.publish.postgres_sink import sink_views

    try:
        sink_views(rt.compiled.spec, rt.committed, say)
    except DbspError as exc:
        if strict:
            raise
        if say is not None:
            say(f"sink not written yet ({exc}); the next step or commit retries")


# ---- phases 1-5 in one process ------------------------------------------------------------------
@dataclass
class Computed:
    """Phases 1-5 of one timestep: what to commit, and what to report."""

    work: Work
    reports: list[InputReport]
    gate: "GateReport"


def read_inputs(rt: "CircuitRuntime", engine: StepEngine, names: Sequence[str],
                files: Mapping[str, Sequence[InputFile]], state: Any, work: Work,
                reports: list[InputReport] | None = None) -> tuple[dict[str, Any], dict[str, tuple]]:
    """Phase 1 for ``names``: their changes (inputs without a new file have none), and the own
    trace of each input that keeps one; consumed files, unknown keys and bytes go to ``work``.
    Every refused file of these inputs is reported at once (``InputRefused``)."""
    deltas: dict[str, Any] = {}
    own: dict[str, tuple] = {}
    refused: list[InputRefused] = []
    for name in names:
        listed = list(files.get(name, ()))
        report = InputReport(name, [f.path for f in listed])
        if reports is not None:
            reports.append(report)
        if not listed:
            continue
        try:
            change = engine.read_input(name, listed, state)
        except InputRefused as exc:  # keep going: report every refused file of the step at once
            refused.append(exc)
            continue
        if change.delta is None:
            continue
        deltas[name] = change.delta
        work.consumed[name] = [f.record() for f in listed]
        if change.unknown_keys:
            work.unknown_keys[name] = change.unknown_keys
            report.unknown_keys = change.unknown_keys
        if change.trace is not None:  # the input's own trace gets the on-time rows, as the circuit saw them
            own[name] = change.trace
        work.bytes_read = (work.bytes_read or 0) + int(getattr(change, "bytes_read", 0) or 0)
    if refused:
        raise InputRefused.combine(refused)
    return deltas, own


def check_inputs(rt: "CircuitRuntime", engine: StepEngine, deltas: dict[str, Any],
                 files: Mapping[str, Sequence[InputFile]], state: Any, work: Work,
                 reports: Sequence[InputReport] = (), say: Progress | None = None) -> dict[str, tuple[int, int]]:
    """Phases 2 and 3: late rows counted and left out, then the bag check; ``deltas`` corrected
    in place, quarantines noted in ``work``. Returns each change's (inserted, deleted)."""
    counts = engine.count(work.clock, deltas, files)
    for report in reports:
        report.inserted, report.deleted = counts.get(report.name, (0, 0))
        if report.name in work.clock.seen:
            report.late = describe_late(work.clock.seen[report.name])
    deleted = {name: c[1] for name, c in counts.items()}
    if say is not None:
        for report in reports:  # a long read shows what it read as it goes, not only at the end
            if report.files:
                say(f"timestep {work.timestep}: read input {report.name}: {len(report.files)} file(s), "
                    f"{report.inserted + report.deleted:,} rows")
        announce(rt, work.timestep, deleted, say)
    for q in engine.check_bags(work.timestep, deltas, deleted, files, state):
        work.quarantined[q.input] = q.to_dict()
        work.notes.append(q.note())
    return counts


def state_writes(rt: "CircuitRuntime", result: Any, deltas: Mapping[str, Any], own: Mapping[str, tuple],
                 full: bool) -> list[Write]:
    """The state updates of an evaluated step: each input's own trace gets its change, each
    stateful operator its update (a full refresh replaces every trace: it rebuilt them whole)."""
    from spark_jobs.executor.evaluate import trace_kind

    writes = [Write(trace, deltas[name], "zset", (), tuple(sort_by), full)
              for name, (trace, sort_by) in own.items()]
    for node_id, update in result.updates.items():
        writes.append(Write(node_id, update.df, trace_kind(rt.compiled.incremental, node_id),
                            tuple(update.keys), tuple(update.sort_by), full or update.kind == "replace",
                            update.row_group_bytes))
    return writes


def compute(rt: "CircuitRuntime", engine: StepEngine, work: Work, files: Mapping[str, Sequence[InputFile]],
            state: Any, say: Progress) -> Computed:
    """Phases 1-5 of ``work.timestep`` on ``engine``, filling ``work`` with what to commit."""
    t, spec = work.timestep, rt.compiled.spec
    say(f"timestep {t}: reading inputs" + (" (full refresh: every retained file)" if work.full else "")
        + (" (in-process)" if engine.name == "arrow" else ""))
    reports: list[InputReport] = []
    deltas, own = read_inputs(rt, engine, list(spec.inputs), files, state, work, reports)
    check_inputs(rt, engine, deltas, files, state, work, reports, say)
    checked = {n: d for n, d in deltas.items() if spec.inputs[n].expectations}  # declared input expectations
    circuit = rt.compiled.incremental
    evaluated, on = deltas, state
    if work.recompute and engine.name != "arrow":  # Q over the integrated inputs, from no state (recompute.py)
        from spark_jobs.runtime.recompute import NoState, integrate

        say(f"timestep {t}: recomputing the views from the integrated inputs ({work.mode_reason})")
        evaluated, own = integrate(rt, engine, deltas, state)
        on = NoState()
    if work.change is not None:  # an edit applied: kept nodes step, the others are bootstrapped
        from spark_jobs.runtime import change

        applied = change.compute(rt, engine, work.change, deltas, own, state, say)
        work.notes += applied.notes
        outputs, writes, checked = engine.settle(applied.outputs, applied.writes, checked)
        # the gate compares with each view's old value where comparable (a reshaped view has none)
        gate = engine.gate(t, outputs, checked, True, work.clock.report(), change.GateState(state, work.change))
        work.outputs, work.writes = outputs, writes
        return Computed(work, reports, gate)
    say(f"timestep {t}: evaluating {len(circuit.nodes)} operators" + (" (Arrow)" if engine.name == "arrow" else ""))
    if work.recompute and engine.name == "arrow":  # in two passes, the linear prefixes streamed (recompute_arrow.py)
        from spark_jobs.runtime import recompute_arrow

        say(f"timestep {t}: recomputing the views from the integrated inputs ({work.mode_reason})")
        done = recompute_arrow.recompute(rt, engine, deltas, own, state)
        outputs = {v: engine.view_delta(v, value) for v, value in done.views.items()}
        return _gated(rt, engine, work, reports, outputs, done.writes, checked, state, say)
    result = engine.evaluate(evaluated, on, first_step=work.full or work.recompute or t == 1, full=work.full)
    outputs = dict(result.outputs)
    if work.full:
        work.view_schemas = {v: engine.schema_json(value) for v, value in outputs.items()}
    if work.full or work.recompute:
        outputs = {v: engine.view_delta(v, value) for v, value in outputs.items()}
    writes = state_writes(rt, result, evaluated, own, work.full or work.recompute)
    if work.recompute and not work.full:  # the inputs' integrals: the change appended (recompute.appended)
        from spark_jobs.runtime.recompute import appended

        writes = appended(rt, writes, deltas)
    return _gated(rt, engine, work, reports, outputs, writes, checked, state, say)


def _gated(rt: "CircuitRuntime", engine: StepEngine, work: Work, reports: list[InputReport], outputs: dict[str, Any],
           writes: list[Write], checked: dict[str, Any], state: Any, say: Progress) -> Computed:
    """Phase 5 of an evaluated step: the view deltas and writes settled, checked by the gate."""
    outputs, writes, checked = engine.settle(outputs, writes, checked)
    say(f"timestep {work.timestep}: checking view deltas ({len(outputs)} view(s)"
        + (f", {len(checked)} input(s) with expectations)" if checked else ")"))
    gate = engine.gate(work.timestep, outputs, checked, work.full, work.clock.report(), state)
    work.outputs = outputs
    work.writes = writes
    return Computed(work, reports, gate)


def step_report(rt: "CircuitRuntime", manifest: "Manifest", computed: Computed, seconds: float,
                notes: Sequence[str]) -> StepReport:
    """What `dbsp step` prints of a committed timestep."""
    work = computed.work
    views = {view: (int(info.rows_inserted or 0), int(info.rows_deleted or 0))
             for view, info in (manifest.outputs or {}).items()}
    return StepReport(rt.name, manifest.timestep, computed.reports, views, seconds, computed.gate.summary(),
                      engine=work.engine, engine_reason=work.engine_reason, bytes_read=work.bytes_read,
                      notes=[*notes, *work.notes], mode=work.mode, mode_reason=work.mode_reason)


__all__ = ["Computed", "MODES", "Published", "StepEngine", "Work", "Write", "after_commit", "check_inputs",
           "commit", "compute", "read_inputs", "state_writes", "step_report",
           "write_values"]
