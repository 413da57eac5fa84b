"""The row checks of one input file, tallied in Python as ``sources/checks.failed_checks`` tallies
them in Spark: per check, how many rows fail and the least example (Spark's ``min`` over the
examples' strings; every distinct example for ``all_examples`` checks). The reasons are the Spark
path's own ``Check`` objects, so both engines refuse a file with the same words."""
from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from spark_jobs.executor.sources.checks import Check


class FileTally:
    """What one file's rows fail, check by check."""

    def __init__(self, checks: Sequence[Check]) -> None:
        self.checks = list(checks)
        self.counts: Counter = Counter()
        self.least: dict[str, str] = {}
        self.every: dict[str, set[str]] = {}

    def fail(self, key: str, example: Any = None) -> None:
        """One row fails check ``key`` (a check the file's reader does not declare is ignored,
        as Spark's tally ignores a group's extra checks)."""
        self.counts[key] += 1
        if example is None:
            return
        text = example if isinstance(example, str) else str(example)
        self.every.setdefault(key, set()).add(text)
        if key not in self.least or text < self.least[key]:
            self.least[key] = text

    def reasons(self) -> list[str]:
        """The reasons, in the order of ``checks``."""
        out = []
        for chk in self.checks:
            n = self.counts.get(chk.key, 0)
            if n:
                example = sorted(self.every.get(chk.key, ())) if chk.all_examples else self.least.get(chk.key)
                out.append(chk.describe(n, example))
        return out
