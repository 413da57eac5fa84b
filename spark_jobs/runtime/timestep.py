"""One timestep as the tasks of a DAG run: plan, the operator stages, the quality check, commit.

Each task runs in its own process (Airflow), so anything a later task needs is staged durably
under ``<state root>/staging/<run>/`` and listed in a JSON journal written last:

- ``plan`` freezes the timestep number (last committed + 1) and the input files of the run. It
  needs no Spark session (manifests and listings only), so an empty run costs no Spark at all;
  it reports ``empty`` when no input has a new file (the DAG then skips the rest of the run).
- ``run_stage`` evaluates one stage (``stages.py``) into staging: the deltas other stages read,
  its state updates and view deltas. One Spark job per stage brings its small results to the
  driver as Arrow; pyarrow writes them (``staging.py``); the next task reads them back as local
  relations (no job). Input files are read once, by their input stage; nothing is re-planned.
- ``run_stages`` (``orchestration.tasks: per_step``) runs every stage in one process, in order,
  each under a Spark job group/tag named after the stage; values stay in memory between stages.
- ``check`` runs the quality gate on the staged view deltas and input changes (no input file is
  read again).
- ``commit`` moves the staged updates into the state store in one transaction and publishes the
  manifest (its meta records the run id, so a retried commit is a no-op); then it writes the
  change files of views with ``feed: true``.

Every task is idempotent for its run id (a finished stage is not redone, a half-done one starts
over). ``mode="full_refresh"`` recomputes everything from the retained input files with empty
state; the view deltas it commits are new view - old view, so readers of deltas stay consistent.
"""
from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

from spark_jobs.runtime.circuit import CircuitRuntime
from spark_jobs.runtime.inputs import is_snapshot, pending_inputs, retained_inputs, snapshot_trace
from spark_jobs.runtime.stages import Stage, is_state_backed, stage_graph, staged_values
from spark_jobs.state.failpoints import failpoint
from spark_jobs.state.layout import safe_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

MODES = ("incremental", "full_refresh")
STEPS = ("plan", "stage", "stages", "check", "commit")


# ---- staging layout ------------------------------------------------------------------------
# Staging lives under the state root, on the store's file system (local, hdfs://, s3a://, ...).
def staging_root(rt: CircuitRuntime) -> str:
    return rt.files.fs.join(rt.files.root, "staging")


def run_dir(rt: CircuitRuntime, run_id: str) -> str:
    return rt.files.fs.join(staging_root(rt), safe_name(run_id))


def _write_json(rt: CircuitRuntime, path: str, data: dict) -> None:
    """Write JSON atomically: a reader sees the old file or the whole new one."""
    rt.files.fs.publish_text(path, json.dumps(data, indent=1, default=str), tmp_prefix=".tmp-")


def _read_json(rt: CircuitRuntime, path: str) -> dict | None:
    fs = rt.files.fs
    return json.loads(fs.read_text(path)) if fs.exists(path) else None


def _committed_by(rt: CircuitRuntime, run_id: str) -> int | None:
    """The timestep this run committed, if it did (retained manifests only)."""
    store = rt.files
    for t in reversed(store.timesteps()):
        m = store.manifest(t)
        if m is not None and (m.meta or {}).get("run_id") == run_id:
            return t
    return None


