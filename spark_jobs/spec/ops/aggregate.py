"""``aggregate``: group and aggregate, ``{input, group_by: [cols], aggregates: {out: "sum(x)"}}``,
optionally per time ``window``. Compiled to a window assignment (with a window) and the IR's
``aggregate`` (``ir/ops/aggregate.py``)."""
from __future__ import annotations

from typing import Any, Iterator

from ..columns import Issue, Lookup, missing, reserved
from ..errors import did_you_mean, listing
from ..expressions import ExpressionError, parse_aggregate
from ..model import NodeSpec
from ..node_ops import COLUMN_KEY, DURATION, REF, Loading, NodeOp, column_list, register
from ..sites import ExpressionSite
from ..time import WINDOW_COLUMNS, window_of
from ..typecheck import ANY, TIMESTAMP, TypeProblem, aggregate_type

FIELDS = {
    "input": REF,
    "group_by": column_list("a list of column names", 0),
    "aggregates": {
        "type": "object", "minProperties": 1, "title": "a mapping of output column -> aggregate such as \"sum(amount)\"",
        "propertyNames": COLUMN_KEY,
        "additionalProperties": {
            "type": "string", "minLength": 1,
            "title": "an aggregate string: count(*), count(distinct x), sum(x), avg(x), min(x) or max(x)",
            "examples": ["count(*)", "sum(amount)", "count(distinct customer_id)"]}},
    "window": {
        "type": "object",
        "title": "a time window {column: ts, size: \"1 hour\", slide: \"15 minutes\"} (tumbling without slide)",
        "required": ["column", "size"], "additionalProperties": False,
        "properties": {"column": {"type": "string", "minLength": 1, "title": "a timestamp column of the input"},
                       "size": DURATION, "slide": DURATION}},
}


def load(raw: dict, loading: Loading) -> dict[str, Any]:
    """Each aggregate string parsed (``expressions.parse_aggregate``); the window's fields."""
    found = []
    aggregates = raw.get("aggregates")
    for out, text in aggregates.items() if isinstance(aggregates, dict) else ():
        if not isinstance(text, str):
            continue
        try:
            found.append(parse_aggregate(out, text))
        except ExpressionError as exc:
            loading.problem(f"aggregates.{out}", f"aggregate '{out}': {exc}")
    return {"aggregates": tuple(found), "window": window_of(raw.get("window"))}


def columns(node: NodeSpec, lookup: Lookup,
            known: tuple[str, ...]) -> tuple[tuple[str, ...] | None, list[Issue]]:
    """The ``group_by`` columns, then the aggregate names (a window's two columns first)."""
    src = lookup(node.input or "")
    issues = [] if src is None else missing(node.group_by, src, "group_by", f"input '{node.input}'")
    agg_names = tuple(a.name for a in node.aggregates)
    issues += reserved(agg_names, "aggregates")
    issues += [Issue(f"aggregates.{n}", f"output column '{n}' is produced twice (group_by columns "
                                        f"and aggregate names must all differ)")
               for i, n in enumerate(agg_names) if n in node.group_by + agg_names[:i]]
    names = node.group_by + agg_names
    if "window" in node.field_lines:
        issues += window_issues(node, src, names)
        names = WINDOW_COLUMNS + names
    return names, issues


def window_issues(node: NodeSpec, src: tuple[str, ...] | None, names: tuple[str, ...],
                  named: str | None = None) -> list[Issue]:
    """A window's column must be an input column; its output columns must be free names
    (``names``: the node's own output names; ``named``: the field they come from, else the
    aggregate's). Shared by ``topk.window``."""
    issues = []
    window = node.window
    if src is not None and window is not None and window.column not in src:
        issues.append(Issue("window.column", f"window column '{window.column}' is not a column of input "
                                             f"'{node.input}' (columns: {listing(src)})"
                                             f"{did_you_mean(window.column, src)}"))
    for name in WINDOW_COLUMNS:
        if src is not None and name in src:
            issues.append(Issue("window", f"input '{node.input}' already has a column '{name}', which a window "
                                          f"adds: rename it with a select first"))
        elif name in names:
            where = named or ("group_by" if name in node.group_by else f"aggregates.{name}")
            issues.append(Issue(where, f"'{name}' is a column the window adds: choose another name"))
    return issues


def types(typer: Any, label: str, node: NodeSpec, scope: dict) -> dict | None:
    src = scope.get(node.input) if node.input else None
    if src is None:
        return None
    out: dict = {}
    if node.window is not None:
        out.update(window_start=TIMESTAMP, window_end=TIMESTAMP)
    lower = {c.lower(): t for c, t in src.items()}
    for g in node.group_by:
        out[g] = lower.get(g.lower(), ANY)
    for agg in node.aggregates:
        line = node.line_of(f"aggregates.{agg.name}")
        arg = typer.expr(label, line, f"aggregate '{agg.name}'", agg.arg, src) if agg.arg else None
        try:
            out[agg.name] = aggregate_type(agg.func, arg, agg.text)
        except TypeProblem as exc:
            typer.problem(label, line, f"aggregate '{agg.name}'", str(exc))
            out[agg.name] = ANY
    return out


def sites(label: str, node: NodeSpec, lookup: Lookup | None = None,
          known: tuple[str, ...] = ()) -> Iterator[ExpressionSite]:
    for agg in node.aggregates:
        if agg.arg:
            yield ExpressionSite(label, node.line_of(f"aggregates.{agg.name}"), f"aggregate '{agg.name}'",
                                 agg.arg, node.input or "", "node")


AGGREGATE = register(NodeOp(
    "aggregate", 50, "Group and aggregate: {input, group_by: [cols], aggregates: {out: \"sum(x)\"}}; with window: "
    "{column: ts, size: \"1 hour\", slide: \"15 minutes\"} per time window (output window_start, window_end first).",
    FIELDS, columns, "spark_jobs.ir.ops.aggregate:from_aggregate", required=("input", "aggregates"), load=load,
    types=types, sites=sites, recursion="aggregation"))
