"""One timestep as the tasks of a DAG run: plan, the operator stages, the quality check, commit.

Each task runs in its own process (Airflow), so anything a later task needs is staged durably
under ``<state root>/staging/<run>/`` and listed in a JSON journal written last:

- ``plan`` freezes the timestep number (last committed + 1) and the input files of the run. It
  needs no Spark session (manifests and listings only), so an empty run costs no Spark at all;
  it reports ``empty`` when no input has a new file (the DAG then skips the rest of the run).
- ``run_stage`` evaluates one stage (``stages.py``) into staging: the deltas other stages read,
  its state updates and view deltas. One Spark job per stage brings its small results to the
  driver as Arrow; pyarrow writes them (``staging.py``); the next task reads them back as local
  relations (no job). A small change this process reaches is read, counted and bag-checked
  in-process and staged without a job, as ``dbsp step`` does (``stage_run.RunValues.spark_steps``). Input files are read once, by their input stage; nothing is re-planned.
- ``run_stages`` (``orchestration.tasks: per_step``) runs every stage in one process, in order,
  each under a Spark job group/tag named after the stage; values stay in memory between stages.
- ``check`` runs the quality gate on the staged view deltas and input changes (no input file is
  read again).
- ``commit`` moves the staged updates into the state store in one transaction and publishes the
  manifest (its meta records the run id, so a retried commit is a no-op); then it writes the
  change files of views with ``feed: true``.

Every task is idempotent for its run id (a finished stage is not redone, a half-done one starts
over). ``mode="full_refresh"`` recomputes everything from the retained input files with empty
state, under the circuit as it is now (also after an edit: see ``refresh.py``); the view deltas
it commits are new view - old view, so readers of deltas stay consistent.

What a run checks and records is what ``dbsp step`` does, through the same functions: input
files recorded by name, size and fingerprint, and a consumed file that changed refused
(``inputs.choose_inputs``); unreadable files refused (``errors.input_errors``); deletes of rows
never inserted refused or quarantined (``bag.check_deltas``, in the input's stage); a full
refresh's traces, view deltas and notes (``refresh.py``); late rows of timed inputs counted,
then left out or refused (``step.count_inputs``, in the input's stage, whose journal carries what
the watermark saw to the check's report line and the commit's manifest: ``event_time.py``);
retention after the commit (``retention.after_commit``), and a full refresh after it removed
consumed change files refused by the plan (``choose_inputs(pruned=...)``).

The run holds the circuit's lease (``writer.py``) from ``plan`` to ``commit``, owned by its run id:
every task renews it and heartbeats while it works, so no ``dbsp step`` (or other DAG) writes the
state meanwhile; ``plan`` may take over the lease of an earlier run of this DAG (Airflow starts a
run only after the previous one ended), and ``commit`` releases it, as does a ``plan`` whose run
is skipped as empty.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from spark_jobs.runtime.circuit import CircuitRuntime
from spark_jobs.runtime.failures import step_failures
from spark_jobs.runtime import refresh
from spark_jobs.runtime.inputs import choose_inputs
from spark_jobs.runtime.stage_run import RunValues, evaluate_stage
from spark_jobs.runtime.staging import journal_path, read_json, run_dir, staging_root, write_json
from spark_jobs.runtime.stages import Stage, stage_graph
from spark_jobs.runtime.writer import run_lease
from spark_jobs.state.retention import Removed

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_jobs.runtime.event_time import StepClock

# recompute: this run recomputes its views from the integrated inputs whatever the cost model says
# (where the circuit can be: ``recompute.py``); its plan records mode incremental, path recompute
# apply_change: the circuit was edited since its state was committed: this run keeps the state of
# unchanged nodes and bootstraps the others from the state (``change.py``), in its commit task
MODES = ("incremental", "full_refresh", "recompute", "apply_change")
# the reason a run's manifest gives when its plan recorded none (a plan written by an older version)
DAG_ENGINE_REASON = "a DAG run computes its stages on Spark, one task per stage or per run"
STEPS = ("plan", "stage", "stages", "check", "commit", "timestep")


def _committed_by(rt: CircuitRuntime, run_id: str) -> int | None:
    """The timestep this run committed, if it did (retained manifests only)."""
    store = rt.committed
    for t in reversed(store.timesteps()):
        m = store.manifest(t)
        if m is not None and (m.meta or {}).get("run_id") == run_id:
            return t
    return None


# ---- plan ------------------------------------------------------------------------------------
def plan(rt: CircuitRuntime, run_id: str, *, mode: str = "incremental") -> dict:
    """Take the run's lease and freeze its timestep and input files (idempotent per run id; no
    Spark on a local state root).

    ``empty`` is True when the run has nothing to do: incremental, and no input has a new file.
    Unless the circuit sets ``orchestration.commit_empty``, nothing is staged for such a run.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    with run_lease(rt, run_id, take_over_runs=True) as lease:
        data = _plan(rt, run_id, mode)
        if is_skipped(rt, data):
            lease.release()  # no task of this run follows
        return data


