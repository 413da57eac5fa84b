"""The compiler pipeline: spec -> query circuit -> distinct consolidation -> incremental circuit."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from spark_jobs.ir.from_spec import build_query_circuit
from spark_jobs.ir.graph import Circuit
from spark_jobs.ir.incrementalize import incrementalize
from spark_jobs.ir.operator import operator
from spark_jobs.ir.optimize import consolidate_distinct
from spark_jobs.spec.model import CircuitSpec


@dataclass(frozen=True)
class CompiledCircuit:
    spec: CircuitSpec
    query: Circuit  # as translated (Table 1)
    optimized: Circuit  # after distinct consolidation
    incremental: Circuit  # Q^Δ: what the executor runs each timestep
    fingerprint: str  # changes whenever the meaning of the circuit or an input schema changes


def compile_spec(spec: CircuitSpec, columns: dict[str, tuple[str, ...]]) -> CompiledCircuit:
    query = build_query_circuit(spec, columns)
    optimized = consolidate_distinct(query)
    incremental = incrementalize(optimized)
    return CompiledCircuit(spec, query, optimized, incremental, fingerprint(spec, incremental))


def fingerprint(spec: CircuitSpec, incremental: Circuit) -> str:
    """A short hash of the input schemas and the incremental circuit's structure.

    Comments, key order and schedules in the YAML do not change it; anything that changes what
    the state means (operators, expressions, columns, types) does.
    """
    payload = {
        "inputs": {name: [(c.name, c.type.lower(), c.nullable) for c in inp.columns]
                   for name, inp in sorted(spec.inputs.items())},
        "nodes": [(n.id, n.op, n.inputs, repr(_meaning(n.params)), n.columns) for n in incremental],
        "outputs": sorted(incremental.outputs.items()),
    }
    formats = sorted({(n.op, f) for n in incremental if (f := _state_format(n.op)) > 1})
    if formats:  # only circuits with an operator whose state layout changed get a new fingerprint
        payload["state_formats"] = formats
    keys = {name: list(inp.key) for name, inp in sorted(spec.inputs.items()) if inp.key}
    if keys:  # a keyed input's integral holds one row per key: another key is another state
        payload["keys"] = keys  # (only when present: unkeyed circuits keep their fingerprints)
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _state_format(op: str) -> int:
    """The version of an operator's state layout (``State.format``; 1 when it keeps none)."""
    state = operator(op).state
    return state.format if state is not None else 1


# Params that bound or tune the work, or document it, without changing what the state means
# (an input's ``append_only`` changes state only through the operators it selects, whose names
# are in the fingerprint: circuits whose state it does not change keep their fingerprint).
# An input's ``time`` column and lateness bound state (``ir/bounds.py``) without changing what it means.
# ``positive_input`` (aggregate_touched) picks how the Arrow kernel finds the same rows (kept extrema
# or a recompute of the group), not which rows.
_NOT_MEANING = frozenset({"max_iterations", "sql", "append_only", "time", "lateness_us", "positive_input"})


def _meaning(params: tuple) -> tuple:
    return tuple((k, v) for k, v in params if k not in _NOT_MEANING)
