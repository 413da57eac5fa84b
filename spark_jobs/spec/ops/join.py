"""``join`` (equi-join; with ``within`` an interval join, with ``stream`` a stream joined on
arrival), ``product`` and ``antijoin``, each ``{left, right, ...}``. Compiled to the IR's
``join`` / ``stream_join`` (``ir/ops/join.py``, ``ir/ops/stream_join.py``); an antijoin to a
join, a distinct and a negation (section 7.5 of the paper)."""
from __future__ import annotations

from typing import Any

from ..columns import ColumnClash, Issue, Lookup, join_layout, missing
from ..errors import Problem, did_you_mean, listing
from ..model import CircuitSpec, NodeSpec
from ..node_ops import DURATION, REF, Loading, NodeOp, column_list, register
from ..time import within_of
from ..typecheck import ANY, comparable

SIDES = {"left": REF, "right": REF}
KEYS = {
    "on": column_list("a list of key column names (in both inputs)"),
    "left_on": column_list("a list of key column names of the left input"),
    "right_on": column_list("a list of key column names of the right input"),
    "within": {
        "type": "object", "title": "an interval {left: column, right: column, range: \"5 minutes\"}",
        "required": ["left", "right", "range"], "additionalProperties": False,
        "properties": {"left": {"type": "string", "minLength": 1, "title": "a timestamp column of the left input"},
                       "right": {"type": "string", "minLength": 1, "title": "a timestamp column of the right input"},
                       "range": DURATION}},
    "stream": {"enum": ["left", "right"], "title": "left or right: the side that is a stream of events"},
}


def load(raw: dict, loading: Loading) -> dict[str, Any]:
    """An interval join's ``within`` and a stream join's ``stream`` (op join only)."""
    stream = raw.get("stream")
    return {"within": within_of(raw.get("within")), "stream": stream if isinstance(stream, str) else None}


def columns(node: NodeSpec, lookup: Lookup, known: tuple[str, ...]) -> tuple[tuple[str, ...] | None, list[Issue]]:
    """``join_layout``'s columns (an antijoin: the left input's); keys must be input columns."""
    left, right = lookup(node.left or ""), lookup(node.right or "")
    issues: list[Issue] = []
    if left is not None and right is not None:
        issues += missing(node.on, left, "on", f"left input '{node.left}'")
        issues += missing(node.on, right, "on", f"right input '{node.right}'")
    if left is not None:
        issues += missing(node.left_on, left, "left_on", f"left input '{node.left}'")
    if right is not None:
        issues += missing(node.right_on, right, "right_on", f"right input '{node.right}'")
    within = node.within if node.op == "join" else None
    if within is not None:
        if left is not None and within.left not in left:
            issues.append(Issue("within.left", f"column '{within.left}' is not a column of left input "
                                               f"'{node.left}' (columns: {listing(left)}){did_you_mean(within.left, left)}"))
        if right is not None and within.right not in right:
            issues.append(Issue("within.right", f"column '{within.right}' is not a column of right input "
                                                f"'{node.right}' (columns: {listing(right)})"
                                                f"{did_you_mean(within.right, right)}"))
    if node.op == "antijoin":
        return left, issues
    if left is None or right is None or issues:
        return None, issues
    keyless = not node.on and not node.left_on and not node.right_on and "within" in node.field_lines
    if node.op == "join" and not keyless and not node.on and (not node.left_on or len(node.left_on) != len(node.right_on)):
        return None, issues  # keys missing or mismatched: reported by checks
    try:
        return join_layout(left, right, node.right or "", node.on, node.left_on, node.right_on).columns, issues
    except ColumnClash as clash:
        return None, issues + [Issue("right", str(clash))]


def types(typer: Any, label: str, node: NodeSpec, scope: dict) -> dict | None:
    """The output types by ``join_layout``; paired keys must be comparable."""
    left, right = scope.get(node.left), scope.get(node.right)
    if left is None or right is None:
        return None
    lower_l = {c.lower(): t for c, t in left.items()}
    lower_r = {c.lower(): t for c, t in right.items()}
    on = tuple(node.on or ())
    pairs = [(k, k) for k in on] + list(zip(node.left_on or (), node.right_on or ()))
    line = node.line_of("on") if on else node.line_of("left_on")
    for lk, rk in pairs:
        a, b = lower_l.get(lk.lower(), ANY), lower_r.get(rk.lower(), ANY)
        if not comparable(a, b):
            typer.problem(label, line, "join key", f"{node.left}.{lk} ({a}) is matched with {node.right}.{rk} ({b}): "
                          f"values of these types are never equal")
    if node.op == "antijoin":
        return left
    try:
        layout = join_layout(tuple(left), tuple(right), node.right, on, tuple(node.left_on or ()),
                             tuple(node.right_on or ()))
    except ValueError:
        return None
    return {out: lower_l.get(src.lower(), ANY) for src, out in layout.left_out} | {
        out: lower_r.get(src.lower(), ANY) for src, out in layout.right_out}