def is_skipped(rt: CircuitRuntime, p: dict) -> bool:
    """Is the rest of this run skipped (an empty run of a circuit that does not commit empty steps)?"""
    return bool(p.get("empty")) and not rt.compiled.spec.orchestration.commit_empty


def _plan(rt: CircuitRuntime, run_id: str, mode: str) -> dict:
    store = rt.committed
    done = _committed_by(rt, run_id)
    if done is not None:
        return {"run_id": run_id, "timestep": done, "mode": mode, "already_committed": True, "empty": False}
    t = store.last_committed() + 1
    path = store.fs.join(run_dir(rt, run_id), "plan.json")
    existing = read_json(rt, path)
    if existing and existing["timestep"] == t and existing.get("requested", existing["mode"]) == mode:
        return existing
    from spark_jobs.runtime.step import change_plan, choose_path

    full = mode == "full_refresh"  # refused (CannotRebuild) once retention removed consumed change files
    # an edited circuit: refused unless the run (mode apply_change) or settings.on_change asks to apply it
    change = change_plan(rt, full_refresh=full, apply_change=mode == "apply_change")
    notes = []
    if change is not None and change.cannot:  # no kept state can feed a node: a full refresh
        notes.append(f"the change cannot be bootstrapped from the state ({'; '.join(change.cannot)}): full refresh")
        full, change = True, None
    chosen = choose_inputs(rt.compiled.spec.inputs, rt.config.data_root, store.manifest(),
                           rt.config.allowed_input_roots, full_refresh=full,
                           pruned=Removed.read(store).inputs if full else None)
    empty = mode == "incremental" and change is None and not any(chosen.files.values())
    # incremental or recompute (cost.py, or the run's mode), or applying a change, and the engine
    way = choose_path(rt, chosen.files, full_refresh=full, recompute=mode == "recompute", change=change)
    data = {"run_id": run_id, "timestep": t, "mode": "full_refresh" if full else "incremental", "requested": mode,
            "created_at": time.time(), "empty": empty,
            "inputs": {name: [f.as_dict() for f in files] for name, files in chosen.files.items()},
            "consumed_records": chosen.records(), "notes": notes + chosen.notes(),
            "change_rows": None if full else way.change_rows,
            "engine": way.engine, "engine_reason": way.engine_reason, "path": way.to_dict()}
    if is_skipped(rt, data):
        return data  # the DAG skips the rest of the run: nothing to stage, nothing to clean
    if store.fs.exists(staging_root(rt)):
        store.fs.remove_tree(staging_root(rt))  # leftovers of runs that never committed (we hold the lease)
    store.recover()
    write_json(rt, path, data)
    return data


def load_plan(rt: CircuitRuntime, run_id: str) -> dict:
    data = read_json(rt, rt.committed.fs.join(run_dir(rt, run_id), "plan.json"))
    if data is None:
        raise RuntimeError(f"run {run_id!r} of {rt.name} has no plan: run the plan task first")
    return data


def _stage(rt: CircuitRuntime, name: str) -> tuple[Stage, list[Stage]]:
    stages = stage_graph(rt.compiled)
    for stage in stages:
        if stage.name == name:
            return stage, stages
    raise KeyError(f"{rt.name} has no stage {name!r}")


