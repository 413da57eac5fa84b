"""The linear operators: input, map (select), filter, plus (UNION ALL) and negate.

Linear and time-invariant, each is its own incremental version (Theorem 3.3): applied to a
delta as is, no state. Inside a recursive body they apply to 2-D deltas unchanged.

Params: ``input``: name (the input relation), bag (a `changes` input: integrated for the bag check); ``map``: columns ((out, spark_sql_expr), ...);
``filter``: where (a Spark SQL predicate; NULL drops the row); ``plus`` / ``negate``: none.
"""
from __future__ import annotations

from spark_jobs.ir.bounds import Floor, Floors, combine, own_time_floor, plain_column
from spark_jobs.ir.builder import Builder, BodyBuilder
from spark_jobs.ir.graph import Circuit, Node, make_node
from spark_jobs.ir.operator import ALWAYS, INPUTS, LINEAR, Operator, builtin_kernels, operator, register
from spark_jobs.spec.model import NodeSpec

AS_IS = "linear: applied to the delta as is"


def same_on_the_change(circuit: Circuit, node: Node) -> str:
    return "the same operator on the change (linear, no state)"


def plus_form(circuit: Circuit, node: Node) -> str:
    """A plus of a join's three terms is that join's incremental form (``join.delta_form``)."""
    if node.inputs and all(i.startswith(node.id + "[") for i in node.inputs):
        form = operator(circuit[node.inputs[0]].op).delta_form
        if form is not None:
            return form(circuit, node)
    return same_on_the_change(circuit, node)


def rule_linear(b: Builder, node: Node, deltas: list[str]) -> str:
    """Theorem 3.3: a linear (time-invariant) operator is its own incremental version."""
    return b.add(node.with_(inputs=tuple(deltas)))


def rule_input(b: Builder, node: Node, deltas: list[str]) -> str:
    """An input is its own change; a `changes` input (``bag``) is also integrated, for the bag
    check of its deletions (``runtime/bag.py``): that integral is shared with the operators that
    integrate the same stream."""
    node_id = rule_linear(b, node, deltas)
    if node.param("bag"):
        b.integral(node_id)
    return node_id


def nested_as_is(bb: BodyBuilder, node: Node) -> None:
    """Inside a recursive body a linear operator applies to 2-D deltas unchanged."""
    bb.add(node)


def append_only_input(circuit: Circuit, node: Node) -> bool:
    """An input is insert-only when its source is ``append_only``: its reader refuses a file with
    a negative ``_weight`` and the step commits nothing (``executor/sources/formats.py``)."""
    return node.param("append_only") is True


def input_floor(circuit: Circuit, node: Node, column: str, floors: Floors) -> Floor | None:
    """A timed input's time column: its rows from now on are at or above its watermark (which
    moves about one lateness between compactions of the state it bounds)."""
    return own_time_floor(node) if node.param("time") == column else None


def same_floor(circuit: Circuit, node: Node, column: str, floors: Floors) -> Floor | None:
    """Rows of the input, unchanged (filter, negate): the input's floor."""
    return floors.of(node.inputs[0], column)


def map_floor(circuit: Circuit, node: Node, column: str, floors: Floors) -> Floor | None:
    """A selected plain column keeps the floor of the column it names; a computed one has none."""
    source = plain_column(dict(node.param("columns") or ()).get(column))
    return floors.of(node.inputs[0], source) if source is not None else None


def plus_floor(circuit: Circuit, node: Node, column: str, floors: Floors) -> Floor | None:
    return combine([floors.of(i, column) for i in node.inputs])


INPUT = register(Operator(
    "input", arity=0, linearity=LINEAR, symbol="in", positive=ALWAYS, insert_only=append_only_input,
    summary="the change of an input relation (its value in the query circuit)",
    incremental=rule_input, delta_form=same_on_the_change, floor=input_floor, kernels=builtin_kernels("input", narrow="input_keys")))

MAP = register(Operator(
    "map", arity=1, linearity=LINEAR, symbol="map", positive=INPUTS, insert_only=INPUTS,
    distinct_moves=frozenset({"once"}),
    summary="computed columns, weights unchanged (select)", incremental=rule_linear, nested=nested_as_is,
    note=AS_IS, delta_form=same_on_the_change, floor=map_floor, kernels=builtin_kernels("map", loop="linear", body="body_map",
                                                narrow="map_keys")))

FILTER = register(Operator(
    "filter", arity=1, linearity=LINEAR, symbol="σ", positive=INPUTS, insert_only=INPUTS,
    distinct_moves=frozenset({"delay", "once"}),
    summary="rows whose predicate is true", incremental=rule_linear, nested=nested_as_is, note=AS_IS,
    delta_form=same_on_the_change, floor=same_floor, kernels=builtin_kernels("filter", loop="linear", body="body_filter",
                                                narrow="same_keys")))

PLUS = register(Operator(
    "plus", arity=None, linearity=LINEAR, symbol="+", positive=INPUTS, insert_only=INPUTS,
    distinct_moves=frozenset({"once"}),
    summary="Z-set addition (UNION ALL)", incremental=rule_linear, nested=nested_as_is, note=AS_IS,
    delta_form=plus_form, floor=plus_floor, kernels=builtin_kernels("plus", loop="plus", narrow="plus_keys")))

NEGATE = register(Operator(
    "negate", arity=1, linearity=LINEAR, symbol="−", summary="every weight negated",
    incremental=rule_linear, nested=nested_as_is, note=AS_IS, delta_form=same_on_the_change, floor=same_floor,
    kernels=builtin_kernels("negate", loop="linear", body="body_negate",
                                                narrow="same_keys")))


# ---- YAML ops compiled to these operators (their spec/ops/ modules name these functions) -----

def from_select(c: Circuit, n: NodeSpec, cols: dict, ctx: object) -> Node:
    """``select`` / ``map``: the linear map of the columns' expressions."""
    return c.add(make_node(n.name, "map", [n.input], cols[n.name], columns=n.columns))


def from_filter(c: Circuit, n: NodeSpec, cols: dict, ctx: object) -> Node:
    return c.add(make_node(n.name, "filter", [n.input], cols[n.name], is_set=c[n.input].is_set, where=n.where))


def from_union_all(c: Circuit, n: NodeSpec, cols: dict, ctx: object) -> Node:
    """``union_all``: the Z-set sum of its inputs."""
    return c.add(make_node(n.name, "plus", n.references, cols[n.name]))
