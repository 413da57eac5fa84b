"""State bounds: which state rows no future on-time row can change (the paper's W operator,
moved into the integral).

Why: a windowed aggregate or an interval join over event data would otherwise keep every row
of history. Late rows are dropped at the input (``inputs.<n>.time``): after a timestep, every
row a later step reads from a timed input has its time column >= that input's watermark. From
that fact, derived here operator by operator, some state rows can never be read again:

- a *floor* (``Floor``) of a column of a stream: every future change row of the stream has
  ``column >= min(watermark of the floor's inputs) + offset``. An input's time column has one
  (offset 0); filters, selects of a plain column and unions carry it; a window assignment gives
  ``window_end`` the floor of its time column + 1 µs (a window ends after the rows it holds); an
  aggregate's output changes carry their group columns' floors (only touched groups change).
- a *forget* (``Forget``): a state row whose ``column`` is below a floor is dead for one reader
  (an aggregate's group that no future change touches; an interval join's row that no future
  row of the other side is within range of). ``Operator.forgets`` says it per operator.
- a ``StateBound``: the forgets of every reader of one trace; a row is dropped only when all of
  them agree (one reader without a forget keeps the whole trace).

The store applies a bound when it rewrites a trace (``Transaction.bound``); views keep their
history. Nothing here reads data: bounds are derived from the IR alone, and evaluated with the
watermarks a timestep commits (``runtime/state_bounds.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

from spark_jobs.spec.time import format_duration
from spark_jobs.ir.operator import delayed_integral_source, operator

if TYPE_CHECKING:
    from spark_jobs.ir.graph import Circuit, Node


@dataclass(frozen=True)
class Floor:
    """Every future change row has ``column >= min(watermark of inputs) + offset_us``.

    ``grain_us``: how far the floor moves before a rewrite is worth it (a window's slide, a join's
    range): a bounded trace is compacted each time its threshold has advanced that much."""

    inputs: tuple[str, ...]
    offset_us: int = 0
    grain_us: int = 0

    def shifted(self, us: int, grain_us: int | None = None) -> "Floor":
        return Floor(self.inputs, self.offset_us + us, self.grain_us if grain_us is None else grain_us)

    def at(self, marks: Mapping[str, int | None]) -> int | None:
        """The floor's value given each input's watermark (None while one has none)."""
        values = [marks.get(i) for i in self.inputs]
        if not values or any(v is None for v in values):
            return None
        return min(values) + self.offset_us  # type: ignore[type-var]

    def describe(self) -> str:
        mark = " ".join(f"watermark({i})" for i in self.inputs)
        if len(self.inputs) > 1:
            mark = f"min({', '.join(f'watermark({i})' for i in self.inputs)})"
        if not self.offset_us:
            return mark
        sign = "+" if self.offset_us > 0 else "-"
        return f"{mark} {sign} {format_duration(abs(self.offset_us))}"


def combine(floors: list["Floor | None"]) -> Floor | None:
    """The floor of a union of streams: the lowest of theirs (None if one has none)."""
    if not floors or any(f is None for f in floors):
        return None
    inputs = tuple(dict.fromkeys(i for f in floors for i in f.inputs))  # type: ignore[union-attr]
    return Floor(inputs, min(f.offset_us for f in floors), max(f.grain_us for f in floors))  # type: ignore[union-attr]


@dataclass(frozen=True)
class Forget:
    """For one reader of a state: rows whose ``column`` is below ``floor`` are dead."""

    column: str
    floor: Floor

    def describe(self) -> str:
        if self.floor.offset_us == 1:  # a window's end: below watermark + 1 µs
            return f"{self.column} <= {self.floor.shifted(-1).describe()}"
        return f"{self.column} < {self.floor.describe()}"


@dataclass(frozen=True)
class StateBound:
    """The bound of one trace (a node's state): a row is dropped when every forget holds."""

    trace: str
    forgets: tuple[Forget, ...]

    def thresholds(self, marks: Mapping[str, int | None]) -> tuple[tuple[str, int], ...] | None:
        """``(column, below_us)`` per forget, with these watermarks (None: nothing can be dropped yet)."""
        out = []
        for f in self.forgets:
            at = f.floor.at(marks)
            if at is None:
                return None
            out.append((f.column, at))
        return tuple(out)

    @property
    def every_us(self) -> int:
        return max((f.floor.grain_us for f in self.forgets), default=0)

    def describe(self) -> str:
        return "drops rows with " + " and ".join(dict.fromkeys(f.describe() for f in self.forgets))


@dataclass
class Floors:
    """Floors of the columns of a circuit's streams, memoized (``Operator.floor`` per op)."""

    circuit: "Circuit"
    _memo: dict[tuple[str, str], Floor | None] = field(default_factory=dict)

    def of(self, node_id: str, column: str) -> Floor | None:
        key = (node_id, column)
        if key not in self._memo:
            self._memo[key] = None  # a cycle (none in Q^Δ) has no floor
            node = self.circuit[node_id]
            rule = operator(node.op).floor
            self._memo[key] = rule(self.circuit, node, column, self) if rule is not None else None
        return self._memo[key]


def own_time_floor(node: "Node") -> Floor:
    """The floor of a timed input's time column: its watermark; a state it bounds is compacted
    about once per lateness of watermark progress (not at every step)."""
    return Floor((node.id,), 0, int(node.param("lateness_us") or 0))


def plain_column(expr: object) -> str | None:
    """The column a select expression names as is (`` `ts` `` or ``ts``), else None."""
    if not isinstance(expr, str):
        return None
    name = expr.strip()
    if len(name) > 1 and name[0] == name[-1] == "`":
        name = name[1:-1]
    return name if name.replace("_", "").isalnum() else None


def readers(circuit: "Circuit", node_id: str) -> list[tuple["Node", int]]:
    """Who reads the integral ``node_id`` (directly, or as z⁻¹ of it), with the input position."""
    sources = {node_id} | {r.id for r in circuit.consumers(node_id) if delayed_integral_source(circuit, r.id)}
    return [(reader, pos) for reader in circuit for pos, source in enumerate(reader.inputs)
            if source in sources and reader.id not in sources]


def _integral_bound(circuit: "Circuit", node: "Node", floors: Floors) -> tuple[Forget, ...] | None:
    """An integral's rows are dead when they are dead for every reader (and for the bag check of
    a ``changes`` input: a delete must find its row until the row's time is below the watermark)."""
    delays = [r.id for r in circuit.consumers(node.id) if delayed_integral_source(circuit, r.id)]
    if any(circuit.is_output(i) for i in [node.id, *delays]):  # a view shows the whole integral
        return None
    found: list[Forget] = []
    source = circuit[node.inputs[0]]
    if source.op == "input" and source.param("bag"):
        column = source.param("time")
        if column is None:
            return None
        found.append(Forget(column, own_time_floor(source)))
    users = readers(circuit, node.id)
    if not users:
        return tuple(found) or None
    for reader, pos in users:
        rule = operator(reader.op).forgets
        forget = rule(circuit, reader, pos, floors) if rule is not None else None
        if forget is None:
            return None
        found.append(forget)
    return tuple(dict.fromkeys(found))


def state_bounds(circuit: "Circuit") -> dict[str, StateBound]:
    """Per trace (node id) of the incremental circuit ``circuit``, its bound, where it has one."""
    floors = Floors(circuit)
    out: dict[str, StateBound] = {}
    for node in circuit:
        op = operator(node.op)
        if not op.stateful(circuit, node):
            continue
        if node.op == "integrate":
            forgets = _integral_bound(circuit, node, floors)
        else:
            own = op.forgets(circuit, node, None, floors) if op.forgets is not None else None
            forgets = (own,) if own is not None else None
        if forgets:
            out[node.id] = StateBound(node.id, forgets)
    return out


def group_forget(circuit: "Circuit", node: "Node", columns: tuple[str, ...], floors: Floors) -> Forget | None:
    """A state looked up by ``columns`` (groups, partitions) of ``node``'s input change: a row is
    dead when one of those columns is below its floor (no future change reaches its group)."""
    for c in sorted(columns, key=lambda c: c != "window_end"):  # a window's end reads best
        floor = floors.of(node.inputs[0], c)
        if floor is not None:
            return Forget(c, floor)
    return None


__all__ = ["Floor", "Floors", "Forget", "StateBound", "combine", "group_forget", "own_time_floor", "plain_column", "readers", "state_bounds"]
