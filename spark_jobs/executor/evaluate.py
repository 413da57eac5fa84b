"""The interpreter: one timestep of a circuit, on either engine's kernels.

``evaluate_step`` walks the IR nodes in (topological) order, applies each node's kernel for the
step's engine (``Operator.kernels``: ``spark/kernels.py`` on DataFrames, ``arrow/kernels.py``
on Arrow tables) to the values of its inputs, and collects two things besides the values: the
output deltas of the views and, per stateful node, the state update to commit. On Spark nothing
runs here (every value is a lazy DataFrame over the inputs and the *previous* committed state);
on Arrow the values are computed as it goes, in this process. Either way the caller writes the
outputs and the state and commits all updates together.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping, Protocol

from spark_jobs.errors import DbspError
from spark_jobs.executor.engine import Engine, NotLocal, StateUpdate
from spark_jobs.executor.weights import evaluating
from spark_jobs.ir.graph import Circuit, Node, state_of
from spark_jobs.ir.operator import is_integral, operator
from spark_jobs.policy import ExecutionPolicy
from spark_jobs.spec.model import WEIGHT

__all__ = ["NotLocal", "NotSupported", "StateReader", "StateUpdate", "Step", "StepResult", "evaluate_step",
           "state_keys", "trace_kind"]


class NotSupported(DbspError, NotImplementedError):
    """An IR construct this executor cannot evaluate yet."""


class StateReader(Protocol):
    """Read side of a state store: the last committed state of a stateful node."""

    def read(self, node_id: str) -> Any:
        """The node's state as of the previous timestep (a DataFrame), or None if it has none yet."""
        ...


@dataclass
class StepResult:
    values: dict[str, Any] = field(default_factory=dict)  # every node's value at this step
    outputs: dict[str, Any] = field(default_factory=dict)  # view -> consolidated delta
    updates: dict[str, StateUpdate] = field(default_factory=dict)  # node id -> state to commit
    engine: Engine | None = None

    @property
    def persisted(self) -> list[Any]:
        """The values ``persist=True`` cached (Spark) this step."""
        return list(getattr(self.engine, "kept", ()))

    def release(self) -> None:
        """Drop the cached values (after outputs and state have been written)."""
        if self.engine is not None:
            self.engine.release()


def trace_kind(circuit: Circuit, state_id: str) -> str:
    """How a store keeps a state update: "sum" (running totals) or "zset" (``State.kind``). A
    scope's traces are named ``<scope>/<body node>`` and are Z-sets."""
    node = circuit.nodes.get(state_id)
    if node is None and "/" in state_id:  # a trace a node keeps under its own id (``Operator.trace_kinds``)
        owner, _, rest = state_id.partition("/")
        found = circuit.nodes.get(owner)
        hook = operator(found.op).trace_kinds if found is not None else None
        return hook(found, rest) if hook is not None else "zset"
    state = operator(node.op).state if node is not None else None
    return state.kind if state is not None else "zset"


def state_keys(circuit: Circuit, node: Node) -> tuple[str, ...]:
    """The columns ``node``'s state is looked up by (``State.keys``; else its columns)."""
    state = operator(node.op).state
    keys = state.keys if state is not None else None
    return tuple(keys(circuit, node)) if keys is not None else tuple(node.columns)


@dataclass
class Step:
    """The context a kernel gets: the step's inputs, committed state, engine and results."""

    circuit: Circuit
    engine: Any  # the step's Engine (kernels reach their engine's own helpers through it)
    state: StateReader
    first_step: bool
    inputs: Mapping[str, Any]
    input_schemas: Mapping[str, Any]
    result: StepResult
    external: Callable[[str], Any] | None = None  # values of nodes evaluated elsewhere

    def value(self, node_id: str) -> Any:
        if node_id not in self.result.values and self.external is not None:
            self.result.values[node_id] = self.external(node_id)
        return self.result.values[node_id]

    def args(self, node: Node) -> list[Any]:
        return [self.value(i) for i in node.inputs]

    def update(self, node_id: str, update: StateUpdate) -> None:
        self.result.updates[node_id] = update

    def state_keys(self, node: Node) -> tuple[str, ...]:
        return state_keys(self.circuit, node)

    def input_delta(self, node: Node, empty: Callable[[str, Any], Any]) -> tuple[Any, list[str]]:
        """This step's delta of input ``node`` (``empty(name, schema)`` when the input has no
        change) and the columns it must have (the weight is checked too)."""
        name = node.param("name") or node.id
        columns = list(self.circuit.inputs.get(name, node.columns))
        value = self.inputs.get(name)
        if value is None:
            schema = self.input_schemas.get(name)
            if schema is None:
                raise ValueError(f"input {name!r} has no delta for this step and no schema in input_schemas")
            value = empty(name, schema)
        missing = [c for c in [*columns, WEIGHT] if c not in value.schema.names]
        if missing:
            raise ValueError(f"input {name!r}: delta lacks columns {missing} (has {value.schema.names})")
        return value, columns


