"""``select`` (and its synonym ``map``): computed columns, ``{input, columns: {out: expr}}`` or
``{input, columns: [names]}``. Compiled to the IR's linear ``map`` (``ir/ops/linear.py``)."""
from __future__ import annotations

from typing import Any, Iterator

from ..columns import Issue, Lookup, reserved
from ..model import NodeSpec
from ..node_ops import COLUMN_KEY, REF, Loading, NodeOp, register
from ..sites import ExpressionSite

FIELDS = {
    "input": REF,
    "columns": {
        "type": ["object", "array"], "minProperties": 1, "minItems": 1,
        "title": "a mapping of output column -> Spark SQL expression, or a list of column names",
        "propertyNames": COLUMN_KEY,
        "additionalProperties": {"type": "string", "minLength": 1, "title": "a Spark SQL expression (a string)"},
        "items": {"type": "string", "minLength": 1, "title": "a column name"}},
}


def load(raw: dict, loading: Loading) -> dict[str, Any]:
    """``columns`` as (output name, expression) pairs; a list of names is name -> name."""
    columns = raw.get("columns")
    if isinstance(columns, dict):
        return {"columns": tuple((k, v) for k, v in columns.items() if isinstance(v, str))}
    names = columns if isinstance(columns, list) else []
    return {"columns": tuple((c, c) for c in names if isinstance(c, str))}


def columns(node: NodeSpec, lookup: Lookup,
            known: tuple[str, ...]) -> tuple[tuple[str, ...] | None, list[Issue]]:
    """The keys of ``columns``, in the order written; each name once."""
    names = tuple(n for n, _ in node.columns)
    issues = reserved(names, "columns")
    issues += [Issue(f"columns.{i}", f"column '{n}' is listed twice in 'columns'")
               for i, n in enumerate(names) if n in names[:i]]
    return names, issues


def _key(node: NodeSpec, i: int, name: str) -> str:
    return f"columns.{name}" if f"columns.{name}" in node.field_lines else f"columns.{i}"


def types(typer: Any, label: str, node: NodeSpec, scope: dict) -> dict | None:
    src = scope.get(node.input) if node.input else None
    return {name: typer.expr(label, node.line_of(_key(node, i, name)), f"column '{name}'", expr, src)
            for i, (name, expr) in enumerate(node.columns)}


def sites(label: str, node: NodeSpec, lookup: Lookup | None = None,
          known: tuple[str, ...] = ()) -> Iterator[ExpressionSite]:
    for i, (name, expr) in enumerate(node.columns):
        yield ExpressionSite(label, node.line_of(_key(node, i, name)), f"column '{name}'", expr, node.input or "", "node")


def origin(node: NodeSpec, column: str) -> tuple[str | None, str] | None:
    """A column that selects a plain input column is that column."""
    expr = dict(node.columns).get(column)
    if expr is None:
        return None
    column = expr.strip().strip("`")
    return (node.input, column) if column.replace("_", "").isalnum() else None


def _common(name: str, position: int, help: str) -> NodeOp:
    return NodeOp(name, position, help, FIELDS, columns, "spark_jobs.ir.ops.linear:from_select",
                  required=("input", "columns"), load=load, types=types, sites=sites, origin=origin,
                  inserts=lambda n: n.references, recursion="monotone")


SELECT = register(_common("select", 10, "Compute columns: {input, columns: {out: expr, ...}} or {input, columns: [names]}."))
MAP = register(_common("map", 20, "Synonym of select."))
