"""Operator stages: the incremental circuit cut into the pieces users see as Airflow tasks.

A stage is every incremental operator that implements one user node (or reads one input): the
join of the paper's example is one stage holding its three joins and its plus, its integrators
belong to the stages of the streams they integrate. Stages depend on each other when one reads a
delta another produces; reading another stage's committed state is not a dependency (committed
state does not change during a timestep).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from spark_jobs.ir.graph import Circuit
from spark_jobs.ir.operator import delayed_integral_source, is_integral

_TASK_ID = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class Stage:
    name: str  # a valid Airflow task id
    nodes: tuple[str, ...]  # incremental node ids, in evaluation order
    upstream: tuple[str, ...]  # stages whose deltas this stage reads
    kind: str  # "input" | "operator"


def task_id(origin: str) -> str:
    return _TASK_ID.sub("_", origin)


def is_state_backed(circuit: Circuit, node_id: str) -> bool:
    """Values another stage can rebuild from committed state instead of reading a staged delta.

    z⁻¹(I x) is exactly the integrator's committed state; I x is that state plus Δx.
    """
    return is_integral(circuit, node_id)


def delta_dependencies(circuit: Circuit, node_id: str) -> set[str]:
    """The non-state-backed nodes whose values ``node_id``'s value is computed from."""
    if not is_state_backed(circuit, node_id):
        return {node_id}
    integrate = circuit[delayed_integral_source(circuit, node_id) or node_id]
    # the delta being integrated: its schema is needed even when the state is still empty
    return delta_dependencies(circuit, integrate.inputs[0])


def stage_graph(compiled) -> list[Stage]:
    """The stages of ``compiled.incremental`` in topological order."""
    circuit: Circuit = compiled.incremental
    members: dict[str, list[str]] = {}
    for node in circuit:
        members.setdefault(node.origin, []).append(node.id)
    stage_of = {nid: origin for origin, ids in members.items() for nid in ids}
    stages: list[Stage] = []
    for origin, ids in members.items():
        upstream: set[str] = set()
        for nid in ids:
            for i in circuit[nid].inputs:
                for dep in delta_dependencies(circuit, i):
                    if stage_of[dep] != origin:
                        upstream.add(stage_of[dep])
        kind = "input" if any(circuit[n].op == "input" for n in ids) else "operator"
        stages.append(Stage(task_id(origin), tuple(ids), tuple(task_id(u) for u in sorted(upstream)), kind))
    names = [s.name for s in stages]
    if len(set(names)) != len(names):
        raise ValueError(f"two stages map to the same task id: {names}")
    return stages


def staged_values(compiled) -> set[str]:
    """Node values that must be written to staging: read by another stage as a delta."""
    circuit: Circuit = compiled.incremental
    needed: set[str] = set()
    for node in circuit:
        for i in node.inputs:
            for dep in delta_dependencies(circuit, i):
                if circuit[dep].origin != node.origin:
                    needed.add(dep)
    return needed
