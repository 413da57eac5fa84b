"""Retention of a circuit's history, applied after every commit and by ``dbsp gc``.

The settings are the circuit's ``settings.retention``, key by key over the profile's
``state.retention`` (``spec/time.py``): how long view deltas, consumed input files and manifests
are kept. The store removes manifests and view deltas (``state/retention.py``); consumed input
files are the runtime's, as only it knows the inputs' folders (``inputs.py``).

Two readers bound what may go. A published Delta table (``spark_jobs/publish``) catches up from
the view deltas after the timestep it holds, so no delta after that timestep is removed until
it caught up. And a full refresh rebuilds from every consumed change file: once retention removed
some, ``retention.json`` says so and the full refresh refuses, naming what it could still rebuild.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from spark_jobs.spec.time import Retention, RetentionSettings, format_duration, retention_settings
from spark_jobs.state.retention import Removed, StoreCollection, collect, horizon, known_times

if TYPE_CHECKING:
    from spark_jobs.config import Config
    from spark_jobs.runtime.circuit import CircuitRuntime
    from spark_jobs.spec.model import CircuitSpec


def effective(config: "Config", spec: "CircuitSpec") -> RetentionSettings:
    """The circuit's retention settings over the profile's."""
    own, _ = retention_settings(spec.settings.get("retention"))
    return own.merged_over(config.retention)


def longest_age_us(settings: RetentionSettings) -> int | None:
    """The longest age any rule measures (the store keeps commit times that far back)."""
    ages = [r.age_us for r in (settings.view_deltas, settings.inputs, settings.manifests)
            if r is not None and r.age_us is not None]
    return max(ages) if ages else None


@dataclass
class GcReport:
    """What a collection removed (or, with ``dry_run``, would remove)."""

    circuit: str
    settings: RetentionSettings
    store: StoreCollection
    dry_run: bool = False
    inputs: dict[str, list[str]] = field(default_factory=dict)  # input -> consumed files removed
    notes: list[str] = field(default_factory=list)

    @property
    def input_file_count(self) -> int:
        return sum(len(v) for v in self.inputs.values())

    def text(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        s = self.settings
        lines = [f"{self.circuit}: retention view_deltas={_rule(s.view_deltas)}, inputs={_rule(s.inputs)}, "
                 f"manifests={_rule(s.manifests, 'profile state.keep_timesteps')}"]
        ms = self.store.manifests
        lines.append(f"  manifests: {verb} {len(ms)}" + (f" (timesteps {ms[0]}-{ms[-1]})" if ms else ""))
        if not self.store.view_deltas:
            lines.append(f"  view deltas: {verb} none")
        for view, dirs in sorted(self.store.view_deltas.items()):
            ts = sorted(t for t, _ in dirs)
            lines.append(f"  view deltas of {view}: {verb} {len(ts)} (timesteps {ts[0]}-{ts[-1]})")
        for view, t in sorted(self.store.held_for_readers.items()):
            lines.append(f"  view deltas of {view}: kept after timestep {t}, where its published table is "
                         f"(the table catches up from them; `dbsp publish` repairs a table that fell behind)")
        if not self.inputs:
            lines.append(f"  consumed input files: {verb} none")
        for name, paths in sorted(self.inputs.items()):
            lines.append(f"  consumed input files of {name}: {verb} {len(paths)}")
        for view, n in sorted(self.store.kept_listed.items()):
            lines.append(f"  view deltas of {view}: {n} old one(s) kept while a retained manifest lists them "
                         f"(the view's trace folds them in at its next merge)")
        lines += [f"  {n}" for n in self.notes]
        return "\n".join(lines)


def _rule(rule: Retention | None, default: str = "forever") -> str:
    if rule is None:
        return default
    if rule.timesteps is not None:
        return f"{rule.timesteps} timesteps"
    return "forever" if rule.age_us is None else format_duration(rule.age_us)


def apply_retention(rt: "CircuitRuntime", store=None, *, dry_run: bool = False,
                    now: datetime | None = None) -> GcReport:
    """Remove what the retention settings no longer keep from ``store`` (the runtime's by
    default); nothing with ``dry_run``."""
    settings = effective(rt.config, rt.compiled.spec)
    now = now or datetime.now(timezone.utc)
    store = store if store is not None else rt.store
    floors = published_floors(rt) if settings.view_deltas is not None else {}
    inputs = prune_inputs(rt, store, settings.inputs, now, dry_run=dry_run)  # before manifests go
    found = collect(store, settings.view_deltas, now, dry_run=dry_run, floors=floors)
    return GcReport(rt.name, settings, found, dry_run, inputs)


def published_floors(rt: "CircuitRuntime") -> dict[str, int]:
    """View -> the timestep its published Delta table holds (0: no table yet, or one that cannot
    be read: its deltas are all kept). Views that are not published are not listed."""
    from spark_jobs.publish import targets
    from spark_jobs.publish.delta import open_table, published_timestep

    floors: dict[str, int] = {}
    for target in targets(rt.config, rt.compiled.spec):
        try:
            table = open_table(target)
            floors[target.view] = 0 if table is None else published_timestep(table, target)
        except Exception:  # a table we cannot read: keep every delta it may still need
            floors[target.view] = 0
    return floors


def prune_inputs(rt: "CircuitRuntime", store, rule: Retention | None, now: datetime,
                 dry_run: bool = False) -> dict[str, list[str]]:
    """Delete consumed change files (``changes``, ``append_only``, ``cdc`` sources) read by a
    timestep that ``rule`` no longer keeps; input -> the files. A consumed record names its file
    below the input's folder (``InputFile.record``) and the timestep that consumed it; only files
    the folder lists now are candidates (nothing outside it is touched), and a record without a
    timestep (format 1, not migrated by a step yet) is kept. A file reached through a symbolic
    link (it is someone else's), or that is not the one consumed (its size or time differ from the
    record), is kept too. Snapshot and Delta sources are left alone (a Delta table's commit files
    are its log, which its own writer cleans up):
    their newest snapshot is the input's state, older ones are never read again."""
    from spark_jobs.executor.sources.discovery import remove_file, scan_input  # (imports Spark's modules)

    manifest = store.manifest()
    if rule is None or manifest is None:
        return {}
    through = horizon(rule, store.last_committed(), known_times(store), now)
    if not through:
        return {}
    found: dict[str, list[str]] = {}
    for name, spec in rt.compiled.spec.inputs.items():
        if spec.source is None or spec.source.kind in ("snapshots", "delta", "postgres"):  # a table's log is not ours
            continue
        scan = scan_input(spec, rt.config.data_root, manifest.consumed(name),
                          allowed_roots=rt.config.allowed_input_roots, fingerprints=False)
        old = {n: rec for n, rec in scan.consumed.by_name.items() if 0 < int(rec.get("timestep", 0)) <= through}
        paths = [f.path for f in scan.listed if f.name in old and _own_consumed(f, old[f.name])]
        if paths:
            found[name] = paths
    if dry_run or not found:
        return found
    removed = Removed.read(store)
    for name, paths in found.items():
        before = removed.inputs.get(name) or {}
        removed.inputs[name] = {"files": int(before.get("files", 0)) + len(paths),
                                "through_timestep": max(int(before.get("through_timestep", 0)), through)}
    removed.write(store)  # first: a crash below leaves a record, never a silent gap
    for paths in found.values():
        for path in paths:
            remove_file(path)
    return found


def _own_consumed(listed, record: dict) -> bool:  # noqa: ANN001 (discovery.InputFile)
    """May retention delete ``listed``? Only a file below the input's own folder, not reached
    through a symbolic link, and still the file that was consumed (same size and time)."""
    if listed.linked:
        return False
    return int(record.get("size", -1)) == listed.size and float(record.get("mtime", -1.0)) == listed.mtime


def after_commit(rt: "CircuitRuntime") -> str:
    """Retention after a commit (``dbsp step`` and the DAG's commit task): a note for the step's
    summary when something was removed; a failure here never undoes the commit."""
    try:
        report = apply_retention(rt)
    except OSError as exc:
        return f"retention: could not remove old history ({exc}); `dbsp gc` retries"
    n, k = report.store.view_delta_count, report.input_file_count
    parts = ([f"{n} old view delta(s)"] if n else []) + ([f"{k} consumed input file(s)"] if k else [])
    return f"retention: removed {' and '.join(parts)}" if parts else ""


__all__ = ["GcReport", "after_commit", "apply_retention", "effective", "longest_age_us", "published_floors",
           "prune_inputs"]
