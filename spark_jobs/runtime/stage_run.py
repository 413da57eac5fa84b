"""One operator stage of a DAG run, evaluated and staged: what a stage task (or, for every
stage in turn, the ``stages`` task of ``per_step``) does between the plan and the check.

A stage reads its inputs (an input stage: the planned files, once), evaluates its incremental
operators one at a time (so each gets its planning seconds), then brings everything later
tasks need (the deltas other stages read, its state updates and view deltas) to the driver in
one Spark job (none for a small change read in-process and projections of it), stages them (``staging.py``) and writes its journal last. The journal's summary
is the table the task logs: operators, rows in and out, state rows read and written, seconds.
Its Spark jobs run under a job group (classic session) or job tag (Spark Connect) named after
the stage.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

from spark_jobs.runtime.circuit import CircuitRuntime
from spark_jobs.runtime.inputs import input_trace
from spark_jobs.runtime.staging import journal_path, read_json, run_dir, write_json
from spark_jobs.runtime.stages import Stage, is_state_backed, staged_values
from spark_jobs.state.failpoints import failpoint
from spark_jobs.state.layout import safe_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_jobs.runtime.event_time import StepClock


@dataclass
class RunValues:
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
        from spark_jobs.runtime.refresh import EmptyState
        from spark_jobs.runtime.step_types import StoreReader

        self.state = EmptyState() if self.full else StoreReader(self.rt.store)
        self.needed = staged_values(self.rt.compiled) | self._inputs_kept()

    def _inputs_kept(self) -> set[str]:
        """Input nodes whose change is staged even if no stage reads it: the quality gate checks
        it, or the commit appends it to the input's own trace (snapshots, cdc keyed rows)."""
        circuit = self.rt.compiled.incremental
        names = {n for n, i in self.rt.compiled.spec.inputs.items() if i.expectations or input_trace(i)}
        return {node.id for node in circuit if node.op == "input" and (node.param("name") or node.id) in names}

    def stage_dir(self, stage: str) -> str:
        fs = self.rt.committed.fs
        return fs.join(run_dir(self.rt, self.run_id), "stages", stage)

    def value(self, node_id: str, engine: str = "spark") -> Any:
        """A value another stage produced (in memory in this process, or staged by an earlier
        task), as ``engine`` reads it: a DataFrame, or a pyarrow table with its staged types."""
        from spark_jobs.runtime import staging

        if engine == "arrow":
            if node_id not in self.tables:
                self.tables[node_id] = staging.read_value_table(staging.Staged.from_dict(self.staged[node_id]))
            return self.tables[node_id]
        if node_id not in self.frames:
            if node_id in self.tables:
                data = self.staged[node_id]
                self.frames[node_id] = staging.to_frame(self.rt.spark, self.tables[node_id], data["schema"])
            else:
                st = staging.Staged.from_dict(self.staged[node_id])
                self.frames[node_id] = staging.read_staged(self.rt.spark, st, self.rt.committed.fs.spark_uri(st.path))
        return self.frames[node_id]

    def engine(self, spark_small: bool):
        """The engine a stage runs on first: the plan's choice (Arrow falls back to Spark per stage)."""
        from spark_jobs.runtime.step_engines import ArrowSteps

        if self.plan.get("engine") == "arrow":
            return ArrowSteps(self.rt)
        return self.spark_steps(spark_small)

    def spark_steps(self, spark_small: bool):
        """The Spark engine of a stage. A small change this process reaches is read, counted and
        bag-checked in-process and handed to Spark, as ``dbsp step`` does (``step.commit_path``):
        the count is not a Spark job, and the stage's values that are the change (or projections
        of it) are staged without one."""
        from spark_jobs.runtime.step_engines import SparkSteps, reads_change_in_process

        mode = "full_refresh" if self.full else str(self.plan.get("mode"))
        arrow_reads = reads_change_in_process(self.rt, mode, self.plan.get("change_rows"))
        return SparkSteps(self.rt, full=self.full, small=spark_small, persist=False, arrow_reads=arrow_reads)

    def load_journals(self, stages: list[Stage]) -> None:
        """Learn where earlier tasks staged their values."""
        for stage in stages:
            j = read_json(self.rt, journal_path(self.rt, self.run_id, stage.name))
            if j is not None:
                self.staged.update(j.get("values", {}))


