"""The set operators of Table 1 of the paper: ``union`` (distinct), ``union_all`` (Z-set sum),
``difference`` and ``intersect``; their inputs have the same columns. Compiled to plus, negate,
join and distinct (``ir/ops/sets.py``; ``union_all`` to the IR's ``plus``, ``ir/ops/linear.py``)."""
from __future__ import annotations

from typing import Any

from ..columns import Issue, Lookup
from ..errors import listing
from ..model import NodeSpec
from ..node_ops import REF, Loading, NodeOp, register

MANY = {
    "inputs": {"type": "array", "title": "a list of two or more input/node names", "minItems": 2, "items": REF},
    "left": REF, "right": REF,
}
TWO = {"left": REF, "right": REF}


def load_many(raw: dict, loading: Loading) -> dict[str, Any]:
    """``left`` + ``right`` are another spelling of ``inputs: [left, right]``."""
    inputs, left, right = raw.get("inputs"), raw.get("left"), raw.get("right")
    if (not isinstance(inputs, list) or not any(isinstance(i, str) for i in inputs)) \
            and isinstance(left, str) and left and isinstance(right, str) and right:
        loading.lines.update({"inputs.0": loading.lines["left"], "inputs.1": loading.lines["right"]})
        return {"inputs": (left, right), "left": None, "right": None}
    return {}


def columns(node: NodeSpec, lookup: Lookup, known: tuple[str, ...]) -> tuple[tuple[str, ...] | None, list[Issue]]:
    """Every input must have the same set of column names; the output has the first's order."""
    refs = node.inputs or tuple(r for r in (node.left, node.right) if r)
    found = [(r, lookup(r)) for r in refs]
    first = next((c for _, c in found if c is not None), None)
    if any(c is None for _, c in found) or not found:
        return first, []  # unknown inputs: best guess, no check
    (ref0, cols0) = found[0]
    assert cols0 is not None
    issues = [Issue("inputs" if node.inputs else "right",
                    f"{node.op} needs inputs with the same columns: '{ref0}' has ({listing(cols0)}), "
                    f"'{r}' has ({listing(c)})")
              for r, c in found[1:] if c is not None and set(c) != set(cols0)]
    return cols0, issues


def types(typer: Any, label: str, node: NodeSpec, scope: dict) -> dict | None:
    """The first input's types."""
    sources = [scope.get(i) for i in node.inputs] if node.inputs else [scope.get(node.left), scope.get(node.right)]
    return sources[0] if sources and sources[0] is not None else None


def checks_many(node: NodeSpec) -> list[tuple[str, str]]:
    """``inputs`` or ``left`` + ``right``, not both."""
    present = set(node.field_lines)
    sides = present & {"left", "right"}
    if "inputs" in present and sides:
        return [("inputs", "give either 'inputs: [a, b, ...]' or 'left' + 'right', not both")]
    if "inputs" not in present and sides != {"left", "right"}:
        return [("", f"{node.op} needs 'inputs: [a, b, ...]' (two or more) or 'left' + 'right'")]
    return []


def _first(node: NodeSpec, column: str) -> tuple[str | None, str]:
    return node.input or (node.inputs[0] if node.inputs else None), column


UNION = register(NodeOp(
    "union", 150, "Set union (distinct): {inputs: [a, b, ...]} or {left, right}.", MANY, columns,
    "spark_jobs.ir.ops.sets:from_union", load=load_many, types=types, checks=checks_many, recursion="monotone"))
UNION_ALL = register(NodeOp(
    "union_all", 160, "Bag union (Z-set sum): {inputs: [a, b, ...]} or {left, right}.", MANY, columns,
    "spark_jobs.ir.ops.linear:from_union_all", load=load_many, types=types, checks=checks_many, origin=_first,
    inserts=lambda n: n.references, recursion="monotone"))
DIFFERENCE = register(NodeOp(
    "difference", 130, "Set difference left - right: {left, right}.", TWO, columns,
    "spark_jobs.ir.ops.sets:from_difference", required=("left", "right"), types=types,
    recursion="negation", negated="right"))
INTERSECT = register(NodeOp(
    "intersect", 140, "Set intersection: {left, right}.", TWO, columns, "spark_jobs.ir.ops.sets:from_intersect",
    required=("left", "right"), types=types, recursion="monotone"))
