"""Problems found in a circuit file, and the exception that carries them.

A circuit author fixes a file faster when every problem is reported at once, each with the
file, the line, the node it concerns and what was expected; so checks collect ``Problem``s
instead of raising on the first one, and ``CircuitError`` carries the whole list.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Iterable

from spark_jobs.errors import DbspError, EXIT_FAILED


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a circuit file. ``line`` is 1-based; ``node`` names the input, node
    or output the problem is about (``None`` for file-level problems)."""

    file: str
    line: int
    node: str | None
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", shorten(self.message))

    def __str__(self) -> str:
        if self.node is None:
            return f"{self.file}:{self.line}: {self.message}"
        return f"{self.file}:{self.line}: node '{self.node}': {self.message}"


MAX_MESSAGE_CHARS = 1_000


def shorten(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """A message cut in the middle when longer than ``limit`` (it may quote a text of the circuit,
    up to a megabyte): the start says what, the end says why."""
    if len(message) <= limit:
        return message
    keep = (limit - 40) // 2
    return f"{message[:keep]} ... ({len(message) - 2 * keep:,} characters cut) ... {message[-keep:]}"


class CircuitError(DbspError):
    """A circuit file that cannot be used; ``problems`` lists everything found wrong with it."""
    exit_code = EXIT_FAILED
    retryable = False

    def __init__(self, problems: Iterable[Problem]):
        self.problems: list[Problem] = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """A " (did you mean 'x'?)" suffix for the closest candidate, or "" when none is close."""
    close = difflib.get_close_matches(word, [c for c in candidates if c != word], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def listing(names: Iterable[str]) -> str:
    """Names as a short comma-separated list for messages ("(none)" when empty)."""
    names = list(names)
    return ", ".join(names) if names else "(none)"
