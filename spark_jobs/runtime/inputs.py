"""Choosing and reading the input files of a timestep (shared by `dbsp step` and the DAG tasks)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol, Sequence

from pyspark.sql import DataFrame

from spark_jobs.errors import DbspError, EXIT_FAILED
from spark_jobs.executor.sources import InputFile, read_changes, read_snapshot, snapshot_delta, spark_schema
from spark_jobs.executor.sources.cdc import KeyedState, cdc_change
from spark_jobs.executor.sources.checks import InputRefused
from spark_jobs.executor.sources.discovery import InputScan, fingerprint_of, refuse_shared, scan_input
from spark_jobs.executor.sources.own_traces import input_trace, is_snapshot, keyed_trace, snapshot_trace
from spark_jobs.policy import ExecutionPolicy
from spark_jobs.runtime.input_folders import missing_folders
from spark_jobs.spec.model import InputSpec
from spark_jobs.state.lookup import TraceFiles


PATH_META = "path"  # inputs.<name>.path of a manifest: the folder the input read, as the circuit wrote it


def consumed_records(manifest, input_name: str) -> list[dict]:
    if manifest is None:
        return []
    return list(((manifest.inputs or {}).get(input_name) or {}).get("consumed", []))


def scan_inputs(spec_inputs: dict[str, InputSpec], data_root: str, manifest, allowed_roots: Sequence[str] = (),
                *, fingerprints: bool = True) -> Scans:
    """Every input's folder against what the committed timesteps consumed (``scan_input``);
    ``allowed_roots``: the profile's ``inputs.allowed_roots``. A file two inputs list is refused
    (``refuse_shared``)."""
    scans = Scans({name: scan_input(spec, data_root, consumed_records(manifest, name), allowed_roots=allowed_roots,
                                    fingerprints=fingerprints)
                   for name, spec in spec_inputs.items()}, source_paths(spec_inputs))
    refuse_shared(scans)
    return scans


def refuse_changed(scans: dict[str, InputScan]) -> None:
    """Refuse the step (``InputRefused``, exit code 2) if a consumed file changed under its name."""
    refused = [InputRefused(s.changed, name) for name, s in scans.items() if s.changed]
    if refused:
        raise InputRefused.combine(refused)


class Scans(dict):
    """Every input's scan (input -> ``InputScan``; none for a full refresh), and the folder each
    input reads as the circuit writes it (``paths``), which the commit records."""

    def __init__(self, scans: dict[str, InputScan] | None = None, paths: dict[str, str] | None = None):
        super().__init__(scans or {})
        self.paths = dict(paths or {})


def source_paths(spec_inputs: dict[str, InputSpec]) -> dict[str, str]:
    return {name: spec.source.path for name, spec in spec_inputs.items() if spec.source is not None}


def record_input_paths(txn, paths: dict[str, str]) -> None:
    """Note in the manifest the folder each input read (``inputs.<name>.path``, carried to later
    manifests), so a later step can say that a circuit's input moved (``moved_inputs``)."""
    for name, path in paths.items():
        txn.set_input_meta(name, PATH_META, path)


def moved_inputs(spec_inputs: dict[str, InputSpec], manifest) -> dict[str, str]:
    """Inputs whose folder is not the one the committed state was built from: input -> the
    folder recorded by the last commit (none before the first commit, or for a state written
    before paths were recorded)."""
    if manifest is None:
        return {}
    recorded = {name: (meta or {}).get(PATH_META) for name, meta in (manifest.inputs or {}).items()}
    return {name: recorded[name] for name, path in source_paths(spec_inputs).items()
            if recorded.get(name) and recorded[name] != path}


def moved_notes(spec_inputs: dict[str, InputSpec], manifest) -> list[str]:
    """What a step says before it reads anything when an input's folder changed."""
    t = getattr(manifest, "timestep", None)
    return [f"input {name!r} now reads folder {spec_inputs[name].source.path!r}, but the state (timestep {t}) "
            f"was built from {old!r}: files consumed there are known by their names below the folder, so a "
            f"file of the same name here counts as consumed and every other file as new. If the data moved "
            f"with the path, that is what you want; otherwise rebuild the state from the new folder "
            f"(`dbsp step --full-refresh`) or put the path back"
            for name, old in sorted(moved_inputs(spec_inputs, manifest).items())]


