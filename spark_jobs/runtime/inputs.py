"""Choosing and reading the input files of a timestep (shared by `dbsp step` and the DAG tasks)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from pyspark.sql import DataFrame

from spark_jobs.executor.sources import InputFile, read_changes, read_snapshot, snapshot_delta
from spark_jobs.executor.sources.checks import InputRefused
from spark_jobs.executor.sources.discovery import InputScan, fingerprint_of, scan_input
from spark_jobs.spec.model import InputSpec


def snapshot_trace(input_name: str) -> str:
    """The trace holding the last snapshot of a `snapshots` input (D needs it)."""
    return f"snapshot:{input_name}"


def is_snapshot(spec: InputSpec) -> bool:
    return spec.source is not None and spec.source.kind == "snapshots"


def consumed_records(manifest, input_name: str) -> list[dict]:
    if manifest is None:
        return []
    return list(((manifest.inputs or {}).get(input_name) or {}).get("consumed", []))


def scan_inputs(spec_inputs: dict[str, InputSpec], data_root: str, manifest, allowed_roots: Sequence[str] = (),
                *, fingerprints: bool = True) -> dict[str, InputScan]:
    """Every input's folder against what the committed timesteps consumed (``scan_input``);
    ``allowed_roots``: the profile's ``inputs.allowed_roots``."""
    return {name: scan_input(spec, data_root, consumed_records(manifest, name), allowed_roots=allowed_roots,
                             fingerprints=fingerprints)
            for name, spec in spec_inputs.items()}


def refuse_changed(scans: dict[str, InputScan]) -> None:
    """Refuse the step (``InputRefused``, exit code 2) if a consumed file changed under its name."""
    refused = [InputRefused(s.changed, name) for name, s in scans.items() if s.changed]
    if refused:
        raise InputRefused.combine(refused)


def pending_inputs(spec_inputs: dict[str, InputSpec], data_root: str, manifest,
                   allowed_roots: Sequence[str] = ()) -> dict[str, list[InputFile]]:
    """Input files that arrived and no committed timestep consumed (not fingerprinted: for a
    "is anything pending?")."""
    scans = scan_inputs(spec_inputs, data_root, manifest, allowed_roots, fingerprints=False)
    return {name: s.pending for name, s in scans.items()}


def retained_inputs(spec_inputs: dict[str, InputSpec], data_root: str, manifest,
                    allowed_roots: Sequence[str] = ()) -> dict[str, list[InputFile]]:
    """Every input file a full refresh rebuilds from, as it is now: consumed ones plus pending ones.

    A consumed `changes` file that is gone makes a full refresh impossible (its changes would be
    lost), so that is an error; for `snapshots` only the newest snapshot matters. A consumed file
    whose content changed is read as it is now (a refresh is how to accept such a change).
    """
    out: dict[str, list[InputFile]] = {}
    for name, scan in scan_inputs(spec_inputs, data_root, manifest, allowed_roots, fingerprints=False).items():
        spec = spec_inputs[name]
        listed = {f.name for f in scan.listed}
        missing = [n for n in scan.consumed.by_name if n not in listed]
        if missing and not is_snapshot(spec):
            raise FileNotFoundError(
                f"full refresh of input {name!r} needs every consumed change file, but "
                f"{len(missing)} are gone from its folder (e.g. {missing[0]}); restore them or reset the circuit")
        out[name] = [replace(f, fingerprint=fingerprint_of(f)) for f in scan.listed]
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
