"""What a benchmark workload is: a circuit, a seeded generator, its sizes, and a SQL reference.

A workload only describes; ``bench.workloads.runner`` does the measuring, the same way for all.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

BENCH_DIR = Path(__file__).resolve().parent.parent
CIRCUITS = BENCH_DIR / "circuits"


class Generator(Protocol):
    """The generator interface of ``bench.generators`` (initial load, changes, snapshots)."""

    def initial(self): ...
    def change(self, rows: int): ...
    def snapshot(self, folder: str) -> dict[str, str]: ...
    def state_rows(self) -> dict[str, int]: ...


@dataclass(frozen=True)
class Size:
    """One state size of a workload: a label for tables and the generator's size parameter."""

    label: str
    param: float


@dataclass(frozen=True)
class Workload:
    key: str  # short name on the command line (w1, w2, identity)
    title: str
    circuit: str  # file name under bench/circuits/
    view: str  # the view compared with the recompute
    float_cols: tuple[str, ...]  # compared with a tolerance (summation order differs)
    make_generator: Callable[[str, float], Generator]
    sizes: tuple[Size, ...]  # `make bench` defaults
    smoke_sizes: tuple[Size, ...]
    size_help: str  # what the size parameter means
    duckdb_sql: Callable[[dict[str, str]], str] | None = None  # tables -> query (recompute reference)
    # a hand-written step (runtime -> {"seconds", "jobs", "view_dir"}) run before each measured
    # engine step on the same change and state
    reference: Callable[..., dict] | None = None
    in_smoke: bool = True  # part of `--smoke` (CI time is scarce: a variant of another workload is not)
    notes: list[str] = field(default_factory=list)

    @property
    def circuit_path(self) -> str:
        return str(CIRCUITS / self.circuit)

    def size(self, text: str) -> Size:
        """A size from the command line: a number (the generator's parameter) or a known label."""
        for s in (*self.sizes, *self.smoke_sizes):
            if s.label == text:
                return s
        value = float(text)
        return Size(self.label_for(value), value)

    def label_for(self, value: float) -> str:
        prefix = "sf" if self.key.startswith("w1") else "n"
        return f"{prefix}{value:g}"
