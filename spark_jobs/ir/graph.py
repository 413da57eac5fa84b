"""The circuit IR: an engine-free graph of DBSP operators over Z-sets.

A ``Circuit`` holds ``Node``s in topological order. The same node kinds describe the query
circuit (what the user means, evaluated on whole relations) and the incremental circuit
(evaluated on changes, with state). No Spark here: the executor interprets these nodes.

What a node's ``op`` means (its inputs, params, linearity, state, incremental rule, kernels) is
defined once, by the operator's own module under ``spark_jobs/ir/ops/`` (see ``operator.py``);
this module only knows the graph. Params are plain tuples/strings, so nodes are hashable and
printable.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator

from spark_jobs.ir.operator import LINEAR, is_known, operator

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
        if not is_known(self.op):
            raise ValueError(f"unknown IR op {self.op!r}")
        arity = operator(self.op).arity
        if arity is not None and len(self.inputs) != arity:
            raise ValueError(f"IR node {self.id!r}: op {self.op!r} takes {arity} input(s), got {len(self.inputs)}")

    def param(self, key: str, default: Any = None) -> Any:
        for k, v in self.params:
            if k == key:
                return v
        return default

    def with_(self, **changes: Any) -> "Node":
        return replace(self, **changes)

    @property
    def is_linear(self) -> bool:
        return operator(self.op).linearity == LINEAR

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


def state_of(circuit: Circuit, node: Node) -> str | None:
    """What state ``node`` keeps between timesteps, or None for a stateless operator (from its
    operator's definition: a delay of an integral, for one, keeps none of its own)."""
    op = operator(node.op)
    if not op.stateful(circuit, node):
        return None
    what = op.state.what  # type: ignore[union-attr]
    return what(circuit, node) if callable(what) else what
