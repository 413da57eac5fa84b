"""One timestep of a circuit in one process (`dbsp step` / `dbsp run`): read the input changes,
evaluate Q^Δ, check the view deltas, write state and view deltas, commit one manifest.

The execution policy picks the engine of each step (``ExecutionPolicy.engine_for``): a small
change runs in-process on Arrow (``inprocess.py``: no Spark job, no JVM started), a load, a
large change or a cluster profile on Spark (below). A step Arrow cannot serve runs on Spark, and
its report (and manifest) says which engine ran it and why.

Everything is written before the manifest; a crash anywhere before the manifest's rename leaves
the circuit at the previous timestep, and the next step cleans up what the crashed one wrote.
(The Airflow DAGs run the same timestep as separate stage tasks: see ``timestep.py``.)
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from pyspark.sql import DataFrame

from spark_jobs.executor.evaluate import evaluate_step, trace_kind
from spark_jobs.executor.spark.local_relations import collect_local
from spark_jobs.executor.spark.session import step_conf
from spark_jobs.executor.sources import InputFile, InputRefused, spark_schema
from spark_jobs.executor.engine import NotLocal
from spark_jobs.policy import ExecutionPolicy
from spark_jobs.runtime import inprocess
from spark_jobs.executor.sources.lateness import change_totals, on_time
from spark_jobs.executor.sources.reading import refuse_late
from spark_jobs.runtime.circuit import CircuitRuntime
from spark_jobs.executor.sources.discovery import InputScan
from spark_jobs.publish import publish_views
from spark_jobs.quality import mark_committed
from spark_jobs.runtime import refresh
from spark_jobs.runtime.bag import announce, check_deltas
from spark_jobs.runtime.errors import input_errors
from spark_jobs.runtime.state_bounds import bound_state
from spark_jobs.runtime.event_time import StepClock, describe as describe_late, iso
from spark_jobs.runtime.failures import step_failures
from spark_jobs.runtime.feeds import publish_feeds
from spark_jobs.runtime.step_types import InputReport, StepReport, StoreReader
from spark_jobs.state.arrow_fs import is_local
from spark_jobs.runtime.inputs import (choose_inputs, count_unknown_keys, keep_consumed_records,
                                      pending_inputs as _pending, read_input)
from spark_jobs.runtime.quality_gate import check_timestep, quality_dir
from spark_jobs.runtime.refresh import EmptyState
from spark_jobs.runtime.retention import after_commit
from spark_jobs.runtime.writer import process_lease
from spark_jobs.state.failpoints import failpoint
from spark_jobs.state.retention import Removed

Progress = Callable[[str], None]
log = logging.getLogger(__name__)
__all__ = ["InputReport", "StepReport", "StoreReader", "choose_engine", "count_inputs", "ins_del",
           "pending_inputs", "record_commit", "run_step"]


def pending_inputs(rt: CircuitRuntime) -> dict[str, list[InputFile]]:
    """Input files that arrived and no committed timestep consumed."""
    return _pending(rt.compiled.spec.inputs, rt.config.data_root, rt.store.manifest(), rt.config.allowed_input_roots)


def count_all_changes(spark, deltas: dict[str, DataFrame], local_rows: int, max_extra_rows: int,
                      totals: dict[str, DataFrame] | None = None
                      ) -> tuple[dict[str, dict], dict[str, DataFrame] | None]:
    """The change totals of every input (``lateness.change_totals``: ``ins`` and ``del``, plus
    the late rows and largest event time of timed inputs, whose ``totals`` the caller gives) and,
    when the inputs together have at most ``local_rows`` rows, the inputs as driver-local
    relations (None otherwise): one Spark job.

    Local inputs let every lookup of state by an input's change skip its broadcast job (see
    ``zset.key_prefilter``)."""
    totals = {name: (totals or {}).get(name) or change_totals(df) for name, df in deltas.items()}
    local, rows = collect_local(spark, deltas, local_rows, totals, max_extra_rows)
    return {name: r[0].asDict() for name, r in rows.items()}, local


def count_inputs(spark, clock: StepClock, deltas: dict[str, DataFrame], files: dict[str, list[InputFile]],
                 policy: ExecutionPolicy) -> tuple[dict[str, dict], dict[str, DataFrame] | None]:
    """``count_all_changes`` of the inputs' changes under ``policy``'s thresholds, with event time:
    the late rows of a timed input are counted, then left out of ``deltas`` (in place), and
    ``clock`` records what each change saw; a late row of an input with ``on_late: refuse``
    refuses the step (``InputRefused``, its files named). `dbsp step` on Spark and a DAG run's
    input stages both come here."""
    totals: dict[str, DataFrame] = {}  # timed inputs: kept, late, largest event time
    for name, df in list(deltas.items()):
        if clock.timed(name):
            column, mark = clock.column(name), clock.watermark(name)
            totals[name] = change_totals(df, column, mark)
            deltas[name] = on_time(df, column, mark)
    with step_conf(spark, True):  # a global count has nothing for AQE to adapt
        counts, local = count_all_changes(spark, deltas, policy.local_change_rows, policy.collect_extra_rows,
                                          totals=totals)
    for name, row in counts.items():
        clock.record(name, row)
    if clock.refused():
        raise InputRefused.combine([refuse_late(spark, clock.inputs[n], files[n], clock.watermark(n), iso)
                                    for n in clock.refused()])
    return counts, local


def ins_del(row: dict | None) -> tuple[int, int]:
    """(rows inserted, rows deleted) of a change's totals (``count_all_changes``)."""
    return (int(row.get("ins") or 0), int(row.get("del") or 0)) if row else (0, 0)


