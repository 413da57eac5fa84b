"""Event time in a circuit file: durations, an input's event time and lateness, windows, the
time bound of an interval join, and retention settings, parsed from their YAML fields.

- ``inputs.<n>.time: {column: ts, lateness: "10 minutes", on_late: drop}``: the input's
  *watermark* after a timestep is the largest event time seen so far minus the lateness (it never
  goes back). A row whose event time is below the watermark when it arrives is *late*: dropped
  and counted (``on_late: drop``, the default) or the step is refused (``on_late: refuse``).
- ``aggregate.window: {column: ts, size: "1 hour", slide: "15 minutes"}``: each row counts in
  every window ``[start, start + size)`` that holds its ``column``, with starts at multiples of
  ``slide`` from 1970-01-01 00:00 UTC (tumbling windows: no ``slide``, slide = size).
- ``join.within: {left: ts, right: ts, range: "5 minutes"}``: an interval join, pairs whose
  times differ by at most ``range``.
- ``settings.retention: {view_deltas: "30 days", inputs: "100 timesteps", manifests: ...}``.

Durations are written as one or more ``<integer> <unit>`` pairs ("90 seconds", "1 hour 30
minutes"); months and years are refused, as they have no fixed length. Everything is kept in
microseconds, the resolution of Spark's timestamps.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from spark_jobs.errors import DbspError

MICROS_PER: dict[str, int] = {}
for _names, _us in ((("microsecond", "microseconds", "us"), 1),
                    (("millisecond", "milliseconds", "ms"), 1_000),
                    (("second", "seconds", "sec", "secs", "s"), 1_000_000),
                    (("minute", "minutes", "min", "mins", "m"), 60_000_000),
                    (("hour", "hours", "hr", "hrs", "h"), 3_600_000_000),
                    (("day", "days", "d"), 86_400_000_000),
                    (("week", "weeks", "w"), 604_800_000_000)):
    MICROS_PER.update(dict.fromkeys(_names, _us))
_VARIABLE = ("month", "months", "mon", "mons", "year", "years", "y", "yr", "yrs")
_PAIR = re.compile(r"\s*(\d+)\s*([A-Za-z]+)\s*")
DURATION_HELP = "a duration such as \"10 minutes\", \"1 hour\", \"90 seconds\" or \"1 hour 30 minutes\""
TIMESTAMP_TYPES = ("timestamp", "timestamp_ltz", "timestamp_ntz")
ON_LATE = ("drop", "refuse")
WINDOW_COLUMNS = ("window_start", "window_end")
MAX_WINDOWS_PER_ROW = 1000  # size / slide: how many windows one row is counted in
MAX_DURATION_DAYS = 36_500  # about 100 years: longer durations overflow Spark's timestamp arithmetic
RETENTION_KEYS = ("view_deltas", "inputs", "manifests")


class DurationError(DbspError, ValueError):
    """A duration that cannot be read; the message says what was expected."""


def parse_duration(text: object) -> int:
    """Microseconds of a duration such as "10 minutes" (``DurationError`` if it is not one)."""
    if not isinstance(text, str) or not text.strip():
        raise DurationError(f"expected {DURATION_HELP}, got {text!r}")
    pos, total = 0, 0
    while pos < len(text):
        m = _PAIR.match(text, pos)
        if m is None or m.end() == pos:
            raise DurationError(f"cannot read {text!r}: expected {DURATION_HELP}")
        unit = m.group(2).lower()
        if unit in _VARIABLE:
            raise DurationError(f"{text!r}: months and years have no fixed length; write days or weeks")
        if unit not in MICROS_PER:
            raise DurationError(f"{text!r}: unknown unit {m.group(2)!r}; expected seconds, minutes, hours, "
                                f"days or weeks (or ms, s, m, h, d, w)")
        total += int(m.group(1)) * MICROS_PER[unit]
        pos = m.end()
    if total > MAX_DURATION_DAYS * MICROS_PER["day"]:
        raise DurationError(f"{text!r} is longer than {MAX_DURATION_DAYS:,} days (about 100 years), the longest "
                            f"duration a timestamp can be moved by safely")
    return total


def format_duration(us: int) -> str:
    """A duration in the largest unit that divides it ("1 hour", "90 seconds", "250 ms")."""
    for unit, size in (("week", 604_800_000_000), ("day", 86_400_000_000), ("hour", 3_600_000_000),
                       ("minute", 60_000_000), ("second", 1_000_000), ("ms", 1_000)):
        if us and us % size == 0:
            n = us // size
            return f"{n} {unit}" + ("s" if n != 1 and unit != "ms" else "")
    return f"{us} us"


@dataclass(frozen=True)
class EventTime:
    """``inputs.<n>.time``: the event-time column of an input and how late a row may arrive."""

    column: str
    lateness_us: int
    on_late: str = "drop"  # drop | refuse
    line: int = 0

    @property
    def lateness(self) -> str:
        return format_duration(self.lateness_us)


@dataclass(frozen=True)
class WindowSpec:
    """``aggregate.window``: tumbling (slide = size) or sliding windows over a time column."""

    column: str
    size_us: int
    slide_us: int

    @property
    def tumbling(self) -> bool:
        return self.slide_us == self.size_us

    def windows_of(self, ts_us: int) -> list[tuple[int, int]]:
        """``(start, end)`` in microseconds of every window holding ``ts_us``, earliest first."""
        last = ts_us // self.slide_us
        first = (ts_us - self.size_us) // self.slide_us + 1
        return [(k * self.slide_us, k * self.slide_us + self.size_us) for k in range(first, last + 1)]

    def describe(self) -> str:
        size = format_duration(self.size_us)
        if self.tumbling:
            return f"tumbling windows of {size} over {self.column}"
        return f"sliding windows of {size} every {format_duration(self.slide_us)} over {self.column}"


@dataclass(frozen=True)
class WithinSpec:
    """``join.within``: an interval join keeps pairs with |left - right| <= range."""

    left: str
    right: str
    range_us: int

    def describe(self) -> str:
        return f"|{self.left} - {self.right}| <= {format_duration(self.range_us)}"


@dataclass(frozen=True)
class Retention:
    """How long one kind of history is kept: the last ``timesteps``, those younger than
    ``age_us``, or everything (both None)."""

    timesteps: int | None = None
    age_us: int | None = None

    @property
    def forever(self) -> bool:
        return self.timesteps is None and self.age_us is None

    def describe(self) -> str:
        if self.timesteps is not None:
            return f"{self.timesteps} timesteps"
        return "forever" if self.age_us is None else format_duration(self.age_us)


FOREVER = Retention()
_TIMESTEPS = re.compile(r"^\s*(\d+)\s*(?:timesteps?|steps?)\s*$", re.IGNORECASE)


def parse_retention(value: object) -> Retention:
    """"forever", "<n> timesteps" or a duration (``DurationError`` otherwise)."""
    if isinstance(value, str) and value.strip().lower() == "forever":
        return FOREVER
    if isinstance(value, str) and (m := _TIMESTEPS.match(value)):
        n = int(m.group(1))
        if n < 1:
            raise DurationError(f"{value!r}: keep at least 1 timestep")
        return Retention(timesteps=n)
    try:
        age = parse_duration(value)
    except DurationError:
        raise DurationError(f"expected \"forever\", \"<n> timesteps\" or {DURATION_HELP}, got {value!r}") from None
    if age <= 0:
        raise DurationError(f"{value!r}: a retention age must be positive")
    return Retention(age_us=age)


@dataclass(frozen=True)
class RetentionSettings:
    """``settings.retention`` of a circuit, or ``state.retention`` of a profile: how long each kind
    of history is kept. None: not set here (a circuit's unset keys fall back to the profile's;
    unset everywhere, view deltas and consumed inputs are kept forever and manifests as the
    profile's ``state.keep_timesteps`` says)."""

    view_deltas: Retention | None = None
    inputs: Retention | None = None
    manifests: Retention | None = None

    def merged_over(self, base: "RetentionSettings") -> "RetentionSettings":
        """These settings where set, ``base`` (the profile's) elsewhere."""
        return RetentionSettings(*(mine if mine is not None else theirs for mine, theirs in
                                   ((self.view_deltas, base.view_deltas), (self.inputs, base.inputs),
                                    (self.manifests, base.manifests))))


def retention_settings(raw: object) -> tuple[RetentionSettings, list[tuple[str, str]]]:
    """Retention settings from a mapping, and ``(key, message)`` for every value that is wrong."""
    if not isinstance(raw, dict):
        return RetentionSettings(), []
    found: dict[str, Retention] = {}
    problems = []
    for key in RETENTION_KEYS:
        if key in raw:
            try:
                found[key] = parse_retention(raw[key])
            except DurationError as exc:
                problems.append((key, f"retention of {key.replace('_', ' ')}: {exc}"))
    return RetentionSettings(**found), problems


# ---- typed objects from YAML values: None when malformed (the validator says why) ----------

def _duration_or_none(value: object) -> int | None:
    try:
        return parse_duration(value)
    except DurationError:
        return None


def event_time_of(raw: object, line: int = 0) -> EventTime | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("column"), str):
        return None
    lateness = _duration_or_none(raw.get("lateness"))
    on_late = raw.get("on_late", "drop")
    if lateness is None or on_late not in ON_LATE:
        return None
    return EventTime(raw["column"], lateness, on_late, line)


