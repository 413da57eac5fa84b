"""Evaluate one timestep of an incremental circuit on Spark DataFrames.

``evaluate_step`` walks the IR nodes in (topological) order, applies each node's kernel to the
values of its inputs, and collects two things besides the values: the output deltas of the views
and, per stateful node, the state update to commit. Nothing runs here: every value is a lazy
DataFrame over the inputs and the *previous* committed state, so the caller decides when to run
jobs (writing outputs and state) and commits all updates together.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Collection, Literal, Mapping, Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from spark_jobs.executor import recursion, zset
from spark_jobs.executor.narrow import Narrowing, narrowing_enabled
from spark_jobs.executor.operators import aggregate, distinct, join, linear, stream
from spark_jobs.executor.zset import WEIGHT, col
from spark_jobs.ir.graph import Circuit, Node, state_of


log = logging.getLogger(__name__)


class NotSupported(NotImplementedError):
    """An IR construct this executor cannot evaluate yet."""


class StateReader(Protocol):
    """Read side of a state store: the last committed state of a stateful node."""

    def read(self, node_id: str) -> DataFrame | None:
        """The node's state as of the previous timestep, or None if it has none yet."""
        ...


@dataclass(frozen=True)
class StateUpdate:
    """What a stateful node commits: ``append`` a delta to its trace, or ``replace`` the value.

    ``keys`` are the columns the state is looked up by; ``sort_by`` asks the store to keep the
    trace's compacted files sorted on these columns (lookups then read few row groups).
    """

    kind: Literal["append", "replace"]
    df: DataFrame
    keys: tuple[str, ...] = ()
    sort_by: tuple[str, ...] = ()


@dataclass
class StepResult:
    values: dict[str, DataFrame] = field(default_factory=dict)  # every node's value at this step
    outputs: dict[str, DataFrame] = field(default_factory=dict)  # view -> consolidated delta
    updates: dict[str, StateUpdate] = field(default_factory=dict)  # node id -> state to commit
    persisted: list[DataFrame] = field(default_factory=list)  # values cached by ``persist=True``

    def release(self) -> None:
        """Drop the cached values (after outputs and state have been written)."""
        for df in self.persisted:
            df.unpersist()
        self.persisted.clear()


# Operators whose result is already consolidated (no second groupBy before publishing).
_CONSOLIDATED = frozenset({"distinct", "distinct_h", "aggregate", "aggregate_linear", "aggregate_touched", "scope"})


@dataclass
class _Step:
    """The mutable context of one evaluation."""

    circuit: Circuit
    inputs: Mapping[str, DataFrame]
    state: StateReader
    first_step: bool
    input_schemas: Mapping[str, StructType]
    spark: SparkSession | None
    broadcast_deltas: bool
    result: StepResult
    external: Callable[[str], DataFrame] | None = None  # values of nodes evaluated elsewhere
    narrowing: Narrowing | None = None  # driver-side state lookups (small steps with trace files)

    def value(self, node_id: str) -> DataFrame:
        if node_id not in self.result.values and self.external is not None:
            self.result.values[node_id] = self.external(node_id)
        return self.result.values[node_id]

    def args(self, node: Node) -> list[DataFrame]:
        return [self.value(i) for i in node.inputs]


def trace_kind(circuit: Circuit, state_id: str) -> str:
    """How a store keeps a state update: "sum" (running totals) or "zset". A scope's traces are
    named ``<scope>/<body node>`` and are Z-sets."""
    node = circuit.nodes.get(state_id)
    return "sum" if node is not None and node.op == "aggregate_linear" else "zset"


def _lookup_keys(circuit: Circuit, node: Node) -> tuple[str, ...]:
    """Columns an integrator's state is looked up by: its reader's join or group keys, else the tuple."""
    sources = {node.id} | {r.id for r in circuit.consumers(node.id) if r.op == "delay"}
    for reader in circuit:
        for pos, source in enumerate(reader.inputs):
            if source not in sources:
                continue
            if reader.op == "join":
                return tuple(reader.param("left_keys" if pos == 0 else "right_keys") or ())
            if reader.op in ("aggregate_touched", "aggregate_linear"):
                return tuple(reader.param("group_by") or ())
    return tuple(node.columns)


