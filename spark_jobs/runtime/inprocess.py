"""One timestep in this process, on Arrow, with no Spark job (``dbsp step`` of a small change).

The same timestep as ``step.run_step`` on Spark, end to end: the input files are read with
pyarrow (``executor/arrow/inputs.py``), Q^Δ is evaluated by the Arrow kernels (state looked up in
the traces' Parquet row groups by the keys the change holds), the view deltas are checked
(``quality/builtin_arrow.py``; declared expectations with Great Expectations), and the state
deltas, view deltas and the manifest are written with pyarrow through the same store: files
first, the manifest last, atomically, in the layout Spark writes, so the next step may run on
either engine. A step the Arrow kernels cannot serve raises ``NotLocal`` before anything is
written, and the caller runs it on Spark.

Event time is the Spark path's too: each timed input's late rows are counted and left out
(``executor/arrow/lateness.py``, the same rule), the watermarks are committed in the manifest,
and a step with late rows under ``on_late: refuse`` runs on Spark, which refuses it naming the
files. An append_only input's reader refuses a delete as Spark's does.

Trust checks are the Spark path's: consumed files are recorded by name, size and fingerprint
(``InputFile.record``), and the bag check of `changes` inputs runs on the change tables
(``bag.check_tables``, pyarrow lookups in the input's integral). A step that fails the bag check
runs on Spark, which refuses it naming the files and rows, or quarantines the excess.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from spark_jobs.executor.arrow import inputs as arrow_inputs
from spark_jobs.executor.arrow import lateness as arrow_late
from spark_jobs.executor.evaluate import evaluate_step, trace_kind
from spark_jobs.executor.engine import NotLocal
from spark_jobs.executor.arrow.kernels import ArrowEngine
from spark_jobs.executor.sources import InputFile, InputRefused
from spark_jobs.executor.sources.discovery import InputScan
from spark_jobs.ir.operator import operator
from spark_jobs.runtime.bag import announce, check_tables
from spark_jobs.runtime.event_time import StepClock, describe as describe_late
from spark_jobs.runtime.state_bounds import bound_state
from spark_jobs.runtime.inputs import count_unknown_keys, keep_consumed_records
from spark_jobs.runtime.quality_gate import check_timestep_tables
from spark_jobs.state.arrow_trace import weight_totals
from spark_jobs.state.failpoints import failpoint

from spark_jobs.runtime.step_types import InputReport, StepReport, StoreReader

if TYPE_CHECKING:
    from spark_jobs.runtime.circuit import CircuitRuntime


def unsupported(rt: "CircuitRuntime", pending: dict[str, list[InputFile]]) -> str | None:
    """Why this step cannot run in-process at all (None: it may try)."""
    for name, files in pending.items():
        if files:
            why = arrow_inputs.unsupported(rt.compiled.spec.inputs[name], rt.config.session_timezone)
            if why:
                return why
    for node in rt.compiled.incremental:
        if operator(node.op).kernel("arrow") is None:
            return f"operator {node.op!r} (node {node.id!r}) has no Arrow kernel"
    return None


def _late_rows(spec, txn, tables: dict, reports: list[InputReport]) -> StepClock:
    """Drop and count the late rows of the timed inputs' changes (as the Spark step does); a
    step whose policy refuses late rows runs on Spark, which names the files (``NotLocal``)."""
    clock = StepClock(spec.inputs, txn.previous)
    for report in reports:
        name = report.name
        if name not in tables or not clock.timed(name):
            continue
        column, mark = clock.column(name), clock.watermark(name)
        late = clock.record(name, arrow_late.change_totals(tables[name], column, mark))
        tables[name] = arrow_late.on_time(tables[name], column, mark)
        report.inserted, report.deleted = weight_totals(tables[name])
        report.late = describe_late(late)
    if clock.refused():
        raise NotLocal("late rows under on_late: refuse (the refusal names their files)")
    return clock


def change_rows(pending: dict[str, list[InputFile]], inputs: dict | None = None) -> int | None:
    """Rows of the step's input files (Parquet footers, text lines counted; None: unknown);
    ``inputs``: the circuit's input specs by name."""
    total = 0
    for name, files in pending.items():
        rows = arrow_inputs.change_rows(inputs[name], files) if inputs is not None else None
        if rows is None:
            return None
        total += rows
    return total