def _chosen_inputs(rt: CircuitRuntime, full_refresh: bool, say: Progress
                   ) -> tuple[dict[str, list[InputFile]], dict[str, InputScan]]:
    """The files this step reads, and (incremental) each input's scan; a consumed file whose
    content changed refuses the step."""
    chosen = choose_inputs(rt.compiled.spec.inputs, rt.config.data_root, rt.store.manifest(),
                           rt.config.allowed_input_roots, full_refresh=full_refresh,
                           pruned=Removed.read(rt.store).inputs if full_refresh else None)
    for note in chosen.notes():
        say(note)
    return chosen.files, chosen.scans


def choose_engine(rt: CircuitRuntime, pending: dict[str, list[InputFile]], *, full_refresh: bool = False
                  ) -> tuple[str, str]:
    """The engine of this step and why (``ExecutionPolicy.engine_for``, from the change's size in
    the input files' footers, whether state exists, and the profile), read without Spark. A full
    refresh rebuilds every state from all retained files: a load, on Spark."""
    policy = rt.config.policy
    local = rt.config.spark.mode == "local" and is_local(rt.store.root)
    if full_refresh:
        why: str | None = "a full refresh rebuilds the state from every retained file (a load)"
    else:
        why = inprocess.unsupported(rt, pending) if policy.engine != "spark" else None
    rows = inprocess.change_rows(pending, rt.compiled.spec.inputs) if why is None and policy.engine == "auto" else None
    first = rt.store.last_committed() == 0
    return policy.engine_for(rows, first_step=first, local_profile=local, unsupported=why)


def run_step(rt: CircuitRuntime, progress: Progress | None = None, *, full_refresh: bool = False) -> StepReport:
    """Run and commit the next timestep (last committed + 1) on the engine the policy picks,
    holding the circuit's lease, then publish the views (``spark_jobs.publish``: no Spark; a view
    that fails to publish stays committed, and the next run repairs its table). ``seconds`` is the
    commit's; the publish report has its own.

    ``full_refresh``: rebuild every state from the retained input files under the circuit as it
    is now (also after an edit of the circuit: see ``refresh.py``); the view deltas committed
    are new view - old view. A value refused inside a job raises ``ValueRefused``, a full disk
    ``StorageFull``: one message each, nothing committed.
    """
    with process_lease(rt), step_failures(rt):
        with input_errors({}) as files:
            return _run_step(rt, progress or (lambda _msg: None), full_refresh, files)


