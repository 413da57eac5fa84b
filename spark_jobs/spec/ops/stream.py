"""The ops that keep their input's rows and columns: ``distinct`` (set semantics) and the stream
operators ``delay`` (z⁻¹), ``integrate`` (I) and ``differentiate`` (D), each ``{input}``.
Compiled to the IR's ``distinct`` (``ir/ops/distinct.py``) and stream operators
(``ir/ops/stream.py``)."""
from __future__ import annotations

from typing import Any

from ..columns import Issue, Lookup
from ..model import NodeSpec
from ..node_ops import REF, NodeOp, Recursion, register


def columns(node: NodeSpec, lookup: Lookup, known: tuple[str, ...]) -> tuple[tuple[str, ...] | None, list[Issue]]:
    """The input's columns."""
    return lookup(node.input or ""), []


def types(typer: Any, label: str, node: NodeSpec, scope: dict) -> dict | None:
    return scope.get(node.input) if node.input else None


def _op(name: str, position: int, help: str, translate: str, recursion: Recursion = "outer", **facts: Any) -> NodeOp:
    return register(NodeOp(name, position, help, {"input": REF}, columns, translate, required=("input",),
                           types=types, recursion=recursion, **facts))


DISTINCT = _op("distinct", 40, "Set semantics (weight 1 for every present row): {input}.",
               "spark_jobs.ir.ops.distinct:from_distinct", "monotone", origin=lambda n, c: (n.input, c))
DELAY = _op("delay", 70, "z^-1: the input as of the previous timestep: {input}.", "spark_jobs.ir.ops.stream:from_delay", outer_clock=True)
INTEGRATE = _op("integrate", 80, "I: the running sum of the input's changes: {input}.",
                "spark_jobs.ir.ops.stream:from_integrate", outer_clock=True)
DIFFERENTIATE = _op("differentiate", 90, "D: the change of the input since the previous timestep: {input}.",
                    "spark_jobs.ir.ops.stream:from_differentiate", outer_clock=True)
