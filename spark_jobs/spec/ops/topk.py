"""``topk``: per group, the rows ranked <= k, ``{input, partition_by, order_by, k, rank,
rank_column}``, optionally per time ``window`` (as ``aggregate.window``: the rows are assigned to
their windows first and ranked per window, so a windowed top-k of raw events, Nexmark q7, needs no
aggregate in front of it); its fields are kept in ``extra["topk"]`` (a ``TopKSpec``). Compiled to
the IR's ``topk`` (``ir/ops/topk.py``)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from ..columns import Issue, Lookup, missing, reserved
from ..model import NodeSpec
from ..node_ops import REF, Loading, NodeOp, column_list, register
from ..time import WINDOW_COLUMNS, window_of
from ..typecheck import INT, TIMESTAMP
from .aggregate import FIELDS as AGGREGATE_FIELDS
from .aggregate import window_issues

RANKS = ("row_number", "rank", "dense_rank")  # the rank functions of a `topk` node


@dataclass(frozen=True)
class TopKSpec:
    """A `topk` node's fields: per group of ``partition_by``, the rows ranked <= ``k`` by
    ``order_by`` ((column, desc, nulls_first), ...) with ``rank`` (row_number | rank | dense_rank)."""

    partition_by: tuple[str, ...]
    order_by: tuple[tuple[str, bool, bool], ...]
    k: int
    rank: str = "row_number"
    rank_column: str | None = None


FIELDS = {
    "input": REF,
    "partition_by": column_list("a list of column names (the groups; none: one group)", 0),
    "order_by": {
        "type": "array", "minItems": 1,
        "title": "the ranking order: \"col\", \"col DESC\", \"col ASC NULLS LAST\", or {column, desc, nulls}",
        "items": {"oneOf": [
            {"type": "string", "minLength": 1, "title": "\"col [ASC|DESC] [NULLS FIRST|LAST]\""},
            {"type": "object", "title": "{column, desc, nulls}", "additionalProperties": False, "required": ["column"],
             "properties": {
                 "column": {"type": "string", "minLength": 1, "title": "a column name"},
                 "desc": {"type": "boolean", "title": "descending (default false)"},
                 "nulls": {"enum": ["first", "last"],
                           "title": "where NULLs go (default: first ascending, last descending)"}}}]}},
    "k": {"type": "integer", "minimum": 1, "title": "how many ranks to keep per group (1 to 2147483647)",
          "maximum": 2147483647},
    "rank": {"enum": list(RANKS), "title": "the rank function (default row_number)"},
    "rank_column": {**REF, "title": "a column for the rank (optional)"},
    "window": {**AGGREGATE_FIELDS["window"],
               "title": "rank per time window {column: ts, size: \"1 hour\", slide: \"15 minutes\"} (tumbling "
                        "without slide): output window_start, window_end first, then the input's columns"},
}

_ORDER = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)(?:\s+(ASC|DESC))?(?:\s+NULLS\s+(FIRST|LAST))?\s*$", re.I)


def topk_spec(raw: dict, lines: dict[str, int], problem: Callable[[str, str], None]) -> TopKSpec:
    """A `topk` node's fields (the schema has checked their shapes); ``problem(field, message)``
    for an ``order_by`` string that does not read "col [ASC|DESC] [NULLS FIRST|LAST]"."""
    order: list[tuple[str, bool, bool]] = []
    items = raw.get("order_by")
    for i, item in enumerate(items if isinstance(items, list) else []):
        if isinstance(item, dict) and isinstance(item.get("column"), str):
            desc = item.get("desc") is True
            nulls = item.get("nulls")
            order.append((item["column"], desc, (not desc) if nulls not in ("first", "last") else nulls == "first"))
        elif isinstance(item, str):
            m = _ORDER.match(item)
            if m is None:
                problem(f"order_by.{i}", f"order_by item '{item}': expected 'column [ASC|DESC] [NULLS FIRST|LAST]'")
                continue
            desc = (m.group(2) or "").upper() == "DESC"
            order.append((m.group(1), desc, (not desc) if m.group(3) is None else m.group(3).upper() == "FIRST"))
    k = raw.get("k")
    k = int(k) if isinstance(k, float) and k.is_integer() else k  # the schema's integer admits 2.0
    rank = raw.get("rank")
    rank_column = raw.get("rank_column")
    partition = raw.get("partition_by")
    return TopKSpec(tuple(p for p in partition if isinstance(p, str)) if isinstance(partition, list) else (),
                    tuple(order), k if isinstance(k, int) else 1, rank if rank in RANKS else "row_number",
                    rank_column if isinstance(rank_column, str) else None)


def load(raw: dict, loading: Loading) -> dict[str, Any]:
    return {"extra": {"topk": topk_spec(raw, loading.lines, loading.problem)}, "window": window_of(raw.get("window"))}


def columns(node: NodeSpec, lookup: Lookup, known: tuple[str, ...]) -> tuple[tuple[str, ...] | None, list[Issue]]:
    """The input's columns (after a window's two), then ``rank_column``; the groups and order must
    be input columns (or the window's)."""
    spec = node.extra.get("topk")
    src = lookup(node.input or "")
    if spec is None or src is None:
        return None, []
    issues: list[Issue] = []
    if "window" in node.field_lines:
        issues += window_issues(node, src, ())
        src = WINDOW_COLUMNS + src
    issues += missing(spec.partition_by, src, "partition_by", f"input '{node.input}'")
    issues += missing(tuple(c for c, _, _ in spec.order_by), src, "order_by", f"input '{node.input}'")
    if spec.rank_column is None:
        return src, issues
    issues += reserved((spec.rank_column,), "rank_column")
    if spec.rank_column in src:
        issues.append(Issue("rank_column", f"rank_column '{spec.rank_column}' is already a column of input "
                                           f"'{node.input}': choose another name"))
    return src + (spec.rank_column,), issues


def types(typer: Any, label: str, node: NodeSpec, scope: dict) -> dict | None:
    src = scope.get(node.input) if node.input else None
    if src is None:
        return None
    rank_column = getattr(node.extra.get("topk"), "rank_column", None)
    window = {"window_start": TIMESTAMP, "window_end": TIMESTAMP} if node.window is not None else {}
    return {**window, **src, **({rank_column: INT} if rank_column else {})}


TOPK = register(NodeOp(
    "topk", 60, "Per group, the rows ranked <= k: {input, partition_by: [cols], order_by: [\"col DESC\", ...] or "
    "[{column, desc, nulls}], k, rank: row_number|rank|dense_rank, rank_column}; with window: {column: ts, size: "
    "\"10 minutes\"} per time window (output window_start, window_end first).",
    FIELDS, columns, "spark_jobs.ir.ops.topk:from_topk", required=("input", "order_by", "k"), load=load, types=types))