def _input(s: _Step, node: Node) -> DataFrame:
    name = node.param("name") or node.id
    columns = list(s.circuit.inputs.get(name, node.columns))
    df = s.inputs.get(name)
    if df is None:
        schema = s.input_schemas.get(name)
        if schema is None:
            raise ValueError(f"input {name!r} has no delta for this step and no schema in input_schemas")
        spark = s.spark or SparkSession.getActiveSession()
        if spark is None:
            raise ValueError(f"input {name!r}: no delta and no SparkSession to build an empty Z-set")
        df = zset.empty(spark, schema)
    missing = [c for c in [*columns, WEIGHT] if c not in df.columns]
    if missing:
        raise ValueError(f"input {name!r}: delta lacks columns {missing} (has {df.columns})")
    return df.select(*[col(c) for c in columns], col(WEIGHT).cast("long").alias(WEIGHT))


def _is_integral(s: _Step, node_id: str) -> bool:
    """Is this value an integral (state-sized): I(x), or z^-1(I(x))?"""
    node = s.circuit[node_id]
    return node.op == "integrate" or (node.op == "delay" and s.circuit[node.inputs[0]].op == "integrate")


def _join(s: _Step, node: Node) -> DataFrame:
    """A join term; when one side is an integral (state), the other (a delta) is broadcast, or
    the state is narrowed on the driver to the rows the delta's keys can touch (a local relation,
    then joined with a shuffle inside the step's job)."""
    left, right = s.args(node)
    broadcast = None
    if s.broadcast_deltas:
        left_state, right_state = (_is_integral(s, i) for i in node.inputs)
        broadcast = "right" if left_state and not right_state else "left" if right_state and not left_state else None
        if left_state != right_state:
            pos = 0 if left_state else 1
            narrowed = _narrow_join_side(s, node, pos)
            if narrowed is not None:  # joined with a shuffle inside the step's job: broadcasting
                narrowed = narrowed.hint("shuffle_hash")  # even a local relation runs a job
                left, right = (narrowed, right) if pos == 0 else (left, narrowed)
                broadcast = None
    return join.join(left, right, node.param("left_keys", ()), node.param("right_keys", ()),
                     bool(node.param("null_safe", False)), node.param("left_out", ()), node.param("right_out", ()),
                     broadcast=broadcast)


def _delayed_trace(s: _Step, node_id: str) -> str | None:
    """The integrator whose committed state is the value of ``node_id`` (a z⁻¹(I x)), if it is one."""
    node = s.circuit[node_id]
    if node.op == "delay" and s.circuit[node.inputs[0]].op == "integrate":
        return node.inputs[0]
    return None


def _narrow_join_side(s: _Step, node: Node, pos: int) -> DataFrame | None:
    """Side ``pos`` of a join term (a z⁻¹(I x)) narrowed to the rows the other side's keys touch."""
    keys = node.param("left_keys" if pos == 0 else "right_keys") or ()
    probe_keys = node.param("right_keys" if pos == 0 else "left_keys") or ()
    trace = _delayed_trace(s, node.inputs[pos])
    if not keys or trace is None:
        return None
    found = _narrowed(s, trace, keys[0], node.inputs[1 - pos], probe_keys[0], bool(node.param("null_safe", False)),
                      side=(node.id, pos))
    return None if found is None else found.select(*[col(c) for c in s.value(node.inputs[pos]).columns])


def _narrowed(s: _Step, trace: str, column: str, probe: str, probe_column: str, null_matches: bool,
              side: tuple[str, int] | None = None) -> DataFrame | None:
    """Trace ``trace``'s committed state cut on the driver to what ``probe_column`` of node
    ``probe`` can hold this step (``Narrowing.narrow``); None when it is not narrowed."""
    state = s.state.read(trace)
    if state is None or s.narrowing is None:
        return None
    return s.narrowing.narrow(trace, state, column, probe, probe_column, null_matches, side)


def _integrate(s: _Step, node: Node) -> DataFrame:
    (delta,) = s.args(node)
    # Appended as is: a trace is a sum of Z-sets, so nothing reading it needs one row per tuple
    # (readers sum weights; compaction consolidates). Consolidating here cost a shuffle per trace.
    keys = _lookup_keys(s.circuit, node)  # kept sorted on them: lookups read few row groups
    s.result.updates[node.id] = StateUpdate("append", delta, keys, sort_by=keys)
    return stream.integrate_value(s.state.read(node.id), delta)


