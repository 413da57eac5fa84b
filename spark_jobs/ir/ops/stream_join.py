"""The relation-to-stream join (paper, section 7.5): ``op: join`` with ``stream: left|right``.

Why its own operator: a plain join is bilinear, so its incremental form joins each side's change
with the other side's integral (Theorem 3.4) and must keep both integrals. Here one side is a
stream of events that only inserts (an ``append_only`` input, through filters, selects and
other stream joins), and each event is joined **once, on arrival**, with the relation as of that
timestep. Later changes of the relation do not revise output rows already emitted:

    Δout_t = Δs_t ⋈ I(r)_t = Δs_t ⋈ Δr_t + Δs_t ⋈ z⁻¹(I r)_t

so the view at step t is Σ_{τ<=t} Δs_τ ⋈ I(r)_τ (the sum over steps of each step's arrivals
joined with the relation then), and the stream side keeps **no state**: only the relation's
integral is kept. Over a relation that only grows by rows no earlier event matches, this is
the plain join; after a change of a matched relation row it is not (the old output stays).

Params are a join's (``left_keys``, ``right_keys``, ``null_safe``, ``left_out``, ``right_out``)
plus ``stream``: "left" or "right". Inputs stay in (left, right) order, so the join kernels
(``executor/spark/kernels.py`` / ``executor/arrow/kernels.py``: ``join``) run both terms unchanged; the term that
reads z⁻¹(I r) narrows the relation's state to the keys of the step's arrivals. The terms are
added and consolidated (``executor/kernels/stream_join.py``): Δs⋈Δr alone is negative where a
matched relation row is deleted in the step its stream row arrives.

Bounds (``ir/bounds.py``): an output column taken from the stream side keeps the stream's floor,
so a windowed aggregate over a stream join drops closed windows; the relation's integral drops
rows whose key is below the stream's floor of the matching key (a join on a window column).

Evaluated on its own in one step (a query over whole inputs, a full refresh), every stream row
arrives at once: it is then the plain join with the relation as it is now.
"""
from __future__ import annotations

from spark_jobs.ir.bounds import Floor, Floors, Forget
from spark_jobs.ir.builder import Builder
from spark_jobs.ir.graph import Circuit, Node, make_node
from spark_jobs.ir.operator import (ENGINES, INPUTS, LINEAR, NONLINEAR, Operator, builtin_kernels, is_insert_only,
                                    operator, register)
from spark_jobs.ir.ops.linear import plus_floor
from spark_jobs.ir.optimize import is_positive

KERNELS = "spark_jobs.executor.kernels.stream_join"  # the sum's kernel (the terms run the join kernels)


def stream_position(node: Node) -> int:
    """0 when the left input is the stream, 1 when the right one is."""
    return 0 if node.param("stream") == "left" else 1


def rule_stream_join(b: Builder, node: Node, deltas: list[str]) -> str:
    """Δs ⋈ Δr + Δs ⋈ z⁻¹(I r): the arrivals joined with the relation as of this step; no
    integral of the stream side."""
    s = stream_position(node)
    d_stream, d_rel = deltas[s], deltas[1 - s]
    terms = []
    for suffix, rel in (("Δs·Δr", d_rel), ("Δs·Ir", b.delayed_integral(d_rel))):
        pair = (d_stream, rel) if s == 0 else (rel, d_stream)
        terms.append(b.add(node.with_(id=f"{node.id}[{suffix}]", op="stream_join_term", inputs=pair,
                                      origin=node.origin)))
    return b.add(make_node(node.id, "stream_join_sum", terms, node.columns, origin=node.origin))


def _insert_only(circuit: Circuit, node: Node) -> bool:
    """Every change is Δs ⋈ I(r): non-negative when the arrivals are and the relation is a
    positive Z-set (the bag check keeps a `changes` input's integral >= 0)."""
    s = stream_position(node)
    return is_insert_only(circuit, node.inputs[s]) and is_positive(circuit, node.inputs[1 - s])


def _lookup(node: Node, position: int) -> tuple[str, ...] | None:
    """The relation side is looked up by its join keys (its integral is kept sorted on them)."""
    if position == stream_position(node):
        return None
    return tuple(node.param("left_keys" if position == 0 else "right_keys") or ()) or None


def _uses(circuit: Circuit, node: Node, position: int) -> str:
    return f"relation side of stream join {node.origin!r}: joined with each arriving stream row"


def _floor(circuit: Circuit, node: Node, column: str, floors: Floors) -> Floor | None:
    """A column taken as is from the stream side keeps that side's floor (a change holds only the
    step's arrivals); the relation's columns have none (an old relation row joins a new event)."""
    s = stream_position(node)
    source = next((src for src, name in node.param("left_out" if s == 0 else "right_out") or () if name == column),
                  None)
    return floors.of(node.inputs[s], source) if source is not None else None


def _forgets(circuit: Circuit, node: Node, position: int | None, floors: Floors) -> Forget | None:
    """Relation rows whose key is below the stream's floor of the matching key (a window
    column) can meet no future arrival: a join's rule (the stream side keeps no integral)."""
    if position is None or position == stream_position(node):
        return None
    return operator("join").forgets(circuit, node, position, floors)  # type: ignore[misc]


def stateless_side(circuit: Circuit, node: Node) -> str:
    """``explain``'s state column of a term: the stream side keeps nothing."""
    stream = node.inputs[stream_position(node)]
    return f"none: stream side {stream!r} is joined on arrival and not kept"


def _delta_form(circuit: Circuit, total: Node) -> str:
    term = circuit[total.inputs[-1]]
    rel = term.inputs[1 - stream_position(term)]
    return (f"Δs⋈Δr + Δs⋈z⁻¹(I r): each arriving stream row joined once with the relation as of this step; "
            f"reads {circuit[rel].inputs[0]}; the stream side keeps no state")


STREAM_JOIN = register(Operator(
    "stream_join", arity=2, linearity=NONLINEAR, symbol="⋈ₛ", positive=INPUTS, insert_only=_insert_only,
    summary="relation-to-stream join: each stream row joined once, on arrival, with the relation's integral",
    incremental=rule_stream_join, kernels=builtin_kernels("join")))
# Linearity: linear in the stream for a fixed relation, but not time-invariant in the relation (an
# old output row is never revised), so neither Theorem 3.3 nor 3.4 applies: it has its own rule.

STREAM_JOIN_TERM = register(Operator(
    "stream_join_term", arity=2, linearity=NONLINEAR, symbol="⋈ₛ(Δs)", positive=INPUTS, form_of="stream_join",
    summary="a term of the stream join: this step's arrivals joined with Δr or z⁻¹(I r)",
    lookup=_lookup, uses=_uses, explain_state=stateless_side, floor=_floor, forgets=_forgets,
    kernels=builtin_kernels("join")))

STREAM_JOIN_SUM = register(Operator(
    "stream_join_sum", arity=2, linearity=LINEAR, symbol="+ (consolidated)", positive=INPUTS, consolidated=True,
    form_of="stream_join", summary="the stream join's two terms added and consolidated: Δs⋈I(r), never negative",
    delta_form=_delta_form, floor=plus_floor, kernels={engine: f"{KERNELS}:consolidated_sum" for engine in ENGINES}))
