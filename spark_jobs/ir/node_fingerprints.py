"""Per-node fingerprints: what lets an edited circuit keep the state of the nodes it did not touch.

Why: the circuit fingerprint (``compile.fingerprint``) changes with any edit, so it can only say
"this state is not yours". A node's own fingerprint hashes its definition (op, the params that
change what its state means, its output columns, its state format) and its inputs' fingerprints,
transitively; an input node's hashes the input's schema and key. Two circuits' nodes with the
same id and the same fingerprint compute the same stream from the same inputs, so the state one
committed is the state the other would have written: it is **kept**. Every other node of the new
circuit is **new** (no node of that id before) or **rebuilt** (same id, another fingerprint).
"""
from __future__ import annotations

import hashlib
import json

from spark_jobs.ir.graph import Circuit
from spark_jobs.spec.model import CircuitSpec


def node_fingerprints(spec: CircuitSpec, incremental: Circuit) -> dict[str, str]:
    """Node id -> a short hash of the node's definition and its inputs' fingerprints."""
    from spark_jobs.ir.compile import _meaning, _state_format

    out: dict[str, str] = {}
    for node in incremental:  # topological: a node's inputs come first
        payload: dict = {"op": node.op, "params": repr(_meaning(node.params)), "columns": list(node.columns),
                         "inputs": [out.get(i, i) for i in node.inputs]}
        if _state_format(node.op) > 1:
            payload["format"] = _state_format(node.op)
        if node.op == "input":
            inp = spec.inputs.get(node.param("name") or node.id)
            if inp is not None:
                payload["schema"] = [(c.name, c.type.lower(), c.nullable) for c in inp.columns]
                payload["key"] = list(inp.key)
                payload["kind"] = inp.kind  # an input's kind decides which traces it keeps
        out[node.id] = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return out


def owner(circuit: Circuit, trace_id: str) -> str | None:
    """The node a trace belongs to: the node of that id, or the scope of ``<scope>/<body node>``
    (None: not an operator's trace, e.g. a view's or an input's own)."""
    if trace_id in circuit:
        return trace_id
    head = trace_id.split("/", 1)[0]
    return head if "/" in trace_id and head in circuit else None


def ancestors(circuit: Circuit, node_ids: set[str]) -> set[str]:
    """``node_ids`` and every node they read, transitively."""
    seen: set[str] = set()
    todo = list(node_ids)
    while todo:
        nid = todo.pop()
        if nid in seen or nid not in circuit:
            continue
        seen.add(nid)
        todo.extend(circuit[nid].inputs)
    return seen


__all__ = ["ancestors", "node_fingerprints", "owner"]
