"""Distinct consolidation (Algorithm 4.6 step 2): Propositions 4.4 and 4.5 of the paper.

Each incremental ``distinct`` keeps the integral of its input as state, so fewer distincts means
less state. Both rules need positive inputs (all weights >= 0), which holds for relations built
from inputs without negation; ``is_positive`` checks it structurally.

Each rule is a small function ``Circuit -> bool`` (changed or not) that rewrites in place;
``consolidate_distinct`` applies them until nothing changes, in the style of sqlglot's passes.
"""
from __future__ import annotations

from spark_jobs.ir.graph import Circuit, Node
from spark_jobs.ir.operator import ALWAYS, INPUTS, operator


def _moves(op: str, rule: str) -> bool:
    """May a distinct be delayed through (rule "delay", Prop. 4.4) or dropped before a later one
    through (rule "once", Prop. 4.5) operator ``op``? (``Operator.distinct_moves``)"""
    return rule in operator(op).distinct_moves


def is_positive(circuit: Circuit, node_id: str) -> bool:
    """True when the node's value is a positive Z-set whenever the circuit's inputs are."""
    node = circuit[node_id]
    positive = operator(node.op).positive
    if positive == ALWAYS:
        return True
    if positive != INPUTS:
        return False
    return all(is_positive(circuit, i) for i in node.inputs)


def _single_internal_consumer(circuit: Circuit, node_id: str) -> Node | None:
    """The only reader of ``node_id``, or None when it has several or is a published view."""
    if circuit.is_output(node_id):
        return None
    readers = circuit.consumers(node_id)
    return readers[0] if len(readers) == 1 else None


def _bypass(circuit: Circuit, distinct_id: str) -> None:
    """Remove a distinct node, making its readers read its input."""
    source = circuit[distinct_id].inputs[0]
    circuit.rewire(distinct_id, source)
    del circuit.nodes[distinct_id]


def _reaches_distinct(circuit: Circuit, node_id: str) -> bool:
    """Does ``node_id`` flow, through a private chain of operators a distinct may be dropped through (Prop. 4.5), into a distinct?"""
    current = node_id
    while True:
        reader = _single_internal_consumer(circuit, current)
        if reader is None:
            return False
        if reader.op == "distinct":
            return True
        if not _moves(reader.op, "once") or not all(is_positive(circuit, i) for i in reader.inputs):
            return False
        current = reader.id


def rule_distinct_once(circuit: Circuit) -> bool:
    """Prop. 4.5: distinct(Q(distinct(i))) = distinct(Q(i)) for Q in filter/map/plus/join.

    A distinct whose only reader leads (through such operators, each read once) into another
    distinct is redundant: drop it. distinct(distinct(x)) is the case where Q is the identity.
    """
    for node in list(circuit):
        if node.op == "distinct" and is_positive(circuit, node.inputs[0]) and _reaches_distinct(circuit, node.id):
            _bypass(circuit, node.id)
            return True
    return False


def rule_delay_distinct(circuit: Circuit) -> bool:
    """Prop. 4.4: Q(distinct(i)) = distinct(Q(i)) for Q in filter/join (i positive).

    Moving a distinct after a filter shrinks its state (it integrates the filtered relation);
    after a join it replaces two distincts by one. Applied where every input of Q is a distinct
    read only by Q.
    """
    for node in list(circuit):
        if not _moves(node.op, "delay") or not node.inputs:
            continue
        sources = [circuit[i] for i in node.inputs]
        if len(set(node.inputs)) != len(node.inputs):
            continue
        if not all(s.op == "distinct" and _single_internal_consumer(circuit, s.id) is node
                   and is_positive(circuit, s.inputs[0]) for s in sources):
            continue
        for s in sources:
            _bypass(circuit, s.id)
        moved = circuit[node.id]
        new_id = circuit.fresh_id(f"{node.id}.distinct")
        distinct = Node(id=new_id, op="distinct", inputs=(node.id,), columns=node.columns,
                        origin=node.origin, is_set=True)
        circuit.rewire(node.id, new_id)
        circuit.nodes[new_id] = distinct
        circuit.replace_node(node.id, moved.with_(is_set=False))
        circuit.toposort()
        return True
    return False


def rule_distinct_of_set(circuit: Circuit) -> bool:
    """distinct(x) = x when x is already a set (the output of a distinct, an aggregate, ...)."""
    for node in list(circuit):
        if node.op == "distinct" and circuit[node.inputs[0]].is_set:
            _bypass(circuit, node.id)
            return True
    return False


RULES = (rule_distinct_of_set, rule_distinct_once, rule_delay_distinct)


def consolidate_distinct(circuit: Circuit) -> Circuit:
    """Apply the distinct rules until convergence; returns a new circuit."""
    result = circuit.copy()
    changed = True
    while changed:
        changed = any(rule(result) for rule in RULES)
    result.prune()
    return result
