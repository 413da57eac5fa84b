"""One timestep of a circuit in one process (`dbsp step` / `dbsp run`): read the input changes,
evaluate Q^Δ, check the view deltas, write state and view deltas, commit one manifest.

The phases are the timestep recipe's (``recipe.py``); this module supplies what `dbsp step`
adds: the lease, the choice of files and engine, and running every phase in this process. The
execution policy picks the engine of each step (``ExecutionPolicy.engine_for``): a small change
runs in-process on Arrow (``step_engines.ArrowSteps``: no Spark job, no JVM started), a load, a
large change or a cluster profile on Spark (``step_engines.SparkSteps``). A step Arrow cannot
serve runs on Spark, and its report (and manifest) says which engine ran it and why.

Everything is written before the manifest; a crash anywhere before the manifest's rename leaves
the circuit at the previous timestep, and the next step cleans up what the crashed one wrote.
(The Airflow DAGs run the same timestep as separate stage tasks: see ``timestep.py``.)
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from pyspark.sql import DataFrame

from spark_jobs.executor.engine import NotLocal
from spark_jobs.executor.spark.local_relations import collect_local
from spark_jobs.executor.spark.session import folded_on_local_rows, step_conf, without_local_folding
from spark_jobs.executor.sources import InputFile, InputRefused
from spark_jobs.executor.sources.lateness import change_totals, on_time
from spark_jobs.executor.sources.reading import refuse_late
from spark_jobs.policy import ExecutionPolicy
from spark_jobs.runtime import chunks, recipe, step_engines
from spark_jobs.runtime.circuit import CircuitRuntime
from spark_jobs.runtime.errors import input_errors
from spark_jobs.runtime.event_time import StepClock, iso
from spark_jobs.runtime.failures import step_failures
from spark_jobs.runtime.inputs import CannotRebuild, ChosenInputs, choose_inputs, pending_inputs as _pending
from spark_jobs.runtime.reach import driver_reach
from spark_jobs.runtime.refresh import EmptyState
from spark_jobs.runtime.step_types import InputReport, StepReport, StoreReader
from spark_jobs.runtime.writer import process_lease
from spark_jobs.state.manifest import Manifest
from spark_jobs.state.retention import Removed

Progress = Callable[[str], None]
log = logging.getLogger(__name__)
__all__ = ["InputReport", "Path", "StepReport", "StoreReader", "choose_engine", "choose_path", "commit_path", "count_inputs", "ins_del",
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


def _chosen_inputs(rt: CircuitRuntime, full_refresh: bool, say: Progress) -> ChosenInputs:
    """The files this step reads and (incremental) each input's scan; a consumed file whose
    content changed refuses the step."""
    chosen = choose_inputs(rt.compiled.spec.inputs, rt.config.data_root, rt.store.manifest(),
                           rt.config.allowed_input_roots, full_refresh=full_refresh,
                           pruned=Removed.read(rt.store).inputs if full_refresh else None)
    for note in chosen.notes():
        say(note)
    return chosen


def choose_engine(rt: CircuitRuntime, pending: dict[str, list[InputFile]], *, full_refresh: bool = False,
                  chunked: bool = False) -> tuple[str, str]:
    """The engine of this step and why (``ExecutionPolicy.engine_for``, from the change's size in
    the input files' footers, whether state exists, and whether this process reaches the files),
    read without Spark. A full refresh rebuilds every state from all retained files: a load, on
    Spark. ``chunked``: this process can run a step past the memory bound in sub-steps
    (``chunks.py``; `dbsp step`, not a DAG run's stages)."""
    policy = rt.config.policy
    if full_refresh:
        why: str | None = "a full refresh rebuilds the state from every retained file (a load)"
    else:
        why = step_engines.unsupported(rt, pending) if policy.engine != "spark" else None
    reach = driver_reach(rt) if why is None and policy.engine != "spark" else None
    rows = step_engines.change_rows(pending, rt.compiled.spec.inputs) if why is None and reach is None and policy.engine == "auto" else None
    first = rt.committed.last_committed() == 0
    return policy.engine_for(rows, first_step=first, driver_reach=reach, unsupported=why,
                             local_spark=rt.config.spark.mode == "local"
                             and str(rt.config.spark.master).startswith("local"), chunked=chunked)


@dataclass
class Path:
    """How a step runs: its mode (incremental | recompute | full_refresh), its engine, and why."""

    mode: str
    engine: str
    engine_reason: str
    mode_reason: str = ""
    estimate: Any = None  # ``cost.Estimate``
    change_rows: int | None = None
    input_rows: int | None = None

    def work(self, txn, clock: StepClock, records: dict, run_id: str | None = None) -> recipe.Work:
        return recipe.Work(txn.timestep, clock, self.engine, self.engine_reason, mode=self.mode, records=records,
                           mode_reason=self.mode_reason, estimate=self.estimate, change_rows=self.change_rows,
                           input_rows=self.input_rows, run_id=run_id)

    def to_dict(self) -> dict[str, Any]:
        """As a DAG run's plan keeps it (``timestep.plan``)."""
        est = self.estimate.to_dict() if hasattr(self.estimate, "to_dict") else self.estimate
        return {"mode": self.mode, "engine": self.engine, "engine_reason": self.engine_reason,
                "mode_reason": self.mode_reason, "estimate": est, "change_rows": self.change_rows,
                "input_rows": self.input_rows}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "Path":
        return cls(**{k: raw.get(k) for k in ("mode", "engine", "engine_reason", "mode_reason", "estimate",
                                               "change_rows", "input_rows")})


def change_plan(rt: CircuitRuntime, *, full_refresh: bool = False, apply_change: bool = False):
    """The plan of applying an edited circuit to its state (None: not edited, or a full refresh).
    Refuses (``FingerprintMismatch``, naming the change and how to apply it) unless the change is
    asked for: ``apply_change`` (`dbsp step --apply-change`, a DAG param) or ``settings.on_change:
    bootstrap``. A plan whose ``cannot`` is set falls back to a full refresh (the caller)."""
    from spark_jobs.runtime import change
    from spark_jobs.state.store import FingerprintMismatch

    if full_refresh:
        return None
    plan = change.plan_change(rt)
    if plan is None:
        return None
    if not (apply_change or change.on_change(rt) == "bootstrap"):
        m = rt.committed.manifest()
        raise FingerprintMismatch(rt.name, rt.committed.root, m.timestep, m.fingerprint, rt.compiled.fingerprint,
                                  change=plan.summary())
    return plan


def _in_process(rt: CircuitRuntime, pending: dict[str, list[InputFile]]) -> bool:
    """Whether this process can compute a step over ``pending`` itself (Arrow kernels for every
    operator and input, files it reaches), which decides where a recompute or a change runs."""
    return (rt.config.policy.engine != "spark" and step_engines.unsupported(rt, pending) is None
            and driver_reach(rt) is None)


def choose_path(rt: CircuitRuntime, pending: dict[str, list[InputFile]], *, full_refresh: bool = False,
                recompute: bool = False, change: Any = None, chunked: bool = False) -> Path:
    """The mode and engine of this step, read without Spark: the engine of an incremental step
    (``choose_engine``), then the cost model (``cost.choose``): incremental, or recomputed from
    the integrated inputs when that is estimated cheaper (``execution.cost``), on Arrow when the
    integrated inputs are few enough (``execution.cost.arrow_rows``) and the step may run in-process.
    ``recompute``: recompute whatever the model says (`dbsp step --recompute`), where possible."""
    from spark_jobs.runtime import cost
    from spark_jobs.runtime import recompute as recomputing
    from spark_jobs.runtime.recompute import why_not as recompute_why_not

    engine, reason = choose_engine(rt, pending, full_refresh=full_refresh, chunked=chunked)
    if full_refresh:
        return Path("full_refresh", engine, reason)
    policy = rt.config.policy
    try:
        rows = step_engines.change_rows(pending, rt.compiled.spec.inputs)
    except (OSError, ValueError, NotLocal):  # a file this process cannot open: the size is unknown
        rows = None
    if rt.committed.last_committed() == 0:  # a load: Q over the inputs already (recorded as a recompute's cost)
        return Path("incremental", engine, reason, "the first step loads the inputs", None, rows, 0)
    held = recomputing.input_rows(rt)
    if change is not None:  # an edit applied (runtime/change.py): the bootstrap reads the integrals
        inprocess = rows is not None and _in_process(rt, pending)
        held = change.read_rows  # the integrals it reads: inputs' and kept nodes' (not every input's)
        small = inprocess and held + (rows or 0) <= policy.cost.arrow_rows
        return Path("apply_change", "arrow" if small else "spark",
                    "in-process: the integrals fit execution.cost.arrow_rows" if small else
                    "on Spark: the integrals exceed execution.cost.arrow_rows or are not in-process",
                    f"applying a change of the circuit: {change.summary()}", None, rows, held)
    if not any(pending.values()) and not recompute:
        return Path("incremental", engine, reason, "no input changed", None, rows, held)
    settings = replace(policy.cost, recompute="always") if recompute else policy.cost
    cannot = recompute_why_not(rt) if settings.recompute != "never" else None
    est = None
    rengine = "spark"
    if rows is not None:
        inprocess = _in_process(rt, pending)
        rengine = "arrow" if inprocess and held + rows <= policy.cost.arrow_rows else "spark"
        history = cost.history_of((rt.committed.manifest().meta or {}) if rt.committed.manifest() else None)
        engine, reason = cost.incremental_engine(history, policy, rows, held, engine, reason, rengine)
        est = cost.estimate(history, rows, held, engine, rengine)
    choice = cost.choose(settings, est, cannot)
    if recompute and choice.mode == "recompute":
        choice = cost.Choice("recompute", "asked for (--recompute)", est)
    if choice.mode == "recompute":
        why = ("the profile sets execution.engine: spark" if policy.engine == "spark" else
               f"{held + (rows or 0)} integrated rows "
               + ("<=" if rengine == "arrow" else "> or not in-process:") + " execution.cost.arrow_rows")
        return Path("recompute", rengine, f"recompute: {why}", choice.reason, est, rows, held)
    return Path("incremental", engine, reason, choice.reason, est, rows, held)


def run_step(rt: CircuitRuntime, progress: Progress | None = None, *, full_refresh: bool = False,
             recompute: bool = False, apply_change: bool = False) -> StepReport:
    """Run and commit the next timestep (last committed + 1) on the engine the policy picks,
    holding the circuit's lease, then publish the views (``spark_jobs.publish``: no Spark; a view
    that fails to publish stays committed, and the next run repairs its table). ``seconds`` is the
    commit's; the publish report has its own.

    ``full_refresh``: rebuild every state from the retained input files under the circuit as it
    is now (also after an edit of the circuit: see ``refresh.py``); the view deltas committed
    are new view - old view. ``recompute``: recompute the views from the integrated inputs the
    state keeps, whatever the cost model says (``recompute.py``; a circuit that cannot be stays
    incremental, and the report says why). A value refused inside a job raises ``ValueRefused``,
    a full disk ``StorageFull``: one message each, nothing committed. ``apply_change``: the
    circuit was edited since its state was committed: keep the state of the nodes the edit did not
    touch and bootstrap the others from the state (``change.py``); without it (or
    ``settings.on_change: bootstrap``) an edited circuit is refused, naming the change.
    """
    with process_lease(rt), step_failures(rt):
        with input_errors({}) as files:
            return _run_step(rt, progress or (lambda _msg: None), full_refresh, files, recompute, apply_change)


def _run_step(rt: CircuitRuntime, say: Progress, full_refresh: bool, read_files: dict,
              recompute: bool = False, apply_change: bool = False) -> StepReport:
    plan = change_plan(rt, full_refresh=full_refresh, apply_change=apply_change)
    if plan is not None and plan.cannot:  # no kept state can feed a node: a full refresh (refused
        say(f"the change cannot be bootstrapped from the state ({'; '.join(plan.cannot)}): full refresh")
        try:  # when retention removed input files)
            chosen = _chosen_inputs(rt, True, say)
        except CannotRebuild as exc:
            raise CannotRebuild(f"the change cannot be applied: {'; '.join(plan.cannot)}, and {exc}") from exc
        full_refresh, plan = True, None
    else:
        chosen = _chosen_inputs(rt, full_refresh, say)
    read_files.update(chosen.files)
    path = choose_path(rt, chosen.files, full_refresh=full_refresh, recompute=recompute, change=plan, chunked=True)
    manifest, computed, seconds = commit_path(rt, chosen.files, chosen.records(), path, say)
    done = recipe.after_commit(rt, manifest, say)  # a failed view: committed, the next run repairs it
    report = recipe.step_report(rt, manifest, computed, seconds, chosen.notes())
    report.published = done.report
    if done.retention:
        report.notes.append(done.retention)
    return report


def commit_path(rt: CircuitRuntime, files: dict[str, list[InputFile]], records: dict, path: Path, say: Progress,
                run_id: str | None = None) -> tuple[Manifest, recipe.Computed, float]:
    """Compute and commit the next timestep in this process on ``path`` (its mode and engine;
    ``records``: consumed records a scan rewrote); a step Arrow cannot serve (an operator, a
    type, a size, a delete past what an input holds) runs on Spark, before anything is written.
    `dbsp step` and a DAG run's recompute (``timestep.commit``) come here."""
    full = path.mode == "full_refresh"
    before = rt.store.last_committed()  # a failed try below may run again only if nothing committed
    if path.engine == "arrow":
        import pyarrow as pa

        try:
            return _compute_and_commit(rt, step_engines.ArrowSteps(rt), files, records, path, say, run_id)
        except (NotLocal, pa.ArrowException) as why:  # a type or size Arrow does not take: Spark does
            if rt.store.last_committed() != before:  # (never after the commit point)
                raise
            what = "" if isinstance(why, NotLocal) else "Arrow refused: "
            path.engine, path.engine_reason = "spark", f"in-process on Arrow was not possible: {what}{why}"
            log.info("timestep runs on Spark: %s", path.engine_reason)
    large = full or path.mode in ("recompute", "apply_change")  # a recompute's values are the inputs: never "small"
    reach = driver_reach(rt) is None
    arrow_reads = step_engines.reads_change_in_process(rt, path.mode, path.change_rows)

    def spark_steps() -> step_engines.SparkSteps:
        return step_engines.SparkSteps(rt, full=full, small=False if large else None, driver_writes=reach,
                                       arrow_reads=arrow_reads, driver_views=path.mode in ("incremental", "recompute"))

    try:
        return _compute_and_commit(rt, spark_steps(), files, records, path, say, run_id)
    except Exception as exc:
        if rt.store.last_committed() != before or not folded_on_local_rows(exc):
            raise
        log.info("timestep runs again without folding expressions over rows held in the plan: %s",
                 str(exc).splitlines()[0][:300])
    path.engine_reason = (f"{path.engine_reason}; run again without folding over rows held in the plan (Spark's "
                          f"optimizer failed evaluating an expression over them)").lstrip("; ")
    spark = spark_steps()
    with without_local_folding(spark.spark):
        return _compute_and_commit(rt, spark, files, records, path, say, run_id)


def _compute_and_commit(rt: CircuitRuntime, engine: "recipe.StepEngine", files: dict[str, list[InputFile]],
                        records: dict, path: Path, say: Progress, run_id: str | None
                        ) -> tuple[Manifest, recipe.Computed, float]:
    """The recipe's phases 1-6 in this process, holding one transaction."""
    started = time.time()
    store = rt.store
    full = path.mode == "full_refresh"
    state = EmptyState() if full else StoreReader(store)
    changing = path.mode == "apply_change"
    chunk = chunks.sub_step_rows(rt, path) if engine.name == "arrow" else 0
    with store.begin(refresh=full or changing) as txn:
        txn.in_process = engine.name == "arrow"
        path.engine = engine.name
        work = path.work(txn, StepClock(rt.compiled.spec.inputs, txn.previous, fresh=full), records, run_id)
        if changing:
            from spark_jobs.runtime.change import plan_change

            work.change = plan_change(rt, txn.previous)
            if work.change is None:  # (another writer applied it meanwhile: a plain incremental step)
                work.mode = "incremental"
        try:
            if chunk:  # past the memory bound: sub-steps in this transaction, one commit
                computed = chunks.compute(rt, engine, work, files, state, txn, chunk, say)
            else:
                computed = recipe.compute(rt, engine, work, files, state, say)
            say(f"timestep {work.timestep}: writing state")
            work.batched = bool(getattr(engine, "small", False))
            work.bytes_read = (work.bytes_read or 0) + state.bytes_read()
            manifest = recipe.commit(rt, txn, work)
        finally:
            engine.release()
    return manifest, computed, time.time() - started


def record_commit(rt: CircuitRuntime, manifest) -> None:
    """What follows a commit on either engine before publishing (``recipe.after_commit``)."""
    from spark_jobs.quality import mark_committed
    from spark_jobs.runtime.feeds import publish_feeds
    from spark_jobs.runtime.quality_gate import quality_dir

    mark_committed(quality_dir(rt), manifest.timestep)
    publish_feeds(rt, manifest)
