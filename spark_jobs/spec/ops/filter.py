"""``filter``: the rows where a Spark SQL predicate holds, ``{input, where}``. Compiled to the
IR's linear ``filter`` (``ir/ops/linear.py``)."""
from __future__ import annotations

from typing import Any, Iterator

from ..columns import Issue, Lookup
from ..model import NodeSpec
from ..node_ops import REF, NodeOp, register
from ..sites import ExpressionSite


def columns(node: NodeSpec, lookup: Lookup,
            known: tuple[str, ...]) -> tuple[tuple[str, ...] | None, list[Issue]]:
    """The input's columns."""
    return lookup(node.input or ""), []


def types(typer: Any, label: str, node: NodeSpec, scope: dict) -> dict | None:
    """The input's types; ``where`` must be a boolean."""
    src = scope.get(node.input) if node.input else None
    t = typer.expr(label, node.line_of("where"), "where", node.where or "true", src)
    if (t.known and not t.is_("boolean")) or t.is_("null"):  # Spark: a VOID filter is not a boolean either
        typer.problem(label, node.line_of("where"), "where",
                      f"'{node.where}' is {t}, not a boolean: a filter keeps the rows where it is true")
    return src


def sites(label: str, node: NodeSpec, lookup: Lookup | None = None,
          known: tuple[str, ...] = ()) -> Iterator[ExpressionSite]:
    if node.where is not None:
        yield ExpressionSite(label, node.line_of("where"), "where", node.where, node.input or "", "node")


FILTER = register(NodeOp(
    "filter", 30, "Keep rows where a Spark SQL predicate holds: {input, where}.",
    {"input": REF, "where": {"type": "string", "minLength": 1, "title": "a Spark SQL boolean expression (a string)"}},
    columns, "spark_jobs.ir.ops.linear:from_filter", required=("input", "where"), types=types, sites=sites,
    origin=lambda n, c: (n.input, c), inserts=lambda n: n.references, recursion="monotone"))
