"""Watermarks of the inputs that declare event time (``inputs.<n>.time``), one timestep at a time.

The watermark of an input after timestep t is ``max(watermark after t-1, largest event time seen
up to t - lateness)``: it never goes back, even when the lateness is raised, so state dropped
for a closed window is never needed again. A row of timestep t whose event time is below the
watermark after t-1 is *late*: with ``on_late: drop`` it is left out of the change and counted
(the step's summary, the quality report, the manifest); with ``on_late: refuse`` the step is
refused (exit code 2, the files named) and nothing is committed. A full refresh reads every
retained file as one batch with no watermark: nothing is late in it.

Each manifest records, per timed input, ``inputs.<n>.event_time``: the largest event time seen,
the watermark, and the late rows dropped (that step's and in total).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

from spark_jobs.spec.model import InputSpec

META_KEY = "event_time"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def iso(us: int | None) -> str | None:
    """A time in microseconds since the epoch as ISO 8601 UTC (None stays None)."""
    if us is None:
        return None
    return (_EPOCH + timedelta(microseconds=us)).isoformat().replace("+00:00", "Z")


def micros(value: Any) -> int:
    """Microseconds since the epoch of a datetime (naive = UTC, as the sessions read them)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return (value - _EPOCH) // timedelta(microseconds=1)


@dataclass(frozen=True)
class Watermark:
    """An input's event-time progress as committed: largest event time seen, watermark, and
    the late rows dropped in total."""

    max_us: int | None = None
    watermark_us: int | None = None
    late_total: int = 0

    def to_meta(self, late_inserted: int = 0, late_deleted: int = 0) -> dict[str, Any]:
        return {"max_event_time": iso(self.max_us), "watermark": iso(self.watermark_us),
                "max_event_us": self.max_us, "watermark_us": self.watermark_us,
                "late_inserted": late_inserted, "late_deleted": late_deleted, "late_total": self.late_total}

    @classmethod
    def from_meta(cls, raw: Mapping[str, Any] | None) -> "Watermark":
        if not raw:
            return cls()
        return cls(raw.get("max_event_us"), raw.get("watermark_us"), int(raw.get("late_total", 0)))

    def advanced(self, lateness_us: int, step_max_us: int | None, late: int) -> "Watermark":
        """After a step whose change had ``step_max_us`` as its largest event time."""
        top = self.max_us if step_max_us is None else max(step_max_us, self.max_us or step_max_us)
        mark = self.watermark_us
        if top is not None:
            mark = top - lateness_us if mark is None else max(mark, top - lateness_us)
        return Watermark(top, mark, self.late_total + late)


def committed_watermark(manifest, input_name: str) -> Watermark:
    """The watermark an earlier timestep committed for an input (none before the first)."""
    if manifest is None:
        return Watermark()
    return Watermark.from_meta(((manifest.inputs or {}).get(input_name) or {}).get(META_KEY))


@dataclass
class LateRows:
    """One input's late rows in one step and its watermark before and after."""

    input: str
    column: str
    before: Watermark
    after: Watermark
    inserted: int = 0
    deleted: int = 0
    step_max_us: int | None = None  # largest event time of this step's change

    @property
    def rows(self) -> int:
        return self.inserted + self.deleted