def _run_step(rt: CircuitRuntime, say: Progress, full_refresh: bool, read_files: dict) -> StepReport:
    report = _commit_step(rt, say, full_refresh, read_files)
    record_commit(rt, rt.store.manifest())
    say(f"timestep {report.timestep}: publishing views")
    report.published = publish_views(rt, progress=say)  # a failed view: committed, the next run repairs
    note = after_commit(rt)  # after publishing: retention keeps the deltas a table has not caught up with
    if note:
        report.notes.append(note)
    return report


def record_commit(rt: CircuitRuntime, manifest) -> None:
    """What follows a commit on either engine, in `dbsp step` and a DAG run's commit task (also
    on a retried commit, which may have crashed before it): the quality report says its timestep
    committed; the change files of ``feed: true`` views are written."""
    mark_committed(quality_dir(rt), manifest.timestep)
    publish_feeds(rt, manifest)


def _commit_step(rt: CircuitRuntime, say: Progress, full_refresh: bool, read_files: dict) -> StepReport:
    """Run and commit the next timestep on the engine the policy picks (Spark if Arrow cannot)."""
    pending, scans = _chosen_inputs(rt, full_refresh, say)
    read_files.update(pending)
    engine, reason = choose_engine(rt, pending, full_refresh=full_refresh)
    if engine == "arrow":
        import pyarrow as pa

        before = rt.store.last_committed()
        try:
            return inprocess.run_in_process(rt, pending, scans, say, reason)
        except (NotLocal, pa.ArrowException) as why:  # a type or size Arrow does not take: Spark does
            if rt.store.last_committed() != before:  # (never after the commit point)
                raise
            what = "" if isinstance(why, NotLocal) else "Arrow refused: "
            reason = f"in-process on Arrow was not possible: {what}{why}"
            log.info("timestep runs on Spark: %s", reason)
    return _run_on_spark(rt, pending, scans, say, reason, full_refresh)