@contextmanager
def stage_jobs(rt: CircuitRuntime, engine, stage: str) -> Iterator[None]:
    """Submit the stage's Spark jobs under a name the Spark UI shows: a job group and description
    on a classic session; a job tag on Spark Connect (which sets its own group per request). An
    in-process stage starts no session (it may still fall back to Spark: its jobs are unnamed)."""
    from spark_jobs.executor.spark.local_relations import is_connect

    if engine.name != "spark":
        yield
        return
    spark, circuit = rt.spark, rt.name
    tag = f"dbsp-{circuit}-{stage}".replace(",", "_")
    if is_connect(spark):
        spark.addTag(tag)
        try:
            yield
        finally:
            spark.removeTag(tag)
        return
    sc = spark.sparkContext
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


COUNT_ENV = "DBSP_COUNT_OPERATORS"


def count_all() -> bool:
    """Count the rows of the operators inside a stage too (``$DBSP_COUNT_OPERATORS=1``)?

    Off by default: a count is one more aggregate per operator in the stage's job, which runs
    that operator's subplan again (measured: the join stage of the README example took 2-4 s
    instead of 0.6 s with its three join terms counted). Without it, the table shows the rows of
    what the stage hands on (the deltas other stages read, state updates, view deltas) and of
    its inputs; an operator whose rows flow straight into the next one in the same job shows "-".
    """
    return os.environ.get(COUNT_ENV) == "1"


def operator_rows(run: RunValues, stage: Stage, rows: dict[str, int], written: dict[str, int | None],
                  seconds: dict[str, float]) -> list[dict]:
    """The stage's table: per operator, rows in and out (``rows``: deltas counted in this stage;
    others were staged by earlier stages), state rows read (the committed traces it looks up)
    and written (``written``: its state update), and the seconds its evaluation took."""
    from spark_jobs.ir.explain import symbol

    circuit = run.rt.compiled.incremental
    manifest = None if run.full else run.rt.committed.manifest()

    def rows_of(node_id: str) -> int | None:
        return rows[node_id] if node_id in rows else (run.staged.get(node_id) or {}).get("rows")

    out = []
    for node_id in stage.nodes:
        node = circuit[node_id]
        ins = [rows_of(i) for i in node.inputs if not is_state_backed(circuit, i)]
        looked_up = [t for t in (_state_trace(circuit, i) for i in node.inputs) if t]
        if node_id in written and node.op != "integrate":
            looked_up.append(node_id)  # an operator that looks its own state up (totals, H)
        out.append({
            "operator": node_id, "op": symbol(node.op),
            "rows_in": None if not ins or any(r is None for r in ins) else sum(ins),  # type: ignore[arg-type]
            "rows_out": None if is_state_backed(circuit, node_id) else rows_of(node_id),
            "state_read": sum(_trace_rows(manifest, t) for t in looked_up) if looked_up else None,
            "state_written": written.get(node_id),
            "seconds": round(seconds.get(node_id, 0.0), 3)})
    return out


def evaluate_stage(run: RunValues, stage: Stage, spark_small: bool = False) -> dict:
    """Evaluate one stage of the run on the plan's engine and stage its results durably; returns
    its journal's summary. A stage the in-process engine cannot serve runs on Spark (before it
    stages anything), and its journal says so."""
    from spark_jobs.executor.engine import NotLocal

    engine = run.engine(spark_small)
    reason = run.plan.get("engine_reason") or ""
    if engine.name == "arrow":
        import pyarrow as pa

        try:
            return _evaluate_stage(run, stage, engine, reason)
        except (NotLocal, pa.ArrowException) as why:
            what = "" if isinstance(why, NotLocal) else "Arrow refused: "
            reason = f"in-process on Arrow was not possible: {what}{why}"
    return _evaluate_stage(run, stage, run.spark_steps(spark_small), reason)


def _counted(run: RunValues, engine, inputs: dict[str, Any], clock: "StepClock") -> dict[str, Any]:
    """The changes phases 2-3 look at: on Spark only those the clock or the bag check needs (a
    count is a job); in-process all of them (counting a table is free), also on Spark when the
    changes were read in-process (``RunValues.spark_steps``: the count hands them to Spark)."""
    import pyarrow as pa

    if engine.name == "arrow" or any(isinstance(v, pa.Table) for v in inputs.values()):
        return inputs
    from spark_jobs.ir.incrementalize import bag_integrals

    bagged = bag_integrals(run.rt.compiled.incremental)
    return {n: df for n, df in inputs.items() if n in bagged or clock.timed(n)}