@dataclass
class StepClock:
    """The timed inputs of one timestep: the watermark each change is judged against, and what
    the step saw (fed from each input's change totals; see ``executor/sources/lateness.py``).

    ``fresh``: a full refresh (no watermark: nothing is late; the watermark restarts)."""

    inputs: Mapping[str, InputSpec]
    manifest: Any
    fresh: bool = False
    seen: dict[str, LateRows] = field(default_factory=dict)

    def timed(self, name: str) -> bool:
        return self.inputs[name].time is not None

    def column(self, name: str) -> str | None:
        spec = self.inputs[name]
        return spec.time.column if spec.time is not None else None

    def before(self, name: str) -> Watermark:
        return Watermark() if self.fresh else committed_watermark(self.manifest, name)

    def watermark(self, name: str) -> int | None:
        """Rows of this step's change of ``name`` below this are late (None: none are)."""
        return self.before(name).watermark_us if self.timed(name) else None

    def record(self, name: str, totals: Mapping[str, Any]) -> LateRows | None:
        """Take in an input's change totals (``late_ins``, ``late_del``, ``max_us``)."""
        spec = self.inputs[name]
        if spec.time is None:
            return None
        ins, dels = int(totals.get("late_ins") or 0), int(totals.get("late_del") or 0)
        before = self.before(name)
        top = None if totals.get("max_us") is None else int(totals["max_us"])
        after = before.advanced(spec.time.lateness_us, top, ins + dels)
        self.seen[name] = LateRows(name, spec.time.column, before, after, ins, dels, top)
        return self.seen[name]

    def report(self) -> list[LateRows]:
        """Every timed input's late rows this step (none for an input without a change)."""
        out = []
        for name, spec in self.inputs.items():
            if spec.time is not None:
                before = self.before(name)
                out.append(self.seen.get(name) or LateRows(name, spec.time.column, before, before))
        return out

    def refused(self) -> list[str]:
        """Inputs with late rows whose policy is to refuse the step."""
        return [n for n, late in self.seen.items() if late.rows and self.inputs[n].time.on_late == "refuse"]

    def after(self, name: str) -> Watermark:
        """The watermark of ``name`` this step commits (as it was, for an input without a change)."""
        late = self.seen.get(name)
        return late.after if late is not None else self.before(name)

    def marks(self) -> dict[str, int | None]:
        """Every timed input's committed watermark after this step (µs; None: none yet)."""
        return {n: self.after(n).watermark_us for n, spec in self.inputs.items() if spec.time is not None}

    def commit(self, txn) -> None:
        """Record every timed input's watermark in the manifest (also for inputs without a
        change this step: the watermark is carried as it was)."""
        for name, spec in self.inputs.items():
            if spec.time is None:
                continue
            late = self.seen.get(name)
            mark = self.after(name)
            txn.set_input_meta(name, META_KEY, mark.to_meta(late.inserted if late else 0,
                                                            late.deleted if late else 0))

    def journal(self) -> dict[str, dict[str, Any]]:
        """What a stage task saw, for the commit task (``from_journal``)."""
        return {n: {"late_ins": s.inserted, "late_del": s.deleted, "max_us": s.step_max_us}
                for n, s in self.seen.items()}

    def from_journal(self, seen: Mapping[str, Mapping[str, Any]]) -> None:
        for name, totals in seen.items():
            self.record(name, totals)


def committed_late(manifest, inputs: Mapping[str, InputSpec]) -> dict[str, LateRows]:
    """Per timed input, the late rows a committed timestep dropped and its watermark after it, as
    its manifest records them (the watermark before is not recorded: ``before`` is ``after``)."""
    out = {}
    for name, spec in inputs.items():
        raw = ((manifest.inputs or {}).get(name) or {}).get(META_KEY) if spec.time is not None else None
        if raw:
            mark = Watermark.from_meta(raw)
            out[name] = LateRows(name, spec.time.column, mark, mark, int(raw.get("late_inserted") or 0),
                                 int(raw.get("late_deleted") or 0), raw.get("max_event_us"))
    return out


def describe(late: LateRows) -> str:
    """The step summary's note on an input's late rows and watermark."""
    mark = iso(late.after.watermark_us) or "none yet"
    if not late.rows:
        return f"watermark {mark}"
    return f"{late.rows} late row(s) dropped ({late.inserted} inserts, {late.deleted} deletes); watermark {mark}"


__all__ = ["LateRows", "META_KEY", "StepClock", "Watermark", "committed_late", "committed_watermark", "describe",
           "iso", "micros"]
