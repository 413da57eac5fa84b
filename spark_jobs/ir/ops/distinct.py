"""distinct and its incremental form H (Proposition 4.7): Δdistinct = H(Δx, z⁻¹(I x)).

``distinct``: weight 1 where the weight is positive (a consolidated set). ``distinct_h``
(inputs: the delta, the delayed integral) looks up only the delta's tuples in the integral and
emits +1 / -1 where a tuple's weight crosses zero: work bounded by the delta. Inside a
recursive body a distinct becomes ``distinct_nested`` (inputs Δx and its per-iteration trace).
"""
from __future__ import annotations

from spark_jobs.ir.builder import Builder, BodyBuilder
from spark_jobs.ir.graph import Circuit, Node, make_node
from spark_jobs.ir.operator import ALWAYS, INPUTS, NONLINEAR, Operator, builtin_kernels, register
from spark_jobs.spec.model import NodeSpec


def rule_distinct(b: Builder, node: Node, deltas: list[str]) -> str:
    """Proposition 4.7: Δdistinct = H(Δx, z⁻¹(I x)); work bounded by the delta."""
    (dx,) = deltas
    return b.add(make_node(node.id, "distinct_h", [dx, b.delayed_integral(dx)], node.columns,
                           origin=node.origin))


def nested_distinct(bb: BodyBuilder, node: Node) -> None:
    """In a body: the distinct reads its input's 2-D delta and trace."""
    (x,) = node.inputs
    bb.add(node.with_(op="distinct_nested", inputs=(x, bb.trace(x, bb.inc[x].columns))))


def _tuple(node: Node, position: int) -> tuple[str, ...] | None:
    """H looks its integral (input 1) up by the whole tuple."""
    return tuple(node.columns) if position == 1 else None


DISTINCT = register(Operator(
    "distinct", arity=1, linearity=NONLINEAR, symbol="distinct", positive=ALWAYS, consolidated=True,
    insert_only=INPUTS,  # a tuple's weight in I(x) never falls: once in the set, it stays
    summary="the set of tuples with a positive weight", incremental=rule_distinct, nested=nested_distinct,
    kernels=builtin_kernels("distinct")))

DISTINCT_H = register(Operator(
    "distinct_h", arity=2, linearity=NONLINEAR, symbol="H", consolidated=True, form_of="distinct",
    summary="H(Δx, z⁻¹(I x)): the change of distinct, from the delta's tuples only",
    lookup=_tuple, uses=lambda c, n, p: f"distinct {n.origin!r}",
    delta_form=lambda c, n: f"H: looks up only the changed tuples in {c[n.inputs[1]].inputs[0]}, emits sign flips",
    kernels=builtin_kernels("distinct_h")))

DISTINCT_NESTED = register(Operator(
    "distinct_nested", arity=2, linearity=NONLINEAR, symbol="H (2-D)", in_body_only=True,
    summary="a body distinct on 2-D deltas: inputs (Δx, I(Δx))",
    note="distinct in 2-D: touched tuples only, 4 looked-up values each",
    kernels=builtin_kernels(None, loop="distinct_nested", typed="first_type", probe="distinct_probes")))


# ---- the YAML op compiled to it (spec/ops/stream.py names this function) ---------------------

def from_distinct(c: Circuit, n: NodeSpec, cols: dict, ctx: object) -> Node:
    return c.add(make_node(n.name, "distinct", [n.input], cols[n.name], is_set=True))
