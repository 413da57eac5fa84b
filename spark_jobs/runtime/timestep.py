"""One timestep as separate, retryable tasks (the Airflow DAG run): plan, stages, check, commit.

Each task may run in its own process and may be retried; every function here is idempotent for a
given ``run_id``. Nothing is visible to readers before ``commit`` writes the manifest:

- ``plan`` freezes the timestep number (last committed + 1) and the input files of this run in
  ``staging/<run>/plan.json``. A retry of the same run reuses the plan; a new run replaces any
  plan left by a run that never committed.
- ``run_stage`` evaluates one stage's operators. Deltas that later stages read are written to
  ``staging/<run>/values/``; state updates and view deltas to ``staging/<run>/stages/<stage>/``;
  a journal (``journal/<stage>.json``, written last) says the stage is done. A retried stage
  whose journal exists does nothing; one without a journal starts over.
- ``check`` runs the quality gate on the staged view deltas (``QualityGateFailed`` stops the run).
- ``commit`` moves every staged update into the state store in one transaction and publishes the
  manifest (its meta records the run id, so a retried commit is a no-op).

``mode="full_refresh"`` recomputes everything from the retained input files with empty state,
under the circuit as it is now (also after an edit: see ``refresh.py``); the view deltas it
commits are new view - old view, so readers of deltas stay consistent.

The run holds the circuit's lease (``writer.py``) from ``plan`` to ``commit``, owned by its run id:
every task renews it and heartbeats while it works, so no ``dbsp step`` (or other DAG) writes the
state meanwhile; ``plan`` may take over the lease of an earlier run of this DAG (Airflow starts a
run only after the previous one ended), and ``commit`` releases it.
"""
from __future__ import annotations

import json
import time
from typing import Any

from pyspark.sql import DataFrame

from spark_jobs.executor import zset
from spark_jobs.executor.evaluate import evaluate_step, trace_kind
from spark_jobs.executor.session import step_conf
from spark_jobs.executor.sources import InputFile, spark_schema
from spark_jobs.executor.sources.lateness import change_totals, on_time
from spark_jobs.executor.sources.reading import refuse_late
from spark_jobs.runtime import refresh
from spark_jobs.runtime.bag import check_deltas
from spark_jobs.runtime.circuit import CircuitRuntime
from spark_jobs.publish import publish_views
from spark_jobs.quality import mark_committed
from spark_jobs.runtime.errors import input_errors
from spark_jobs.runtime.state_bounds import bound_state
from spark_jobs.runtime.event_time import StepClock, iso
from spark_jobs.runtime.failures import step_failures
from spark_jobs.runtime.inputs import input_trace, read_input, refuse_changed, retained_inputs, scan_inputs
from spark_jobs.runtime.quality_gate import check_timestep, quality_dir
from spark_jobs.runtime.retention import after_commit
from spark_jobs.runtime.writer import run_lease
from spark_jobs.runtime.stages import Stage, is_state_backed, stage_graph, staged_values
from spark_jobs.runtime.step import StoreReader, count_unknown_keys
from spark_jobs.state.failpoints import failpoint
from spark_jobs.state.retention import Removed
from spark_jobs.state.layout import safe_name

MODES = ("incremental", "full_refresh")
STEPS = ("plan", "stage", "check", "commit")


# ---- staging layout ------------------------------------------------------------------------
# Staging lives under the state root, on the store's file system (local, hdfs://, s3a://, ...).
def staging_root(rt: CircuitRuntime) -> str:
    return rt.store.fs.join(rt.store.root, "staging")


def run_dir(rt: CircuitRuntime, run_id: str) -> str:
    return rt.store.fs.join(staging_root(rt), safe_name(run_id))


def _write_json(rt: CircuitRuntime, path: str, data: dict) -> None:
    """Write JSON atomically: a reader sees the old file or the whole new one."""
    rt.store.fs.publish_text(path, json.dumps(data, indent=1, default=str), tmp_prefix=".tmp-")


def _read_json(rt: CircuitRuntime, path: str) -> dict | None:
    fs = rt.store.fs
    return json.loads(fs.read_text(path)) if fs.exists(path) else None


