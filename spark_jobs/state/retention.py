"""Retention of a store's history: which old manifests and view deltas may go, and a record of
what went (so a read of removed history fails with a reason instead of returning nothing).

What a store keeps, and for how long:

- manifests (committed timesteps that stay readable with ``show --at``): the latest always; the
  last ``keep_timesteps`` (the profile's ``state.keep_timesteps``), or what
  ``retention.manifests`` says, by count or by age;
- view deltas (``outputs/<view>/t<t>-...``, the published change log read by ``show --delta``):
  forever, unless ``retention.view_deltas`` says otherwise. A delta still listed by a retained
  manifest (the view's trace folds its newest deltas in only when it merges them) is kept until
  it is not.

Ages are measured from the commit time of the timestep that wrote a thing. Manifests record
their commit times; ``timeline`` (carried in every manifest while an age rule is set) records
those of timesteps whose manifests are gone. A timestep whose time was never recorded counts as
at least as old as the first one that was (commit times only grow with timesteps).

``retention.json`` in the store root records what was removed; it is written before anything is
deleted, so a crash halfway leaves a record that claims a little more than was removed, never
less.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Iterable, Protocol

if TYPE_CHECKING:
    from spark_jobs.state.store import StateStore

RECORD = "retention.json"


class Rule(Protocol):
    """How long something is kept: the last ``timesteps``, or what is younger than ``age_us``
    microseconds, or everything (both None). (``spec.time.Retention`` is one.)"""

    timesteps: int | None
    age_us: int | None


@dataclass(frozen=True)
class Keep:
    """A ``Rule`` made here (the store's own default: the last ``keep_timesteps``)."""

    timesteps: int | None = None
    age_us: int | None = None


def _forever(rule: Rule | None) -> bool:
    return rule is None or (rule.timesteps is None and rule.age_us is None)


def parse_time(text: str) -> datetime:
    """A manifest's ``committed_at`` (ISO 8601, UTC)."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def horizon(rule: Rule | None, last: int, timeline: Iterable[tuple[int, str]], now: datetime) -> int:
    """The newest timestep that ``rule`` no longer keeps (0: none), given the last committed one
    and known commit times. The last committed timestep is always kept."""
    if _forever(rule) or last <= 0:
        return 0
    if rule.timesteps is not None:
        return max(0, last - rule.timesteps)
    cutoff = now - timedelta(microseconds=rule.age_us or 0)
    old = [t for t, at in timeline if parse_time(at) <= cutoff]
    return min(max(old), last - 1) if old else 0


@dataclass
class Removed:
    """What retention removed from a store so far (``retention.json``)."""

    view_deltas_through: dict[str, int] = field(default_factory=dict)  # view -> newest removed timestep
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)  # input -> {files, through_timestep}

    def to_json(self) -> str:
        return json.dumps({"view_deltas_through": self.view_deltas_through, "inputs": self.inputs},
                          indent=1, sort_keys=True) + "\n"

    @classmethod
    def read(cls, store: "StateStore") -> "Removed":
        path = store.fs.join(store.root, RECORD)
        if not store.fs.exists(path):
            return cls()
        raw = json.loads(store.fs.read_text(path))
        return cls({k: int(v) for k, v in (raw.get("view_deltas_through") or {}).items()},
                   dict(raw.get("inputs") or {}))

    def write(self, store: "StateStore") -> None:
        store.fs.publish_text(store.fs.join(store.root, RECORD), self.to_json(), tmp_prefix=".tmp-")


@dataclass
class StoreCollection:
    """What one collection of a store removes (or, in a dry run, would remove)."""

    manifests: list[int] = field(default_factory=list)
    view_deltas: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # view -> (t, rel dir)
    kept_listed: dict[str, int] = field(default_factory=dict)  # view -> old deltas a retained manifest lists
    held_for_readers: dict[str, int] = field(default_factory=dict)  # view -> timestep its published table holds

    @property
    def view_delta_count(self) -> int:
        return sum(len(v) for v in self.view_deltas.values())


def expired_manifests(store: "StateStore", now: datetime) -> list[int]:
    """Retained manifests the manifest rule no longer keeps (never the latest)."""
    ts = store.timesteps()
    if not ts:
        return []
    rule = store.manifest_retention or Keep(timesteps=store.keep_timesteps)
    if _forever(rule):
        return []
    last = ts[-1]
    if rule.timesteps is not None:
        return [t for t in ts if t <= last - rule.timesteps]
    cutoff = now - timedelta(microseconds=rule.age_us or 0)
    return [t for t in ts[:-1] if parse_time(store.manifest(t).committed_at) <= cutoff]  # type: ignore[union-attr]


def known_times(store: "StateStore") -> list[tuple[int, str]]:
    """Commit times of timesteps: the latest manifest's timeline plus every retained manifest."""
    m = store.manifest()
    times = dict(m.timeline) if m is not None else {}
    for t in store.timesteps():
        mt = store.manifest(t)
        if mt is not None and mt.committed_at:
            times[t] = mt.committed_at
    return sorted(times.items())


def collect(store: "StateStore", view_rule: Rule | None, now: datetime | None = None,
            dry_run: bool = False, floors: dict[str, int] | None = None) -> StoreCollection:
    """Remove (unless ``dry_run``) the manifests and view deltas past retention.

    ``floors``: view -> the newest timestep a reader of its deltas (a published table) has
    caught up with; no delta after it is removed, whatever the rule says (views keyed by their
    names; a view missing from ``floors`` has no such reader)."""
    from spark_jobs.state import layout as L

    now = now or datetime.now(timezone.utc)
    out = StoreCollection(manifests=expired_manifests(store, now))
    last = store.last_committed()
    through = horizon(view_rule, last, known_times(store), now)
    removed = Removed.read(store)
    floor_of = {L.safe_name(view): t for view, t in (floors or {}).items()}
    if through:
        listed: set[str] = set()
        for t in store.timesteps():
            if t not in out.manifests:
                listed |= store.manifest(t).referenced_dirs()  # type: ignore[union-attr]
        for view_dir in store.fs.listdir(store.fs.join(store.root, L.OUTPUTS)):
            top = f"{L.OUTPUTS}/{view_dir}"
            if store.layout.through_link(top):  # not the store's own: never delete through it
                continue
            view_through = min(through, floor_of.get(view_dir, through))
            if view_through < through:
                out.held_for_readers[view_dir] = view_through
            for name in store.fs.listdir(store.layout.abs(top)):
                t = L.parse_dir_timestep(name)
                if t is None or t > view_through:
                    continue
                rel = f"{top}/{name}"
                if store.fs.is_link(store.layout.abs(rel)):
                    continue
                if rel in listed:
                    out.kept_listed[view_dir] = out.kept_listed.get(view_dir, 0) + 1
                else:
                    out.view_deltas.setdefault(view_dir, []).append((t, rel))
    if dry_run:
        return out
    if out.view_deltas:
        for view_dir, dirs in out.view_deltas.items():
            removed.view_deltas_through[view_dir] = max(removed.view_deltas_through.get(view_dir, 0),
                                                        max(t for t, _ in dirs))
        removed.write(store)  # first: a crash below leaves a record, never a silent gap
        for dirs in out.view_deltas.values():
            for _, rel in dirs:
                store.fs.remove_tree(store.layout.abs(rel))
    if out.manifests:
        store.drop_manifests(out.manifests)
    return out


__all__ = ["Keep", "RECORD", "Removed", "Rule", "StoreCollection", "collect", "expired_manifests", "horizon", "known_times",
           "parse_time"]
