"""Build the query circuit (Algorithm 4.6 step 1) from a validated circuit spec.

This is the translation of Table 1 of the paper: every SQL-ish operator becomes Z-set operators.
Each YAML op names its translation (``NodeOp.translate`` in ``spec/ops/<op>.py``), a function of
the IR module of the operators it becomes (``ir/ops/linear.py: from_select``, ``ir/ops/sets.py:
from_union``, ...); this module only walks the nodes. Set operators get their ``distinct``s there
(``union`` = distinct(a + b), ...); the consolidation pass (``optimize.py``) removes the ones that
are not needed.
"""
from __future__ import annotations

from dataclasses import dataclass

from spark_jobs.errors import DbspError
from spark_jobs.ir.graph import Circuit, Node, make_node
from spark_jobs.ir.scope import DEFAULT_MAX_ITERATIONS
from spark_jobs.spec.model import CircuitSpec, NodeSpec, dependency_order
from spark_jobs.spec.node_ops import node_op


class UnsupportedOperator(DbspError, ValueError):
    """A spec op that this version of the compiler cannot translate yet."""


@dataclass(frozen=True)
class Translation:
    """What a translation may need beyond its node: the circuit's spec (a recursive node reads
    its body's columns), the loop bound, and how to translate a body node."""

    spec: CircuitSpec
    max_iterations: int

    def body(self, c: Circuit, n: NodeSpec, cols: dict) -> Node:
        """A body node of a recursive node (validation has rejected ops a body cannot hold)."""
        op = node_op(n.op)
        if op is None or op.scope or not op.in_body:
            raise UnsupportedOperator(f"{n.name!r}: op {n.op!r} cannot be compiled inside a recursive body")
        return op.translation()(c, n, cols, self)


def build_query_circuit(spec: CircuitSpec, columns: dict[str, tuple[str, ...]]) -> Circuit:
    """Translate ``spec`` into the (non-incremental) query circuit.

    ``columns`` are the output columns of every input and node (``spec.output_columns``).
    """
    circuit = Circuit(spec.name, inputs={n: columns[n] for n in spec.inputs})
    for name, inp in spec.inputs.items():
        # only `changes` can delete what is not there: snapshots and cdc derive their changes from
        # the input's own state, append_only refuses deletes (the bag check: runtime/bag.py).
        # append_only: since its reader refuses deletes, the IR derives insert-only streams from it
        kind = inp.source.kind if inp.source is not None else None
        params = {"bag": True} if kind == "changes" else {"append_only": True} if kind == "append_only" else {}
        if inp.time is not None:  # its watermark bounds state (ir/bounds.py)
            params.update(time=inp.time.column, lateness_us=inp.time.lateness_us)
        circuit.add(make_node(name, "input", out=columns[name], name=name, **params))
    ctx = Translation(spec, int(spec.settings.get("max_iterations", DEFAULT_MAX_ITERATIONS)))
    for node in (spec.nodes[name] for name in dependency_order(spec.nodes)):
        op = node_op(node.op)
        if op is None:
            raise UnsupportedOperator(
                f"{spec.path}:{node.line}: node {node.name!r}: op {node.op!r} cannot be compiled yet")
        op.translation()(circuit, node, columns, ctx)
    circuit.outputs = {view: view for view in spec.outputs}
    return circuit
