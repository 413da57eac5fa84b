"""Shrink a failing case to a small one that fails the same way, within a time budget.

Each candidate is a whole run through the engine (seconds), so the passes go from the ones that
remove most to the finest: steps after the failure, views other than the failing one, nodes no
view reads, moving the view upstream to a node that still fails, merging adjacent timesteps
(their sum is a valid change: the integrals after the merged step are the same), dropping
halves, then single rows of a timestep's change, and weights lowered to 1. A candidate whose
changes would delete a row that is not there is never run (the engine refuses those).
"""
from __future__ import annotations

import copy
import time
from collections import Counter
from typing import Any, Callable, Iterator

from .check import Failure
from .generate import Batch, circuit_yaml

Run = Callable[[dict[str, Any], list[Batch]], "Failure | None"]


def references(node: dict[str, Any]) -> list[str]:
    """Top-level names a node reads (a recursive node: what its body reads from outside)."""
    if node["op"] == "recursive":
        inner = set(node["body"])
        return [r for b in node["body"].values() for r in references(b) if r not in inner]
    refs = [node.get("input"), node.get("left"), node.get("right"), *node.get("inputs", [])]
    return [r for r in refs if r]


def pruned(doc: dict[str, Any], batches: list[Batch]) -> tuple[dict[str, Any], list[Batch]]:
    """Only the nodes and inputs the views read (their changes too)."""
    needed: set[str] = set()
    stack = list(doc["outputs"])
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        if name in doc["nodes"]:
            stack.extend(r for r in references(doc["nodes"][name]) if r != name)
    out = dict(doc)
    out["nodes"] = {n: v for n, v in doc["nodes"].items() if n in needed}
    out["inputs"] = {n: v for n, v in doc["inputs"].items() if n in needed}
    return out, [{n: c for n, c in b.items() if n in out["inputs"]} for b in batches]


def valid(batches: list[Batch]) -> bool:
    """No timestep deletes a copy of a row that its input does not hold."""
    held: dict[str, Counter] = {}
    for batch in batches:
        for name, change in batch.items():
            bag = held.setdefault(name, Counter())
            for row, w in change.items():
                bag[row] += w
                if bag[row] < 0:
                    return False
    return True


def _merge(a: Batch, b: Batch) -> Batch:
    out: Batch = {}
    for batch in (a, b):
        for name, change in batch.items():
            bag = out.setdefault(name, Counter())
            for row, w in change.items():
                bag[row] += w
    return {n: Counter({r: w for r, w in c.items() if w}) for n, c in out.items() if any(c.values())}


def _without(batches: list[Batch], step: int, name: str, rows: list[tuple]) -> list[Batch]:
    out = copy.deepcopy(batches)
    for row in rows:
        del out[step][name][row]
    if not out[step][name]:
        del out[step][name]
    return out


def _row_candidates(batches: list[Batch]) -> Iterator[list[Batch]]:
    """Halves, then quarters, ... then single rows of each timestep's change of each input."""
    for step in range(len(batches)):
        for name in list(batches[step]):
            rows = list(batches[step].get(name, {}))
            size = max(1, len(rows) // 2)
            while size >= 1:
                for start in range(0, len(rows), size):
                    yield _without(batches, step, name, rows[start:start + size])
                if size == 1:
                    break
                size //= 2


class Shrinker:
    def __init__(self, run: Run, doc: dict[str, Any], batches: list[Batch], failure: Failure,
                 seconds: float) -> None:
        self.run = run
        self.doc, self.batches, self.failure = doc, batches, failure
        self.deadline = time.monotonic() + seconds
        self.runs = 0
        self.tried: set[tuple[str, str]] = set()

    def out_of_time(self) -> bool:
        return time.monotonic() > self.deadline

    def attempt(self, doc: dict[str, Any], batches: list[Batch]) -> bool:
        """Run a candidate; keep it when it fails the same way."""
        key = (circuit_yaml(doc), repr(batches))
        if self.out_of_time() or key in self.tried or not valid(batches):
            return False
        self.tried.add(key)
        self.runs += 1
        found = self.run(doc, batches)
        if found is not None and found.signature == self.failure.signature:
            self.doc, self.batches, self.failure = doc, batches[:found.step], found
            return True
        return False

    def shrink(self) -> tuple[dict[str, Any], list[Batch], Failure]:
        self.batches = self.batches[:self.failure.step]
        if self.failure.view:
            doc = dict(self.doc, outputs=[self.failure.view])
            self.attempt(*pruned(doc, self.batches))
        else:
            for view in self.doc["outputs"]:
                if len(self.doc["outputs"]) > 1 and self.attempt(*pruned(dict(self.doc, outputs=[view]), self.batches)):
                    break
        progress = True
        while progress and not self.out_of_time():
            progress = self._upstream() or self._steps() or self._rows() or self._weights()
        return self.doc, self.batches, self.failure

    def _upstream(self) -> bool:
        """A view read by the failing view that fails too is a smaller circuit."""
        for view in self.doc["outputs"]:
            node = self.doc["nodes"].get(view)
            for ref in references(node) if node else []:
                if ref in self.doc["nodes"] and ref not in self.doc["outputs"]:
                    outputs = [ref if v == view else v for v in self.doc["outputs"]]
                    if self.attempt(*pruned(dict(self.doc, outputs=outputs), self.batches)):
                        return True
        return False

    def _steps(self) -> bool:
        for i in range(len(self.batches) - 1):
            merged = self.batches[:i] + [_merge(self.batches[i], self.batches[i + 1])] + self.batches[i + 2:]
            if self.attempt(self.doc, merged):
                return True
        return False

    def _rows(self) -> bool:
        for candidate in _row_candidates(self.batches):
            if self.attempt(self.doc, candidate):
                return True
        return False

    def _weights(self) -> bool:
        for step, batch in enumerate(self.batches):
            for name, change in batch.items():
                for row, w in change.items():
                    if abs(w) > 1:
                        candidate = copy.deepcopy(self.batches)
                        candidate[step][name][row] = 1 if w > 0 else -1
                        if self.attempt(self.doc, candidate):
                            return True
        return False


def shrink(run: Run, doc: dict[str, Any], batches: list[Batch], failure: Failure,
           seconds: float) -> tuple[dict[str, Any], list[Batch], Failure, int]:
    """The smallest failing case found within ``seconds``, and how many runs that took."""
    s = Shrinker(run, doc, batches, failure, seconds)
    doc, batches, failure = s.shrink()
    return doc, batches, failure, s.runs
