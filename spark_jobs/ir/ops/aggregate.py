"""GROUP BY aggregates (section 7 of the paper) and their two incremental forms.

Params: group_by (columns); aggs: ((out, func, arg_expr or None for count(*), distinct), ...)
with func one of count, sum, avg, min, max. Without group_by there is one row, even on empty input.

- ``aggregate_linear`` (only count, sum, avg, none DISTINCT): the change of the output from the
  delta alone, given per-group running totals (its state, a "sum" trace keyed by the groups).
- ``aggregate_touched`` (inputs: the delta, the integral of the input): recompute only the
  groups the delta touches from the integral; its state is the previous output per group, so
  the old row of a touched group is known without recomputing it.
  With only min/max (no DISTINCT) over a positive input (``positive_input``: every row of the
  integral has weight >= 0), the Arrow kernel keeps the extrema it emitted: a touched group whose
  change deletes no row at its extremum (nor any row when the extremum is NULL) gets extremum(old,
  the change's inserts) without reading the integral; only the groups whose extremum row was
  deleted are recomputed, from their own rows of the integral (a per-window max: a step's cost
  follows the change, not the open window). The Spark kernel recomputes every touched group; both
  give the same rows and state.
- ``aggregate_insert_only`` (min/max, with or without count/sum/avg, none DISTINCT, over an
  insert-only input: ``operator.is_insert_only``): a group's min can only fall and its max only
  rise, so the new extremum is the extremum of the old one and the delta's. Its state is one row
  per group (running totals and extrema); it keeps no integral of its input: O(groups), not
  O(rows).
"""
from __future__ import annotations

from spark_jobs.ir.bounds import Floor, Floors, Forget, group_forget
from spark_jobs.ir.builder import Builder
from spark_jobs.ir.graph import Circuit, Node, make_node
from spark_jobs.ir.operator import ALWAYS, NONLINEAR, Operator, State, builtin_kernels, is_insert_only, register
from spark_jobs.spec.model import NodeSpec
from spark_jobs.spec.time import WINDOW_COLUMNS

LINEAR_AGGREGATES = frozenset({"count", "sum", "avg"})
EXTREMA = frozenset({"min", "max"})


def is_linear(aggs) -> bool:
    """Can every aggregate be maintained from deltas and running totals?"""
    return all(func in LINEAR_AGGREGATES and not distinct for _, func, _, distinct in aggs)


def monotone(aggs) -> bool:
    """Can every aggregate be maintained from running totals and extrema when rows are only
    ever inserted (no DISTINCT: that needs the set of values)?"""
    return all(func in LINEAR_AGGREGATES | EXTREMA and not distinct for _, func, _, distinct in aggs)


def rule_aggregate(b: Builder, node: Node, deltas: list[str]) -> str:
    """Section 7: linear aggregates from the delta; min/max over an insert-only input from the
    old extrema and the delta; others re-evaluated for touched groups only."""
    (dx,) = deltas
    aggs = node.param("aggs")
    if is_linear(aggs):
        return b.add(node.with_(op="aggregate_linear", inputs=(dx,)))
    if monotone(aggs) and is_insert_only(b.query, node.inputs[0]):
        return b.add(node.with_(op="aggregate_insert_only", inputs=(dx,)))
    touched = node.with_(op="aggregate_touched", inputs=(dx, b.integral(dx)))
    if extrema_only(aggs) and node.param("group_by"):
        from spark_jobs.ir.optimize import is_positive

        if is_positive(b.query, node.inputs[0]):  # a deleted row was in the bag: the kept extrema decide
            touched = touched.with_(params=touched.params + (("positive_input", True),))
    return b.add(touched)


def extrema_only(aggs) -> bool:
    """Only min/max, none DISTINCT: a group's output is its extrema, kept from step to step."""
    return bool(aggs) and all(func in EXTREMA and not distinct for _, func, _, distinct in aggs)


def group_keys(circuit: Circuit, node: Node) -> tuple[str, ...]:
    return tuple(node.param("group_by") or ())