def run_in_process(rt: "CircuitRuntime", pending: dict[str, list[InputFile]], scans: dict[str, InputScan],
                   say: Callable[[str], None], reason: str) -> StepReport:
    """Run and commit the next timestep on Arrow; ``NotLocal`` (nothing written) if it cannot.
    ``scans``: each input's folder against what was consumed (``inputs.scan_inputs``)."""
    started = time.time()
    store, spec, policy = rt.store, rt.compiled.spec, rt.config.policy
    with store.begin() as txn:
        txn.in_process = True
        t = txn.timestep
        keep_consumed_records(txn, scans)
        say(f"timestep {t}: reading inputs (in-process)")
        tables, reports, refused, read = {}, [], [], 0
        state = StoreReader(store)
        own_traces: dict[str, tuple[str, tuple[str, ...]]] = {}  # input -> (its trace, sort columns)
        for name, inp in spec.inputs.items():
            report = InputReport(name, [f.path for f in pending[name]])
            reports.append(report)
            if not pending[name]:
                continue
            try:
                change = arrow_inputs.read_input(inp, pending[name], state, policy)
            except InputRefused as exc:  # keep going: report every refused file of the step at once
                refused.append(exc)
                continue
            tables[name] = change.table
            read += change.bytes_read
            if change.trace is not None:
                own_traces[name] = change.trace
            report.inserted, report.deleted = weight_totals(change.table)
            report.unknown_keys = change.unknown_keys
            count_unknown_keys(txn, name, change.unknown_keys)
            txn.consume(name, [f.record() for f in pending[name]])
        if refused:
            raise InputRefused.combine(refused)
        clock = _late_rows(spec, txn, tables, reports)
        for name, (trace_id, sort_by) in own_traces.items():  # the on-time rows: the input as the circuit sees it
            txn.append_table(trace_id, tables[name], kind="zset", sort_by=sort_by)
        deleted = {r.name: r.deleted for r in reports}
        announce(rt, t, deleted, say)
        check_tables(rt, tables, deleted, state)
        say(f"timestep {t}: evaluating {len(rt.compiled.incremental.nodes)} operators (Arrow)")
        engine = ArrowEngine(policy, rt.config.session_timezone)
        schemas = {name: arrow_inputs.schema(inp) for name, inp in spec.inputs.items()}
        result = evaluate_step(rt.compiled.incremental, tables, state, first_step=t == 1,
                               input_schemas=schemas, engine=engine)
        say(f"timestep {t}: checking view deltas")
        gate = check_timestep_tables(rt, t, result.outputs, tables, state.trace_files, late=clock.report())
        say(f"timestep {t}: writing state")
        for node_id, update in result.updates.items():
            kind = trace_kind(rt.compiled.incremental, node_id)
            write = txn.replace_table if update.kind == "replace" else txn.append_table
            write(node_id, update.df, kind=kind, keys=update.keys, sort_by=update.sort_by)
        for view, table in result.outputs.items():
            txn.write_output_table(view, table)
        clock.commit(txn)
        bound_state(txn, rt.compiled.incremental, clock)
        read += state.bytes_read()
        txn.set_meta("engine", "arrow")
        txn.set_meta("engine_reason", reason)
        txn.set_meta("bytes_read", read)
        failpoint("mid_step")
        manifest = txn.commit()
    views = {view: (int(info.rows_inserted or 0), int(info.rows_deleted or 0))
             for view, info in (manifest.outputs or {}).items()}
    notes = [n for scan in scans.values() for n in scan.notes]
    return StepReport(rt.name, manifest.timestep, reports, views, time.time() - started, gate.summary(),
                      engine="arrow", engine_reason=reason, bytes_read=read, notes=notes)


__all__ = ["NotLocal", "change_rows", "run_in_process", "unsupported"]