def _run_on_spark(rt: CircuitRuntime, pending: dict[str, list[InputFile]], scans: dict[str, InputScan],
                  say: Progress, reason: str, full_refresh: bool) -> StepReport:
    started = time.time()
    store = rt.store
    spec = rt.compiled.spec
    cached: list[DataFrame] = []
    notes: list[str] = [n for s in scans.values() for n in s.notes]
    state = EmptyState() if full_refresh else StoreReader(store)
    with store.begin(refresh=full_refresh) as txn:
        t = txn.timestep
        if full_refresh:
            refresh.forget_consumed(txn)
        keep_consumed_records(txn, scans)
        say(f"timestep {t}: reading inputs" + (" (full refresh: every retained file)" if full_refresh else ""))
        clock = StepClock(spec.inputs, txn.previous, fresh=full_refresh)
        deltas: dict[str, DataFrame] = {}
        reports: list[InputReport] = []
        refused: list[InputRefused] = []
        own_traces: dict[str, tuple[str, tuple[str, ...]]] = {}  # input -> (its trace, sort columns)
        for name, inp in spec.inputs.items():
            report = InputReport(name, [f.path for f in pending[name]])
            reports.append(report)
            try:
                change = read_input(rt.spark, inp, pending[name], state, rt.config.policy)
            except InputRefused as exc:  # keep going: report every refused file of the step at once
                refused.append(exc)
                continue
            if change.delta is not None:
                delta = change.delta
                if change.trace is not None:  # the delta is also appended to the input's own trace
                    delta = delta.cache()
                    cached.append(delta)
                    own_traces[name] = change.trace  # gets the on-time rows: the input as the circuit saw it
                deltas[name] = delta
                txn.consume(name, [f.record() for f in pending[name]])
                count_unknown_keys(txn, name, change.unknown_keys, restart=full_refresh and inp.kind == "cdc")
                report.unknown_keys = change.unknown_keys
        if refused:
            raise InputRefused.combine(refused)
        policy = rt.config.policy
        counts, local = count_inputs(rt.spark, clock, deltas, pending, policy)  # late rows counted, then left out
        clock.commit(txn)
        bound_state(txn, rt.compiled.incremental, clock)
        if local is not None:
            deltas = local
        # late rows are out of the deltas already: the bag check judges what the circuit sees
        deleted = {n: ins_del(r)[1] for n, r in counts.items()}
        announce(rt, t, deleted, say)
        quarantined = check_deltas(rt, t, deltas, deleted, pending, state)
        if quarantined:
            txn.set_meta("quarantined", {q.input: q.to_dict() for q in quarantined})
            notes += [q.note() for q in quarantined]
        if local is None:  # too large for the driver: computed once, by the next job
            for name, df in deltas.items():
                if not any(df is c for c in cached):
                    deltas[name] = df.cache()
                    cached.append(deltas[name])
        for report in reports:
            report.inserted, report.deleted = ins_del(counts.get(report.name))
            if report.name in clock.seen:
                report.late = describe_late(clock.seen[report.name])
        small = not full_refresh and policy.small_change(sum(sum(ins_del(row)) for row in counts.values()))
        say(f"timestep {t}: evaluating {len(rt.compiled.incremental.nodes)} operators")
        schemas = {name: spark_schema(inp) for name, inp in spec.inputs.items()}
        with step_conf(rt.spark, small):
            # persist: a delta read by several operators and state writes is computed once
            result = evaluate_step(rt.compiled.incremental, deltas, state,
                                   first_step=full_refresh or t == 1, input_schemas=schemas,
                                   broadcast_deltas=small, persist=True, policy=policy, spark=rt.spark)
            try:
                outputs = result.outputs
                previous = None
                if full_refresh:
                    notes += refresh.start(txn, store, {v: df.schema for v, df in outputs.items()})
                    previous = {v: refresh.old_view(store, v, df) for v, df in outputs.items()}
                    outputs = {v: refresh.view_delta(store, v, df) for v, df in outputs.items()}
                # small view deltas are computed once, to the driver (with the jobs they need);
                # the gate then looks the previous view up by them without a broadcast job
                views = collect_local(rt.spark, outputs, policy.local_change_rows)[0] if small else None
                if views is None:
                    views = {view: df.cache() for view, df in outputs.items()}
                    cached.extend(views.values())
                outputs = views
                say(f"timestep {t}: checking view deltas")
                gate = check_timestep(rt, t, outputs, deltas, previous, late=clock.report())
                say(f"timestep {t}: writing state")
                appends = []
                for name, (trace_id, sort_by) in own_traces.items():  # an input's integral: its own trace
                    if full_refresh:  # rebuilt from every retained file: the whole integral
                        txn.replace(trace_id, deltas[name], kind="zset", sort_by=sort_by)
                    else:
                        appends.append((trace_id, deltas[name], "zset", (), sort_by))
                for node_id, update in result.updates.items():
                    kind = trace_kind(rt.compiled.incremental, node_id)
                    if full_refresh or update.kind == "replace":
                        txn.replace(node_id, update.df, kind=kind, keys=tuple(update.keys), sort_by=update.sort_by)
                    else:
                        appends.append((node_id, update.df, kind, tuple(update.keys), update.sort_by))
                txn.write_deltas(appends, outputs, batched=small)  # small: one write job for all
                failpoint("mid_step")
                if full_refresh:
                    txn.set_meta("mode", "full_refresh")
                txn.set_meta("engine", "spark")
                txn.set_meta("engine_reason", reason)
                txn.set_meta("bytes_read_driver", state.bytes_read())
                manifest = txn.commit()
            finally:
                result.release()
    for df in cached:
        df.unpersist()
    views = {view: (int(info.rows_inserted or 0), int(info.rows_deleted or 0))
             for view, info in (manifest.outputs or {}).items()}
    return StepReport(rt.name, manifest.timestep, reports, views, time.time() - started, gate.summary(),
                      engine="spark", engine_reason=reason, bytes_read=state.bytes_read(), notes=notes)
