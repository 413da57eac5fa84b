"""Build the query circuit (Algorithm 4.6 step 1) from a validated circuit spec.

This is the translation of Table 1 of the paper: every SQL-ish operator becomes Z-set operators.
Set operators get their ``distinct``s here (``union`` = distinct(a + b), ...); the consolidation
pass (``optimize.py``) removes the ones that are not needed.
"""
from __future__ import annotations

from typing import Callable

from spark_jobs.errors import DbspError
from spark_jobs.ir.from_sql import lower_sql
from spark_jobs.ir.graph import Circuit, Node, make_node
from spark_jobs.ir.ops.window import add_window_assign
from spark_jobs.ir.scope import DEFAULT_MAX_ITERATIONS, build_scope
from spark_jobs.spec.columns import body_columns, join_layout
from spark_jobs.spec.model import CircuitSpec, NodeSpec, dependency_order
from spark_jobs.spec.time import WINDOW_COLUMNS
from spark_jobs.spec.sql.node import bind_node


class UnsupportedOperator(DbspError, ValueError):
    """A spec op that this version of the compiler cannot translate yet."""


def build_query_circuit(spec: CircuitSpec, columns: dict[str, tuple[str, ...]]) -> Circuit:
    """Translate ``spec`` into the (non-incremental) query circuit.

    ``columns`` are the output columns of every input and node (``spec.output_columns``).
    """
    circuit = Circuit(spec.name, inputs={n: columns[n] for n in spec.inputs})
    for name, inp in spec.inputs.items():
        # only `changes` can delete what is not there: snapshots and cdc derive their changes from
        # the input's own state, append_only refuses deletes (the bag check: runtime/bag.py).
        # append_only: since its reader refuses deletes, the IR derives insert-only streams from it
        kind = inp.source.kind if inp.source is not None else None
        params = {"bag": True} if kind == "changes" else {"append_only": True} if kind == "append_only" else {}
        if inp.time is not None:  # its watermark bounds state (ir/bounds.py)
            params.update(time=inp.time.column, lateness_us=inp.time.lateness_us)
        circuit.add(make_node(name, "input", out=columns[name], name=name, **params))
    for node in (spec.nodes[name] for name in dependency_order(spec.nodes)):
        limit = int(spec.settings.get("max_iterations", DEFAULT_MAX_ITERATIONS))
        if node.op == "recursive":
            build_scope(circuit, node, body_columns(spec, node.name), columns[node.name], _translate_body, limit)
            continue
        if node.op == "sql":
            lower_sql(circuit, node.name, bind_node(node.sql, columns.get, list(columns)), limit)
            continue
        translate = _TRANSLATIONS.get(node.op)
        if translate is None:
            raise UnsupportedOperator(
                f"{spec.path}:{node.line}: node {node.name!r}: op {node.op!r} cannot be compiled yet")
        translate(circuit, node, columns)
    circuit.outputs = {view: view for view in spec.outputs}
    return circuit


def _unary(op: str) -> Callable[[Circuit, NodeSpec, dict], Node]:
    def translate(c: Circuit, n: NodeSpec, cols: dict) -> Node:
        # z⁻¹ of a set is a set; the integral of a set is not (a tuple present at two timesteps
        # has weight 2), nor is a difference of sets (weights -1)
        src = c[n.input]
        return c.add(make_node(n.name, op, [n.input], cols[n.name], is_set=src.is_set and op == "delay"))
    return translate


def _select(c: Circuit, n: NodeSpec, cols: dict) -> Node:
    return c.add(make_node(n.name, "map", [n.input], cols[n.name], columns=n.columns))


def _filter(c: Circuit, n: NodeSpec, cols: dict) -> Node:
    return c.add(make_node(n.name, "filter", [n.input], cols[n.name], is_set=c[n.input].is_set, where=n.where))


def _distinct(c: Circuit, n: NodeSpec, cols: dict) -> Node:
    return c.add(make_node(n.name, "distinct", [n.input], cols[n.name], is_set=True))


def _aggregate(c: Circuit, n: NodeSpec, cols: dict) -> Node:
    """GROUP BY; with a ``window``, a window assignment first, then the groups (window_start,
    window_end, group_by...) (``ir/ops/window.py``)."""
    aggs = tuple((a.name, a.func, a.arg, a.distinct) for a in n.aggregates)
    source, groups = n.input, tuple(n.group_by)
    if n.window is not None:
        source = add_window_assign(c, f"{n.name}.window", n.input, n.window, origin=n.name)
        groups = WINDOW_COLUMNS + groups
    return c.add(make_node(n.name, "aggregate", [source], cols[n.name], is_set=True,
                           group_by=groups, aggs=aggs))


def _topk(c: Circuit, n: NodeSpec, cols: dict) -> Node:
    spec = n.extra["topk"]
    return c.add(make_node(n.name, "topk", [n.input], cols[n.name], partition_by=spec.partition_by,
                           order_by=spec.order_by, k=spec.k, rank=spec.rank, rank_column=spec.rank_column))


def _union_all(c: Circuit, n: NodeSpec, cols: dict) -> Node:
    return c.add(make_node(n.name, "plus", n.references, cols[n.name]))


