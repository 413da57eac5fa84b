"""Checks of the event-time fields of a circuit: ``inputs.<n>.time``, ``aggregate.window``,
``join.within``, ``join.stream`` and ``settings.retention`` (their shapes are the JSON Schema's).

What is checked here: durations (``time.py``), that time columns exist and are timestamps
(traced back to the input that declares them where a column passes through unchanged), that
event time is declared on inputs whose rows can be judged late one by one, and that the stream
side of a stream join only ever inserts.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from .columns import Resolution
from .errors import Problem, listing
from .model import CircuitSpec, Column, NodeSpec
from .node_ops import node_op
from .time import TIMESTAMP_TYPES, retention_settings, time_field_problems

if TYPE_CHECKING:
    from .loader import Document

# sources whose rows are events: each row is judged late or not by its own time
TIMED_SOURCES = ("changes", "append_only")


def time_problems(spec: CircuitSpec, doc: "Document", broken: frozenset[str], res: Resolution) -> list[Problem]:
    """Every problem of the event-time fields (nodes in ``broken`` are skipped)."""
    problems = list(_retention(spec, doc)) + list(_inputs(spec, doc))
    for name, node in spec.nodes.items():
        if name in broken:
            continue
        problems += _node(spec, doc, name, node, res)
        for inner, body_node in node.body.items():
            for key in ("window", "within", "stream"):
                if key in body_node.field_lines:
                    problems.append(Problem(spec.path, body_node.line_of(key), f"{name}.{inner}",
                                            f"'{key}' is not supported inside a recursive body"))
    return problems


def _retention(spec: CircuitSpec, doc: "Document") -> Iterator[Problem]:
    _, found = retention_settings(spec.settings.get("retention"))
    for key, message in found:
        yield Problem(spec.path, doc.line(("settings", "retention", key)), None, message)


def _inputs(spec: CircuitSpec, doc: "Document") -> Iterator[Problem]:
    for name, inp in spec.inputs.items():
        raw = doc.get(("inputs", name, "time"))
        if not isinstance(raw, dict):
            continue
        at = ("inputs", name, "time")
        for key, message in time_field_problems("time", raw):
            yield Problem(spec.path, doc.line(at + (key,)), name, message)
        column = raw.get("column")
        declared = {c.name: c for c in inp.columns}
        if isinstance(column, str) and column not in declared:
            yield Problem(spec.path, doc.line(at + ("column",)), name,
                          f"time.column '{column}' is not a column of the input (columns: {listing(declared)})")
        elif isinstance(column, str) and (why := _not_timestamp(declared[column])):
            yield Problem(spec.path, doc.line(at + ("column",)), name, f"time.column {why}")
        kind = inp.source.kind if inp.source is not None else None
        if kind is not None and kind not in TIMED_SOURCES:
            yield Problem(spec.path, doc.line(at), name,
                          f"event time needs a source whose rows are events ({listing(TIMED_SOURCES)}); a "
                          f"{kind} source derives changes whose rows are not judged late one by one")


def _not_timestamp(col: Column) -> str | None:
    if col.type.strip().lower() in TIMESTAMP_TYPES:
        return None
    return f"'{col.name}' has type {col.type}; event time needs a timestamp column ({listing(TIMESTAMP_TYPES)})"


def _node(spec: CircuitSpec, doc: "Document", name: str, node: NodeSpec, res: Resolution) -> list[Problem]:
    problems: list[Problem] = []
    path = ("nodes", name)
    for key in ("window", "within"):
        for field, message in time_field_problems(key, doc.get(path + (key,))):
            problems.append(Problem(spec.path, node.line_of(f"{key}.{field}"), name, message))
    if node.window is not None:
        if (why := traced_type(spec, node.input, node.window.column)):
            problems.append(Problem(spec.path, node.line_of("window.column"), name, f"window column {why}"))
    op = node_op(node.op)
    if op is not None and op.time_checks is not None:  # an op's own time fields (spec/ops/<op>.py)
        problems += op.time_checks(spec, name, node, res)
    return problems


def origin_column(spec: CircuitSpec, ref: str | None, column: str) -> tuple[str, Column] | None:
    """The input column that ``ref``'s ``column`` is, unchanged (through the ops whose rows pass
    through: their ``origin`` hook, e.g. filters, distinct, selects of a plain column and the first
    input of a union_all); None when it is computed or unknown."""
    seen = 0
    while ref is not None and seen < 1000:
        seen += 1
        if ref in spec.inputs:
            col = next((c for c in spec.inputs[ref].columns if c.name == column), None)
            return (ref, col) if col is not None else None
        node = spec.nodes.get(ref)
        op = node_op(node.op) if node is not None else None
        if node is None or op is None or op.origin is None:
            return None
        found = op.origin(node, column)
        if found is None:
            return None
        ref, column = found
    return None


def sql_window_columns(spec: CircuitSpec, name: str, node: NodeSpec, res: Resolution) -> list[Problem]:
    """``GROUP BY window(ts, ...)`` in an sql node: ``ts`` must be a timestamp, when it traces back
    to an input column (as ``aggregate.window.column`` must)."""
    from .sql import SqlError, plan as P
    from .sql.node import bind_node, where

    try:
        rel = bind_node(node.sql, res.columns.get, tuple(res.columns))
    except SqlError:
        return []  # the query's own problem is reported by the column checks
    problems = []
    for r in P.walk(rel):
        if isinstance(r, P.WindowAssign):
            found = _plan_origin(spec, r.input, r.column)
            if found is not None and (why := _not_timestamp(found[1])):
                key, prefix = where(SqlError("", r.at))
                problems.append(Problem(spec.path, node.line_of(key), name, f"{prefix}the time of window(...): {why}"))
    return problems


def _plan_origin(spec: CircuitSpec, rel: object, column: str) -> tuple[str, Column] | None:
    """The input column a SQL plan's ``column`` is, unchanged (through filters, plain-column
    projections and joins); None when it is computed."""
    from .sql import plan as P

    for _ in range(1000):
        if isinstance(rel, (P.Filter, P.Distinct)):
            rel = rel.input
        elif isinstance(rel, P.Map):
            expr = dict(rel.exprs).get(column, "")
            inner = expr[1:-1]
            if not (len(expr) > 2 and expr[0] == expr[-1] == "`" and "`" not in inner.replace("``", "")):
                return None
            rel, column = rel.input, inner.replace("``", "`")
        elif isinstance(rel, P.Join):
            left, right = dict((o, s) for s, o in rel.left_out), dict((o, s) for s, o in rel.right_out)
            if column in left:
                rel, column = rel.left, left[column]
            elif column in right:
                rel, column = rel.right, right[column]
            else:
                return None
        elif isinstance(rel, P.Table):
            return origin_column(spec, rel.name, column)
        else:
            return None
    return None


def traced_type(spec: CircuitSpec, ref: str | None, column: str) -> str | None:
    """Why ``column`` of ``ref`` cannot be a time column, when its input's type is known."""
    found = origin_column(spec, ref, column)
    return _not_timestamp(found[1]) if found is not None else None


def not_append_only(spec: CircuitSpec, ref: str) -> str | None:
    """Why ``ref``'s rows may be deleted (None: they come from append_only inputs through
    filters, selects, union_all and the stream side of stream joins)."""
    stack, seen = [ref], set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in spec.inputs:
            src = spec.inputs[name].source
            if src is None or src.kind != "append_only":
                kind = src.kind if src is not None else "no"
                return f"input '{name}' has a {kind} source (declare it source.kind: append_only)"
            continue
        node = spec.nodes.get(name)
        if node is None:
            return None  # unknown references are reported elsewhere
        op = node_op(node.op)
        sources = op.inserts(node) if op is not None and op.inserts is not None else None
        if sources is None:
            return f"node '{name}' is a {node.op}, whose output changes may delete rows"
        stack.extend(sources)
    return None


__all__ = ["TIMED_SOURCES", "origin_column", "time_problems"]