def _done(rt: CircuitRuntime, run_id: str, stage: str) -> dict | None:
    j = read_json(rt, journal_path(rt, run_id, stage))
    return None if j is None else dict(j["summary"], note="already done by an earlier attempt")


# A change file whose rows the plan cannot read from a footer (CSV) counts as its size over this
# many bytes per row (~10-50 in Parquet or CSV).
BYTES_PER_ROW = 40


def is_small(rt: CircuitRuntime, p: dict) -> bool:
    """Do this run's tasks run with the small-change Spark settings (no AQE, 2 shuffle partitions,
    broadcasts of the deltas), as ``dbsp step`` does for a change of at most
    ``execution.small_change_rows`` rows? The plan counted the rows in the Parquet footers
    (``step_engines.change_rows``, no data read); else it guesses them from the files' sizes."""
    if p["mode"] == "full_refresh":
        return False
    rows = p.get("change_rows")
    if rows is None:
        rows = sum(int(f.get("size") or 0) for files in p["inputs"].values() for f in files) // BYTES_PER_ROW
    return rt.config.policy.small_change(rows)


def run_stage(rt: CircuitRuntime, run_id: str, stage_name: str) -> dict:
    """Evaluate one stage of this run into the staging area (idempotent per run id)."""
    with run_lease(rt, run_id):
        return _run_stage(rt, run_id, stage_name)


def recomputes(p: dict) -> bool:
    """Does this run recompute its views from the integrated inputs (the plan's cost model chose
    it: ``step.choose_path``)? Then the commit task computes and commits the whole timestep in one
    process (``recompute.py``); the stage and check tasks have nothing to do."""
    return (p.get("path") or {}).get("mode") in ("recompute", "apply_change")


RECOMPUTED = "this run recomputes the views from the integrated inputs in its commit task"


def _run_stage(rt: CircuitRuntime, run_id: str, stage_name: str) -> dict:
    p = load_plan(rt, run_id)
    if p.get("already_committed"):
        return {"stage": stage_name, "skipped": "timestep already committed by this run"}
    if recomputes(p):
        return {"stage": stage_name, "skipped": RECOMPUTED}
    done = _done(rt, run_id, stage_name)
    if done is not None:
        return done
    stage, stages = _stage(rt, stage_name)
    run = RunValues(rt, run_id, p)
    run.load_journals(stages)
    return evaluate_stage(run, stage, is_small(rt, p))


def run_stages(rt: CircuitRuntime, run_id: str, on_stage: "Callable[[dict], None] | None" = None) -> dict:
    """Every stage of this run in this process, in order (``orchestration.tasks: per_step``).

    The values a stage hands to the next stay in memory as Arrow tables; they are staged all the
    same, so that a retry after a crash resumes at the first unfinished stage. ``on_stage(summary)``
    is called as each stage ends (the task logs the stage's table then, not at the end)."""
    with run_lease(rt, run_id):
        return _run_stages(rt, run_id, on_stage or (lambda _summary: None))


def _run_stages(rt: CircuitRuntime, run_id: str, on_stage: "Callable[[dict], None]") -> dict:
    started = time.perf_counter()
    p = load_plan(rt, run_id)
    if p.get("already_committed"):
        return {"skipped": "timestep already committed by this run"}
    if recomputes(p):
        return {"timestep": p["timestep"], "mode": "recompute", "skipped": RECOMPUTED}
    stages = stage_graph(rt.compiled)
    run = RunValues(rt, run_id, p)
    run.load_journals(stages)
    small = is_small(rt, p)
    summaries = []
    for stage in stages:
        summaries.append(_done(rt, run_id, stage.name) or evaluate_stage(run, stage, small))
        on_stage(summaries[-1])
    return {"timestep": p["timestep"], "mode": p["mode"], "stages": summaries,
            "seconds": round(time.perf_counter() - started, 3)}


def _journals(rt: CircuitRuntime, run_id: str) -> dict[str, dict]:
    out = {}
    for stage in stage_graph(rt.compiled):
        j = read_json(rt, journal_path(rt, run_id, stage.name))
        if j is None:
            raise RuntimeError(f"stage {stage.name!r} of run {run_id!r} has not finished; cannot go on")
        out[stage.name] = j
    return out