def _union(c: Circuit, n: NodeSpec, cols: dict) -> Node:
    total = c.add(make_node(f"{n.name}.sum", "plus", n.references, cols[n.name], origin=n.name))
    return c.add(make_node(n.name, "distinct", [total.id], cols[n.name], is_set=True))


def _set_of(c: Circuit, ref: str, owner: str, side: str) -> str:
    """``ref`` as a set: itself if it already is one, else a new distinct node."""
    if c[ref].is_set:
        return ref
    node = make_node(f"{owner}.distinct_{side}", "distinct", [ref], c[ref].columns, origin=owner, is_set=True)
    return c.add(node).id


def _difference(c: Circuit, n: NodeSpec, cols: dict) -> Node:
    """EXCEPT: distinct(distinct(a) - distinct(b)); inner distincts make it right for bags too."""
    left = _set_of(c, n.left, n.name, "left")
    right = _set_of(c, n.right, n.name, "right")
    neg = c.add(make_node(f"{n.name}.neg", "negate", [right], c[right].columns, origin=n.name))
    total = c.add(make_node(f"{n.name}.sum", "plus", [left, neg.id], cols[n.name], origin=n.name))
    return c.add(make_node(n.name, "distinct", [total.id], cols[n.name], is_set=True))


def _intersect(c: Circuit, n: NodeSpec, cols: dict) -> Node:
    """INTERSECT: a join of the two sets on every column, nulls equal (SQL set semantics)."""
    left = _set_of(c, n.left, n.name, "left")
    right = _set_of(c, n.right, n.name, "right")
    lcols = c[left].columns
    return c.add(make_node(n.name, "join", [left, right], cols[n.name], is_set=True,
                           left_keys=lcols, right_keys=lcols, null_safe=True,
                           left_out=tuple(zip(lcols, lcols)), right_out=()))


def _join_keys(n: NodeSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if n.on:
        return n.on, n.on
    return n.left_on, n.right_on


def _join(c: Circuit, n: NodeSpec, cols: dict) -> Node:
    """Inner equi-join (or product); output column names follow the spec's naming rules."""
    left, right = c[n.left], c[n.right]
    lkeys, rkeys = _join_keys(n) if n.op == "join" else ((), ())
    # inside a recursive body n.right may be a renamed reference: clashes are named as written
    layout = join_layout(left.columns, right.columns, n.extra.get("right_name", n.right), n.on, n.left_on,
                         n.right_on)
    if n.op == "join" and n.stream in ("left", "right"):  # joined once on arrival (ir/ops/stream_join.py)
        return c.add(make_node(n.name, "stream_join", [n.left, n.right], cols[n.name], stream=n.stream,
                               left_keys=lkeys, right_keys=rkeys, null_safe=False,
                               left_out=layout.left_out, right_out=layout.right_out))
    within = {"within": (n.within.left, n.within.right, n.within.range_us)} if n.within is not None else {}
    return c.add(make_node(n.name, "join", [n.left, n.right], cols[n.name], is_set=left.is_set and right.is_set,
                           left_keys=lkeys, right_keys=rkeys, null_safe=False,
                           left_out=layout.left_out, right_out=layout.right_out, **within))


def _antijoin(c: Circuit, n: NodeSpec, cols: dict) -> Node:
    """a - semijoin(a, distinct(keys of b)) (section 7.5 of the paper)."""
    lkeys, rkeys = _join_keys(n)
    keys = c.add(make_node(f"{n.name}.keys", "map", [n.right], rkeys, origin=n.name,
                           columns=tuple((k, f"`{k}`") for k in rkeys)))
    keyset = c.add(make_node(f"{n.name}.keyset", "distinct", [keys.id], rkeys, origin=n.name, is_set=True))
    lcols = c[n.left].columns
    semi = c.add(make_node(f"{n.name}.semijoin", "join", [n.left, keyset.id], lcols, origin=n.name,
                           left_keys=lkeys, right_keys=rkeys, null_safe=False,
                           left_out=tuple(zip(lcols, lcols)), right_out=()))
    neg = c.add(make_node(f"{n.name}.neg", "negate", [semi.id], lcols, origin=n.name))
    return c.add(make_node(n.name, "plus", [n.left, neg.id], lcols, is_set=c[n.left].is_set))


_TRANSLATIONS: dict[str, Callable[[Circuit, NodeSpec, dict], Node]] = {
    "select": _select,
    "map": _select,
    "filter": _filter,
    "distinct": _distinct,
    "aggregate": _aggregate,
    "topk": _topk,
    "union_all": _union_all,
    "union": _union,
    "difference": _difference,
    "intersect": _intersect,
    "join": _join,
    "product": _join,
    "antijoin": _antijoin,
    "delay": _unary("delay"),
    "integrate": _unary("integrate"),
    "differentiate": _unary("differentiate"),
}


def _translate_body(c: Circuit, n: NodeSpec, cols: dict) -> Node:
    """A body node of a recursive node (validation has rejected ops a body cannot hold)."""
    translate = _TRANSLATIONS.get(n.op)
    if translate is None:
        raise UnsupportedOperator(f"{n.name!r}: op {n.op!r} cannot be compiled inside a recursive body")
    return translate(c, n, cols)