def _write_parquet(rt: CircuitRuntime, df: DataFrame, path: str) -> None:
    df.write.mode("overwrite").parquet(rt.store.fs.spark_uri(path))


def _read_parquet(rt: CircuitRuntime, path: str) -> DataFrame:
    return rt.spark.read.parquet(rt.store.fs.spark_uri(path))


def _committed_by(rt: CircuitRuntime, run_id: str) -> int | None:
    """The timestep this run committed, if it did (retained manifests only)."""
    for t in reversed(rt.store.timesteps()):
        m = rt.store.manifest(t)
        if m is not None and (m.meta or {}).get("run_id") == run_id:
            return t
    return None


# ---- plan ------------------------------------------------------------------------------------
def plan(rt: CircuitRuntime, run_id: str, *, mode: str = "incremental") -> dict:
    """Take the run's lease and freeze its timestep and input files (idempotent per run id)."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    with run_lease(rt, run_id, take_over_runs=True):
        return _plan(rt, run_id, mode)


def _plan(rt: CircuitRuntime, run_id: str, mode: str) -> dict:
    if mode != "full_refresh":  # a refresh rebuilds state of another definition on purpose
        rt.store.check_fingerprint()
    done = _committed_by(rt, run_id)
    if done is not None:
        return {"run_id": run_id, "timestep": done, "already_committed": True}
    t = rt.store.last_committed() + 1
    path = rt.store.fs.join(run_dir(rt, run_id), "plan.json")
    existing = _read_json(rt, path)
    if existing and existing["timestep"] == t and existing["mode"] == mode:
        return existing
    if rt.store.fs.exists(staging_root(rt)):
        rt.store.fs.remove_tree(staging_root(rt))  # leftovers of runs that never committed (we hold the lease)
    rt.store.recover()
    manifest = rt.store.manifest()
    spec_inputs = rt.compiled.spec.inputs
    records: dict[str, list[dict]] = {}
    notes: list[str] = []
    roots = rt.config.allowed_input_roots
    if mode == "full_refresh":
        chosen = retained_inputs(spec_inputs, rt.config.data_root, manifest, roots, pruned=Removed.read(rt.store).inputs)
    else:
        scans = scan_inputs(spec_inputs, rt.config.data_root, manifest, roots)
        refuse_changed(scans)
        chosen = {name: scan.pending for name, scan in scans.items()}
        records = {name: scan.consumed.records() for name, scan in scans.items() if scan.consumed.changed}
        notes = [n for scan in scans.values() for n in scan.notes]
    data = {"run_id": run_id, "timestep": t, "mode": mode, "created_at": time.time(),
            "inputs": {name: [f.as_dict() for f in files] for name, files in chosen.items()},
            "consumed_records": records, "notes": notes}
    _write_json(rt, path, data)
    return data


def load_plan(rt: CircuitRuntime, run_id: str) -> dict:
    data = _read_json(rt, rt.store.fs.join(run_dir(rt, run_id), "plan.json"))
    if data is None:
        raise RuntimeError(f"run {run_id!r} of {rt.name} has no plan: run the plan task first")
    return data


# ---- stages ----------------------------------------------------------------------------------
def _stage(rt: CircuitRuntime, name: str) -> Stage:
    for stage in stage_graph(rt.compiled):
        if stage.name == name:
            return stage
    raise KeyError(f"{rt.name} has no stage {name!r}")


def _journal_path(rt: CircuitRuntime, run_id: str, stage: str) -> str:
    return rt.store.fs.join(run_dir(rt, run_id), "journal", f"{stage}.json")


def _value_dir(rt: CircuitRuntime, run_id: str, node_id: str) -> str:
    return rt.store.fs.join(run_dir(rt, run_id), "values", safe_name(node_id))


def run_stage(rt: CircuitRuntime, run_id: str, stage_name: str) -> dict:
    """Evaluate one stage of this run into the staging area (idempotent per run id)."""
    with run_lease(rt, run_id):
        return _run_stage(rt, run_id, stage_name)


def _run_stage(rt: CircuitRuntime, run_id: str, stage_name: str) -> dict:
    started = time.time()
    p = load_plan(rt, run_id)
    if p.get("already_committed"):
        return {"stage": stage_name, "skipped": "timestep already committed by this run"}
    journal_path = _journal_path(rt, run_id, stage_name)
    done = _read_json(rt, journal_path)
    if done is not None:
        return dict(done["summary"], note="already done by an earlier attempt")
    stage = _stage(rt, stage_name)
    spark, circuit, store = rt.spark, rt.compiled.incremental, rt.store
    full = p["mode"] == "full_refresh"
    state = refresh.EmptyState() if full else StoreReader(store)
    fs = store.fs
    stage_dir = fs.join(run_dir(rt, run_id), "stages", stage_name)
    if fs.exists(stage_dir):
        fs.remove_tree(stage_dir)  # a killed earlier attempt
    journal: dict[str, Any] = {"updates": [], "outputs": {}, "consumed": {}, "inputs": {}, "event_time": {}}
    clock = StepClock(rt.compiled.spec.inputs, store.manifest(), fresh=full)
    summary: dict[str, Any] = {"stage": stage_name, "timestep": p["timestep"], "nodes": list(stage.nodes)}

    # inputs of an input stage: read (and validate) the planned files
    inputs: dict[str, DataFrame] = {}
    cached: list[DataFrame] = []
    planned: dict[str, list[InputFile]] = {}
    deleted: dict[str, int] = {}
    for node_id in stage.nodes:
        node = circuit[node_id]
        if node.op != "input":
            continue
        name = node.param("name") or node_id
        spec = rt.compiled.spec.inputs[name]
        files = planned[name] = [InputFile.from_dict(f) for f in p["inputs"].get(name, [])]
        with input_errors({name: files}):
            change = read_input(spark, spec, files, state, rt.config.policy)
            if change.delta is None:
                summary.setdefault("inputs", {})[name] = "no new files: no changes"
                continue
            delta = change.delta.cache()
            cached.append(delta)
            column, mark = clock.column(name), clock.watermark(name)
            totals = change_totals(delta, column, mark).first().asDict()  # one job: counts, late rows
            ins, dels = int(totals["ins"] or 0), int(totals["del"] or 0)
            late = clock.record(name, totals)
            if name in clock.refused():
                raise refuse_late(spark, spec, files, mark, iso)
            if column is not None:
                delta = on_time(delta, column, mark)
            inputs[name] = delta
        deleted[name] = dels
        summary.setdefault("inputs", {})[name] = {"files": len(files), "inserted": ins, "deleted": dels,
                                                  **({"unknown_keys": change.unknown_keys} if change.unknown_keys else {})}
        if late is not None:
            summary["inputs"][name].update(late_rows=late.rows, watermark=iso(late.after.watermark_us))
        journal["inputs"][name] = {"inserted": ins, "deleted": dels, "unknown_keys": change.unknown_keys}
        journal["consumed"][name] = [f.record() for f in files]
        if change.trace is not None:  # the input's own trace (snapshot, keyed rows) gets the delta
            trace_id, sort_by = change.trace
            path = fs.join(stage_dir, "state", safe_name(trace_id))
            _write_parquet(rt, delta, path)
            journal["updates"].append({"trace": trace_id, "op": "replace" if full else "append",
                                       "kind": "zset", "keys": [], "sort_by": list(sort_by), "path": path})
    with input_errors(planned):
        quarantined = check_deltas(rt, p["timestep"], inputs, deleted, planned, state)
    if quarantined:
        journal["quarantined"] = {q.input: q.to_dict() for q in quarantined}
        summary["quarantined"] = [q.note() for q in quarantined]

    def external(node_id: str) -> DataFrame:
        """Values produced outside this stage: committed state, or another stage's staged delta."""
        node = circuit[node_id]
        if is_state_backed(circuit, node_id):
            if node.op == "delay":
                prev = state.read(node.inputs[0])
                return prev if prev is not None else zset.empty_like(external(node.inputs[0]))
            prev, delta = state.read(node_id), external(node.inputs[0])
            return delta if prev is None else zset.plus(prev, delta)
        return _read_parquet(rt, _value_dir(rt, run_id, node_id))

    schemas = {name: spark_schema(inp) for name, inp in rt.compiled.spec.inputs.items()}
    result = evaluate_step(circuit, inputs, state, first_step=full or p["timestep"] == 1,
                           input_schemas=schemas, spark=spark, only=set(stage.nodes), external=external,
                           policy=rt.config.policy)
    needed = staged_values(rt.compiled)
    for node_id in stage.nodes:
        if node_id in needed:
            _write_parquet(rt, result.values[node_id], _value_dir(rt, run_id, node_id))
    for node_id, update in result.updates.items():
        path = fs.join(stage_dir, "state", safe_name(node_id))
        _write_parquet(rt, update.df, path)
        failpoint("after_state_write")
        kind = trace_kind(circuit, node_id)
        op = "replace" if full or update.kind == "replace" else "append"
        journal["updates"].append({"trace": node_id, "op": op, "kind": kind, "keys": list(update.keys),
                                   "sort_by": list(update.sort_by), "path": path})
    failpoint("mid_step")
    for view, df in result.outputs.items():
        if full:  # the change of the view = new view - old view (where comparable)
            df = refresh.view_delta(store, view, df)
        path = fs.join(stage_dir, "outputs", safe_name(view))
        _write_parquet(rt, df, path)
        journal["outputs"][view] = path
    for df in cached:
        df.unpersist()
    journal["event_time"] = clock.journal()
    summary["seconds"] = round(time.time() - started, 2)
    summary["state_updates"] = [u["trace"] for u in journal["updates"]]
    summary["views"] = sorted(journal["outputs"])
    journal["summary"] = summary
    _write_json(rt, journal_path, journal)
    return summary


