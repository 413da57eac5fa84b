"""The relational while loop of section 7.6 of the paper: ``x := init; while x changes: x := Q(x)``.

``iterate`` (inputs: ``init``, then the outer relations its body reads; params: body, a query
Circuit whose ``input`` nodes are the loop variable (``loop``) and those outer relations
(``imports``, in the order of inputs[1:]); output, the body node whose value is the next
iteration; max_iterations). Its value is that of the paper's while loop: apply the body to the
previous iteration's value, starting from ``init``, until an iteration changes nothing; a loop
that still changes after ``max_iterations`` applications fails the step.

Unlike ``scope`` (a least fixed point of a monotone body, semi-naive on 2-D deltas), the body may
hold any operator: aggregates, distinct, antijoins and differences of the loop, top-k, maps
computing new values. Its incremental form here is the one every operator has (Algorithm 4.6
applied to a non-incremental operator, ``Q^Δ = D ∘ Q ∘ I``): at each timestep the loop runs from
``init`` over the integrated inputs and the step emits its value minus the previous one. That is
correct for insertions and deletions alike; its cost is that of the loop on the whole inputs, not
of the change. State: the integrals of the inputs (shared with any other reader) and the loop's
previous value (``D``).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from spark_jobs.ir.builder import Builder
from spark_jobs.ir.graph import Circuit, Node, make_node
from spark_jobs.ir.operator import NONLINEAR, Operator, register
from spark_jobs.spec.model import NodeSpec, dependency_order

KERNELS = "spark_jobs.executor.kernels.iterate"


def rule_iterate(b: Builder, node: Node, deltas: list[str]) -> str:
    """``D(iterate(I Δinit, I Δimports...))``: the loop over the integrated inputs, differentiated."""
    integrals = tuple(b.integral(d) for d in deltas)
    loop = b.add(node.with_(inputs=integrals))
    return b.add(make_node(f"D({node.id})", "differentiate", [loop], node.columns, origin=node.origin))


def _uses(circuit: Circuit, node: Node, position: int) -> str:
    what = "the start" if position == 0 else "a relation its body reads"
    return f"iterate {node.origin!r} ({what}: the loop reruns over the whole input)"


def _delta_form(circuit: Circuit, node: Node) -> str:
    return ("the while loop reruns from init over the integrated inputs each timestep (not incremental "
            "yet: its work follows the inputs, not the change); D then emits the change of its value; "
            "state: the inputs' integrals and the loop's previous value")


ITERATE = register(Operator(
    "iterate", arity=None, linearity=NONLINEAR, symbol="while", consolidated=True,
    summary="the relational while loop (section 7.6): x := init; x := body(x) until it stops changing",
    incremental=rule_iterate, uses=_uses, delta_form=_delta_form,
    kernels={"spark": f"{KERNELS}:spark", "arrow": f"{KERNELS}:arrow"}))


# ---- the YAML op compiled to it (spec/ops/iterate.py names this function) ---------------------

def from_iterate(c: Circuit, n: NodeSpec, cols: dict, ctx: Any) -> Node:
    """The body as its own query circuit: the loop variable and the outer relations it reads are
    its ``input`` nodes; its nodes are translated as any node is (``Translation.body``)."""
    from spark_jobs.ir.optimize import consolidate_distinct
    from spark_jobs.spec.columns import body_columns

    own = tuple(cols[n.name])
    inner = {**cols, **body_columns(ctx.spec, n.name), n.name: own}
    body = Circuit(f"{n.name}.body", inputs={n.name: own})
    body.add(make_node(n.name, "input", out=own, name=n.name))
    imports: list[str] = []

    def ref(name: str | None) -> str | None:
        if name is None or name == n.name or name in n.body:
            return name
        if name not in imports:
            imports.append(name)
            body.inputs[name] = tuple(c[name].columns)
            body.add(make_node(name, "input", out=c[name].columns, is_set=c[name].is_set, name=name))
        return name

    for name in dependency_order(n.body):
        spec = n.body[name]
        for r in spec.references:
            ref(r)
        ctx.body(body, replace(spec, input=ref(spec.input)), inner)
    output = n.outputs[0]
    body.outputs = {"value": output}
    body = consolidate_distinct(body)
    return c.add(make_node(n.name, "iterate", [n.input, *imports], own, body=body, loop=n.name,
                           imports=tuple(imports), output=output, max_iterations=ctx.max_iterations))
