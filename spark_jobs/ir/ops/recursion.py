"""Recursion (sections 5-6 of the paper): a scope with its own clock, and its body's operators.

``scope`` (inputs: the outer relations its body reads; params: body, a Circuit; outputs, body
node names, the first is the value; max_iterations; incremental, True in Q^Δ): the least fixed
point of the body, by semi-naive iteration over an inner clock. In Q^Δ (equation 6.1) the body
runs on 2-D deltas (timestep × iteration): see ``incrementalize_body``.

Body-only operators: ``delta0`` (params: port, an index into the scope's inputs; name, the
outer node) is δ0, the outer value entering at iteration 0; ``feedback`` (param: source, a body
node) is z⁻¹ on the inner clock, the recursion's back edge; ``integrate_nested`` (param: keys)
is the per-iteration trace of a stream: for each iteration i, the sum over earlier timesteps of
the stream's 2-D delta at i (rows tagged ``_iter = i``).
"""
from __future__ import annotations

from typing import Any

from spark_jobs.ir.builder import Builder
from spark_jobs.ir.graph import Circuit, Node, state_of
from spark_jobs.ir.incrementalize import incrementalize_body
from spark_jobs.ir.operator import LINEAR, NONLINEAR, STREAM, Operator, State, builtin_kernels, register
from spark_jobs.ir.ops.linear import nested_as_is
from spark_jobs.spec.model import NodeSpec


def rule_scope(b: Builder, node: Node, deltas: list[str]) -> str:
    """Equation (6.1): the scope on the outer deltas, its body incremental in both clocks."""
    params = tuple((k, incrementalize_body(v) if k == "body" else v) for k, v in node.params)
    return b.add(node.with_(inputs=tuple(deltas), params=params + (("incremental", True),)))


def _scope_state(circuit: Circuit, node: Node) -> str:
    traces = [n.id for n in node.body if n.op == "integrate_nested"]
    return f"{len(traces)} per-iteration trace(s) and the fixed point's depth"


SCOPE = register(Operator(
    "scope", arity=None, linearity=NONLINEAR, symbol="fix (recursive scope)", consolidated=True,
    summary="the least fixed point of a body circuit (a recursive node)",
    state=State(_scope_state), keeps_state=lambda c, n: bool(n.param("incremental")),
    delta_form=lambda c, n: (f"the fixed point on 2-D changes (timestep × iteration, section 6): "
                             f"{state_of(c, n)}; see 'Recursive scope {n.id!r}' above"),
    incremental=rule_scope, kernels=builtin_kernels("scope")))

DELTA0 = register(Operator(
    "delta0", arity=0, linearity=LINEAR, symbol="δ0", in_body_only=True, nested=nested_as_is,
    summary="δ0: an outer relation entering the inner clock at iteration 0",
    note="δ0: the outer value enters at iteration 0", kernels=builtin_kernels(None, loop="delta0")))

FEEDBACK = register(Operator(
    "feedback", arity=0, linearity=LINEAR, symbol="z⁻¹ (iteration)", in_body_only=True, nested=nested_as_is,
    summary="z⁻¹ on the inner clock: the back edge of the recursion",
    note="z⁻¹ on the inner clock: reads iteration i-1 of {source!r}", kernels=builtin_kernels(None, loop="feedback")))

INTEGRATE_NESTED = register(Operator(
    "integrate_nested", arity=1, linearity=STREAM, symbol="I (per iteration)", in_body_only=True,
    summary="the per-iteration trace of a body stream",
    state=State("per-iteration trace (rows tagged with their iteration, summed over timesteps)"),
    note="state: one trace, rows tagged _iter = i, summed over timesteps"))


# ---- the YAML op compiled to a scope (spec/ops/recursive.py names this function) -------------

def from_recursive(c: Circuit, n: NodeSpec, cols: dict, ctx: Any) -> Node:
    """A nested scope (``ir/scope.build_scope``) whose body nodes are translated as any node is."""
    from spark_jobs.ir.scope import build_scope
    from spark_jobs.spec.columns import body_columns

    return build_scope(c, n, body_columns(ctx.spec, n.name), cols[n.name], ctx.body, ctx.max_iterations)