def _journals(rt: CircuitRuntime, run_id: str) -> dict[str, dict]:
    out = {}
    for stage in stage_graph(rt.compiled):
        j = _read_json(rt, _journal_path(rt, run_id, stage.name))
        if j is None:
            raise RuntimeError(f"stage {stage.name!r} of run {run_id!r} has not finished; cannot go on")
        out[stage.name] = j
    return out


# ---- check and commit --------------------------------------------------------------------------
def check(rt: CircuitRuntime, run_id: str) -> dict:
    """Quality gate on the staged view deltas; raises ``QualityGateFailed`` on a `fail` check."""
    with run_lease(rt, run_id):
        return _check(rt, run_id)


def _check(rt: CircuitRuntime, run_id: str) -> dict:
    p = load_plan(rt, run_id)
    if p.get("already_committed"):
        return {"skipped": "timestep already committed by this run"}
    journals = _journals(rt, run_id)
    spark = rt.spark
    views = {v: _read_parquet(rt, path) for j in journals.values() for v, path in j["outputs"].items()}
    inputs: dict[str, DataFrame] = {}
    checked = {n for n, i in rt.compiled.spec.inputs.items() if i.expectations}
    clock = StepClock(rt.compiled.spec.inputs, rt.store.manifest(), fresh=p["mode"] == "full_refresh")
    for j in journals.values():
        clock.from_journal(j.get("event_time") or {})
        for name in checked & set(j["inputs"]):
            files = [InputFile.from_dict(f) for f in p["inputs"].get(name, [])]
            spec = rt.compiled.spec.inputs[name]
            own = input_trace(spec)
            if own is None:
                delta = read_input(spark, spec, files, refresh.EmptyState()).delta
                inputs[name] = on_time(delta, clock.column(name), clock.watermark(name)) if clock.timed(name) else delta
            else:  # the change was staged (late rows left out) as the update of the input's own trace
                staged = [u["path"] for u in j["updates"] if u["trace"] == own[0]]
                inputs[name] = _read_parquet(rt, staged[0])
    previous = None
    if p["mode"] == "full_refresh":  # the views' deltas were taken against comparable old views only
        previous = {v: refresh.old_view(rt.store, v, df) for v, df in views.items()}
    report = check_timestep(rt, p["timestep"], views, inputs, previous, late=clock.report())
    return {"timestep": p["timestep"], "summary": report.summary(), "failed": len(report.failed),
            "warnings": len(report.warnings)}