def _evaluate_stage(run: RunValues, stage: Stage, engine, reason: str) -> dict:
    from spark_jobs.executor.evaluate import trace_kind
    from spark_jobs.executor.sources import InputFile
    from spark_jobs.runtime import recipe
    from spark_jobs.runtime.errors import input_errors
    from spark_jobs.runtime.event_time import StepClock, describe

    rt, p = run.rt, run.plan
    circuit, fs = rt.compiled.incremental, rt.committed.fs
    started = time.perf_counter()
    stage_dir = run.stage_dir(stage.name)
    if fs.exists(stage_dir):
        fs.remove_tree(stage_dir)  # a killed earlier attempt
    journal: dict[str, Any] = {"updates": [], "outputs": {}, "consumed": {}, "inputs": {}, "values": {},
                               "event_time": {}, "engine": engine.name, "engine_reason": reason}
    seconds: dict[str, float] = {}
    values: dict[str, Any] = {}
    updates: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    first_step = run.full or p["timestep"] == 1

    def outside(node_id: str) -> Any:
        """Values produced outside this stage: another stage's delta (staged), or a value this
        engine rebuilds from committed state and staged deltas (an integral, a delay, a node of
        another stage reached by looking state up)."""
        if node_id in values:
            return values[node_id]
        node = circuit[node_id]
        if not is_state_backed(circuit, node_id) and (node_id in run.staged or node_id in run.tables):
            return run.value(node_id, engine.name)
        if node.op == "input":  # every input another stage reads is staged
            raise RuntimeError(f"input {node_id!r} of run {run.run_id!r} was not staged by its stage")
        result = engine.evaluate({}, run.state, first_step=first_step, full=run.full, only={node_id},
                                 external=outside)
        values[node_id] = result.values[node_id]
        return values[node_id]

    names = [circuit[n].param("name") or n for n in stage.nodes if circuit[n].op == "input"]
    planned = {name: [InputFile.from_dict(f) for f in p["inputs"].get(name, [])] for name in names}
    clock = StepClock(rt.compiled.spec.inputs, rt.committed.manifest(), fresh=run.full)  # timed inputs' watermarks
    scratch = recipe.Work(p["timestep"], clock, engine.name, reason, mode=p["mode"])
    try:
        # a Spark error reading one of the planned files (in any job of the stage) refuses it by name
        with input_errors(planned), stage_jobs(rt, engine, stage.name):
            t0 = time.perf_counter()
            inputs, own = recipe.read_inputs(rt, engine, names, planned, run.state, scratch)  # phase 1, once
            counted = _counted(run, engine, inputs, clock)
            if counted:
                recipe.check_inputs(rt, engine, counted, planned, run.state, scratch)  # phases 2-3
                inputs.update(counted)  # late rows left out, bag corrections
            for name in inputs:
                journal["consumed"][name] = scratch.consumed[name]
                journal["inputs"][name] = {"files": [f.path for f in planned[name]],
                                           "unknown_keys": scratch.unknown_keys.get(name, 0)}
            for node_id in stage.nodes:
                if circuit[node_id].op == "input":
                    seconds[node_id] = (time.perf_counter() - t0) / max(len(names), 1)
            journal["event_time"] = clock.journal()  # for the check (report lines) and the commit (watermarks)
            for name, late in clock.seen.items():
                journal["inputs"][name].update(late_rows=late.rows, late=describe(late))  # as `dbsp step` says it
            if scratch.quarantined:
                journal["quarantined"] = scratch.quarantined
            notes = list(scratch.notes)
            for node_id in stage.nodes:  # phase 4, one node at a time: seconds per operator
                t0 = time.perf_counter()
                result = engine.evaluate(inputs, run.state, first_step=first_step, full=run.full,
                                         only={node_id}, external=outside)
                values.update(result.values)
                updates.update(result.updates)
                outputs.update(result.outputs)
                seconds[node_id] = seconds.get(node_id, 0.0) + time.perf_counter() - t0
            for view, value in list(outputs.items()):
                if run.full:  # the change of the view = new view - old view (where comparable)
                    outputs[view] = engine.view_delta(view, value)
            t0 = time.perf_counter()
            written, tables, counts, held, keys = _stage_values(run, stage, engine, stage_dir, values, updates,
                                                                outputs)
            engine_seconds = time.perf_counter() - t0
    finally:
        engine.release()
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
                                   "row_group_bytes": update.row_group_bytes,
                                   "staged": staged[f"state/{node_id}"].to_dict()})
    for view in outputs:
        journal["outputs"][view] = staged[f"output/{view}"].to_dict()
    for node_id in stage.nodes:  # input changes: rows inserted and deleted (the input's own trace too)
        node = circuit[node_id]
        name = node.param("name") or node_id
        if node.op == "input" and name in journal["inputs"]:
            st = staged.get(f"value/{node_id}")
            journal["inputs"][name].update(inserted=st.inserted if st else None,
                                           deleted=st.deleted if st else None)
            if name in own:  # snapshot, cdc keyed rows: the change is appended to that trace
                if st is None:
                    raise RuntimeError(f"the change of input {name!r} was not staged (run {run.run_id!r})")
                trace_id, sort_by = own[name]
                journal["updates"].append({"trace": trace_id, "op": "replace" if run.full else "append",
                                           "kind": "zset", "keys": [], "sort_by": list(sort_by),
                                           "staged": st.to_dict()})
    failpoint("mid_step")

    counts.update({n: written[fk].rows for n, fk in held.items() if written[fk].rows is not None})
    operators = operator_rows(run, stage, counts, {n: staged[f"state/{n}"].rows for n in updates}, seconds)
    summary = {"stage": stage.name, "timestep": p["timestep"], "mode": p["mode"], "engine": engine.name,
               "staged_as": "arrow" if tables is not None else "spark", "operators": operators,
               "inputs": journal["inputs"], "views": {v: {"inserted": staged[f"output/{v}"].inserted,
                                                          "deleted": staged[f"output/{v}"].deleted}
                                                      for v in outputs},
               **({"notes": notes} if notes else {}),
               "spark_seconds": round(engine_seconds, 3) if engine.name == "spark" else 0.0,
               "seconds": round(time.perf_counter() - started, 3)}
    journal["summary"] = summary
    write_json(rt, journal_path(rt, run.run_id, stage.name), journal)
    return summary