# ---- plan ------------------------------------------------------------------------------------
def plan(rt: CircuitRuntime, run_id: str, *, mode: str = "incremental") -> dict:
    """Freeze this run's timestep and input files (idempotent per run id; no Spark).

    ``empty`` is True when the run has nothing to do: incremental, and no input has a new file.
    Unless the circuit sets ``orchestration.commit_empty``, nothing is staged for such a run.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    store = rt.files
    store.check_fingerprint()
    done = _committed_by(rt, run_id)
    if done is not None:
        return {"run_id": run_id, "timestep": done, "mode": mode, "already_committed": True, "empty": False}
    t = store.last_committed() + 1
    path = store.fs.join(run_dir(rt, run_id), "plan.json")
    existing = _read_json(rt, path)
    if existing and existing["timestep"] == t and existing["mode"] == mode:
        return existing
    manifest = store.manifest()
    spec = rt.compiled.spec
    chosen = (retained_inputs if mode == "full_refresh" else pending_inputs)(
        spec.inputs, rt.config.data_root, manifest, rt.config.allowed_input_roots)
    empty = mode == "incremental" and not any(chosen.values())
    data = {"run_id": run_id, "timestep": t, "mode": mode, "created_at": time.time(), "empty": empty,
            "inputs": {name: [f.as_dict() for f in files] for name, files in chosen.items()}}
    if empty and not spec.orchestration.commit_empty:
        return data  # the DAG skips the rest of the run: nothing to stage, nothing to clean
    if store.fs.exists(staging_root(rt)):
        store.fs.remove_tree(staging_root(rt))  # leftovers of runs that never committed (max_active_runs=1)
    store.recover()
    _write_json(rt, path, data)
    return data


def load_plan(rt: CircuitRuntime, run_id: str) -> dict:
    data = _read_json(rt, rt.files.fs.join(run_dir(rt, run_id), "plan.json"))
    if data is None:
        raise RuntimeError(f"run {run_id!r} of {rt.name} has no plan: run the plan task first")
    return data


# ---- stages ----------------------------------------------------------------------------------
def _journal_path(rt: CircuitRuntime, run_id: str, stage: str) -> str:
    return rt.files.fs.join(run_dir(rt, run_id), "journal", f"{stage}.json")


class _EmptyState:
    """A full refresh starts from no state at all."""

    def read(self, node_id: str) -> "DataFrame | None":
        return None


@dataclass
class _Run:
    """What the stages of one run share in one process: the plan, committed state, values."""

    rt: CircuitRuntime
    run_id: str
    plan: dict
    tables: dict[str, Any] = field(default_factory=dict)  # node id -> Arrow table computed here
    frames: dict[str, "DataFrame"] = field(default_factory=dict)  # node id -> DataFrame read here
    staged: dict[str, dict] = field(default_factory=dict)  # node id -> Staged (as dict), all stages

    @property
    def full(self) -> bool:
        return self.plan["mode"] == "full_refresh"

    def __post_init__(self) -> None:
        from spark_jobs.runtime.step import StoreReader

        self.state = _EmptyState() if self.full else StoreReader(self.rt.store)
        self.needed = staged_values(self.rt.compiled) | self._checked_inputs()

    def _checked_inputs(self) -> set[str]:
        """Input nodes whose change the quality gate checks (staged even if no stage reads them)."""
        circuit = self.rt.compiled.incremental
        names = {n for n, i in self.rt.compiled.spec.inputs.items() if i.expectations}
        return {node.id for node in circuit if node.op == "input" and (node.param("name") or node.id) in names}

    def stage_dir(self, stage: str) -> str:
        fs = self.rt.files.fs
        return fs.join(run_dir(self.rt, self.run_id), "stages", stage)

    def value(self, node_id: str) -> "DataFrame":
        """A value another stage produced: in memory (this process) or staged (an earlier task)."""
        from spark_jobs.runtime import staging

        if node_id not in self.frames:
            if node_id in self.tables:
                data = self.staged[node_id]
                self.frames[node_id] = staging.to_frame(self.rt.spark, self.tables[node_id], data["schema"])
            else:
                st = staging.Staged.from_dict(self.staged[node_id])
                self.frames[node_id] = staging.read_staged(self.rt.spark, st, self.rt.files.fs.spark_uri(st.path))
        return self.frames[node_id]

    def load_journals(self, stages: list[Stage]) -> None:
        """Learn where earlier tasks staged their values."""
        for stage in stages:
            j = _read_json(self.rt, _journal_path(self.rt, self.run_id, stage.name))
            if j is not None:
                self.staged.update(j.get("values", {}))


@contextmanager
def _stage_jobs(spark, circuit: str, stage: str) -> Iterator[None]:
    """Submit the stage's Spark jobs under a name the Spark UI shows: a job group and description
    on a classic session; a job tag on Spark Connect (which sets its own group per request)."""
    tag = f"dbsp-{circuit}-{stage}".replace(",", "_")
    try:
        sc = spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        sc = None
    if sc is None:
        spark.addTag(tag)
        try:
            yield
        finally:
            spark.removeTag(tag)
        return
    sc.setJobGroup(tag, f"dbsp {circuit}: stage {stage}")
    try:
        yield
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]


def _trace_rows(manifest, trace_id: str) -> int:
    entry = manifest.traces.get(trace_id) if manifest is not None else None
    return entry.rows if entry is not None else 0


def _state_trace(circuit, node_id: str) -> str | None:
    """The trace a state-backed value reads: the integrator's id (a delay reads its input's)."""
    if not is_state_backed(circuit, node_id):
        return None
    node = circuit[node_id]
    return node.inputs[0] if node.op == "delay" else node_id


def _evaluate_stage(run: _Run, stage: Stage) -> dict:
    """Evaluate one stage of the run and stage its results durably; returns its journal."""
    from spark_jobs.executor import zset
    from spark_jobs.executor.evaluate import evaluate_step, trace_kind
    from spark_jobs.executor.session import LOCAL_CHANGE_ROWS
    from spark_jobs.executor.sources import InputFile, spark_schema
    from spark_jobs.ir.explain import SYMBOLS
    from spark_jobs.runtime import staging
    from spark_jobs.runtime.inputs import read_input

    rt, p = run.rt, run.plan
    spark, circuit, store, fs = rt.spark, rt.compiled.incremental, rt.store, rt.files.fs
    started = time.perf_counter()
    stage_dir = run.stage_dir(stage.name)
    if fs.exists(stage_dir):
        fs.remove_tree(stage_dir)  # a killed earlier attempt
    journal: dict[str, Any] = {"updates": [], "outputs": {}, "consumed": {}, "inputs": {}, "values": {}}
    seconds: dict[str, float] = {}
    values: dict[str, DataFrame] = {}
    updates: dict[str, Any] = {}
    outputs: dict[str, DataFrame] = {}
    foreign: dict[str, DataFrame] = {}

    def outside(node_id: str) -> "DataFrame":
        """Values produced outside this stage: committed state, or another stage's delta."""
        if node_id in values:
            return values[node_id]
        node = circuit[node_id]
        if is_state_backed(circuit, node_id):
            if node.op == "delay":
                prev = run.state.read(node.inputs[0])
                return prev if prev is not None else zset.empty_like(outside(node.inputs[0]))
            prev, delta = run.state.read(node_id), outside(node.inputs[0])
            return delta if prev is None else zset.plus(prev, delta)
        if node_id in run.staged or node_id in run.tables:
            return run.value(node_id)
        if node_id not in foreign:  # inside another stage and not staged (e.g. reached by
            # narrowing walking upstream): planned again from what is staged, lazily
            foreign[node_id] = evaluate_step(circuit, {}, run.state, first_step=run.full or p["timestep"] == 1,
                                             input_schemas=schemas, spark=spark, only={node_id},
                                             external=outside).values[node_id]
        return foreign[node_id]

    schemas = {name: spark_schema(inp) for name, inp in rt.compiled.spec.inputs.items()}
    with _stage_jobs(spark, rt.name, stage.name):
        inputs: dict[str, DataFrame] = {}
        for node_id in stage.nodes:  # an input stage reads (and checks) the planned files, once
            node = circuit[node_id]
            if node.op != "input":
                continue
            t0 = time.perf_counter()
            name = node.param("name") or node_id
            spec = rt.compiled.spec.inputs[name]
            files = [InputFile.from_dict(f) for f in p["inputs"].get(name, [])]
            previous = None if run.full else store.read_trace(snapshot_trace(name))
            change = read_input(spark, spec, files, previous)
            if change.delta is not None:
                inputs[name] = change.delta
                journal["consumed"][name] = [f.as_dict() for f in files]
                journal["inputs"][name] = {"files": [f.path for f in files]}
            seconds[node_id] = time.perf_counter() - t0
        for node_id in stage.nodes:  # one node at a time: planning seconds per operator
            t0 = time.perf_counter()
            result = evaluate_step(circuit, inputs, run.state, first_step=run.full or p["timestep"] == 1,
                                   input_schemas=schemas, spark=spark, only={node_id}, external=outside)
            values.update(result.values)
            updates.update(result.updates)
            outputs.update(result.outputs)
            seconds[node_id] = seconds.get(node_id, 0.0) + time.perf_counter() - t0
        for view, df in list(outputs.items()):
            if run.full:  # the change of the view = new view - old view
                old = store.read_view(view)
                outputs[view] = zset.consolidate(zset.plus(df, zset.negate(old))) if old is not None else df

        # everything later tasks need, plus the row count of every other delta, in one job
        frames: dict[str, DataFrame] = {}
        keys: dict[str, str] = {}  # journal key -> frame key (one DataFrame is staged once)

        def want(key: str, df: "DataFrame") -> None:
            for fk, seen in frames.items():
                if seen is df:
                    keys[key] = fk
                    return
            frames[key] = df
            keys[key] = key

        for node_id in stage.nodes:
            if node_id in run.needed:
                want(f"value/{node_id}", values[node_id])
        for node_id, update in updates.items():
            want(f"state/{node_id}", update.df)
        for view, df in outputs.items():
            want(f"output/{view}", df)
        counted = {n: values[n] for n in stage.nodes
                   if not is_state_backed(circuit, n) and f"value/{n}" not in keys and n in values}
        t0 = time.perf_counter()
        tables, counts = staging.collect_tables(spark, frames, LOCAL_CHANGE_ROWS, counted)
        written: dict[str, staging.Staged] = {}
        for key, df in frames.items():
            path = fs.join(stage_dir, *[safe_name(part) for part in key.split("/", 1)])
            if tables is not None:
                written[key] = staging.write_table(tables[key], path + ".parquet", df.schema.json())
            else:
                written[key] = staging.write_frame(df, path, fs.spark_uri(path))
        spark_seconds = time.perf_counter() - t0
    failpoint("after_state_write")

    staged = {key: written[fk] for key, fk in keys.items()}
    for node_id in stage.nodes:
        if f"value/{node_id}" in staged:
            journal["values"][node_id] = staged[f"value/{node_id}"].to_dict()
            run.staged[node_id] = journal["values"][node_id]
            if tables is not None:
                run.tables[node_id] = tables[keys[f"value/{node_id}"]]
    for node_id, update in updates.items():
        op = "replace" if run.full or update.kind == "replace" else "append"
        journal["updates"].append({"trace": node_id, "op": op, "kind": trace_kind(circuit, node_id),
                                   "keys": list(update.keys), "sort_by": list(update.sort_by),
                                   "staged": staged[f"state/{node_id}"].to_dict()})
    for view in outputs:
        journal["outputs"][view] = staged[f"output/{view}"].to_dict()
    for node_id in stage.nodes:  # input changes: rows inserted and deleted (the snapshot trace too)
        node = circuit[node_id]
        name = node.param("name") or node_id
        if node.op == "input" and name in journal["inputs"]:
            st = staged.get(f"value/{node_id}")
            journal["inputs"][name].update(inserted=st.inserted if st else None,
                                           deleted=st.deleted if st else None)
            if is_snapshot(rt.compiled.spec.inputs[name]) and st is not None:
                journal["updates"].append({"trace": snapshot_trace(name), "op": "replace" if run.full else "append",
                                           "kind": "zset", "keys": [], "sort_by": [], "staged": st.to_dict()})
    failpoint("mid_step")

    manifest = None if run.full else store.manifest()

    def rows_of(node_id: str) -> int | None:
        st = staged.get(f"value/{node_id}")
        if st is not None:
            return st.rows
        if node_id in counts:
            return counts[node_id]
        return (run.staged.get(node_id) or {}).get("rows")  # staged by another stage

    operators = []
    for node_id in stage.nodes:
        node = circuit[node_id]
        ins = [rows_of(i) for i in node.inputs if not is_state_backed(circuit, i)]
        rows_in = None if not ins or any(r is None for r in ins) else sum(ins)  # type: ignore[arg-type]
        read = sum(_trace_rows(manifest, t) for t in filter(None, (_state_trace(circuit, i) for i in node.inputs)))
        if node_id in updates and node.op != "integrate":
            read += _trace_rows(manifest, node_id)  # an operator that looks its own state up
        upd = staged.get(f"state/{node_id}")
        operators.append({
            "operator": node_id, "op": SYMBOLS.get(node.op, node.op),
            "rows_in": rows_in,
            "rows_out": None if is_state_backed(circuit, node_id) else rows_of(node_id),
            "state_read": read if any(_state_trace(circuit, i) for i in node.inputs) or upd else None,
            "state_written": upd.rows if upd is not None else None,
            "seconds": round(seconds.get(node_id, 0.0), 3)})
    summary = {"stage": stage.name, "timestep": p["timestep"], "mode": p["mode"],
               "staged_as": "arrow" if tables is not None else "spark", "operators": operators,
               "inputs": journal["inputs"], "views": {v: {"inserted": staged[f"output/{v}"].inserted,
                                                          "deleted": staged[f"output/{v}"].deleted}
                                                      for v in outputs},
               "spark_seconds": round(spark_seconds, 3),
               "seconds": round(time.perf_counter() - started, 3)}
    journal["summary"] = summary
    _write_json(rt, _journal_path(rt, run.run_id, stage.name), journal)
    return summary


