"""Choosing and reading the input files of a timestep (shared by `dbsp step` and the DAG tasks)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pyspark.sql import DataFrame

from spark_jobs.executor.sources import InputFile, pending_files, read_changes, read_snapshot, snapshot_delta
from spark_jobs.spec.model import InputSpec


def snapshot_trace(input_name: str) -> str:
    """The trace holding the last snapshot of a `snapshots` input (D needs it)."""
    return f"snapshot:{input_name}"


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


@dataclass
class InputChange:
    """The change an input contributes to a step, and the snapshot trace update it implies."""

    delta: DataFrame | None
    snapshot: DataFrame | None = None  # value to append to snapshot_trace (snapshots only)


def read_input(spark, spec: InputSpec, files: list[InputFile], previous_snapshot: DataFrame | None) -> InputChange:
    """Read (and validate) the files of one input; None delta when no file arrived."""
    if not files:
        return InputChange(None)
    if is_snapshot(spec):
        newest = read_snapshot(spark, spec, files[-1])
        delta = snapshot_delta(newest, previous_snapshot)
        return InputChange(delta, delta)
    return InputChange(read_changes(spark, spec, files))
