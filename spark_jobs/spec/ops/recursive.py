"""``recursive``: a fixed point over a sub-circuit, ``{body: {nodes}, outputs: [body node names]}``
(section 6 of the paper). Its body's columns are resolved by ``columns._resolve_scope``; it is
compiled by ``ir/scope.build_scope`` (``ir/ops/recursion.py``)."""
from __future__ import annotations

from typing import Any

from ..columns import Issue, Lookup
from ..errors import did_you_mean, listing
from ..model import NodeSpec
from ..node_ops import IDENTIFIER, Loading, NodeOp, register

FIELDS = {
    "body": {"type": "object", "minProperties": 1,
             "title": "a mapping of node name -> node (the sub-circuit iterated to a fixed point)",
             "propertyNames": {"pattern": IDENTIFIER, "title": "a node name (an identifier; at most 128 characters)",
                               "maxLength": 128},
             "additionalProperties": {"$ref": "#/$defs/node"}},
    "outputs": {"type": ["string", "array"], "minItems": 1, "pattern": IDENTIFIER,
                "title": "a body node name or a list of them",
                "items": {"type": "string", "pattern": IDENTIFIER, "title": "a body node name", "maxLength": 128},
                "maxLength": 128},
}


def load(raw: dict, loading: Loading) -> dict[str, Any]:
    """The body's nodes (loaded as any node is) and the outputs; the raw body is kept in ``extra``."""
    raw_body, raw_outputs = raw.get("body"), raw.get("outputs")
    body = {k: loading.build(k, v, loading.path + ("body", k)) for k, v in raw_body.items()} \
        if isinstance(raw_body, dict) else {}
    outputs = (raw_outputs,) if isinstance(raw_outputs, str) else \
        tuple(o for o in raw_outputs if isinstance(o, str)) if isinstance(raw_outputs, list) else ()
    return {"body": body, "outputs": outputs, "extra": {"body": raw_body, "outputs": raw_outputs}}


def columns(node: NodeSpec, lookup: Lookup, known: tuple[str, ...]) -> tuple[tuple[str, ...] | None, list[Issue]]:
    return None, []  # resolved with its scope (``columns._resolve_scope``)


def types(typer: Any, label: str, node: NodeSpec, scope: dict) -> dict | None:
    """Its body is typed in a scope of its own; the loop's value is not typed (accepted)."""
    inner = dict(scope)
    inner[label.rsplit(".", 1)[-1]] = None
    typer.nodes(node.body, label + ".", inner)
    return None


def checks(node: NodeSpec) -> list[tuple[str, str]]:
    return [("outputs", f"output '{out}' is not a node of its body (body nodes: {listing(node.body)})"
                        f"{did_you_mean(out, node.body)}")
            for out in node.outputs if out not in node.body]


RECURSIVE = register(NodeOp(
    "recursive", 170, "A fixed point over a sub-circuit: {body: {nodes}, outputs: [body node names]}.", FIELDS,
    columns, "spark_jobs.ir.ops.recursion:from_recursive", required=("body", "outputs"), load=load, types=types,
    checks=checks, scope=True))
