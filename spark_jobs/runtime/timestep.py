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

``mode="full_refresh"`` recomputes everything from the retained input files with empty state;
the view deltas it commits are new view - old view, so readers of deltas stay consistent.
"""
from __future__ import annotations

import json
import time
from typing import Any

from pyspark.sql import DataFrame

from spark_jobs.executor import zset
from spark_jobs.executor.evaluate import evaluate_step, trace_kind
from spark_jobs.executor.session import SMALL_CHANGE_ROWS, step_conf
from spark_jobs.executor.sources import InputFile, spark_schema
from spark_jobs.executor.sources.lateness import change_totals, on_time
from spark_jobs.executor.sources.reading import refuse_late
from spark_jobs.runtime.circuit import CircuitRuntime
from spark_jobs.publish import publish_views
from spark_jobs.runtime.event_time import StepClock, iso
from spark_jobs.runtime.inputs import input_trace, pending_inputs, read_input, retained_inputs
from spark_jobs.runtime.quality_gate import check_timestep
from spark_jobs.runtime.retention import after_commit
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
    """Freeze this run's timestep and input files (idempotent per run id)."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
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
        rt.store.fs.remove_tree(staging_root(rt))  # leftovers of runs that never committed (max_active_runs=1)
    rt.store.recover()
    manifest = rt.store.manifest()
    spec_inputs = rt.compiled.spec.inputs
    if mode == "full_refresh":
        chosen = retained_inputs(spec_inputs, rt.config.data_root, manifest, rt.config.allowed_input_roots,
                                 pruned=Removed.read(rt.store).inputs)
    else:
        chosen = pending_inputs(spec_inputs, rt.config.data_root, manifest, rt.config.allowed_input_roots)
    data = {"run_id": run_id, "timestep": t, "mode": mode, "created_at": time.time(),
            "inputs": {name: [f.as_dict() for f in files] for name, files in chosen.items()}}
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


class _EmptyState:
    """A full refresh starts from no state at all."""

    def read(self, node_id: str) -> DataFrame | None:
        return None

    def trace_files(self, node_id: str) -> None:
        return None


def run_stage(rt: CircuitRuntime, run_id: str, stage_name: str) -> dict:
    """Evaluate one stage of this run into the staging area (idempotent per run id)."""
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
    state = _EmptyState() if full else StoreReader(store)
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
    for node_id in stage.nodes:
        node = circuit[node_id]
        if node.op != "input":
            continue
        name = node.param("name") or node_id
        spec = rt.compiled.spec.inputs[name]
        files = [InputFile(f["path"], f["size"], f["mtime"]) for f in p["inputs"].get(name, [])]
        change = read_input(spark, spec, files, state)
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
        summary.setdefault("inputs", {})[name] = {"files": len(files), "inserted": ins, "deleted": dels,
                                                  **({"unknown_keys": change.unknown_keys} if change.unknown_keys else {})}
        if late is not None:
            summary["inputs"][name].update(late_rows=late.rows, watermark=iso(late.after.watermark_us))
        journal["inputs"][name] = {"inserted": ins, "deleted": dels, "unknown_keys": change.unknown_keys}
        journal["consumed"][name] = [f.as_dict() for f in files]
        if change.trace is not None:  # the input's own trace (snapshot, keyed rows) gets the delta
            trace_id, sort_by = change.trace
            path = fs.join(stage_dir, "state", safe_name(trace_id))
            _write_parquet(rt, delta, path)
            journal["updates"].append({"trace": trace_id, "op": "replace" if full else "append",
                                       "kind": "zset", "keys": [], "sort_by": list(sort_by), "path": path})

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
                           input_schemas=schemas, spark=spark, only=set(stage.nodes), external=external)
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
        if full:  # the change of the view = new view - old view
            old = store.read_view(view)
            df = zset.consolidate(zset.plus(df, zset.negate(old))) if old is not None else df
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
            files = [InputFile(f["path"], f["size"], f["mtime"]) for f in j["consumed"][name]]
            spec = rt.compiled.spec.inputs[name]
            own = input_trace(spec)
            if own is None:
                delta = read_input(spark, spec, files, _EmptyState()).delta
                inputs[name] = on_time(delta, clock.column(name), clock.watermark(name)) if clock.timed(name) else delta
            else:  # the change was staged (late rows left out) as the update of the input's own trace
                staged = [u["path"] for u in j["updates"] if u["trace"] == own[0]]
                inputs[name] = _read_parquet(rt, staged[0])
    report = check_timestep(rt, p["timestep"], views, inputs, late=clock.report())
    return {"timestep": p["timestep"], "summary": report.summary(), "failed": len(report.failed),
            "warnings": len(report.warnings)}