def _change_rows(journals: dict[str, dict]) -> int:
    """Input rows (inserted + deleted) the stages of this run read."""
    return sum(c["inserted"] + c["deleted"] for j in journals.values() for c in j["inputs"].values())


def commit(rt: CircuitRuntime, run_id: str) -> dict:
    """Move the staged updates into the store and publish the manifest (idempotent per run id);
    then give the run's lease back."""
    with run_lease(rt, run_id, release=True):
        return _commit(rt, run_id)


def _commit(rt: CircuitRuntime, run_id: str) -> dict:
    done = _committed_by(rt, run_id)
    if done is not None:  # a retry: the commit is durable; publishing may not have happened
        return {"timestep": done, "note": "already committed by an earlier attempt",
                "published": publish_views(rt).raise_if_failed().summary()}
    p = load_plan(rt, run_id)
    journals = _journals(rt, run_id)
    full = p["mode"] == "full_refresh"
    notes = list(p.get("notes") or [])
    with rt.store.begin(refresh=full) as txn:
        if txn.timestep != p["timestep"]:
            raise RuntimeError(f"run {run_id!r} planned timestep {p['timestep']} but the store is at "
                               f"{txn.timestep - 1}; re-run the plan")
        if full:
            refresh.forget_consumed(txn)
        for name, records in (p.get("consumed_records") or {}).items():
            txn.set_consumed(name, records)
        appends, outputs, quarantined = [], {}, {}
        for j in journals.values():
            for view, path in j["outputs"].items():
                outputs[view] = _read_parquet(rt, path)
            quarantined.update(j.get("quarantined") or {})
        if full:
            notes += refresh.start(txn, rt.store, {v: df.schema for v, df in outputs.items()})
        for j in journals.values():
            for u in j["updates"]:
                df, keys, sort_by = _read_parquet(rt, u["path"]), tuple(u["keys"]), tuple(u.get("sort_by", ()))
                if u["op"] == "replace":
                    txn.replace(u["trace"], df, kind=u["kind"], keys=keys, sort_by=sort_by)
                else:
                    appends.append((u["trace"], df, u["kind"], keys, sort_by))
            for name, files in j["consumed"].items():
                txn.consume(name, files)
            for name, counts in j["inputs"].items():
                restart = full and rt.compiled.spec.inputs[name].kind == "cdc"
                count_unknown_keys(txn, name, int(counts.get("unknown_keys", 0)), restart=restart)
        clock = StepClock(rt.compiled.spec.inputs, txn.previous, fresh=full)
        for j in journals.values():
            clock.from_journal(j.get("event_time") or {})
        clock.commit(txn)
        bound_state(txn, rt.compiled.incremental, clock)
        small = not full and rt.config.policy.small_change(_change_rows(journals))
        with step_conf(rt.spark, small):
            txn.write_deltas(appends, outputs, batched=small)
            txn.set_meta("run_id", run_id)
            txn.set_meta("mode", p["mode"])
            if quarantined:
                txn.set_meta("quarantined", quarantined)
            manifest = txn.commit()
    mark_committed(quality_dir(rt), manifest.timestep)
    rt.store.fs.remove_tree(run_dir(rt, run_id))
    published = publish_views(rt)  # after the commit point: a crash here is repaired by the next run
    out = {"timestep": manifest.timestep, "notes": notes,
           "views": {v: {"inserted": o.rows_inserted, "deleted": o.rows_deleted}
                     for v, o in (manifest.outputs or {}).items()},
           "published": published.raise_if_failed().summary()}
    note = after_commit(rt)  # after publishing: retention keeps the deltas a table has not caught up with
    return {**out, "retention": note} if note else out


def run_task(rt: CircuitRuntime, step: str, run_id: str, stage: str | None = None,
             mode: str = "incremental") -> dict:
    """Dispatch one task of a DAG run (the Airflow callables and spark-submit both come here).
    A value refused inside a job or a full disk ends the task with one message (``step_failures``)."""
    with step_failures(rt):
        return _run_task(rt, step, run_id, stage, mode)


def _run_task(rt: CircuitRuntime, step: str, run_id: str, stage: str | None, mode: str) -> dict:
    if step == "plan":
        return plan(rt, run_id, mode=mode)
    if step == "stage":
        if not stage:
            raise ValueError("step 'stage' needs a stage name")
        return run_stage(rt, run_id, stage)
    if step == "check":
        return check(rt, run_id)
    if step == "commit":
        return commit(rt, run_id)
    raise ValueError(f"unknown step {step!r}; expected one of {STEPS}")