def _stage(rt: CircuitRuntime, name: str) -> tuple[Stage, list[Stage]]:
    stages = stage_graph(rt.compiled)
    for stage in stages:
        if stage.name == name:
            return stage, stages
    raise KeyError(f"{rt.name} has no stage {name!r}")


def _done(rt: CircuitRuntime, run_id: str, stage: str) -> dict | None:
    j = _read_json(rt, _journal_path(rt, run_id, stage))
    return None if j is None else dict(j["summary"], note="already done by an earlier attempt")


# The plan knows the input files' sizes, not their rows: up to this many bytes of new input
# files, a run is "small" (``SMALL_CHANGE_ROWS``: ~10-50 bytes per row in Parquet or CSV) and
# its tasks run with the small-change Spark settings (no AQE, 2 shuffle partitions, broadcasts
# of the deltas), as ``dbsp step`` does.
SMALL_INPUT_BYTES = 8 * 1024 * 1024


def is_small(p: dict) -> bool:
    return p["mode"] != "full_refresh" and sum(
        int(f.get("size") or 0) for files in p["inputs"].values() for f in files) <= SMALL_INPUT_BYTES


def run_stage(rt: CircuitRuntime, run_id: str, stage_name: str) -> dict:
    """Evaluate one stage of this run into the staging area (idempotent per run id)."""
    p = load_plan(rt, run_id)
    if p.get("already_committed"):
        return {"stage": stage_name, "skipped": "timestep already committed by this run"}
    done = _done(rt, run_id, stage_name)
    if done is not None:
        return done
    stage, stages = _stage(rt, stage_name)
    from spark_jobs.executor.session import step_conf

    run = _Run(rt, run_id, p)
    run.load_journals(stages)
    with step_conf(rt.spark, is_small(p)):
        return _evaluate_stage(run, stage)


