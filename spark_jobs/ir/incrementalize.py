"""The incrementalizer: query circuit Q -> incremental circuit Q^Δ (Algorithm 4.6 steps 3-5).

By the chain rule, (Q1 ∘ Q2)^Δ = Q1^Δ ∘ Q2^Δ, so each operator is replaced by its own incremental
version, reading the *delta* streams of its inputs. One small rule per operator family:

- linear operators (map, filter, plus, negate) are their own incremental version (Theorem 3.3);
- a bilinear join becomes Δa⋈Δb + z⁻¹(I a)⋈Δb + Δa⋈z⁻¹(I b) (Theorem 3.4);
- distinct becomes H(Δx, z⁻¹(I x)) (Proposition 4.7);
- aggregates: linear ones (count, sum, avg) keep per-group totals; the others recompute only the
  groups the delta touches from the integrated input (section 7);
- the stream operators I, z⁻¹, D are invariant: inc(I) = I, inc(z⁻¹) = z⁻¹, inc(D) = D;
- a recursive scope becomes its nested incremental version (section 6, eq. 6.1): its body runs on
  2-D deltas (timestep × iteration); joins and distincts get per-iteration traces.

Every `changes` input (an input node with ``bag``) is integrated: the runtime checks each step's
deletions against that integral, so no tuple's weight goes below zero (executor/bag_check.py).

Integrators are shared: a stream integrated for two operators (or for the bag check and a join
that reads the input itself) is integrated once.
"""
from __future__ import annotations

from typing import Callable

from spark_jobs.ir.graph import LINEAR_AGGREGATES, LINEAR_OPS, Circuit, Node, make_node

Rule = Callable[["Builder", Node, list[str]], str]


class Builder:
    """Accumulates the incremental circuit while rules are applied node by node."""

    def __init__(self, query: Circuit) -> None:
        self.query = query
        self.inc = Circuit(f"{query.name}^Δ", inputs=dict(query.inputs))
        self.delta_of: dict[str, str] = {}  # query node id -> incremental node producing its delta

    def add(self, node: Node) -> str:
        return self.inc.add(node).id

    def integral(self, stream: str) -> str:
        """I(stream), created once per stream."""
        node_id = f"I({stream})"
        if node_id not in self.inc:
            src = self.inc[stream]
            self.add(make_node(node_id, "integrate", [stream], src.columns, origin=src.origin))
        return node_id

    def delayed_integral(self, stream: str) -> str:
        """z⁻¹(I(stream)): the integral as of the previous timestep (the integrator's state)."""
        integral = self.integral(stream)
        node_id = f"z({integral})"
        if node_id not in self.inc:
            src = self.inc[stream]
            self.add(make_node(node_id, "delay", [integral], src.columns, origin=src.origin))
        return node_id


def bag_integrals(circuit: Circuit) -> dict[str, str]:
    """Input name -> the integrator of that input that the bag check reads (``bag`` inputs)."""
    out = {}
    for node in circuit:
        if node.op == "input" and node.param("bag") and f"I({node.id})" in circuit:
            out[node.param("name") or node.id] = f"I({node.id})"
    return out


def rule_linear(b: Builder, node: Node, deltas: list[str]) -> str:
    """Theorem 3.3: a linear (time-invariant) operator is its own incremental version."""
    return b.add(node.with_(inputs=tuple(deltas)))


def rule_bilinear(b: Builder, node: Node, deltas: list[str]) -> str:
    """Theorem 3.4: Δ(a⋈b) = Δa⋈Δb + z⁻¹(I a)⋈Δb + Δa⋈z⁻¹(I b)."""
    da, db = deltas
    za, zb = b.delayed_integral(da), b.delayed_integral(db)
    terms = []
    for suffix, pair in (("ΔaΔb", (da, db)), ("Ia·Δb", (za, db)), ("Δa·Ib", (da, zb))):
        terms.append(b.add(node.with_(id=f"{node.id}[{suffix}]", inputs=pair, origin=node.origin)))
    return b.add(make_node(node.id, "plus", terms, node.columns, origin=node.origin))


