"""Choosing and reading the input files of a timestep (shared by `dbsp step` and the DAG tasks)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from pyspark.sql import DataFrame

from spark_jobs.executor.sources import (InputFile, pending_files, read_changes, read_snapshot, snapshot_delta,
                                         spark_schema)
from spark_jobs.executor.sources.cdc import KeyedState, cdc_change
from spark_jobs.spec.model import InputSpec
from spark_jobs.state.lookup import TraceFiles


def snapshot_trace(input_name: str) -> str:
    """The trace holding the last snapshot of a `snapshots` input (D needs it)."""
    return f"snapshot:{input_name}"


def keyed_trace(input_name: str) -> str:
    """The trace holding a `cdc` input's integral, sorted by its key (changes look old rows up)."""
    return f"keyed:{input_name}"


def input_trace(spec: InputSpec) -> tuple[str, tuple[str, ...]] | None:
    """(trace, sort columns) an input keeps of its own, or None: its integral, which its change is
    appended to (a snapshot input's last snapshot; a cdc input's rows, sorted by key)."""
    if is_snapshot(spec):
        return snapshot_trace(spec.name), ()
    if spec.kind == "cdc":
        return keyed_trace(spec.name), tuple(spec.key)
    return None


def is_snapshot(spec: InputSpec) -> bool:
    return spec.source is not None and spec.source.kind == "snapshots"


def consumed_files(manifest, input_name: str) -> list[dict]:
    if manifest is None:
        return []
    return list(((manifest.inputs or {}).get(input_name) or {}).get("consumed", []))


def pending_inputs(spec_inputs: dict[str, InputSpec], data_root: str, manifest,
                   allowed_roots: Sequence[str] = ()) -> dict[str, list[InputFile]]:
    """Input files that arrived and no committed timestep consumed."""
    return {name: pending_files(spec, data_root, {f["path"] for f in consumed_files(manifest, name)}, allowed_roots)
            for name, spec in spec_inputs.items()}


def retained_inputs(spec_inputs: dict[str, InputSpec], data_root: str, manifest,
                    allowed_roots: Sequence[str] = ()) -> dict[str, list[InputFile]]:
    """Every input file a full refresh rebuilds from: consumed ones that still exist plus pending ones.

    A consumed `changes` file that is gone makes a full refresh impossible (its changes would be
    lost), so that is an error; for `snapshots` only the newest snapshot matters.
    """
    import os

    from spark_jobs.executor.sources.discovery import exists

    out: dict[str, list[InputFile]] = {}
    pending = pending_inputs(spec_inputs, data_root, manifest, allowed_roots)
    for name, spec in spec_inputs.items():
        old = [InputFile(f["path"], int(f.get("size", 0)), float(f.get("mtime", 0.0)))
               for f in consumed_files(manifest, name)]
        if not is_snapshot(spec):
            missing = [f.path for f in old if not exists(f.path)]
            if missing:
                raise FileNotFoundError(
                    f"full refresh of input {name!r} needs every consumed change file, but "
                    f"{len(missing)} are gone (e.g. {missing[0]}); restore them or reset the circuit")
        files = old + pending[name]
        if is_snapshot(spec):
            files = [f for f in files if exists(f.path)]
        out[name] = sorted({f.path: f for f in files}.values(), key=lambda f: os.path.basename(f.path)
                           if is_snapshot(spec) else f.path)
    return out


class InputState(Protocol):
    """Committed traces, as a step reads them (``step.StoreReader``; nothing for a full refresh)."""

    def read(self, node_id: str) -> DataFrame | None: ...
    def trace_files(self, node_id: str) -> TraceFiles | None: ...


@dataclass
class InputChange:
    """The change an input contributes to a step. ``trace`` (from ``input_trace``): the input's
    own trace, to which the delta is appended with the step's other writes."""

    delta: DataFrame | None
    trace: tuple[str, tuple[str, ...]] | None = None
    unknown_keys: int = 0  # cdc records of unknown keys, ignored and counted (unknown_key: count)


def read_input(spark, spec: InputSpec, files: list[InputFile], state: InputState) -> InputChange:
    """Read (and validate) the files of one input; None delta when no file arrived."""
    if not files:
        return InputChange(None)
    trace = input_trace(spec)
    if is_snapshot(spec):
        newest = read_snapshot(spark, spec, files[-1])
        return InputChange(snapshot_delta(newest, state.read(snapshot_trace(spec.name))), trace)
    if spec.kind == "cdc":
        tid = keyed_trace(spec.name)
        change = cdc_change(spark, spec, files, KeyedState(lambda: state.read(tid), lambda: state.trace_files(tid)))
        if change is None:  # files without a record
            return InputChange(spark.createDataFrame([], spark_schema(spec)), trace)
        return InputChange(change.delta, trace, change.unknown_keys)
    return InputChange(read_changes(spark, spec, files))