def run_stages(rt: CircuitRuntime, run_id: str) -> dict:
    """Every stage of this run in this process, in order (``orchestration.tasks: per_step``).

    The values a stage hands to the next stay in memory as Arrow tables; they are staged all the
    same, so that a retry after a crash resumes at the first unfinished stage."""
    started = time.perf_counter()
    p = load_plan(rt, run_id)
    if p.get("already_committed"):
        return {"skipped": "timestep already committed by this run"}
    stages = stage_graph(rt.compiled)
    run = _Run(rt, run_id, p)
    run.load_journals(stages)
    from spark_jobs.executor.session import step_conf

    summaries = []
    with step_conf(rt.spark, is_small(p)):
        for stage in stages:
            summaries.append(_done(rt, run_id, stage.name) or _evaluate_stage(run, stage))
    return {"timestep": p["timestep"], "mode": p["mode"], "stages": summaries,
            "seconds": round(time.perf_counter() - started, 3)}


def _journals(rt: CircuitRuntime, run_id: str) -> dict[str, dict]:
    out = {}
    for stage in stage_graph(rt.compiled):
        j = _read_json(rt, _journal_path(rt, run_id, stage.name))
        if j is None:
            raise RuntimeError(f"stage {stage.name!r} of run {run_id!r} has not finished; cannot go on")
        out[stage.name] = j
    return out