def _change_rows(journals: dict[str, dict]) -> int:
    """Input rows (inserted + deleted) the stages of this run read."""
    return sum(c["inserted"] + c["deleted"] for j in journals.values() for c in j["inputs"].values())


def commit(rt: CircuitRuntime, run_id: str) -> dict:
    """Move the staged updates into the store and publish the manifest (idempotent per run id)."""
    done = _committed_by(rt, run_id)
    if done is not None:  # a retry: the commit is durable; publishing may not have happened
        return {"timestep": done, "note": "already committed by an earlier attempt",
                "published": publish_views(rt).raise_if_failed().summary()}
    p = load_plan(rt, run_id)
    journals = _journals(rt, run_id)
    with rt.store.begin() as txn:
        if txn.timestep != p["timestep"]:
            raise RuntimeError(f"run {run_id!r} planned timestep {p['timestep']} but the store is at "
                               f"{txn.timestep - 1}; re-run the plan")
        if p["mode"] == "full_refresh":
            for trace_id in list(txn.previous.traces if txn.previous else {}):
                if not trace_id.startswith("view:"):
                    txn.drop(trace_id)
        appends, outputs = [], {}
        for j in journals.values():
            for u in j["updates"]:
                df, keys, sort_by = _read_parquet(rt, u["path"]), tuple(u["keys"]), tuple(u.get("sort_by", ()))
                if u["op"] == "replace":
                    txn.replace(u["trace"], df, kind=u["kind"], keys=keys, sort_by=sort_by)
                else:
                    appends.append((u["trace"], df, u["kind"], keys, sort_by))
            for view, path in j["outputs"].items():
                outputs[view] = _read_parquet(rt, path)
            for name, files in j["consumed"].items():
                txn.consume(name, files)
            for name, counts in j["inputs"].items():
                count_unknown_keys(txn, name, int(counts.get("unknown_keys", 0)))
        clock = StepClock(rt.compiled.spec.inputs, txn.previous, fresh=p["mode"] == "full_refresh")
        for j in journals.values():
            clock.from_journal(j.get("event_time") or {})
        clock.commit(txn)
        small = p["mode"] != "full_refresh" and _change_rows(journals) <= SMALL_CHANGE_ROWS
        with step_conf(rt.spark, small):
            if small:  # delta-sized, as in run_step: every state and view delta in one write job
                txn.append_many(appends, outputs)
            else:
                for trace_id, df, kind, keys, sort_by in appends:
                    txn.append(trace_id, df, kind=kind, keys=keys, sort_by=sort_by)
                for view, df in outputs.items():
                    txn.write_output(view, df)
            txn.set_meta("run_id", run_id)
            txn.set_meta("mode", p["mode"])
            manifest = txn.commit()
    rt.store.fs.remove_tree(run_dir(rt, run_id))
    published = publish_views(rt)  # after the commit point: a crash here is repaired by the next run
    out = {"timestep": manifest.timestep,
           "views": {v: {"inserted": o.rows_inserted, "deleted": o.rows_deleted}
                     for v, o in (manifest.outputs or {}).items()},
           "published": published.raise_if_failed().summary()}
    note = after_commit(rt)  # after publishing: retention keeps the deltas a table has not caught up with
    return {**out, "retention": note} if note else out


def run_task(rt: CircuitRuntime, step: str, run_id: str, stage: str | None = None,
             mode: str = "incremental") -> dict:
    """Dispatch one task of a DAG run (the Airflow callables and spark-submit both come here)."""
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
