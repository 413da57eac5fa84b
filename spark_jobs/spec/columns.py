"""Output columns of every input and node, and the column checks that come with them.

Each node's output columns follow from its op and its inputs' columns; each op says how in its
own module (the ``columns`` hook of its ``NodeOp``, ``spec/ops/<op>.py``: a filter keeps its
input's columns, a select has the keys of ``columns``, an aggregate its groups then its
aggregates, ...). What they share is here:

- ``join_layout``: the columns of a join or product. With ``on``: the key columns once (in the
  order they appear in the left input), then the left input's other columns, then the right
  input's other columns. With ``left_on`` / ``right_on``: all left columns, then all right columns
  (right keys included); a product: the left columns, then the right columns. A right column whose
  name is already taken is renamed ``<right input name>_<column>``; if that name is taken too, it
  is an error (add a ``select`` to rename the column first).
- ``recursive``: the columns of its first body output. Body nodes may read each other in a
  cycle, so their columns are found by iterating until nothing changes (``_resolve_scope``).
- ``_weight`` is reserved for the Z-set weight and names starting with ``__`` for the engine's
  internal columns: declaring or producing one is an error (``reserved``).

Column names in ``on``, ``left_on``, ``right_on`` and ``group_by`` must match exactly; names
inside expressions are matched case-insensitively, as Spark does (see ``expressions.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from spark_jobs.errors import DbspError

from .errors import CircuitError, Problem, did_you_mean, listing
from .model import WEIGHT, CircuitSpec, NodeSpec, dependency_order, reserved_column_problem
from .node_ops import node_op

Cols = tuple[str, ...]
Lookup = Callable[[str], "Cols | None"]



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


def missing(names: Cols, available: Cols, field_name: str, side: str) -> list[Issue]:
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


def reserved(names: Cols, field_name: str) -> list[Issue]:
    return [Issue(f"{field_name}.{n}", why) for n in names if (why := reserved_column_problem(n))]


def node_columns(node: NodeSpec, lookup: Lookup, known: tuple[str, ...] = ()) -> tuple[Cols | None, list[Issue]]:
    """A node's output columns (None when they depend on unknown inputs) and its column issues.

    Checks that need input columns are skipped while those are unknown, so one broken node does
    not bury the file under follow-on errors.
    """
    op = node_op(node.op)
    if op is None:
        return None, []  # unknown ops were reported by the schema
    return op.columns(node, lookup, known)


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
        op = node_op(node.op)
        if op is not None and op.scope:
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

    if node.input:  # an iterate node: the loop variable has its init's columns from the start
        own[0] = outer(node.input)
        _resolve_nodes(spec, node.body, label + ".", lookup, env, res, skip, [], report=False)
        out = env.get(node.outputs[0]) if node.outputs and node.outputs[0] in node.body else None
        if report:
            _resolve_nodes(spec, node.body, label + ".", lookup, env, res, skip, problems, report=True)
            res.scopes[label] = dict(env)
            if own[0] is not None and out is not None and set(out) != set(own[0]):
                problems.append(Problem(spec.path, node.line_of("outputs"), label,
                                        f"output '{node.outputs[0]}' has columns {list(out)} but the loop "
                                        f"starts from '{node.input}' with {list(own[0])}: the next iteration "
                                        f"must have the columns of the previous one"))
        return own[0]
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
