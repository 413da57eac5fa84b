"""Run a case through the engine and the reference and compare every view at every timestep.

Views are compared as Z-sets (multisets with weights). Doubles are compared with a relative
tolerance of ``REL_TOL`` (and ``ABS_TOL`` near zero): a float sum depends on the order of its
terms, and until float sums are exact (issue #19) the engine's order is not the reference's.
Rows equal but for such float noise are merged on each side before matching, so a view whose
old and new row differ in the last bit still compares equal. Everything else is exact: longs,
strings, dates, and decimals (including ``avg`` of a decimal, rounded half up at scale + 4).
"""
from __future__ import annotations

import math
import shutil
import tempfile
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .engine import EngineRun
from .reference import Reference, plus

REL_TOL = 1e-9
ABS_TOL = 1e-9
Bag = Counter


@dataclass
class Failure:
    """The first disagreement of a case: at which timestep, in which view, and what."""

    step: int
    kind: str  # "mismatch" | "columns" | "error"
    view: str | None
    message: str

    @property
    def signature(self) -> tuple[str, str]:
        """What a smaller case must still show to count as the same failure while shrinking."""
        if self.kind == "error":
            return self.kind, self.message.split(":", 1)[0]
        return self.kind, ""

    def __str__(self) -> str:
        where = f", view {self.view!r}" if self.view else ""
        return f"timestep {self.step}{where}: {self.kind}\n{self.message}"


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return False
        return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=ABS_TOL)
    return a == b


def _rows_close(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))


def _exact_part(row: tuple) -> tuple:
    return tuple("<float>" if isinstance(v, float) else v for v in row)


def _merged(bag: Bag) -> list[list]:
    """[row, weight] entries, rows equal up to float noise merged, zero weights dropped."""
    groups: dict[tuple, list[list]] = {}
    for row, w in bag.items():
        entries = groups.setdefault(_exact_part(row), [])
        for entry in entries:
            if _rows_close(entry[0], row):
                entry[1] += w
                break
        else:
            entries.append([row, w])
    return [e for entries in groups.values() for e in entries if e[1]]


def bag_diff(expected: Bag, got: Bag) -> tuple[list, list]:
    """(rows only expected, rows only got) as [row, weight] lists, weights being the excess on
    that side; both empty = equal."""
    want, have = _merged(expected), _merged(got)
    only_want, only_have = [], []
    for row, w in want:
        match = next((e for e in have if e[1] is not None and _rows_close(row, e[0])), None)
        other = 0
        if match is not None:
            other, match[1] = match[1], None
        if w > other:
            only_want.append([row, w - other])
        elif w < other:
            only_have.append([row, other - w])
    only_have += [e for e in have if e[1] is not None]
    return only_want, only_have


def _show(entries: list, limit: int = 8) -> str:
    lines = [f"    {tuple(r)!r} x {w}" for r, w in sorted(entries, key=repr)[:limit]]
    if len(entries) > limit:
        lines.append(f"    ... {len(entries) - limit} more")
    return "\n".join(lines) or "    (none)"


def run_case(spark, root: Path, yaml_text: str, batches: list[dict[str, Bag]]) -> Failure | None:
    """Run every timestep through the engine and the reference; the first disagreement, if any."""
    engine = EngineRun(root, yaml_text)
    reference = Reference(engine.spec)
    bags: dict[str, Bag] = {}
    for t, batch in enumerate(batches, start=1):
        bags = {name: plus(bags.get(name, Counter()), batch.get(name, Counter())) for name in engine.spec.inputs}
        expected = reference.step(bags)  # first: a reference problem is not an engine failure
        try:
            engine.step(batch)
            got = engine.views()
        except Exception as exc:  # noqa: BLE001 - any engine error on valid input is a finding
            text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            return Failure(t, "error", None, f"{type(exc).__name__}: {text[:3000]}")
        for view, want in expected.items():
            columns, have = got[view]
            if have and columns != reference.columns(view):
                return Failure(t, "columns", view, f"  engine columns:    {columns}\n"
                                                   f"  reference columns: {reference.columns(view)}")
            only_want, only_have = bag_diff(want, have)
            if only_want or only_have:
                return Failure(t, "mismatch", view,
                               f"  columns {reference.columns(view)}\n"
                               f"  only in the reference (row x weight):\n{_show(only_want)}\n"
                               f"  only in the engine:\n{_show(only_have)}")
    return None


def run_in_temp(spark, yaml_text: str, batches: list[dict[str, Bag]], parent: Path | None = None) -> Failure | None:
    """``run_case`` in a fresh data root that is removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="fuzz-", dir=parent))
    try:
        return run_case(spark, root, yaml_text, batches)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def check_case(spark, tmp_path: Path, yaml_text: str, batches: list[dict[str, Any]]) -> None:
    """Assert that the engine agrees with the reference at every timestep (for pasted repros:
    batches may be plain dicts of row -> weight)."""
    failure = run_case(spark, tmp_path / "case", yaml_text, [{k: Counter(v) for k, v in b.items()} for b in batches])
    assert failure is None, str(failure)
