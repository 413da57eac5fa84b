"""The circuits the incremental rules build, with their shared helpers.

``Builder`` accumulates Q^Δ while the incrementalizer applies each operator's rule; it owns the
one helper that creates the delayed integral z⁻¹(I x) of a stream (each stream is integrated
once, however many operators read its integral). ``BodyBuilder`` does the same for the body of
a recursive scope, where the state of a stream is a per-iteration trace.
"""
from __future__ import annotations

from spark_jobs.ir.graph import Circuit, Node, make_node


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


class BodyBuilder:
    """Accumulates a recursive body on 2-D deltas (``incrementalize_body``)."""

    def __init__(self, body: Circuit) -> None:
        self.inc = Circuit(f"{body.name}^Δ", inputs=dict(body.inputs))

    def add(self, node: Node) -> str:
        return self.inc.add(node).id

    def trace(self, stream: str, keys: tuple[str, ...]) -> str:
        """The per-iteration trace of ``stream`` (looked up by ``keys``), one per stream."""
        node_id = f"I({stream})"
        if node_id not in self.inc:
            src = self.inc[stream]
            self.add(make_node(node_id, "integrate_nested", [stream], src.columns, origin=src.origin, keys=keys))
        return node_id