# ---- check and commit --------------------------------------------------------------------------
def _read(rt: CircuitRuntime, data: dict) -> "DataFrame":
    from spark_jobs.runtime import staging

    st = staging.Staged.from_dict(data)
    return staging.read_staged(rt.spark, st, rt.files.fs.spark_uri(st.path))


def check(rt: CircuitRuntime, run_id: str) -> dict:
    """Quality gate on the staged view deltas and input changes (no input file is read again);
    raises ``QualityGateFailed`` on a `fail` check, naming the input files behind it."""
    from spark_jobs.quality import QualityGateFailed
    from spark_jobs.runtime.culprits import explain_failure
    from spark_jobs.runtime.quality_gate import check_timestep

    p = load_plan(rt, run_id)
    if p.get("already_committed"):
        return {"skipped": "timestep already committed by this run"}
    from spark_jobs.runtime import staging

    journals = _journals(rt, run_id)
    staged_views = {v: st for j in journals.values() for v, st in j["outputs"].items()}
    values = {nid: st for j in journals.values() for nid, st in j.get("values", {}).items()}
    circuit = rt.compiled.incremental
    staged_inputs = {}
    for node in circuit:
        name = node.param("name") or node.id
        if node.op == "input" and rt.compiled.spec.inputs[name].expectations and node.id in values:
            staged_inputs[name] = values[node.id]
    local = {}  # changes staged as Arrow: GE checks them with pandas, no Spark job
    for prefix, found in (("view", staged_views), ("input", staged_inputs)):
        for name, st in found.items():
            if st["form"] == staging.ARROW:
                local[f"{prefix}:{name}"] = staging.read_table(st["path"])
    views = {v: _read(rt, st) for v, st in staged_views.items()}
    inputs = {n: _read(rt, st) for n, st in staged_inputs.items()}
    from spark_jobs.executor.session import step_conf

    try:
        with step_conf(rt.spark, is_small(p)):
            report = check_timestep(rt, p["timestep"], views, inputs, local=local)
    except QualityGateFailed as exc:
        raise QualityGateFailed(exc.report, explain_failure(rt, p, exc.report)) from None
    return {"timestep": p["timestep"], "summary": report.summary(), "failed": len(report.failed),
            "warnings": len(report.warnings), "report": quality_report_path(rt, p["timestep"])}