def _stage_values(run: RunValues, stage: Stage, engine, stage_dir: str, values: dict[str, Any],
                  updates: dict[str, Any], outputs: dict[str, Any]):
    """Stage everything later tasks need: the deltas other stages read, the state updates and
    the view deltas (one value staged once). On Spark, small results come to the driver in ONE
    job and pyarrow writes them (larger ones: a Spark write each); in-process, pyarrow writes the
    tables. Returns (written, tables, counts, held, keys)."""
    from spark_jobs.runtime import staging

    rt, circuit, fs = run.rt, run.rt.compiled.incremental, run.rt.committed.fs
    frames: dict[str, Any] = {}
    keys: dict[str, str] = {}  # journal key -> frame key (one value is staged once)

    def want(key: str, value: Any) -> None:
        for fk, seen in frames.items():
            if seen is value:
                keys[key] = fk
                return
        frames[key] = value
        keys[key] = key

    for node_id in stage.nodes:
        if node_id in run.needed:
            want(f"value/{node_id}", values[node_id])
    for node_id, update in updates.items():
        want(f"state/{node_id}", update.df)
    for view, value in outputs.items():
        want(f"output/{view}", value)
    held = {n: fk for n in stage.nodes for fk, value in frames.items() if values.get(n) is value}
    if engine.name == "arrow":
        tables, counts = dict(frames), {n: values[n].num_rows for n in stage.nodes
                                        if n in values and n not in held and not is_state_backed(circuit, n)
                                        and hasattr(values[n], "num_rows")}
    else:
        counted = {n: values[n] for n in stage.nodes  # (the integral I(x) is state plus delta: not counted)
                   if n in values and n not in held and not is_state_backed(circuit, n)} if count_all() else {}
        # changes read in-process, and projections of them, are here already: no job for them
        held_tables = {key: t for key, value in frames.items() if (t := engine.held(value)) is not None}
        rest = {key: value for key, value in frames.items() if key not in held_tables}
        if rest or counted:
            tables, counts = staging.collect_tables(rt.spark, rest, rt.config.policy.local_change_rows, counted,
                                                    rt.config.policy.collect_extra_rows)
        else:
            tables, counts = {}, {}
        if tables is not None:
            tables.update(held_tables)
    written: dict[str, staging.Staged] = {}
    for key, value in frames.items():
        path = fs.join(stage_dir, *[safe_name(part) for part in key.split("/", 1)])
        if tables is not None:
            written[key] = staging.write_table(tables[key], path + ".parquet", engine.schema_json(value))
        else:
            written[key] = staging.write_frame(value, path, fs.spark_uri(path))
    return written, tables, counts, held, keys
