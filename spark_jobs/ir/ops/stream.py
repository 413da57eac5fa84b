"""The stream operators I (integrate), z⁻¹ (delay) and D (differentiate).

They are their own incremental versions (Proposition 3.2: inc(I) = I, inc(z⁻¹) = z⁻¹, inc(D) = D)
and they are the state of a circuit: I keeps the integral of its input (a trace of Z-set
deltas), z⁻¹ and D the previous value of their input. A delay that reads an integrator keeps
nothing of its own: z⁻¹(I x) is the integrator's committed state (``delayed_integral_source``).
"""
from __future__ import annotations

from spark_jobs.ir.bounds import readers
from spark_jobs.ir.builder import Builder
from spark_jobs.ir.graph import Circuit, Node, make_node
from spark_jobs.ir.operator import (INPUTS, STREAM, Operator, State, builtin_kernels, delayed_integral_source,
                                    operator, register)
from spark_jobs.spec.model import NodeSpec


def rule_stream_invariant(b: Builder, node: Node, deltas: list[str]) -> str:
    """inc(I) = I, inc(z⁻¹) = z⁻¹, inc(D) = D (Proposition 3.2, invariance)."""
    return b.add(node.with_(inputs=tuple(deltas)))


def _readers(circuit: Circuit, node: Node) -> list[tuple[Node, int]]:
    """Who reads the integral ``node`` (directly, or as z⁻¹ of it), with the input position."""
    return readers(circuit, node.id)


def integral_keys(circuit: Circuit, node: Node) -> tuple[str, ...]:
    """Columns an integrator's state is looked up by: its first reader's lookup columns (a join's
    keys on that side, an aggregate's groups), else the whole tuple."""
    for reader, pos in _readers(circuit, node):
        lookup = operator(reader.op).lookup
        keys = lookup(reader, pos) if lookup is not None else None
        if keys is not None:
            return keys
    return tuple(node.columns)


def integral_role(circuit: Circuit, node: Node) -> str:
    """``explain``'s line for an integrator: what it integrates and who reads it for what."""
    users = []
    for reader, pos in _readers(circuit, node):
        uses = operator(reader.op).uses
        users.append(uses(circuit, reader, pos) if uses is not None else f"{reader.op} {reader.origin!r}")
    if circuit[node.inputs[0]].param("bag"):
        users.insert(0, "the bag check: deletes must not exceed inserts")
    seen = list(dict.fromkeys(users))
    return f"integral of {node.inputs[0]!r}" + (f" (for {', '.join(seen)})" if seen else "")


def _own_columns(circuit: Circuit, node: Node) -> tuple[str, ...]:
    return tuple(node.columns)


INTEGRATE = register(Operator(
    "integrate", arity=1, linearity=STREAM, symbol="I", positive=INPUTS,
    summary="I: the running sum of its input over timesteps",
    state=State("integral of its input (trace of Z-set deltas)", keys=integral_keys, role=integral_role),
    incremental=rule_stream_invariant,
    kernels=builtin_kernels("integrate")))

DELAY = register(Operator(
    "delay", arity=1, linearity=STREAM, symbol="z⁻¹", positive=INPUTS,
    summary="z⁻¹: its input's value at the previous timestep",
    state=State("previous value of its input", keys=_own_columns),
    keeps_state=lambda c, n: delayed_integral_source(c, n.id) is None,
    incremental=rule_stream_invariant, kernels=builtin_kernels("delay")))

DIFFERENTIATE = register(Operator(
    "differentiate", arity=1, linearity=STREAM, symbol="D",
    summary="D: its input's value minus the previous one",
    state=State("previous value of its input", keys=_own_columns), incremental=rule_stream_invariant,
    kernels=builtin_kernels("differentiate")))


# ---- the YAML ops compiled to them (spec/ops/stream.py names these functions) ----------------

def _from_yaml(op: str, c: Circuit, n: NodeSpec, cols: dict) -> Node:
    # z⁻¹ of a set is a set; the integral of a set is not (a tuple present at two timesteps
    # has weight 2), nor is a difference of sets (weights -1)
    return c.add(make_node(n.name, op, [n.input], cols[n.name], is_set=c[n.input].is_set and op == "delay"))


def from_delay(c: Circuit, n: NodeSpec, cols: dict, ctx: object) -> Node:
    return _from_yaml("delay", c, n, cols)


def from_integrate(c: Circuit, n: NodeSpec, cols: dict, ctx: object) -> Node:
    return _from_yaml("integrate", c, n, cols)


def from_differentiate(c: Circuit, n: NodeSpec, cols: dict, ctx: object) -> Node:
    return _from_yaml("differentiate", c, n, cols)