def quality_report_path(rt: CircuitRuntime, timestep: int) -> str:
    from spark_jobs.quality.report import report_name
    from spark_jobs.runtime.quality_gate import quality_dir

    return rt.files.fs.join(quality_dir(rt), report_name(timestep))


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
    """Move the staged updates into the store and publish the manifest (idempotent per run id)."""
    from spark_jobs.executor.session import SMALL_CHANGE_ROWS, step_conf
    from spark_jobs.runtime.feeds import publish_feeds

    done = _committed_by(rt, run_id)
    if done is not None:
        manifest = rt.files.manifest(done)
        publish_feeds(rt, manifest)  # a crash after the manifest, before the feeds
        return dict(commit_summary(rt, manifest), note="already committed by an earlier attempt")
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
                df, keys, sort_by = _read(rt, u["staged"]), tuple(u["keys"]), tuple(u.get("sort_by", ()))
                if u["op"] == "replace":
                    txn.replace(u["trace"], df, kind=u["kind"], keys=keys, sort_by=sort_by)
                else:
                    appends.append((u["trace"], df, u["kind"], keys, sort_by))
            for view, st in j["outputs"].items():
                outputs[view] = _read(rt, st)
            for name, files in j["consumed"].items():
                txn.consume(name, files)
        rows = _change_rows(journals)
        small = p["mode"] != "full_refresh" and rows is not None and rows <= SMALL_CHANGE_ROWS
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
    publish_feeds(rt, manifest)
    rt.files.fs.remove_tree(run_dir(rt, run_id))
    return commit_summary(rt, manifest)


def commit_summary(rt: CircuitRuntime, manifest) -> dict:
    """What a committed timestep changed: rows inserted/deleted per view, files per input."""
    meta = manifest.meta or {}
    return {"timestep": manifest.timestep, "mode": meta.get("mode", "incremental"),
            "views": {v: {"inserted": o.rows_inserted, "deleted": o.rows_deleted}
                      for v, o in (manifest.outputs or {}).items()},
            "quality_report": quality_report_path(rt, manifest.timestep)}


def run_task(rt: CircuitRuntime, step: str, run_id: str, stage: str | None = None,
             mode: str = "incremental") -> dict:
    """Dispatch one task of a DAG run (the Airflow callables and spark-submit both come here)."""
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
    raise ValueError(f"unknown step {step!r}; expected one of {STEPS}")