# ---- check and commit --------------------------------------------------------------------------
def _read(rt: CircuitRuntime, data: dict) -> "DataFrame":
    from spark_jobs.runtime import staging

    st = staging.Staged.from_dict(data)
    return staging.read_staged(rt.spark, st, rt.committed.fs.spark_uri(st.path))


def check(rt: CircuitRuntime, run_id: str) -> dict:
    """Quality gate on the staged view deltas and input changes (no input file is read again);
    raises ``QualityGateFailed`` on a `fail` check, naming the input files behind it."""
    with run_lease(rt, run_id):
        return _check(rt, run_id)


def _check(rt: CircuitRuntime, run_id: str) -> dict:
    from spark_jobs.quality import QualityGateFailed
    from spark_jobs.runtime.culprits import explain_failure
    from spark_jobs.runtime.quality_gate import check_timestep

    p = load_plan(rt, run_id)
    if p.get("already_committed"):
        return {"skipped": "timestep already committed by this run"}
    if recomputes(p):
        return {"timestep": p["timestep"], "skipped": RECOMPUTED + " (its quality gate too)"}
    from spark_jobs.runtime import staging

    started = time.perf_counter()
    journals = _journals(rt, run_id)
    staged_views = {v: st for j in journals.values() for v, st in j["outputs"].items()}
    values = {nid: st for j in journals.values() for nid, st in j.get("values", {}).items()}
    circuit = rt.compiled.incremental
    staged_inputs = {}
    for node in circuit:
        name = node.param("name") or node.id
        if node.op == "input" and rt.compiled.spec.inputs[name].expectations and node.id in values:
            staged_inputs[name] = values[node.id]
    late = _clock(rt, p, journals).report()  # a line per timed input, as in `dbsp step`
    staged_all = [*staged_views.values(), *staged_inputs.values()]
    try:
        if p["mode"] != "full_refresh" and all(st["form"] == staging.ARROW for st in staged_all):
            # every change is a small Arrow file: the gate runs in this process (as for an in-process
            # step), the previous views looked up in their traces' row groups; no Spark session
            from spark_jobs.runtime.quality_gate import check_timestep_tables
            from spark_jobs.runtime.step_types import StoreReader

            views = {v: staging.read_value_table(staging.Staged.from_dict(st)) for v, st in staged_views.items()}
            inputs = {n: staging.read_value_table(staging.Staged.from_dict(st)) for n, st in staged_inputs.items()}
            read = time.perf_counter()
            report = check_timestep_tables(rt, p["timestep"], views, inputs, StoreReader(rt.committed).trace_files,
                                           late=late)
        else:
            local = {}  # changes staged as Arrow: GE checks them with pandas, no Spark job
            for prefix, found in (("view", staged_views), ("input", staged_inputs)):
                for name, st in found.items():
                    if st["form"] == staging.ARROW:
                        local[f"{prefix}:{name}"] = staging.read_table(st["path"])
            views = {v: _read(rt, st) for v, st in staged_views.items()}
            inputs = {n: _read(rt, st) for n, st in staged_inputs.items()}
            from spark_jobs.executor.spark.session import step_conf

            read = time.perf_counter()
            with step_conf(rt.spark, is_small(rt, p)):
                previous = None
                if p["mode"] == "full_refresh":  # the deltas were taken against comparable old views only
                    previous = {v: refresh.old_view(rt.store, v, df) for v, df in views.items()}
                report = check_timestep(rt, p["timestep"], views, inputs, previous, late=late, local=local)
    except QualityGateFailed as exc:
        raise QualityGateFailed(exc.report, explain_failure(rt, p, exc.report)) from None
    return {"timestep": p["timestep"], "summary": report.summary(), "failed": len(report.failed),
            "warnings": len(report.warnings), "report": quality_report_path(rt, p["timestep"]),
            "phases": _phases(started, read=read, checks=time.perf_counter())}


