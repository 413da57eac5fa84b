"""The range of weights a step may compute, and the refusal when one leaves it.

Why: a weight is a 64-bit integer, and a join multiplies weights, a consolidation, a distinct or a
count adds them up. Unchecked, three inputs of weight 2^31 - 1 joined wrap around to a positive
weight that is simply wrong, and the wrong bag is committed and published. Every product and sum
of weights on both engines is checked instead (``arrow/zsets.py``: Arrow's checked kernels and
exact sums; ``spark/zset.py``: ``try_multiply`` / ``try_sum`` with ``raise_error``), and one
outside ``-MAX_WEIGHT .. MAX_WEIGHT`` refuses the step (exit 2, nothing committed), naming the
node being evaluated and an example row.

The node: kernels build (Spark) or compute (Arrow) their values while ``evaluate_step`` is inside
``evaluating(node_id)``; the helpers that check weights read it from here, so no kernel has to
pass its node down through every Z-set function.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator

from spark_jobs.executor.refusal import ValueRefused

MAX_WEIGHT = 2**63 - 1  # every weight and count a step computes: |w| <= MAX_WEIGHT (bigint without -2^63)
MAX_INPUT_WEIGHT = 2**31 - 1  # an input file's _weight (sources/formats.py)

_NODE: ContextVar[str | None] = ContextVar("dbsp_node", default=None)


class WeightOutOfRange(ValueRefused):
    """A product or sum of weights (or a count) outside the range of a bigint weight."""


@contextmanager
def evaluating(node_id: str | None) -> Iterator[None]:
    """Checks of weights made inside name ``node_id``."""
    token = _NODE.set(node_id)
    try:
        yield
    finally:
        _NODE.reset(token)


def where() -> str:
    """The node being evaluated, as a message starts ("node 'j'"; "the step" outside a node)."""
    node = _NODE.get()
    return f"node {node!r}" if node else "the step"


def message(what: str, row: str) -> str:
    """The refusal's text: the node, what left the range, an example row."""
    return (f"{where()}: {what} is outside the weight range -{MAX_WEIGHT}..{MAX_WEIGHT} "
            f"(bigint; input weights are at most {MAX_INPUT_WEIGHT} in absolute value); "
            f"example row: {row}")


def refuse(what: str, row: Any) -> WeightOutOfRange:
    """The error for one example ``row`` (a mapping or a string) whose weight ``what`` overflowed."""
    return WeightOutOfRange(message(what, row if isinstance(row, str) else _short(row)))


def in_range(value: int) -> bool:
    return -MAX_WEIGHT <= value <= MAX_WEIGHT


def _short(row: Any, limit: int = 300) -> str:
    text = repr(row)
    return text if len(text) <= limit else text[:limit] + "..."
