"""The incrementalizer: query circuit Q -> incremental circuit Q^Δ (Algorithm 4.6 steps 3-5).

By the chain rule, (Q1 ∘ Q2)^Δ = Q1^Δ ∘ Q2^Δ, so each operator is replaced by its own incremental
version, reading the *delta* streams of its inputs. Each operator's module
(``spark_jobs/ir/ops/``) states its rule (``Operator.incremental``):

- linear operators (map, filter, plus, negate) are their own incremental version (Theorem 3.3);
- a bilinear join becomes Δa⋈Δb + z⁻¹(I a)⋈Δb + Δa⋈z⁻¹(I b) (Theorem 3.4);
- distinct becomes H(Δx, z⁻¹(I x)) (Proposition 4.7);
- aggregates: linear ones (count, sum, avg) keep per-group totals; the others recompute only the
  groups the delta touches from the integrated input (section 7);
- the stream operators I, z⁻¹, D are invariant: inc(I) = I, inc(z⁻¹) = z⁻¹, inc(D) = D;
- a recursive scope becomes its nested incremental version (section 6, eq. 6.1): its body runs on
  2-D deltas (timestep × iteration); joins and distincts get per-iteration traces
  (``Operator.nested``).

Every `changes` input (an input node with ``bag``) is integrated (``ops/linear.rule_input``):
the runtime checks each step's deletions against that integral, so no tuple's weight goes below
zero (executor/bag_check.py).

Integrators are shared: a stream integrated for two operators (or for the bag check and a join
that reads the input itself) is integrated once (``Builder.integral``).
"""
from __future__ import annotations

from spark_jobs.ir.builder import BodyBuilder, Builder
from spark_jobs.ir.graph import Circuit
from spark_jobs.ir.operator import operator

__all__ = ["BAG_ROW_GROUP_BYTES", "Builder", "bag_integrals", "bag_only", "incrementalize", "incrementalize_body",
           "integral_row_group_bytes"]


def bag_integrals(circuit: Circuit) -> dict[str, str]:
    """Input name -> the integrator of that input that the bag check reads (``bag`` inputs)."""
    out = {}
    for node in circuit:
        if node.op == "input" and node.param("bag") and f"I({node.id})" in circuit:
            out[node.param("name") or node.id] = f"I({node.id})"
    return out


# the row groups of an input's integral that only the bag check reads (``StateUpdate.row_group_bytes``;
# the store's default is 256 KiB): the check looks up the tuples a change deletes and decodes
# every row group a deleted key falls in, all columns. W1's line items: ~4,600 rows a group at
# 256 KiB, ~1,100 at 64 KiB, so a 1,000-row change decodes a quarter as many rows; 10k deleted
# orders fall in 53% of SF10's 13k groups, 17% of the 52k smaller ones. A bigger footer (read
# once per process) is the price.
BAG_ROW_GROUP_BYTES = 64 * 1024


def bag_only(circuit: Circuit, integral_id: str) -> bool:
    """Is ``integral_id`` an input's integral that only the bag check reads (no operator of
    ``circuit`` reads it: W1's inputs are filtered and projected before their joins)?"""
    return (integral_id in bag_integrals(circuit).values()
            and not any(integral_id in node.inputs for node in circuit))


def integral_row_group_bytes(circuit: Circuit, integral_id: str) -> int:
    """The row-group size of an integrator's trace (0: the store's default)."""
    return BAG_ROW_GROUP_BYTES if bag_only(circuit, integral_id) else 0


def incrementalize_body(body: Circuit) -> Circuit:
    """The body of a scope on 2-D deltas: inc(lift(inc(lift T))) of section 6, operator by operator.

    Linear operators, ``δ0`` and the back edges ``z⁻¹`` apply to 2-D deltas unchanged. A join
    reads the 2-D deltas of its inputs and their per-iteration traces (the 4-term rule); a
    distinct reads its input's delta and trace. One trace per stream, shared by its readers.
    """
    bb = BodyBuilder(body)
    for node in body:
        rule = operator(node.op).nested
        if rule is None:
            raise ValueError(f"operator {node.op!r} (node {node.id!r}) cannot run inside a recursive scope")
        rule(bb, node)
    bb.inc.outputs = dict(body.outputs)
    return bb.inc


def incrementalize(query: Circuit) -> Circuit:
    """Return the incremental circuit of ``query``; its outputs produce the views' deltas."""
    b = Builder(query)
    for node in query:
        rule = operator(node.op).incremental
        if rule is None:
            raise ValueError(f"no incremental rule for operator {node.op!r} (node {node.id!r})")
        b.delta_of[node.id] = rule(b, node, [b.delta_of[i] for i in node.inputs])
    b.inc.outputs = {view: b.delta_of[nid] for view, nid in query.outputs.items()}
    return b.inc
