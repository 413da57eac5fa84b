"""Join (equi-join or product), bilinear: Δ(a⋈b) = Δa⋈Δb + z⁻¹(I a)⋈Δb + Δa⋈z⁻¹(I b) (Theorem 3.4).

Params: left_keys, right_keys (column tuples; empty = Cartesian product); null_safe (True for
set operations: NULL matches NULL; False for SQL equi-joins); left_out / right_out:
((source column, output name), ...) of the columns kept, left's then right's; ``within``
(an interval join): (left time column, right time column, range in µs): a pair matches only
when the two times differ by at most the range (and the keys, if any, are equal).

State bound (``ir/bounds.py``): a row of one side's integral that no future row of the other
side can match is dropped at compaction: with ``within``, a left row whose time is below the
floor of the right's time minus the range (and symmetrically); with an equi-key whose other side
has a floor (a window column), a row whose key is below it.

Inside a recursive body a join becomes ``join_nested`` (inputs Δa, Δb and their per-iteration
traces): the bilinear rule in two time dimensions, four terms (``executor/loop.join_nested``).
"""
from __future__ import annotations

from spark_jobs.ir.bounds import Floors, Forget
from spark_jobs.ir.builder import Builder, BodyBuilder
from spark_jobs.ir.graph import Circuit, Node, make_node
from spark_jobs.spec.time import format_duration
from spark_jobs.ir.operator import BILINEAR, INPUTS, Operator, builtin_kernels, register
from spark_jobs.spec.columns import join_layout
from spark_jobs.spec.model import NodeSpec


def rule_bilinear(b: Builder, node: Node, deltas: list[str]) -> str:
    """Theorem 3.4: Δ(a⋈b) = Δa⋈Δb + z⁻¹(I a)⋈Δb + Δa⋈z⁻¹(I b)."""
    da, db = deltas
    za, zb = b.delayed_integral(da), b.delayed_integral(db)
    terms = []
    for suffix, pair in (("ΔaΔb", (da, db)), ("Ia·Δb", (za, db)), ("Δa·Ib", (da, zb))):
        terms.append(b.add(node.with_(id=f"{node.id}[{suffix}]", inputs=pair, origin=node.origin)))
    return b.add(make_node(node.id, "plus", terms, node.columns, origin=node.origin))


def nested_join(bb: BodyBuilder, node: Node) -> None:
    """In a body: the join reads the 2-D deltas of its inputs and their per-iteration traces."""
    a, b = node.inputs
    ta = bb.trace(a, tuple(node.param("left_keys") or bb.inc[a].columns))
    tb = bb.trace(b, tuple(node.param("right_keys") or bb.inc[b].columns))
    bb.add(node.with_(op="join_nested", inputs=(a, b, ta, tb)))


def join_keys(node: Node, position: int) -> tuple[str, ...]:
    """The key columns of side ``position`` (0 left, 1 right); empty for a product."""
    return tuple(node.param("left_keys" if position == 0 else "right_keys") or ())


def _forgets(circuit: Circuit, node: Node, position: int | None, floors: Floors) -> Forget | None:
    """Rows of the integral at ``position`` that no future change of the other side can match."""
    if position is None:
        return None
    other = node.inputs[1 - position]
    within = node.param("within")
    if within:
        mine, theirs, range_us = within[position], within[1 - position], int(within[2])
        floor = floors.of(other, theirs)
        if floor is not None:
            return Forget(mine, floor.shifted(-range_us, max(floor.grain_us, range_us)))
    for mine, theirs in zip(join_keys(node, position), join_keys(node, 1 - position)):
        floor = floors.of(other, theirs)
        if floor is not None:
            return Forget(mine, floor)
    return None


def describe_within(node: Node) -> str:
    """``|l.ts - r.ts| <= 5 minutes``: an interval join's condition (explain)."""
    left, right, range_us = node.param("within")
    return f"|{left} - {right}| <= {format_duration(int(range_us))}"


def delta_form(circuit: Circuit, terms: Node) -> str:
    """``explain``: the plus of a join's terms, and the integrals they read."""
    delays = [j for t in terms.inputs for j in circuit[t].inputs if circuit[j].op == "delay"]
    traces = list(dict.fromkeys(circuit[j].inputs[0] for j in delays))
    return ("Δl⋈Δr + z⁻¹(I l)⋈Δr + Δl⋈z⁻¹(I r): joins the change with the other side's integral; "
            f"reads {', '.join(traces)}")


def _side(circuit: Circuit, node: Node, position: int) -> str:
    return f"{'left' if position == 0 else 'right'} side of join {node.origin!r}"


JOIN = register(Operator(
    "join", arity=2, linearity=BILINEAR, symbol="⋈", positive=INPUTS, insert_only=INPUTS,
    distinct_moves=frozenset({"delay", "once"}),
    summary="inner equi-join (or product); weights multiply", incremental=rule_bilinear, nested=nested_join,
    lookup=join_keys, uses=_side, delta_form=delta_form, forgets=_forgets, kernels=builtin_kernels("join", narrow="join_keys")))
# insert_only=INPUTS: over insert-only inputs all three terms of the rule are products of
# non-negative Z-sets (a change, or the integral of non-negative changes), so the change is too

JOIN_NESTED = register(Operator(
    "join_nested", arity=4, linearity=BILINEAR, symbol="⋈ (2-D)", in_body_only=True,
    summary="a body join on 2-D deltas: inputs (Δa, Δb, I(Δa), I(Δb))",
    note="Δ(a⋈b) in 2-D: 4 terms over (this/earlier timestep) × (this/earlier iteration)",
    kernels=builtin_kernels(None, loop="join_nested", typed="join_type", probe="join_probes")))


# ---- the YAML ops compiled to joins (spec/ops/join.py names these functions) -----------------

def _join_keys(n: NodeSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if n.on:
        return n.on, n.on
    return n.left_on, n.right_on


def from_join(c: Circuit, n: NodeSpec, cols: dict, ctx: object) -> Node:
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


def from_antijoin(c: Circuit, n: NodeSpec, cols: dict, ctx: object) -> Node:
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
