"""Translate a ``recursive`` node into a ``scope``: a body circuit with its own (inner) clock.

The body is the circuit of section 5 of the paper: outer relations enter through ``δ0``
(``delta0`` nodes), the recursion's back edges are ``z⁻¹`` on the inner clock (``feedback``
nodes), and the scope's value is the body output at the fixed point (``∫`` of its changes).

Which reference is a back edge: body nodes are put in dependency order, depth-first from the
outputs (edges closing a cycle ignored); a node reading an *earlier* body node reads it in the same iteration, a *later* one
(or itself, or the recursive node's own name) reads the previous iteration. Any such cut gives
the same fixed point; it only shifts which iteration a fact is derived in.

Body nodes that do not depend on a back edge are loop-invariant: their value is the same at
every iteration, so they are hoisted into the outer circuit (maintained by the ordinary rules)
and enter the body through ``δ0``. This keeps the per-iteration state to the recursive part.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from spark_jobs.ir.graph import Circuit, Node, make_node
from spark_jobs.spec.model import NodeSpec, dependency_order

Translate = Callable[[Circuit, NodeSpec, dict], Node]
DEFAULT_MAX_ITERATIONS = 1000


def delta0(body: Circuit, outer: Circuit, name: str) -> str:
    """The body's ``δ0`` of outer node ``name`` (one per name)."""
    if name not in body:
        src = outer[name]
        body.add(make_node(name, "delta0", out=src.columns, is_set=src.is_set, name=name))
    return name


def feedback_id(source: str) -> str:
    return f"z({source})"


def build_scope(outer: Circuit, node: NodeSpec, body_cols: dict[str, tuple[str, ...]],
                own_cols: tuple[str, ...], translate: Translate, max_iterations: int) -> Node:
    """Add the scope of recursive ``node`` (and its hoisted loop-invariant parts) to ``outer``."""
    # depth-first from the outputs: the back edge then enters the recursion where it starts (the
    # semi-naive circuit 5.1: z⁻¹ right after the relation being defined)
    first = {name: node.body[name] for name in node.outputs if name in node.body}
    order = dependency_order(first | node.body)
    position = {name: k for k, name in enumerate(order)}
    body = Circuit(f"{node.name}.body")

    def ref(reader: str, name: str) -> str:
        if name == node.name:  # the relation being defined, as of the previous iteration
            return _feedback(body, node.outputs[0], body_cols)
        if name in node.body:
            return name if position[name] < position[reader] else _feedback(body, name, body_cols)
        return delta0(body, outer, name)

    for name in order:
        spec = node.body[name]
        renamed = replace(spec, input=ref(name, spec.input) if spec.input else None,
                          inputs=tuple(ref(name, r) for r in spec.inputs),
                          left=ref(name, spec.left) if spec.left else None,
                          right=ref(name, spec.right) if spec.right else None,
                          extra={**spec.extra, "right_name": spec.right})
        translate(body, renamed, body_cols)
    body.outputs = {out: out for out in node.outputs}
    return finish_scope(outer, node.name, node.name, body, own_cols, max_iterations)


def finish_scope(outer: Circuit, node_id: str, origin: str, body: Circuit, own_cols: tuple[str, ...],
                 max_iterations: int, **params) -> Node:
    """Add the scope of a built ``body`` (its ``outputs`` set, its first output the value) to
    ``outer``: unreachable body nodes dropped, loop-invariant ones hoisted out."""
    outputs = tuple(body.outputs)
    body.prune(_back_edge_source)
    body, imports = _hoist(outer, body)
    first = body[body.outputs[outputs[0]]]
    return outer.add(make_node(node_id, "scope", imports, own_cols, origin=origin, is_set=first.is_set,
                               body=body, outputs=outputs, max_iterations=max_iterations, **params))


def _feedback(body: Circuit, source: str, body_cols: dict[str, tuple[str, ...]]) -> str:
    node_id = feedback_id(source)
    if node_id not in body:
        body.add(make_node(node_id, "feedback", out=body_cols[source], origin=source, source=source))
    return node_id


def _back_edge_source(node: Node) -> tuple[str, ...]:
    """A back edge (``feedback``) needs its source, though the source is not an input edge."""
    return (node.param("source"),) if node.op == "feedback" else ()


def _hoist(outer: Circuit, body: Circuit) -> tuple[Circuit, list[str]]:
    """Move loop-invariant body nodes to ``outer``; return the new body and its imports (ports).

    A node is loop-variant when it is a back edge or reads a loop-variant node. Every other
    non-``delta0`` node is hoisted; what the remaining body reads of them becomes a ``δ0`` import.
    """
    variant: set[str] = set()
    for n in body:
        if n.op == "feedback" or any(i in variant for i in n.inputs):
            variant.add(n.id)
    outer_id: dict[str, str] = {}  # body id -> outer id, for imports and hoisted nodes
    for n in body:
        if n.op == "delta0":
            outer_id[n.id] = n.param("name")
        elif n.id not in variant:
            new_id = outer.fresh_id(n.id)
            outer.add(n.with_(id=new_id, inputs=tuple(outer_id[i] for i in n.inputs)))
            outer_id[n.id] = new_id
    imports: list[str] = []
    result = Circuit(body.name)

    def port(body_id: str) -> str:
        """The δ0 node through which the body reads outer value ``outer_id[body_id]``."""
        name = outer_id[body_id]
        if name not in imports:
            imports.append(name)
            src = outer[name]
            result.add(make_node(f"δ0({name})", "delta0", out=src.columns, is_set=src.is_set,
                                 origin=name, port=imports.index(name), name=name))
        return f"δ0({name})"

    for n in body:
        if n.id not in variant:
            continue
        inputs = tuple(i if i in variant else port(i) for i in n.inputs)
        params = n.params
        if n.op == "feedback" and n.param("source") not in variant:
            params = tuple((k, port(v) if k == "source" else v) for k, v in params)
        result.add(n.with_(inputs=inputs, params=params))
    result.outputs = {view: nid if nid in variant else port(nid) for view, nid in body.outputs.items()}
    result.inputs = {name: outer[name].columns for name in imports}
    return result, imports