def window_of(raw: object) -> WindowSpec | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("column"), str):
        return None
    size = _duration_or_none(raw.get("size"))
    slide = _duration_or_none(raw["slide"]) if "slide" in raw else size
    if not size or not slide or slide > size or size // slide > MAX_WINDOWS_PER_ROW:
        return None
    return WindowSpec(raw["column"], size, slide)


def within_of(raw: object) -> WithinSpec | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("left"), str) or not isinstance(raw.get("right"), str):
        return None
    rng = _duration_or_none(raw.get("range"))
    return None if rng is None else WithinSpec(raw["left"], raw["right"], rng)


def time_field_problems(kind: str, raw: object) -> list[tuple[str, str]]:
    """``(field, message)`` for the values of a ``time``, ``window`` or ``within`` mapping that
    are wrong in ways the JSON Schema cannot see (durations, their order and limits)."""
    if not isinstance(raw, dict):
        return []
    fields = {"time": ("lateness",), "window": ("size", "slide"), "within": ("range",)}[kind]
    found: dict[str, int] = {}
    problems = []
    for f in fields:
        if isinstance(raw.get(f), str):
            try:
                found[f] = parse_duration(raw[f])
            except DurationError as exc:
                problems.append((f, f"{kind}.{f}: {exc}"))
    for f in ("size", "slide"):
        if found.get(f) == 0:
            problems.append((f, f"window.{f} must be longer than 0"))
    size, slide = found.get("size"), found.get("slide")
    if size and slide:
        if slide > size:
            problems.append(("slide", f"window.slide ({format_duration(slide)}) is longer than window.size "
                                      f"({format_duration(size)}): rows between windows would be counted in none"))
        elif size // slide > MAX_WINDOWS_PER_ROW:
            problems.append(("slide", f"window.size / window.slide is {size // slide}: each row would be "
                                      f"counted in that many windows (at most {MAX_WINDOWS_PER_ROW})"))
    return problems


__all__ = ["DURATION_HELP", "DurationError", "EventTime", "FOREVER", "MAX_WINDOWS_PER_ROW", "ON_LATE",
           "RETENTION_KEYS", "Retention", "RetentionSettings", "TIMESTAMP_TYPES", "WINDOW_COLUMNS",
           "WindowSpec", "WithinSpec", "event_time_of", "format_duration", "parse_duration", "parse_retention",
           "retention_settings", "time_field_problems", "window_of", "within_of"]