def _groups_of_integral(node: Node, position: int) -> tuple[str, ...] | None:
    """``aggregate_touched`` looks its integrated input (input 1) up by the groups."""
    return tuple(node.param("group_by") or ()) if position == 1 else None


def group_floor(circuit: Circuit, node: Node, column: str, floors: Floors) -> Floor | None:
    """Only the groups a change touches change: a group column keeps its floor in the input."""
    return floors.of(node.inputs[0], column) if column in group_keys(circuit, node) else None


def group_forgets(circuit: Circuit, node: Node, position: int | None, floors: Floors) -> Forget | None:
    """Its own state and its integrated input are looked up by group: a group below its floor
    (a closed window) is never touched again."""
    return group_forget(circuit, node, group_keys(circuit, node), floors)


AGGREGATE = register(Operator(
    "aggregate", arity=1, linearity=NONLINEAR, symbol="agg", positive=ALWAYS, consolidated=True,
    summary="GROUP BY with count/sum/avg/min/max (SQL semantics)", incremental=rule_aggregate,
    kernels=builtin_kernels("aggregate")))

AGGREGATE_LINEAR = register(Operator(
    "aggregate_linear", arity=1, linearity=NONLINEAR, symbol="agg(linear)", consolidated=True,
    form_of="aggregate",
    summary="linear aggregates from the delta and per-group running totals",
    # format 2: exact running totals (integer limbs for float sums, decimal(38,...) for integers
    # and decimals; issue 19): state of format 1 is refused with the reset hint, not misread
    state=State("per-group running totals (exact sums and counts)", kind="sum", keys=group_keys, format=2),
    delta_form=lambda c, n: "per-group running totals from the change (state: the totals of the touched groups)",
    floor=group_floor, forgets=group_forgets, kernels=builtin_kernels("aggregate_linear")))

AGGREGATE_TOUCHED = register(Operator(
    "aggregate_touched", arity=2, linearity=NONLINEAR, symbol="agg(touched)", consolidated=True,
    form_of="aggregate",
    summary="recompute the groups the delta touches from the integrated input",
    state=State("previous output row per group", keys=group_keys, update_reads="output"),
    lookup=_groups_of_integral, uses=lambda c, n, p: f"integrated input of aggregate {n.origin!r}",
    delta_form=lambda c, n: (f"recomputes only the groups in the change from {n.inputs[1]}, keeps its previous "
                             f"output per group"),
    floor=group_floor, forgets=group_forgets, kernels=builtin_kernels("aggregate_touched")))

AGGREGATE_INSERT_ONLY = register(Operator(
    "aggregate_insert_only", arity=1, linearity=NONLINEAR, symbol="agg(insert-only)", consolidated=True,
    summary="min/max (and count/sum/avg) of an insert-only input from per-group totals and extrema",
    # one row per group (zset: each step appends -old +new state rows of the groups it touches,
    # which compaction cancels): running totals as aggregate_linear's, then the extrema
    state=State("per-group running totals and extrema (inserts only: no integral of the input)",
                keys=group_keys),
    delta_form=lambda c, n: ("new extremum = extremum(old, change's), totals plus the change's "
                             "(state: one row per touched group)"),
    floor=group_floor, forgets=group_forgets, kernels=builtin_kernels("aggregate_insert_only")))


# ---- the YAML op compiled to it (spec/ops/aggregate.py names this function) ------------------

def from_aggregate(c: Circuit, n: NodeSpec, cols: dict, ctx: object) -> Node:
    """GROUP BY; with a ``window``, a window assignment first, then the groups (window_start,
    window_end, group_by...) (``ir/ops/window.py``)."""
    from spark_jobs.ir.ops.window import add_window_assign

    aggs = tuple((a.name, a.func, a.arg, a.distinct) for a in n.aggregates)
    source, groups = n.input, tuple(n.group_by)
    if n.window is not None:
        source = add_window_assign(c, f"{n.name}.window", n.input, n.window, origin=n.name)
        groups = WINDOW_COLUMNS + groups
    return c.add(make_node(n.name, "aggregate", [source], cols[n.name], is_set=True,
                           group_by=groups, aggs=aggs))