def _clock(rt: CircuitRuntime, p: dict, journals: dict[str, dict], manifest=None) -> "StepClock":
    """The timed inputs' late rows and watermarks of this run, as its input stages saw them
    (their journals), against the watermarks committed before it (``manifest``, default the last)."""
    from spark_jobs.runtime.event_time import StepClock

    clock = StepClock(rt.compiled.spec.inputs, manifest if manifest is not None else rt.committed.manifest(),
                      fresh=p["mode"] == "full_refresh")
    for j in journals.values():
        clock.from_journal(j.get("event_time") or {})
    return clock


def _phases(started: float, **ends: float) -> dict[str, float]:
    """Seconds per phase of a task's work, from the phases' end times in order (for the benchmark)."""
    out, last = {}, started
    for name, end in ends.items():
        out[name], last = round(end - last, 3), end
    return out


def quality_report_path(rt: CircuitRuntime, timestep: int) -> str:
    from spark_jobs.quality.report import report_name
    from spark_jobs.runtime.quality_gate import quality_dir

    return rt.committed.fs.join(quality_dir(rt), report_name(timestep))


def _change_rows(journals: dict[str, dict]) -> int | None:
    """Input rows (inserted + deleted) the stages of this run read; None if some were not counted."""
    total = 0
    for j in journals.values():
        for c in j["inputs"].values():
            if c.get("inserted") is None:
                return None
            total += c["inserted"] + c["deleted"]
    return total


def commit(rt: CircuitRuntime, run_id: str) -> dict:
    """Move the staged updates into the store and publish the manifest (idempotent per run id);
    then give the run's lease back."""
    with run_lease(rt, run_id, release=True):
        return _commit(rt, run_id)


def _commit(rt: CircuitRuntime, run_id: str) -> dict:
    from spark_jobs.runtime import recipe

    done = _committed_by(rt, run_id)
    if done is not None:  # a retry: the commit is durable; the report's mark, feeds, tables and retention may not be
        manifest = rt.committed.manifest(done)
        after = recipe.after_commit(rt, manifest, strict=True, cleanup=lambda: _drop_staging(rt, run_id))
        return dict(commit_summary(rt, manifest), note="already committed by an earlier attempt",
                    published=after.report.summary(), **_retention(after))
    started = time.perf_counter()
    p = load_plan(rt, run_id)
    if recomputes(p):
        return _recompute(rt, run_id, p)
    journals = _journals(rt, run_id)
    full = p["mode"] == "full_refresh"
    engine, reason = _run_engine(p, journals)
    with rt.store.begin(refresh=full) as txn:
        if txn.timestep != p["timestep"]:
            raise RuntimeError(f"run {run_id!r} planned timestep {p['timestep']} but the store is at "
                               f"{txn.timestep - 1}; re-run the plan")
        txn.in_process = engine == "arrow"
        work = recipe.Work(p["timestep"], _clock(rt, p, journals, txn.previous), engine, reason, mode=p["mode"],
                           run_id=run_id, records=dict(p.get("consumed_records") or {}),
                           notes=list(p.get("notes") or []))
        for j in journals.values():
            for view, st in j["outputs"].items():
                work.outputs[view] = _value(rt, st)
                work.view_schemas[view] = st["schema"]
            work.quarantined.update(j.get("quarantined") or {})
            work.notes += j["summary"].get("notes") or []
            for u in j["updates"]:
                work.writes.append(recipe.Write(u["trace"], _value(rt, u["staged"]), u["kind"], tuple(u["keys"]),
                                                tuple(u.get("sort_by", ())), u["op"] == "replace",
                                                int(u.get("row_group_bytes") or 0)))
            for name, files in j["consumed"].items():
                work.consumed[name] = files
            for name, counts in j["inputs"].items():
                work.unknown_keys[name] = int(counts.get("unknown_keys") or 0)
        planned = p.get("path") or {}  # what the cost model saw (meta.cost): seconds from the plan on
        work.mode_reason, work.estimate = str(planned.get("mode_reason") or ""), planned.get("estimate")
        work.change_rows, work.input_rows = planned.get("change_rows"), planned.get("input_rows")
        work.started -= max(0.0, time.time() - float(p.get("created_at") or time.time()))
        rows = _change_rows(journals)
        work.batched = not full and rows is not None and rt.config.policy.small_change(rows)
        read = time.perf_counter()
        if any(not _is_table(w.value) for w in work.writes) or any(not _is_table(v) for v in work.outputs.values()):
            from spark_jobs.executor.spark.session import step_conf

            with step_conf(rt.spark, work.batched):
                manifest = recipe.commit(rt, txn, work)
        else:  # every value is an Arrow table: written by pyarrow, no Spark session
            manifest = recipe.commit(rt, txn, work)
    written = time.perf_counter()
    # after the commit point: a crash here is repaired by the next run (or this task's retry)
    after = recipe.after_commit(rt, manifest, strict=True, cleanup=lambda: _drop_staging(rt, run_id))
    summary = commit_summary(rt, manifest)
    notes = work.notes + [f"input {name}: {text}" for name, text in summary.get("late", {}).items()  # as `dbsp step` notes them
                          if summary["late_rows"][name]]
    kept = _retention(after)
    return dict(summary, notes=notes + list(kept.values()), published=after.report.summary(), **kept,
                engine=engine, engine_reason=reason,
                phases=dict(_phases(started, read=read, write=written), **after.phases))


