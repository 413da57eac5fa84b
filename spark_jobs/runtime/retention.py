"""Retention of a circuit's history, applied after every commit and by ``dbsp gc``.

The settings are the circuit's ``settings.retention``, key by key over the profile's
``state.retention`` (``spec/time.py``): how long view deltas, consumed input files and manifests
are kept. The store removes manifests and view deltas (``state/retention.py``); consumed input
files are the runtime's, as only it knows the inputs' folders (``inputs.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from spark_jobs.spec.time import Retention, RetentionSettings, format_duration, retention_settings
from spark_jobs.state.retention import StoreCollection, collect

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
    notes: list[str] = field(default_factory=list)

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
    found = collect(store if store is not None else rt.store, settings.view_deltas, now, dry_run=dry_run)
    return GcReport(rt.name, settings, found, dry_run)


def after_commit(rt: "CircuitRuntime") -> str:
    """Retention after a commit (``dbsp step`` and the DAG's commit task): a note for the step's
    summary when something was removed; a failure here never undoes the commit."""
    try:
        report = apply_retention(rt)
    except OSError as exc:
        return f"retention: could not remove old history ({exc}); `dbsp gc` retries"
    n = report.store.view_delta_count
    return f"retention: removed {n} old view delta(s)" if n else ""


__all__ = ["GcReport", "after_commit", "apply_retention", "effective", "longest_age_us"]