def rule_distinct(b: Builder, node: Node, deltas: list[str]) -> str:
    """Proposition 4.7: Δdistinct = H(Δx, z⁻¹(I x)); work bounded by the delta."""
    (dx,) = deltas
    return b.add(make_node(node.id, "distinct_h", [dx, b.delayed_integral(dx)], node.columns,
                           origin=node.origin))


def rule_aggregate(b: Builder, node: Node, deltas: list[str]) -> str:
    """Section 7: linear aggregates from the delta; others re-evaluated for touched groups only."""
    (dx,) = deltas
    aggs = node.param("aggs")
    linear = all(func in LINEAR_AGGREGATES and not distinct for _, func, _, distinct in aggs)
    if linear:
        return b.add(node.with_(op="aggregate_linear", inputs=(dx,)))
    return b.add(node.with_(op="aggregate_touched", inputs=(dx, b.integral(dx))))


def rule_stream_invariant(b: Builder, node: Node, deltas: list[str]) -> str:
    """inc(I) = I, inc(z⁻¹) = z⁻¹, inc(D) = D (Proposition 3.2, invariance)."""
    return b.add(node.with_(inputs=tuple(deltas)))


def incrementalize_body(body: Circuit) -> Circuit:
    """The body of a scope on 2-D deltas: inc(lift(inc(lift T))) of section 6, operator by operator.

    Linear operators, ``δ0`` and the back edges ``z⁻¹`` apply to 2-D deltas unchanged. A join
    reads the 2-D deltas of its inputs and their per-iteration traces (the 4-term rule); a
    distinct reads its input's delta and trace. One trace per stream, shared by its readers.
    """
    inc = Circuit(f"{body.name}^Δ", inputs=dict(body.inputs))

    def trace(stream: str, keys: tuple[str, ...]) -> str:
        node_id = f"I({stream})"
        if node_id not in inc:
            src = inc[stream]
            inc.add(make_node(node_id, "integrate_nested", [stream], src.columns, origin=src.origin, keys=keys))
        return node_id

    for node in body:
        if node.op in LINEAR_OPS or node.op in ("delta0", "feedback"):
            inc.add(node)
        elif node.op == "join":
            a, b = node.inputs
            ta = trace(a, tuple(node.param("left_keys") or inc[a].columns))
            tb = trace(b, tuple(node.param("right_keys") or inc[b].columns))
            inc.add(node.with_(op="join_nested", inputs=(a, b, ta, tb)))
        elif node.op == "distinct":
            (x,) = node.inputs
            inc.add(node.with_(op="distinct_nested", inputs=(x, trace(x, inc[x].columns))))
        else:
            raise ValueError(f"operator {node.op!r} (node {node.id!r}) cannot run inside a recursive scope")
    inc.outputs = dict(body.outputs)
    return inc


def rule_scope(b: Builder, node: Node, deltas: list[str]) -> str:
    """Equation (6.1): the scope on the outer deltas, its body incremental in both clocks."""
    params = tuple((k, incrementalize_body(v) if k == "body" else v) for k, v in node.params)
    return b.add(node.with_(inputs=tuple(deltas), params=params + (("incremental", True),)))


RULES: dict[str, Rule] = {
    **{op: rule_linear for op in LINEAR_OPS if op != "input"},
    "join": rule_bilinear,
    "distinct": rule_distinct,
    "aggregate": rule_aggregate,
    "integrate": rule_stream_invariant,
    "delay": rule_stream_invariant,
    "differentiate": rule_stream_invariant,
    "scope": rule_scope,
}


def incrementalize(query: Circuit) -> Circuit:
    """Return the incremental circuit of ``query``; its outputs produce the views' deltas."""
    b = Builder(query)
    for node in query:
        if node.op == "input":
            b.delta_of[node.id] = b.add(node)
            if node.param("bag"):
                b.integral(node.id)
            continue
        rule = RULES.get(node.op)
        if rule is None:
            raise ValueError(f"no incremental rule for operator {node.op!r} (node {node.id!r})")
        b.delta_of[node.id] = rule(b, node, [b.delta_of[i] for i in node.inputs])
    b.inc.outputs = {view: b.delta_of[nid] for view, nid in query.outputs.items()}
    return b.inc