def _recompute(rt: CircuitRuntime, run_id: str, p: dict) -> dict:
    """A run whose plan chose to recompute: the whole timestep (inputs, bag check, Q over the
    integrated inputs, the gate, the commit) in this process, as `dbsp step` runs it, the run id
    in the manifest (a retry finds it committed); then phase 7."""
    from spark_jobs.executor.sources import InputFile
    from spark_jobs.runtime import recipe
    from spark_jobs.runtime.errors import input_errors
    from spark_jobs.runtime.step import Path, commit_path

    started = time.perf_counter()
    files = {name: [InputFile.from_dict(f) for f in listed] for name, listed in p["inputs"].items()}
    path = Path.from_dict(p["path"])
    if rt.store.last_committed() + 1 != p["timestep"]:
        raise RuntimeError(f"run {run_id!r} planned timestep {p['timestep']} but the store is at "
                           f"{rt.store.last_committed()}; re-run the plan")
    with input_errors(dict(files)):
        manifest, computed, _seconds = commit_path(rt, files, dict(p.get("consumed_records") or {}), path,
                                                   lambda _msg: None, run_id)
    written = time.perf_counter()
    after = recipe.after_commit(rt, manifest, strict=True, cleanup=lambda: _drop_staging(rt, run_id))
    summary = commit_summary(rt, manifest)
    kept = _retention(after)
    work = computed.work
    return dict(summary, notes=list(p.get("notes") or []) + work.notes + list(kept.values()),
                published=after.report.summary(), **kept, engine=work.engine, engine_reason=work.engine_reason,
                mode_reason=work.mode_reason, quality=computed.gate.summary(),
                phases=dict(_phases(started, write=written), **after.phases))


def _drop_staging(rt: CircuitRuntime, run_id: str) -> None:
    rt.committed.fs.remove_tree(run_dir(rt, run_id))


def _is_table(value) -> bool:
    import pyarrow as pa

    return isinstance(value, pa.Table)


def _value(rt: CircuitRuntime, data: dict):
    """A staged value as the commit writes it: a small one as a pyarrow table (no Spark), a
    large one (written by Spark) as a DataFrame."""
    from spark_jobs.runtime import staging

    st = staging.Staged.from_dict(data)
    return staging.read_value_table(st) if st.form == staging.ARROW else _read(rt, data)


def _run_engine(p: dict, journals: dict[str, dict]) -> tuple[str, str]:
    """The engine a run's manifest records: ``arrow`` when every stage ran in-process, else
    ``spark``, with the reason (the plan's, or why a stage could not run in-process)."""
    engines = {j.get("engine", "spark") for j in journals.values()}
    if engines == {"arrow"} or (not journals and p.get("engine") == "arrow"):
        return "arrow", str(p.get("engine_reason") or "")
    fallback = [j.get("engine_reason") for j in journals.values()
                if j.get("engine") == "spark" and j.get("engine_reason") and p.get("engine") == "arrow"]
    return "spark", str(fallback[0] if fallback else (p.get("engine_reason") or DAG_ENGINE_REASON))


