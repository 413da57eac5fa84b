"""Output columns of every input and node, and the column checks that come with them.

Each node's output columns follow from its op and its inputs' columns:

- ``filter``, ``distinct``, ``delay``, ``integrate``, ``differentiate``: the input's columns.
- ``select`` / ``map``: the keys of ``columns`` (or the listed names), in the order written.
- ``union``, ``union_all``, ``difference``, ``intersect``: every input must have the same set of
  column names; the output has the first input's column order.
- ``join`` with ``on``: the key columns once (in the order they appear in the left input), then
  the left input's other columns, then the right input's other columns. With ``left_on`` /
  ``right_on``: all left columns, then all right columns (right keys included).
- ``product``: the left columns, then the right columns.
- In ``join`` and ``product``, a right column whose name is already taken is renamed
  ``<right input name>_<column>``; if that name is taken too, it is an error (add a ``select``
  to rename the column first).
- ``antijoin``: the left input's columns.
- ``aggregate``: the ``group_by`` columns, then the aggregate names; a name may appear once.
  With a ``window``: ``window_start`` and ``window_end`` first (the input may not have columns
  of those names: rename them with a ``select``).
- ``join`` with ``within`` (an interval join): like a join, or a product when it has no keys.
- ``topk``: the input's columns, then ``rank_column`` if it has one.
- ``sql``: the columns of the query's result (``spec/sql``): the SELECT list's names.
- ``recursive``: the columns of its first body output. Body nodes may read each other in a
  cycle, so their columns are found by iterating until nothing changes.
- ``_weight`` is reserved for the Z-set weight and names starting with ``__`` for the engine's
  internal columns: declaring or producing one is an error.

Column names in ``on``, ``left_on``, ``right_on`` and ``group_by`` must match exactly; names
inside expressions are matched case-insensitively, as Spark does (see ``expressions.py``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from spark_jobs.errors import DbspError

from .errors import CircuitError, Problem, did_you_mean, listing
from .model import WEIGHT, CircuitSpec, NodeSpec, dependency_order, reserved_column_problem
from .sql.node import sql_node_columns
from .time import WINDOW_COLUMNS

Cols = tuple[str, ...]
Lookup = Callable[[str], "Cols | None"]

PASS_THROUGH_OPS = ("filter", "distinct", "delay", "integrate", "differentiate")
SET_OPS = ("union", "union_all", "difference", "intersect")


@dataclass(frozen=True)
class Issue:
    """A column problem in one field of a node (``field`` as in ``NodeSpec.field_lines``)."""

    field: str
    message: str


class ColumnClash(DbspError, ValueError):
    """A right-side column cannot be named without clashing, even after renaming."""


@dataclass(frozen=True)
class JoinLayout:
    """Which input columns a join/product keeps, as ``(source column, output name)`` pairs."""

    left_out: tuple[tuple[str, str], ...]
    right_out: tuple[tuple[str, str], ...]

    @property
    def columns(self) -> Cols:
        return tuple(out for _, out in self.left_out + self.right_out)


def join_layout(left: Cols, right: Cols, right_name: str, on: Cols = (), left_on: Cols = (),
                right_on: Cols = ()) -> JoinLayout:
    """Output columns of a join (``on`` or ``left_on``/``right_on``) or, with no keys, a product."""
    if on:
        keys = [c for c in left if c in on]
        left_out = [(c, c) for c in keys + [c for c in left if c not in on]]
        right_cols = [c for c in right if c not in on]
    else:
        left_out = [(c, c) for c in left]
        right_cols = list(right)
    taken = {out for _, out in left_out}
    right_out: list[tuple[str, str]] = []
    for col in right_cols:
        out = col
        if out in taken:
            out = f"{right_name}_{col}"
            if out in taken:
                raise ColumnClash(f"right column '{col}' of '{right_name}' clashes, and so does its "
                                  f"rename '{out}': add a select node to rename it")
        taken.add(out)
        right_out.append((col, out))
    return JoinLayout(tuple(left_out), tuple(right_out))


def _missing(names: Cols, available: Cols, field_name: str, side: str) -> list[Issue]:
    """Issues for names in a key/group list that the input does not have (or lists twice)."""
    issues = []
    for i, name in enumerate(names):
        key = f"{field_name}.{i}"
        if name not in available:
            issues.append(Issue(key, f"column '{name}' in '{field_name}' is not a column of {side} "
                                     f"(columns: {listing(available)}){did_you_mean(name, available)}"))
        elif name in names[:i]:
            issues.append(Issue(key, f"column '{name}' is listed twice in '{field_name}'"))
    return issues


def _reserved(names: Cols, field_name: str) -> list[Issue]:
    return [Issue(f"{field_name}.{n}", why) for n in names if (why := reserved_column_problem(n))]


_COLUMN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def _query_names(names: Cols) -> list[Issue]:
    """The result columns of an ``sql`` node obey the rules of every other column name (the
    schema checks those of inputs, ``select`` and ``aggregate``)."""
    issues = [Issue("query", f"result column '{n}': expected an identifier (letters, digits and _, not starting "
                             f"with a digit; at most 128 characters): rename it with AS")
              for n in names if not _COLUMN_NAME.match(n)]
    return issues + _reserved(names, "query")


def node_columns(node: NodeSpec, lookup: Lookup, known: tuple[str, ...] = ()) -> tuple[Cols | None, list[Issue]]:
    """A node's output columns (None when they depend on unknown inputs) and its column issues.

    Checks that need input columns are skipped while those are unknown, so one broken node does
    not bury the file under follow-on errors.
    """
    op = node.op
    if op in PASS_THROUGH_OPS:
        return lookup(node.input or ""), []
    if op in ("select", "map"):
        names = tuple(n for n, _ in node.columns)
        issues = _reserved(names, "columns")
        issues += [Issue(f"columns.{i}", f"column '{n}' is listed twice in 'columns'")
                   for i, n in enumerate(names) if n in names[:i]]
        return names, issues
    if op == "aggregate":
        src = lookup(node.input or "")
        issues = [] if src is None else _missing(node.group_by, src, "group_by", f"input '{node.input}'")
        agg_names = tuple(a.name for a in node.aggregates)
        issues += _reserved(agg_names, "aggregates")
        issues += [Issue(f"aggregates.{n}", f"output column '{n}' is produced twice (group_by columns "
                                            f"and aggregate names must all differ)")
                   for i, n in enumerate(agg_names) if n in node.group_by + agg_names[:i]]
        names = node.group_by + agg_names
        if "window" in node.field_lines:
            issues += _window_issues(node, src, names)
            names = WINDOW_COLUMNS + names
        return names, issues
    if op == "topk":
        return _topk_columns(node, lookup)
    if op in SET_OPS:
        return _set_op_columns(node, lookup)
    if op in ("join", "antijoin", "product"):
        return _join_columns(node, lookup)
    if op == "sql":  # ``known``: the relations a query may name
        cols, found = sql_node_columns(node.sql, node.tables, lookup, known)
        return cols, [Issue(key, message) for key, message in found] + _query_names(cols or ())
    return None, []  # recursive is resolved by its scope; unknown ops were reported by the schema


def _topk_columns(node: NodeSpec, lookup: Lookup) -> tuple[Cols | None, list[Issue]]:
    """The input's columns, then ``rank_column``; the groups and order must be input columns."""
    spec = node.extra.get("topk")
    src = lookup(node.input or "")
    if spec is None or src is None:
        return None, []
    issues = _missing(spec.partition_by, src, "partition_by", f"input '{node.input}'")
    issues += _missing(tuple(c for c, _, _ in spec.order_by), src, "order_by", f"input '{node.input}'")
    if spec.rank_column is None:
        return src, issues
    issues += _reserved((spec.rank_column,), "rank_column")
    if spec.rank_column in src:
        issues.append(Issue("rank_column", f"rank_column '{spec.rank_column}' is already a column of input "
                                           f"'{node.input}': choose another name"))
    return src + (spec.rank_column,), issues


