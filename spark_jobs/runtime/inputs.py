"""Choosing and reading the input files of a timestep (shared by `dbsp step` and the DAG tasks)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol, Sequence

from pyspark.sql import DataFrame

from spark_jobs.errors import DbspError, EXIT_FAILED
from spark_jobs.executor.sources import InputFile, read_changes, read_snapshot, snapshot_delta, spark_schema
from spark_jobs.executor.sources.cdc import KeyedState, cdc_change
from spark_jobs.executor.sources.checks import InputRefused
from spark_jobs.executor.sources.discovery import InputScan, fingerprint_of, refuse_shared, scan_input
from spark_jobs.policy import ExecutionPolicy
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


def consumed_records(manifest, input_name: str) -> list[dict]:
    if manifest is None:
        return []
    return list(((manifest.inputs or {}).get(input_name) or {}).get("consumed", []))


def scan_inputs(spec_inputs: dict[str, InputSpec], data_root: str, manifest, allowed_roots: Sequence[str] = (),
                *, fingerprints: bool = True) -> dict[str, InputScan]:
    """Every input's folder against what the committed timesteps consumed (``scan_input``);
    ``allowed_roots``: the profile's ``inputs.allowed_roots``. A file two inputs list is refused
    (``refuse_shared``)."""
    scans = {name: scan_input(spec, data_root, consumed_records(manifest, name), allowed_roots=allowed_roots,
                              fingerprints=fingerprints)
             for name, spec in spec_inputs.items()}
    refuse_shared(scans)
    return scans


def refuse_changed(scans: dict[str, InputScan]) -> None:
    """Refuse the step (``InputRefused``, exit code 2) if a consumed file changed under its name."""
    refused = [InputRefused(s.changed, name) for name, s in scans.items() if s.changed]
    if refused:
        raise InputRefused.combine(refused)


def keep_consumed_records(txn, scans: dict[str, InputScan]) -> None:
    """Write back the consumed records a scan changed (migrated from manifest format 1, or times
    refreshed after a verified copy of the data root); the step then adds its own."""
    for name, scan in scans.items():
        if scan.consumed.changed:
            txn.set_consumed(name, scan.consumed.records())


def pending_inputs(spec_inputs: dict[str, InputSpec], data_root: str, manifest,
                   allowed_roots: Sequence[str] = ()) -> dict[str, list[InputFile]]:
    """Input files that arrived and no committed timestep consumed (not fingerprinted: for a
    "is anything pending?")."""
    scans = scan_inputs(spec_inputs, data_root, manifest, allowed_roots, fingerprints=False)
    return {name: s.pending for name, s in scans.items()}


class CannotRebuild(DbspError, FileNotFoundError):
    """A full refresh would lose changes: consumed change files are gone."""
    exit_code = EXIT_FAILED


def rebuild_refusal(spec_inputs: dict[str, InputSpec], pruned: dict[str, dict]) -> str | None:
    """Why a full refresh cannot run after retention removed consumed change files (``pruned``:
    input -> {files, through_timestep}, from ``retention.json``), and what it could still
    rebuild from; None when nothing it needs was removed."""
    gone = {name: info for name, info in pruned.items() if name in spec_inputs and int(info.get("files", 0))}
    if not gone:
        return None
    lost = "; ".join(f"input {name!r}: {info['files']} consumed change file(s) of timesteps up to "
                     f"{info['through_timestep']}" for name, info in sorted(gone.items()))
    whole = [name for name in spec_inputs if name not in gone]
    still = (f"inputs a full refresh could still rebuild whole: {', '.join(sorted(whole))}" if whole
             else "no input is whole any more")
    return (f"full refresh refused: retention (settings.retention.inputs) removed {lost}. Recomputing "
            f"without them would silently drop those changes. {still}. The committed views and state are "
            f"intact and incremental steps go on; to rebuild anyway, restore the removed files, or reset "
            f"the circuit (`dbsp reset`) and accept views over the files that are left")


def retained_inputs(spec_inputs: dict[str, InputSpec], data_root: str, manifest,
                    allowed_roots: Sequence[str] = (), pruned: dict[str, dict] | None = None
                    ) -> dict[str, list[InputFile]]:
    """Every input file a full refresh rebuilds from, as it is now: consumed ones plus pending ones.

    A consumed `changes` file that is gone makes a full refresh impossible (its changes would be
    lost), so that is an error (``CannotRebuild``; ``pruned``: what retention removed, from
    ``retention.json``, to say so); for `snapshots` only the newest snapshot matters. A consumed
    file whose content changed is read as it is now (a refresh is how to accept such a change).
    """
    refusal = rebuild_refusal(spec_inputs, pruned or {})
    if refusal:
        raise CannotRebuild(refusal)
    out: dict[str, list[InputFile]] = {}
    for name, scan in scan_inputs(spec_inputs, data_root, manifest, allowed_roots, fingerprints=False).items():
        spec = spec_inputs[name]
        listed = {f.name for f in scan.listed}
        missing = [n for n in scan.consumed.by_name if n not in listed]
        if missing and not is_snapshot(spec):
            raise CannotRebuild(
                f"full refresh of input {name!r} needs every consumed change file, but "
                f"{len(missing)} are gone from its folder (e.g. {missing[0]}); restore them or reset the circuit")
        out[name] = [replace(f, fingerprint=fingerprint_of(f)) for f in scan.listed]
    return out


@dataclass
class ChosenInputs:
    """The files one timestep reads (``files``), and for an incremental one every input's scan."""

    files: dict[str, list[InputFile]]
    scans: dict[str, InputScan]

    def notes(self) -> list[str]:
        """What the scans noticed (a data root moved, records migrated), for the step's notes."""
        return [n for scan in self.scans.values() for n in scan.notes]

    def records(self) -> dict[str, list[dict]]:
        """The consumed records of inputs whose records must be rewritten (migrated from manifest
        format 1, or times refreshed after a copy): input -> records, for ``txn.set_consumed``."""
        return {name: scan.consumed.records() for name, scan in self.scans.items() if scan.consumed.changed}