def _retention(after) -> dict[str, str]:
    """Retention's note after a commit (``recipe.after_commit``): ``{"retention": note}`` when
    something was removed."""
    return {"retention": after.retention} if after.retention else {}


def commit_summary(rt: CircuitRuntime, manifest) -> dict:
    """What a committed timestep changed: rows inserted/deleted per view; per timed input, its
    late rows dropped and watermark (``late``, worded as `dbsp step` says them)."""
    from spark_jobs.runtime.event_time import committed_late, describe

    meta = manifest.meta or {}
    late = committed_late(manifest, rt.compiled.spec.inputs)
    return {"timestep": manifest.timestep, "mode": meta.get("mode", "incremental"),
            "views": {v: {"inserted": o.rows_inserted, "deleted": o.rows_deleted}
                      for v, o in (manifest.outputs or {}).items()},
            **({"late_rows": {n: x.rows for n, x in late.items()},
                "late": {n: describe(x) for n, x in late.items()}} if late else {}),
            "quality_report": quality_report_path(rt, manifest.timestep)}


def run_timestep(rt: CircuitRuntime, run_id: str, mode: str = "incremental",
                 on_phase: "Callable[[str, dict], None] | None" = None) -> dict:
    """The whole timestep of a run in this process (``orchestration.tasks: per_step``, one task):
    plan, every stage, the check, the commit, each as its own task would run it (idempotent per
    run id, so a retry resumes where the earlier attempt stopped). ``on_phase(name, summary)`` is
    called as each phase ends, and ``on_phase("stage", summary)`` as each stage ends (the task
    logs its table then, not at the end). Returns
    ``{"plan", "stages", "check", "commit"}`` (``skipped``: an empty run, nothing staged)."""
    report = on_phase or (lambda _name, _summary: None)
    phase = "plan"
    try:
        # one lease for every phase: each phase's own ``run_lease`` reuses it (same owner) instead
        # of taking it over, renewing it and starting a heartbeat again; the plan gives it back
        # when it skips the run, and it is given back after the commit. A failed phase leaves it
        # held, as a failed task does, for the retry to take over.
        with run_lease(rt, run_id, take_over_runs=True) as lease:
            p = plan(rt, run_id, mode=mode)
            report("plan", p)
            out: dict = {"plan": p}
            if is_skipped(rt, p):
                return dict(out, skipped=True)
            if not p.get("already_committed"):
                phase = "stages"
                out["stages"] = run_stages(rt, run_id, on_stage=lambda summary: report("stage", summary))
                report("stages", out["stages"])
                phase = "check"
                out["check"] = check(rt, run_id)
                report("check", out["check"])
            phase = "commit"
            out["commit"] = commit(rt, run_id)
            lease.release()
        report("commit", out["commit"])
        return out
    except BaseException as exc:
        exc.dbsp_phase = phase  # type: ignore[attr-defined] - where the run stopped, for its note
        raise


def run_task(rt: CircuitRuntime, step: str, run_id: str, stage: str | None = None,
             mode: str = "incremental", on_phase: "Callable[[str, dict], None] | None" = None) -> dict:
    """Dispatch one task of a DAG run (the Airflow callables and spark-submit both come here).
    A value refused inside a job or a full disk ends the task with one message (``step_failures``)."""
    with step_failures(rt):
        return _run_task(rt, step, run_id, stage, mode, on_phase)


def _run_task(rt: CircuitRuntime, step: str, run_id: str, stage: str | None, mode: str,
              on_phase: "Callable[[str, dict], None] | None" = None) -> dict:
    if step == "plan":
        return plan(rt, run_id, mode=mode)
    if step == "stage":
        if not stage:
            raise ValueError("step 'stage' needs a stage name")
        return run_stage(rt, run_id, stage)
    if step == "stages":
        return run_stages(rt, run_id)
    if step == "check":
        return check(rt, run_id)
    if step == "commit":
        return commit(rt, run_id)
    if step == "timestep":
        return run_timestep(rt, run_id, mode, on_phase)
    raise ValueError(f"unknown step {step!r}; expected one of {STEPS}")