def _window_issues(node: NodeSpec, src: Cols | None, names: Cols) -> list[Issue]:
    """A window's column must be an input column; its output columns must be free names."""
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
            where = "group_by" if name in node.group_by else f"aggregates.{name}"
            issues.append(Issue(where, f"'{name}' is a column the window adds: choose another name"))
    return issues


def _set_op_columns(node: NodeSpec, lookup: Lookup) -> tuple[Cols | None, list[Issue]]:
    refs = node.inputs or tuple(r for r in (node.left, node.right) if r)
    known = [(r, lookup(r)) for r in refs]
    first = next((c for _, c in known if c is not None), None)
    if any(c is None for _, c in known) or not known:
        return first, []  # unknown inputs: best guess, no check
    (ref0, cols0) = known[0]
    issues = [Issue("inputs" if node.inputs else "right",
                    f"{node.op} needs inputs with the same columns: '{ref0}' has ({listing(cols0)}), "
                    f"'{r}' has ({listing(c)})")
              for r, c in known[1:] if set(c) != set(cols0)]
    return cols0, issues


def _join_columns(node: NodeSpec, lookup: Lookup) -> tuple[Cols | None, list[Issue]]:
    left, right = lookup(node.left or ""), lookup(node.right or "")
    issues: list[Issue] = []
    if left is not None and right is not None:
        issues += _missing(node.on, left, "on", f"left input '{node.left}'")
        issues += _missing(node.on, right, "on", f"right input '{node.right}'")
    if left is not None:
        issues += _missing(node.left_on, left, "left_on", f"left input '{node.left}'")
    if right is not None:
        issues += _missing(node.right_on, right, "right_on", f"right input '{node.right}'")
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
        return None, issues  # keys missing or mismatched: reported by validate
    try:
        return join_layout(left, right, node.right or "", node.on, node.left_on, node.right_on).columns, issues
    except ColumnClash as clash:
        return None, issues + [Issue("right", str(clash))]