def _reused(circuit: Circuit) -> set[str]:
    """Nodes whose value is read more than once in a step (by nodes, views or a state update).

    Integrals and delays are left out: they are as large as the state, and each reader looks up
    only a part.
    """
    uses: dict[str, int] = {n.id: 0 for n in circuit}
    for node in circuit:
        for i in node.inputs:
            uses[i] += 1
        if state_of(circuit, node) is not None and node.inputs:  # the update re-reads its input or output
            state = operator(node.op).state
            uses[node.id if state is not None and state.update_reads == "output" else node.inputs[0]] += 1
    for node_id in circuit.outputs.values():
        uses[node_id] += 1
    return {nid for nid, n in uses.items()
            if n > 1 and not is_integral(circuit, nid) and circuit[nid].op != "delay"}


def _spark_engine(spark: Any, broadcast_deltas: bool, policy: ExecutionPolicy | None, held: bool = False) -> Engine:
    from spark_jobs.executor.spark.kernels import SparkEngine

    return SparkEngine(spark, policy or ExecutionPolicy(), broadcast=broadcast_deltas, held=held)


def evaluate_step(circuit: Circuit, inputs: Mapping[str, Any], state: StateReader, *,
                  first_step: bool, input_schemas: Mapping[str, Any] | None = None,
                  spark: Any = None, broadcast_deltas: bool = True, persist: bool = False,
                  only: Collection[str] | None = None, external: Callable[[str], Any] | None = None,
                  engine: Engine | None = None, policy: ExecutionPolicy | None = None,
                  held: bool = False) -> StepResult:
    """Evaluate one timestep of ``circuit`` on the input deltas and the committed state.

    ``engine``: the kernels to run (default: Spark, ``SparkEngine(spark, policy,
    broadcast=broadcast_deltas)``). ``inputs`` maps input names to delta Z-sets (data columns +
    ``_weight``) of that engine; a missing input is the empty Z-set of ``input_schemas[name]``.
    ``first_step`` is True when nothing has been committed yet (global aggregates then emit their
    initial row). ``persist``: compute once the delta-sized values read more than once (Spark
    caches them; writing the outputs and the state are separate jobs); call ``release()`` after.
    ``only`` evaluates just these nodes (one stage of a DAG run); the values they read from other
    nodes come from ``external(node_id)``. An Arrow kernel that cannot serve raises ``NotLocal``.
    ``held``: the step's changes are held on the driver (a few thousand rows; Spark's
    ``SparkEngine.held``).
    """
    engine = engine or _spark_engine(spark, broadcast_deltas, policy, held)
    step = Step(circuit, engine, state, first_step, inputs, input_schemas or {}, StepResult(engine=engine), external)
    begin = getattr(engine, "begin", None)
    if begin is not None:
        begin(step)
    reused = _reused(circuit) if persist else set()
    for node in circuit:
        if only is not None and node.id not in only:
            continue
        kernel = operator(node.op).kernel(engine.name)
        if kernel is None:
            if engine.name == "arrow":
                raise NotLocal(f"operator {node.op!r} (node {node.id!r}) has no Arrow kernel")
            raise NotSupported(f"IR node {node.id!r}: no {engine.name} kernel for op {node.op!r}")
        with evaluating(node.id):  # a weight out of range names this node (``weights.py``)
            value = kernel(step, node)
            step.result.values[node.id] = engine.settle(node, value, reused=node.id in reused)
    for view, node_id in circuit.outputs.items():
        if only is not None and node_id not in only:
            continue
        value = step.value(node_id)
        with evaluating(node_id):
            step.result.outputs[view] = value if operator(circuit[node_id].op).consolidated else engine.consolidate(value)
    end = getattr(engine, "end", None)
    if end is not None:
        end()
    return step.result