def keep_consumed_records(txn, scans: dict[str, InputScan]) -> None:
    """Write back the consumed records a scan changed (migrated from manifest format 1, or times
    refreshed after a verified copy of the data root); the step then adds its own. The folder
    each input reads is recorded too (``Scans.paths``)."""
    for name, scan in scans.items():
        if scan.consumed.changed:
            txn.set_consumed(name, scan.consumed.records())
    record_input_paths(txn, getattr(scans, "paths", {}))


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
        if spec.kind == "delta":  # the whole table at its newest version
            out[name] = [replace(f, base=None, fingerprint=fingerprint_of(f)) for f in scan.listed[-1:]]
            continue
        if spec.kind == "postgres":  # a new snapshot of the table
            out[name] = [replace(f, base=None) for f in scan.listed[-1:]]
            continue
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
    scans: Scans
    moved: list[str] = field(default_factory=list)  # inputs whose folder changed (``moved_notes``)

    def notes(self) -> list[str]:
        """What the scans noticed (an input's folder changed, a data root moved, records
        migrated), for the step's notes."""
        return self.moved + [n for scan in self.scans.values() for n in scan.notes]

    def records(self) -> dict[str, list[dict]]:
        """The consumed records of inputs whose records must be rewritten (migrated from manifest
        format 1, or times refreshed after a copy): input -> records, for ``txn.set_consumed``."""
        return {name: scan.consumed.records() for name, scan in self.scans.items() if scan.consumed.changed}


def refuse_missing_folders(spec_inputs: dict[str, InputSpec], data_root: str, manifest=None) -> None:
    """Refuse the step (``InputRefused``, exit code 2) if an input's folder does not exist: a
    misspelt or moved path must not read as "no new files" (an empty folder still does)."""
    missing = missing_folders(spec_inputs, data_root)
    moved = moved_inputs(spec_inputs, manifest)
    if missing:
        raise InputRefused.combine(InputRefused(
            [(m.folder, m.reason() + (f" (the state was built from {moved[m.input.name]!r})"
                                      if m.input.name in moved else ""))], m.input.name) for m in missing)


def choose_inputs(spec_inputs: dict[str, InputSpec], data_root: str, manifest, allowed_roots: Sequence[str] = (),
                  *, full_refresh: bool = False, pruned: dict[str, dict] | None = None) -> ChosenInputs:
    """The input files of the next timestep, as `dbsp step` and a DAG run's plan choose them:
    every retained file (full refresh; ``pruned``: what retention removed, from
    ``retention.json``, which refuses it with ``CannotRebuild``), or the pending ones; an
    incremental step is refused (``InputRefused``) if a consumed file's content changed under
    its name. Either is refused before anything is read if an input's folder does not exist
    (``refuse_missing_folders``: exit code 2, naming the input and the folder)."""
    refuse_missing_folders(spec_inputs, data_root, manifest)
    moved = moved_notes(spec_inputs, manifest)
    if full_refresh:
        return ChosenInputs(retained_inputs(spec_inputs, data_root, manifest, allowed_roots, pruned=pruned),
                            Scans(paths=source_paths(spec_inputs)), moved)
    scans = scan_inputs(spec_inputs, data_root, manifest, allowed_roots)
    refuse_changed(scans)
    return ChosenInputs({name: scan.pending for name, scan in scans.items()}, scans, moved)


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
    bytes_read: int = 0  # bytes this process read itself (an in-process reader; Spark's reads are not counted)


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
    if spec.kind == "postgres":  # read in this process (psycopg), applied by key as in-process, handed over
        from spark_jobs.executor.arrow.readers import postgres_tables

        pg = postgres_tables.read_change(spec, files[-1], state.trace_files(keyed_trace(spec.name)),
                                         policy or ExecutionPolicy())
        return InputChange(spark.createDataFrame(pg.table, schema=spark_schema(spec)), trace)
    if spec.kind == "delta":  # read in this process by deltalake (Spark has no Delta reader here), handed over
        from spark_jobs.executor.arrow.inputs import read_delta

        change = read_delta(spec, files)
        return InputChange(spark.createDataFrame(change.table, schema=spark_schema(spec)),
                           bytes_read=change.bytes_read)
    return InputChange(read_changes(spark, spec, files))


def advance_slots(spec_inputs: dict[str, InputSpec], manifest) -> list[str]:
    """After a commit: move each postgres input's replication slot to the position the manifest
    recorded (never before: a crash in between only makes the next step skip what it applied).
    Returns notes for what could not be done (the next step's scan tries again)."""
    from spark_jobs.executor.sources.pg_scan import advance_to

    notes = []
    for name, spec in spec_inputs.items():
        if spec.kind != "postgres" or manifest is None:
            continue
        try:
            advance_to(spec, consumed_records(manifest, name))
        except DbspError as exc:
            notes.append(f"input {name}: replication slot not advanced yet ({exc}); the next step does it")
    return notes


def count_unknown_keys(txn, input_name: str, n: int, *, restart: bool = False) -> None:
    """Add a step's ignored cdc records of unknown keys to the input's running total in the manifest
    (``restart``: a full refresh read every retained file again, so its count is the total)."""
    if n or restart:
        previous = {} if restart else ((txn.previous.inputs if txn.previous else {}).get(input_name) or {})
        txn.set_input_meta(input_name, "unknown_keys", int(previous.get("unknown_keys", 0)) + n)