@dataclass
class Resolution:
    """Columns of every input and top-level node (None = unknown) and, per node label (body
    nodes are labelled ``recursive.body_node``), the columns of each name it reads."""

    columns: dict[str, Cols | None] = field(default_factory=dict)
    scopes: dict[str, dict[str, Cols | None]] = field(default_factory=dict)  # recursive label -> body columns
    reads: dict[str, dict[str, Cols | None]] = field(default_factory=dict)


def resolve(spec: CircuitSpec, skip: frozenset[str] = frozenset()) -> tuple[Resolution, list[Problem]]:
    """Columns of everything in ``spec`` plus the column problems found; nodes (labels) in
    ``skip`` are treated as unknown and not checked (the schema already found them broken)."""
    res, problems = Resolution(), []
    for inp in spec.inputs.values():
        for col in inp.columns:
            if why := reserved_column_problem(col.name):
                problems.append(Problem(spec.path, col.line or inp.line, inp.name, why))
        res.columns[inp.name] = tuple(c for c in inp.column_names if c != WEIGHT) or None
    _resolve_nodes(spec, spec.nodes, "", res.columns.get, res.columns, res, skip, problems, report=True)
    return res, problems


def _resolve_nodes(spec: CircuitSpec, nodes: dict[str, NodeSpec], prefix: str, lookup: Lookup,
                   into: dict[str, Cols | None], res: Resolution, skip: frozenset[str],
                   problems: list[Problem], report: bool) -> None:
    """Fill ``into`` with the columns of ``nodes`` (one scope), in dependency order."""
    for name in dependency_order(nodes):
        node, label = nodes[name], prefix + name
        if label in skip:
            into[name] = None
            continue
        if node.op == "recursive":
            into[name] = _resolve_scope(spec, node, label, lookup, res, skip, problems, report)
            continue
        cols, issues = node_columns(node, lookup, tuple(spec.inputs) + tuple(spec.nodes))
        if issues:
            cols = None  # a wrong node's columns would only cause follow-on errors downstream
        into[name] = tuple(c for c in cols if c != WEIGHT) if cols is not None else None
        if report:
            res.reads[label] = {r: lookup(r) for r in node.references}
            problems.extend(Problem(spec.path, node.line_of(i.field), label, i.message) for i in issues)


def _resolve_scope(spec: CircuitSpec, node: NodeSpec, label: str, outer: Lookup, res: Resolution,
                   skip: frozenset[str], problems: list[Problem], report: bool) -> Cols | None:
    """Columns of a recursive node: iterate its body (which may be cyclic) to a fixed point."""
    env: dict[str, Cols | None] = {}
    own: list[Cols | None] = [None]

    def lookup(ref: str) -> Cols | None:
        if ref in node.body:
            return env.get(ref)
        return own[0] if ref == node.name else outer(ref)

    for _ in range(len(node.body) + 2):
        before = (dict(env), own[0])
        _resolve_nodes(spec, node.body, label + ".", lookup, env, res, skip, [], report=False)
        own[0] = env.get(node.outputs[0]) if node.outputs and node.outputs[0] in env else None
        if (env, own[0]) == before:
            break
    if report:
        _resolve_nodes(spec, node.body, label + ".", lookup, env, res, skip, problems, report=True)
        res.scopes[label] = dict(env)
        if own[0] is None and node.outputs and node.outputs[0] in node.body and all(outer(d) is not None for d in node.dependencies):
            problems.append(Problem(spec.path, node.line_of("outputs"), label,
                                    f"cannot infer the columns of output '{node.outputs[0]}': it needs "
                                    f"a non-recursive path from the inputs (e.g. a union whose first "
                                    f"input does not read the recursion)"))
    return own[0]


def output_columns(spec: CircuitSpec) -> dict[str, Cols]:
    """Output column names of every input and top-level node of a valid ``spec``."""
    res, problems = resolve(spec)
    unknown = [name for name, cols in res.columns.items() if cols is None]
    if problems or unknown:
        raise CircuitError(problems or [Problem(spec.path, 0, n, "columns cannot be determined")
                                        for n in unknown])
    return {name: cols for name, cols in res.columns.items() if cols is not None}


def body_columns(spec: CircuitSpec, node: str) -> dict[str, Cols]:
    """Output columns of the body nodes of recursive node ``node`` (a label, e.g. ``r`` or ``r.inner``)."""
    res, problems = resolve(spec)
    if problems:
        raise CircuitError(problems)
    return {name: cols for name, cols in res.scopes.get(node, {}).items() if cols is not None}
