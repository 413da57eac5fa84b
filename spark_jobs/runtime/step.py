"""One timestep of a circuit, end to end: read input changes, evaluate Q^Δ, write state and view
deltas, commit one manifest.

Everything is written before the manifest; a crash anywhere before the manifest's rename leaves
the circuit at the previous timestep, and the next step cleans up what the crashed one wrote.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.executor.evaluate import evaluate_step
from spark_jobs.executor.sources import (InputFile, pending_files, read_changes, read_snapshot,
                                         snapshot_delta, spark_schema)
from spark_jobs.runtime.circuit import CircuitRuntime
from spark_jobs.spec.model import WEIGHT, InputSpec
from spark_jobs.state.failpoints import failpoint

Progress = Callable[[str], None]


@dataclass
class InputReport:
    name: str
    files: list[str] = field(default_factory=list)
    inserted: int = 0
    deleted: int = 0

    @property
    def note(self) -> str:
        return "no new files: no changes" if not self.files else f"{len(self.files)} file(s)"


@dataclass
class StepReport:
    circuit: str
    timestep: int
    inputs: list[InputReport]
    views: dict[str, tuple[int, int]]  # view -> (rows inserted, rows deleted)
    seconds: float


class _StoreReader:
    """The executor's StateReader over the committed state of the store."""

    def __init__(self, store) -> None:
        self.store = store

    def read(self, node_id: str) -> DataFrame | None:
        return self.store.read_trace(node_id)


def snapshot_trace(input_name: str) -> str:
    return f"snapshot:{input_name}"


def consumed_paths(manifest, input_name: str) -> set[str]:
    if manifest is None:
        return set()
    entry = (manifest.inputs or {}).get(input_name) or {}
    return {f["path"] for f in entry.get("consumed", [])}


def pending_inputs(rt: CircuitRuntime) -> dict[str, list[InputFile]]:
    """Input files that arrived and were not consumed by a committed timestep."""
    manifest = rt.store.manifest()
    return {name: pending_files(spec, rt.config.data_root, consumed_paths(manifest, name))
            for name, spec in rt.compiled.spec.inputs.items()}


def _count_changes(df: DataFrame) -> tuple[int, int]:
    row = df.agg(F.sum(F.when(F.col(WEIGHT) > 0, F.col(WEIGHT)).otherwise(0)).alias("ins"),
                 F.sum(F.when(F.col(WEIGHT) < 0, -F.col(WEIGHT)).otherwise(0)).alias("del")).first()
    return int(row["ins"] or 0), int(row["del"] or 0)


def _read_input(rt: CircuitRuntime, txn, spec: InputSpec, files: list[InputFile]) -> DataFrame | None:
    """The input's change for this step (None = no change), recording consumed files in ``txn``."""
    if not files:
        return None
    if spec.source is not None and spec.source.kind == "snapshots":
        newest = read_snapshot(rt.spark, spec, files[-1])
        previous = rt.store.read_trace(snapshot_trace(spec.name))
        delta = snapshot_delta(newest, previous)
        txn.append(snapshot_trace(spec.name), delta, kind="zset")
    else:
        delta = read_changes(rt.spark, spec, files)
    txn.consume(spec.name, [f.as_dict() for f in files])
    return delta


def run_step(rt: CircuitRuntime, progress: Progress | None = None) -> StepReport:
    """Run and commit the next timestep (last committed + 1)."""
    say = progress or (lambda _msg: None)
    started = time.time()
    store = rt.store
    store.check_fingerprint()
    pending = pending_inputs(rt)
    txn = store.begin()
    try:
        say(f"timestep {txn.timestep}: reading inputs")
        deltas: dict[str, DataFrame] = {}
        reports: list[InputReport] = []
        for name, spec in rt.compiled.spec.inputs.items():
            report = InputReport(name, [f.path for f in pending[name]])
            delta = _read_input(rt, txn, spec, pending[name])
            if delta is not None:
                delta = delta.cache()
                deltas[name] = delta
                report.inserted, report.deleted = _count_changes(delta)
            reports.append(report)
        say(f"timestep {txn.timestep}: evaluating {len(rt.compiled.incremental.nodes)} operators")
        schemas = {name: spark_schema(spec) for name, spec in rt.compiled.spec.inputs.items()}
        result = evaluate_step(rt.compiled.incremental, deltas, _StoreReader(store),
                               first_step=txn.timestep == 1, input_schemas=schemas)
        for node_id, update in result.updates.items():
            kind = "sum" if rt.compiled.incremental[node_id].op == "aggregate_linear" else "zset"
            write = txn.replace if update.kind == "replace" else txn.append
            write(node_id, update.df, kind=kind, keys=tuple(update.keys))
            failpoint("after_state_write")
        failpoint("mid_step")
        for view, df in result.outputs.items():
            txn.write_output(view, df)
        failpoint("before_manifest")
        manifest = txn.commit()
    except BaseException:
        txn.abort()
        raise
    finally:
        for df in locals().get("deltas", {}).values():
            df.unpersist()
    views = {view: (int(info.get("rows_inserted", 0)), int(info.get("rows_deleted", 0)))
             for view, info in (manifest.outputs or {}).items()}
    return StepReport(rt.name, manifest.timestep, reports, views, time.time() - started)
