"""The circuit IR: an engine-free graph of DBSP operators over Z-sets.

A ``Circuit`` holds ``Node``s in topological order. The same node kinds describe the query
circuit (what the user means, evaluated on whole relations) and the incremental circuit
(evaluated on changes, with state). No Spark here: the executor interprets these nodes.

Node kinds and their ``params`` (all values are plain tuples/strings so nodes are hashable and
printable):

==================  =======  ==============================================================
op                  inputs   params
==================  =======  ==============================================================
input               0        name: input relation name
map                 1        columns: ((out_name, spark_sql_expr), ...)
filter              1        where: spark_sql_predicate
plus                >= 1     (none) - Z-set addition (UNION ALL)
negate              1        (none)
join                2        left_keys, right_keys: column tuples (empty = product);
                             null_safe: bool (True for set ops, False for SQL equi-joins);
                             left_out / right_out: ((source_col, out_name), ...) columns kept
distinct            1        (none) - weight 1 where weight > 0
aggregate           1        group_by: cols; aggs: ((out, func, arg_expr|None, distinct), ...)
integrate           1        (none) - I; keeps state
delay               1        (none) - z^-1; keeps state unless its input is an integrate
differentiate       1        (none) - D = x - z^-1 x; keeps state
distinct_h          2        inputs (delta, delayed integral): the H function (Prop. 4.7)
aggregate_linear    1        group_by, aggs: linear aggregates from the delta; keeps per-group
                             running totals
aggregate_touched   2        group_by, aggs; inputs (delta, integral): recompute only the
                             groups the delta touches; keeps the previous output per group
scope               any      body: Circuit (nested, own clock: the iterations of a fixed
                             point); outputs: body node names (first = the value);
                             max_iterations; incremental: True in Q^Δ (body on 2-D deltas)
==================  =======  ==============================================================

Inside a scope's body (see ``scope.py``), besides the linear ops, join and distinct:

==================  =======  ==============================================================
delta0              0        port: index into the scope's inputs; name: outer node id. δ0:
                             the outer relation enters the inner clock at iteration 0
feedback            0        source: body node id. z⁻¹ on the inner clock (iteration i reads
                             iteration i-1 of ``source``): the back edge of the recursion
integrate_nested    1        keys: lookup columns. Per-iteration trace: for each iteration
                             i, the sum over earlier timesteps of the input's 2-D delta at i
join_nested         4        join params; inputs (Δa, Δb, I(Δa), I(Δb)): the 2-D bilinear rule
distinct_nested     2        inputs (Δx, I(Δx)): the 2-D incremental distinct
==================  =======  ==============================================================
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator

LINEAR_OPS = frozenset({"input", "map", "filter", "plus", "negate"})
BILINEAR_OPS = frozenset({"join"})
STREAM_OPS = frozenset({"integrate", "delay", "differentiate"})
INCREMENTAL_OPS = frozenset({"distinct_h", "aggregate_linear", "aggregate_touched"})
NESTED_OPS = frozenset({"delta0", "feedback", "integrate_nested", "join_nested", "distinct_nested"})
ALL_OPS = LINEAR_OPS | BILINEAR_OPS | STREAM_OPS | INCREMENTAL_OPS | NESTED_OPS | {"distinct", "aggregate", "scope"}

LINEAR_AGGREGATES = frozenset({"count", "sum", "avg"})


def freeze(value: Any) -> Any:
    """Turn lists/dicts into tuples so params stay hashable and comparable."""
    if isinstance(value, dict):
        return tuple((k, freeze(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


@dataclass(frozen=True)
class Node:
    """One operator. ``columns`` are the output columns (the weight column is implicit)."""

    id: str
    op: str
    inputs: tuple[str, ...] = ()
    params: tuple[tuple[str, Any], ...] = ()
    columns: tuple[str, ...] = ()
    origin: str = ""  # the user's node (or input) this operator implements; groups stages
    is_set: bool = False  # every weight is 0 or 1 whenever the inputs are sets/positive

    def __post_init__(self) -> None:
        if self.op not in ALL_OPS:
            raise ValueError(f"unknown IR op {self.op!r}")

    def param(self, key: str, default: Any = None) -> Any:
        for k, v in self.params:
            if k == key:
                return v
        return default

    def with_(self, **changes: Any) -> "Node":
        return replace(self, **changes)

    @property
    def is_linear(self) -> bool:
        return self.op in LINEAR_OPS

    @property
    def body(self) -> "Circuit | None":
        return self.param("body")


def make_node(id: str, op: str, inputs: Iterable[str] = (), out: Iterable[str] = (),
              origin: str = "", is_set: bool = False, **params: Any) -> Node:
    """Build a node with frozen params (keyword order kept); ``out`` are its output columns."""
    return Node(id=id, op=op, inputs=tuple(inputs), params=tuple((k, v if isinstance(v, Circuit) else freeze(v))
                                                                for k, v in params.items()),
                columns=tuple(out), origin=origin or id, is_set=is_set)


@dataclass
class Circuit:
    """A DAG of nodes in topological order, with named inputs and outputs.

    ``outputs`` maps a view name to the node that produces it. ``inputs`` maps an input
    relation name to its columns. A nested circuit (a ``scope`` node's body) has the same shape.
    """

    name: str
    inputs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)

    def add(self, node: Node) -> Node:
        if node.id in self.nodes:
            raise ValueError(f"duplicate IR node id {node.id!r}")
        for i in node.inputs:
            if i not in self.nodes:
                raise ValueError(f"IR node {node.id!r} reads {i!r}, which is not defined before it")
        self.nodes[node.id] = node
        return node

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes.values())

    def __getitem__(self, node_id: str) -> Node:
        return self.nodes[node_id]

    def __contains__(self, node_id: str) -> bool:
        return node_id in self.nodes

    def consumers(self, node_id: str) -> list[Node]:
        """Nodes that read ``node_id`` (outputs are not nodes; see ``is_output``)."""
        return [n for n in self.nodes.values() if node_id in n.inputs]

    def is_output(self, node_id: str) -> bool:
        return node_id in self.outputs.values()

    def fresh_id(self, base: str) -> str:
        """An id not used yet, derived from ``base``."""
        if base not in self.nodes:
            return base
        i = 2
        while f"{base}#{i}" in self.nodes:
            i += 1
        return f"{base}#{i}"

    def copy(self) -> "Circuit":
        return Circuit(self.name, dict(self.inputs), dict(self.nodes), dict(self.outputs))

    def replace_node(self, node_id: str, node: Node) -> None:
        """Swap the definition of ``node_id`` in place (same id, same position)."""
        self.nodes[node_id] = node

    def rewire(self, old: str, new: str) -> None:
        """Make every reader of ``old`` (nodes and outputs) read ``new`` instead."""
        for nid, n in list(self.nodes.items()):
            if old in n.inputs:
                self.nodes[nid] = n.with_(inputs=tuple(new if i == old else i for i in n.inputs))
        for view, nid in list(self.outputs.items()):
            if nid == old:
                self.outputs[view] = new

    def prune(self, extra: Callable[[Node], Iterable[str]] = lambda node: ()) -> None:
        """Drop nodes that no output depends on. ``extra(node)`` names dependencies that are not
        input edges (a recursive body's back edge depends on its source)."""
        live: set[str] = set()
        stack = list(self.outputs.values())
        while stack:
            nid = stack.pop()
            if nid in live:
                continue
            live.add(nid)
            stack.extend(self.nodes[nid].inputs)
            stack.extend(extra(self.nodes[nid]))
        self.nodes = {k: v for k, v in self.nodes.items() if k in live}

    def toposort(self) -> None:
        """Re-establish topological order after rewires (stable for already-ordered nodes)."""
        order: dict[str, Node] = {}
        visiting: set[str] = set()

        def visit(nid: str) -> None:
            if nid in order:
                return
            if nid in visiting:
                raise ValueError(f"cycle through IR node {nid!r}")
            visiting.add(nid)
            for i in self.nodes[nid].inputs:
                visit(i)
            visiting.discard(nid)
            order[nid] = self.nodes[nid]

        for nid in list(self.nodes):
            visit(nid)
        self.nodes = order


STATE_KINDS = {
    "integrate": "integral of its input (trace of Z-set deltas)",
    "delay": "previous value of its input",
    "differentiate": "previous value of its input",
    "aggregate_linear": "per-group running totals (sums and counts)",
    "aggregate_touched": "previous output row per group",
    "integrate_nested": "per-iteration trace (rows tagged with their iteration, summed over timesteps)",
}


def state_of(circuit: Circuit, node: Node) -> str | None:
    """What state ``node`` keeps between timesteps, or None for a stateless operator.

    A delay whose input is an integrator keeps nothing of its own: z^-1(I(x)) is the integrator's
    state before the current step.
    """
    if node.op == "delay" and circuit[node.inputs[0]].op == "integrate":
        return None
    if node.op == "scope" and node.param("incremental"):
        traces = [n.id for n in node.body if n.op == "integrate_nested"]
        return f"{len(traces)} per-iteration trace(s) and the fixed point's depth"
    return STATE_KINDS.get(node.op)