def _delay(s: _Step, node: Node) -> DataFrame:
    (current,) = s.args(node)
    if state_of(s.circuit, node) is None:  # z^-1(I x): the integrator's committed state
        return stream.delay_value(s.state.read(node.inputs[0]), current)
    s.result.updates[node.id] = StateUpdate("replace", zset.consolidate(current), tuple(node.columns))
    return stream.delay_value(s.state.read(node.id), current)


def _differentiate(s: _Step, node: Node) -> DataFrame:
    (current,) = s.args(node)
    s.result.updates[node.id] = StateUpdate("replace", zset.consolidate(current), tuple(node.columns))
    return stream.differentiate_value(current, s.state.read(node.id))


def _narrowed_state(s: _Step, trace: str, probe: str, keys: tuple[str, ...], columns: list[str]) -> DataFrame | None:
    """State ``trace`` narrowed by the first of ``keys`` (NULL matches NULL, as in a group or a
    tuple) to what node ``probe``'s change can touch, as ``columns``; else its whole value."""
    found = _narrowed(s, trace, keys[0], probe, keys[0], True) if keys else None
    state = found if found is not None else s.state.read(trace)
    return None if state is None else state.select(*[col(c) for c in columns])


def _distinct_h(s: _Step, node: Node) -> DataFrame:
    delta, prev_integral = s.args(node)
    trace = _delayed_trace(s, node.inputs[1])
    if s.broadcast_deltas and trace is not None and s.state.read(trace) is not None:
        prev_integral = _narrowed_state(s, trace, node.inputs[0], tuple(zset.data_columns(delta)),
                                        prev_integral.columns)
    return distinct.distinct_h(delta, prev_integral, broadcast_delta=s.broadcast_deltas)


def _aggregate_linear(s: _Step, node: Node) -> DataFrame:
    (delta,) = s.args(node)
    group_by = tuple(node.param("group_by", ()))
    prev = s.state.read(node.id)
    if s.broadcast_deltas and prev is not None:
        prev = _narrowed_state(s, node.id, node.inputs[0], group_by, prev.columns)
    out, totals = aggregate.aggregate_linear_step(delta, prev, group_by, node.param("aggs"), s.first_step,
                                                  broadcast_delta=s.broadcast_deltas, node=node.id)
    s.result.updates[node.id] = StateUpdate("append", totals, group_by, sort_by=group_by)
    return out


def _aggregate_touched(s: _Step, node: Node) -> DataFrame:
    delta, integral = s.args(node)
    group_by = tuple(node.param("group_by", ()))
    prev = s.state.read(node.id)
    if s.broadcast_deltas and group_by and prev is not None:
        prev = _narrowed_state(s, node.id, node.inputs[0], group_by, prev.columns)
        source = s.circuit[node.inputs[1]]
        if source.op == "integrate" and s.state.read(source.id) is not None:
            before = _narrowed_state(s, source.id, node.inputs[0], group_by, integral.columns)
            integral = zset.local_plus(before, s.value(source.inputs[0]))  # type: ignore[arg-type]
    out = aggregate.aggregate_touched_step(delta, integral, prev, group_by, node.param("aggs"), s.first_step,
                                           broadcast_delta=s.broadcast_deltas, node=node.id)
    s.result.updates[node.id] = StateUpdate("append", out, group_by, sort_by=group_by)
    return out


def _scope(s: _Step, node: Node) -> DataFrame:
    """A recursive scope: its fixed-point loop runs Spark jobs now (one per iteration)."""
    incremental = bool(node.param("incremental"))
    done = recursion.run_scope(node, s.args(node), s.state.read if incremental else None,
                               broadcast_imports=s.broadcast_deltas and incremental, spark=s.spark,
                               files=getattr(s.state, "trace_files", None) if incremental else None)
    for trace, (kind, df, keys, sort_by) in done.updates.items():
        if incremental:
            s.result.updates[trace] = StateUpdate(kind, df, keys, sort_by)
    return done.output


_EVAL: dict[str, Callable[[_Step, Node], DataFrame]] = {
    "input": _input,
    "map": lambda s, n: linear.map(s.value(n.inputs[0]), n.param("columns")),
    "filter": lambda s, n: linear.filter(s.value(n.inputs[0]), n.param("where")),
    "plus": lambda s, n: linear.plus(*s.args(n)),
    "negate": lambda s, n: linear.negate(s.value(n.inputs[0])),
    "join": _join,
    "distinct": lambda s, n: distinct.distinct(s.value(n.inputs[0])),
    "aggregate": lambda s, n: aggregate.aggregate(s.value(n.inputs[0]), tuple(n.param("group_by", ())),
                                                  n.param("aggs"), node=n.id),
    "integrate": _integrate,
    "delay": _delay,
    "differentiate": _differentiate,
    "distinct_h": _distinct_h,
    "aggregate_linear": _aggregate_linear,
    "aggregate_touched": _aggregate_touched,
    "scope": _scope,
}