def choose_inputs(spec_inputs: dict[str, InputSpec], data_root: str, manifest, allowed_roots: Sequence[str] = (),
                  *, full_refresh: bool = False, pruned: dict[str, dict] | None = None) -> ChosenInputs:
    """The input files of the next timestep, as `dbsp step` and a DAG run's plan choose them:
    every retained file (full refresh; ``pruned``: what retention removed, from
    ``retention.json``, which refuses it with ``CannotRebuild``), or the pending ones; an
    incremental step is refused (``InputRefused``) if a consumed file's content changed under
    its name."""
    if full_refresh:
        return ChosenInputs(retained_inputs(spec_inputs, data_root, manifest, allowed_roots, pruned=pruned), {})
    scans = scan_inputs(spec_inputs, data_root, manifest, allowed_roots)
    refuse_changed(scans)
    return ChosenInputs({name: scan.pending for name, scan in scans.items()}, scans)


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


def read_input(spark, spec: InputSpec, files: list[InputFile], state: InputState,
               policy: ExecutionPolicy | None = None) -> InputChange:
    """Read (and validate) the files of one input; None delta when no file arrived. ``policy``:
    the step's thresholds (a cdc input's lookups of old rows)."""
    if not files:
        return InputChange(None)
    trace = input_trace(spec)
    if is_snapshot(spec):
        newest = read_snapshot(spark, spec, files[-1])
        return InputChange(snapshot_delta(newest, state.read(snapshot_trace(spec.name))), trace)
    if spec.kind == "cdc":
        tid = keyed_trace(spec.name)
        change = cdc_change(spark, spec, files, KeyedState(lambda: state.read(tid), lambda: state.trace_files(tid)),
                            policy)
        if change is None:  # files without a record
            return InputChange(spark.createDataFrame([], spark_schema(spec)), trace)
        return InputChange(change.delta, trace, change.unknown_keys)
    return InputChange(read_changes(spark, spec, files))
