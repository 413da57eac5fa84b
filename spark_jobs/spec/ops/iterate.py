"""``iterate``: the paper's relational while loop (section 7.6), ``{init, body: {nodes}, outputs:
[body node]}``: ``x := init; while x changes: x := body(x)``.

Unlike ``recursive`` (a least fixed point of a monotone body), the body may hold any operator
of the engine, aggregates and negation of the loop included: its value is defined by iterating,
not by monotonicity. The body reads the previous iteration by the node's own name; body nodes
read each other in the same iteration (so the body is acyclic). ``init`` is stored as the node's
``input``. Columns: the loop's value has ``init``'s columns; the output must have the same
ones (``columns._resolve_scope``). Compiled by ``ir/ops/iterate.py``.
"""
from __future__ import annotations

from typing import Any

from ..errors import did_you_mean, listing
from ..model import NodeSpec
from ..node_ops import REF, Loading, NodeOp, register
from .recursive import FIELDS as RECURSIVE_FIELDS
from .recursive import columns, load as load_body

FIELDS = {
    "init": {**REF, "title": "the input or node the loop starts from (x := init)"},
    "body": {**RECURSIVE_FIELDS["body"],
             "title": "a mapping of node name -> node: one iteration, reading the previous one by the "
                      "loop node's own name"},
    "outputs": {**RECURSIVE_FIELDS["outputs"], "title": "the body node whose value is the next iteration"},
}


def load(raw: dict, loading: Loading) -> dict[str, Any]:
    """The body and outputs as a recursive node's; ``init`` becomes the node's ``input``."""
    fields = dict(load_body(raw, loading))
    init = raw.get("init")
    fields["input"] = init if isinstance(init, str) else None
    if "init" in loading.lines:
        loading.lines["input"] = loading.lines["init"]
    return fields


def types(typer: Any, label: str, node: NodeSpec, scope: dict) -> dict | None:
    """The body is typed with the loop variable typed as ``init``; the value has the output's types."""
    inner = dict(scope)
    name = label.rsplit(".", 1)[-1]
    inner[name] = scope.get(node.input) if node.input else None
    typer.nodes(node.body, label + ".", inner)
    out = node.outputs[0] if node.outputs else None
    return inner.get(out) if out in node.body else None


def checks(node: NodeSpec) -> list[tuple[str, str]]:
    problems = [("outputs", f"output '{out}' is not a node of its body (body nodes: {listing(node.body)})"
                            f"{did_you_mean(out, node.body)}")
                for out in node.outputs if out not in node.body]
    if len(node.outputs) > 1:
        problems.append(("outputs", f"an iterate node has one output, the body node whose value is the next "
                                    f"iteration; got {len(node.outputs)} ({listing(node.outputs)})"))
    cycle = _body_cycle(node)
    if cycle:
        problems.append(("body", f"body cycle {' -> '.join(cycle)}: inside an iterate body, nodes read each "
                                 f"other in the same iteration; read the previous iteration by the loop's "
                                 f"name '{node.name}'"))
    return problems


def _body_cycle(node: NodeSpec) -> list[str]:
    """A cycle among the body nodes (the previous iteration is read only by the node's name)."""
    refs = {name: [r for r in b.references if r in node.body] for name, b in node.body.items()}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(name: str) -> list[str]:
        state[name] = 1
        path.append(name)
        for r in refs[name]:
            if state.get(r) == 1:
                return path[path.index(r):] + [r]
            if r not in state and (found := visit(r)):
                return found
        state[name] = 2
        path.pop()
        return []

    for name in node.body:
        if name not in state and (found := visit(name)):
            return found
    return []


ITERATE = register(NodeOp(
    "iterate", 175, "The relational while loop: {init, body: {nodes}, outputs: [body node]}; "
                    "x := init, then x := body(x) until an iteration changes nothing.", FIELDS,
    columns, "spark_jobs.ir.ops.iterate:from_iterate", required=("init", "body", "outputs"), load=load,
    types=types, checks=checks, scope=True, while_loop=True))