def checks(node: NodeSpec) -> list[tuple[str, str]]:
    """Keys: ``on``, or ``left_on`` + ``right_on`` of one length (an interval join may have none)."""
    present = set(node.field_lines)
    if "on" in present and present & {"left_on", "right_on"}:
        return [("on", "give either 'on' or 'left_on' + 'right_on', not both")]
    if "on" not in present and not present & {"left_on", "right_on"} and "within" in present:
        return []  # an interval join may have no keys: the time bound alone pairs the rows
    if "on" not in present and not {"left_on", "right_on"} <= present:
        has = [f for f in ("left_on", "right_on") if f in present]
        return [(has[0] if has else "", f"{node.op} needs its key columns: 'on: [cols]' (same names "
                                        f"on both sides) or 'left_on' + 'right_on'"
                                        + (f" (only '{has[0]}' given)" if has else ""))]
    if "on" not in present and len(node.left_on) != len(node.right_on):
        return [("left_on", f"'left_on' has {len(node.left_on)} columns and 'right_on' has "
                            f"{len(node.right_on)}: they pair up, so they need the same length")]
    return []


def join_time_checks(spec: CircuitSpec, name: str, node: NodeSpec, res: Any) -> list[Problem]:
    """An interval join's columns are timestamps; a stream side only ever inserts."""
    from ..time_checks import not_append_only, traced_type

    problems = _within_or_stream(spec, name, node)
    if node.within is not None:
        for side, column in (("left", node.within.left), ("right", node.within.right)):
            if (why := traced_type(spec, getattr(node, side), column)):
                problems.append(Problem(spec.path, node.line_of(f"within.{side}"), name, f"within.{side} {why}"))
    if node.stream in ("left", "right"):
        source = getattr(node, node.stream)
        if source and (why := not_append_only(spec, source)):
            problems.append(Problem(spec.path, node.line_of("stream"), name,
                                    f"the stream side '{source}' must only insert rows: {why}"))
    return problems


def antijoin_time_checks(spec: CircuitSpec, name: str, node: NodeSpec, res: Any) -> list[Problem]:
    return [Problem(spec.path, node.line_of(key), name, f"'{key}' applies to op join only")
            for key in ("within", "stream") if key in node.field_lines] + _within_or_stream(spec, name, node)


def _within_or_stream(spec: CircuitSpec, name: str, node: NodeSpec) -> list[Problem]:
    if "within" in node.field_lines and "stream" in node.field_lines:
        return [Problem(spec.path, node.line_of("stream"), name, "give either 'within' (an interval join) or "
                                                                 "'stream' (a stream joined with a relation), not both")]
    return []


def _stream_side(node: NodeSpec) -> tuple[str, ...] | None:
    """A stream join only inserts when its stream side does (its other side is never retracted)."""
    side = getattr(node, node.stream) if node.stream in ("left", "right") else None
    return (side,) if side else None


JOIN = register(NodeOp(
    "join", 100, "Equi-join: {left, right, on: [cols]} or {left, right, left_on: [..], right_on: [..]}; with within: "
    "{left: ts, right: ts, range: \"5 minutes\"}: an interval join (keys optional); with stream: left|right: that "
    "side is a stream joined once, on arrival, with the other side as it is then.",
    {**SIDES, **KEYS}, columns, "spark_jobs.ir.ops.join:from_join", required=("left", "right"), load=load,
    types=types, checks=checks, time_checks=join_time_checks, inserts=_stream_side, recursion="monotone"))
PRODUCT = register(NodeOp(
    "product", 110, "Cartesian product: {left, right}.", SIDES, columns, "spark_jobs.ir.ops.join:from_join",
    required=("left", "right"), types=types, recursion="monotone"))
ANTIJOIN = register(NodeOp(
    "antijoin", 120, "Rows of left with no match in right: {left, right, on} or left_on/right_on.",
    {**SIDES, **KEYS}, columns, "spark_jobs.ir.ops.join:from_antijoin", required=("left", "right"), types=types,
    checks=checks, time_checks=antijoin_time_checks, recursion="negation", negated="right"))