# A value whose Spark plan would hold more IR operators than this is materialized first. The
# bilinear rule reads a join's input three times (Δa·Δb, I(a)·Δb, Δa·I(b)), so a chain of k joins
# on an unmaterialized change has a plan of ~3^k subtrees: a 6-way TPC-H join took 7 s to analyze
# per operator and a 10-query circuit exhausted the driver's heap in Spark's analyzer.
MAX_PLAN_OPERATORS = 100


def _reused(circuit: Circuit) -> set[str]:
    """Nodes whose value is read more than once in a step (by nodes, views or a state update).

    Integrals are left out: they are as large as the state, and each reader looks up only a part.
    """
    uses: dict[str, int] = {n.id: 0 for n in circuit}
    for node in circuit:
        for i in node.inputs:
            uses[i] += 1
        if node.op == "aggregate_touched":  # its output is also its state update
            uses[node.id] += 1
        elif state_of(circuit, node) is not None:  # the update re-reads the (delta) input
            uses[node.inputs[0]] += 1
    for node_id in circuit.outputs.values():
        uses[node_id] += 1
    return {nid for nid, n in uses.items() if n > 1 and circuit[nid].op not in ("integrate", "delay")}


def evaluate_step(circuit: Circuit, inputs: Mapping[str, DataFrame], state: StateReader, *,
                  first_step: bool, input_schemas: Mapping[str, StructType] | None = None,
                  spark: SparkSession | None = None, broadcast_deltas: bool = True,
                  persist: bool = False, only: Collection[str] | None = None,
                  external: Callable[[str], DataFrame] | None = None) -> StepResult:
    """Evaluate one timestep of ``circuit`` (lazily) on the input deltas and the committed state.

    ``inputs`` maps input names to delta Z-sets (data columns + ``_weight``); a missing input is
    the empty Z-set of ``input_schemas[name]``. ``first_step`` is True when nothing has been
    committed yet (global aggregates then emit their initial row). ``broadcast_deltas``: look
    state up by broadcasting the (small) deltas; turn it off for a step with a huge delta.
    ``persist``: cache the delta-sized values read more than once, so writing the outputs and
    the state (separate Spark jobs) computes each only once; call ``release()`` afterwards.
    ``only`` evaluates just these nodes (one stage of a DAG run); the values they read from
    other nodes come from ``external(node_id)``.
    """
    step = _Step(circuit, inputs, state, first_step, input_schemas or {}, spark, broadcast_deltas, StepResult(),
                 external)
    files_of = getattr(state, "trace_files", None)
    session = spark or SparkSession.getActiveSession()
    if broadcast_deltas and files_of is not None and session is not None and narrowing_enabled(session):
        step.narrowing = Narrowing(session, circuit, step.value, files_of)
    reused = _reused(circuit) if persist else set()
    plan_size: dict[str, int] = {}  # IR operators in each value's Spark plan, shared inputs counted per use
    for node in circuit:
        if only is not None and node.id not in only:
            continue
        evaluate = _EVAL.get(node.op)
        if evaluate is None:
            raise NotSupported(f"IR node {node.id!r}: no evaluator for op {node.op!r}")
        value = evaluate(step, node)
        plan_size[node.id] = 1 + sum(plan_size.get(i, 1) for i in node.inputs)
        if plan_size[node.id] > MAX_PLAN_OPERATORS:
            value = zset.cut_lineage(value)
            plan_size[node.id] = 1
        elif node.id in reused and not zset.is_local(value):  # a local value is computed already
            value = value.persist()
            step.result.persisted.append(value)
        step.result.values[node.id] = value
    for view, node_id in circuit.outputs.items():
        if only is not None and node_id not in only:
            continue
        value = step.value(node_id)
        step.result.outputs[view] = value if circuit[node_id].op in _CONSOLIDATED else zset.consolidate(value)
    if step.narrowing is not None:
        n = step.narrowing.lookups
        log.debug("%d state lookups narrowed on the driver", n, extra={"narrowed": n})
    return step.result
