"""Kernels of ``iterate`` (``ir/ops/iterate.py``): the while loop on either engine.

The body is evaluated with ``evaluate_step`` itself, each engine with its own kernels, on its
incremental circuit Q^Δ (``ir/ops/iterate.incremental_body``):

- **from scratch** (``scratch``: a first step, a recompute, or a step without the loop's
  state): each iteration is a first step over no state on whole values
  (Q^Δ at t = 1 on the whole input is Q), the loop variable being the previous iteration's value;
  the state updates each iteration's evaluation produces are then exactly the body's state at
  that iteration, written (replacing) as the loop's per-iteration traces;
- **incremental** (``incremental``, on either engine: the same traces, so a step on one
  engine continues from the state the other wrote): iteration i evaluates Q^Δ on the change of
  iteration i-1 with the body's state at iteration i of the previous timestep (``Iteration``
  maps the body's state ids to the loop's traces), as the module docstring of
  ``ir/ops/iterate.py`` says.

Either way the loop stops at the first iteration whose value equals the previous one (as
Z-sets); one that still changes after ``max_iterations`` body applications raises
``RecursionLimitExceeded`` before anything is committed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from spark_jobs.executor.engine import StateUpdate
from spark_jobs.executor.evaluate import evaluate_step
from spark_jobs.executor.loop import ITER, RecursionLimitExceeded
from spark_jobs.ir.graph import Node
from spark_jobs.ir.ops.iterate import DEPTH, DIFF, VALUE, body_states, incremental_body
from spark_jobs.spec.model import WEIGHT

if TYPE_CHECKING:
    from spark_jobs.executor.evaluate import Step


class NoState:
    """A body evaluated from scratch: no committed state, no trace files."""

    def read(self, node_id: str) -> None:
        return None

    def trace_files(self, node_id: str) -> None:
        return None


@dataclass
class Iteration:
    """The committed state of the body at iteration ``i``: a body state id read as the loop's
    trace of that iteration (of ``depth`` past it: the previous values were all equal there)."""

    base: Any
    node_id: str
    states: dict[str, bool]
    i: int
    depth: int

    def trace(self, sid: str) -> str | None:
        if sid not in self.states:
            return None
        return f"{self.node_id}/{min(self.i, self.depth)}/{sid}" if self.states[sid] else f"{self.node_id}/{sid}"

    def read(self, sid: str) -> Any:
        tid = self.trace(sid)
        return self.base.read(tid) if tid is not None else None

    def trace_files(self, sid: str) -> Any:
        tid = self.trace(sid)
        return self.base.trace_files(tid) if tid is not None else None


@dataclass
class Ops:
    """What the loop needs of an engine's values."""

    engine: Callable[[], Any]  # a fresh engine for one evaluation of the body
    consolidate: Callable[[Any], Any]
    plus: Callable[..., Any]
    negate: Callable[[Any], Any]
    is_empty: Callable[[Any], bool]  # of a consolidated value
    order: Callable[[Any], Any]  # the loop's columns in order, consolidated
    tag: Callable[[Any, int], Any]  # with an ``_iter`` column
    depth: Callable[[int], Any]  # the one-row depth table
    settle: Callable[[Any], Any] = lambda v: v  # computed now (Spark: lineage cut)


@dataclass
class Done:
    output: Any  # the change of the loop's value (consolidated)
    updates: dict[str, StateUpdate] = field(default_factory=dict)
    iterations: int = 0


def limit_message(node: str, limit: int) -> str:
    return (f"iterate node {node!r} did not converge within {limit} iterations: its value still changed at "
            f"iteration {limit} (settings.max_iterations = {limit}). The loop may never converge (a value "
            f"that grows without bound, such as n + 1, or one that oscillates between values); if it only "
            f"converges slowly, raise settings.max_iterations in the circuit file. Nothing was committed "
            f"for this timestep.")


def _shape(node: Node) -> tuple[str, list[str], int]:
    imports = list(node.param("imports"))
    return node.param("loop"), imports, 1 + len(imports)


def scratch(node: Node, values: Sequence[Any], previous: Any | None, ops: Ops) -> Done:
    """The loop from ``init`` over whole values (``values``: init, then the imports); with the
    loop's state (per-iteration traces, changes, depth, value) to write when the node is
    incremental. ``previous``: the loop's committed value (None: none), for the output change."""
    body = incremental_body(node)
    loop, imports, _ = _shape(node)
    fixed = dict(zip(imports, values[1:]))
    limit = int(node.param("max_iterations"))
    keep = bool(node.param("incremental"))
    states = body_states(node) if keep else {}
    updates: dict[str, StateUpdate] = {}
    diffs: list[Any] = []
    x = ops.order(values[0])
    for i in range(1, limit + 1):
        result = evaluate_step(body, {**fixed, loop: x}, NoState(), first_step=True, engine=ops.engine())
        for sid, u in result.updates.items():
            if sid in states and (states[sid] or i == 1):
                tid = f"{node.id}/{i}/{sid}" if states[sid] else f"{node.id}/{sid}"
                updates[tid] = StateUpdate("replace", u.df, u.keys, u.sort_by)
        y = ops.settle(ops.order(result.outputs["value"]))
        change = ops.consolidate(ops.plus(y, ops.negate(x)))
        if ops.is_empty(change):
            out = ops.consolidate(ops.plus(y, ops.negate(previous))) if previous is not None else y
            if states:
                tagged = [ops.tag(d, j) for j, d in enumerate(diffs, start=1)]
                updates[f"{node.id}/{DIFF}"] = StateUpdate(
                    "replace", ops.plus(*tagged) if tagged else ops.tag(change, 1), (ITER,), (ITER,))
                updates[f"{node.id}/{DEPTH}"] = StateUpdate("replace", ops.depth(i))
                updates[f"{node.id}/{VALUE}"] = StateUpdate("replace", y, tuple(node.columns))
            return Done(out, updates, i)
        diffs.append(change)
        x = y
    raise RecursionLimitExceeded(limit_message(node.origin, limit))


def incremental(node: Node, deltas: Sequence[Any], state: Any, depth: int, ops: Ops,
                old_diff: Callable[[int], Any | None], whole: Callable[[str], Any], stack: Callable[[Any, Any], Any]) -> Done:
    """One timestep of the loop from the changes (``deltas``: of init, then of the imports) and
    the state of the previous one (``depth`` iterations; ``old_diff(i)``: D_i then, consolidated;
    ``whole(trace)``: a trace's rows; ``stack(a, b)``: both tables' rows)."""
    body = incremental_body(node)
    loop, imports, _ = _shape(node)
    changes = dict(zip(imports, deltas[1:]))
    quiet = all(ops.is_empty(ops.consolidate(d)) for d in deltas[1:])
    limit = int(node.param("max_iterations"))
    states = body_states(node)
    updates: dict[str, StateUpdate] = {}
    diff_parts: list[Any] = []
    prev = ops.order(deltas[0])  # Δx_0
    if quiet and ops.is_empty(prev):
        return Done(ops.consolidate(prev), {}, 0)
    for i in range(1, limit + 1):
        if quiet and ops.is_empty(prev) and i <= depth:  # nothing reaches iterations >= i: all as before
            return _finish(node, ops, prev, depth, depth, old_diff, diff_parts, updates)
        reader = Iteration(state, node.id, states, i, depth)
        result = evaluate_step(body, {**changes, loop: prev}, reader, first_step=False, engine=ops.engine())
        for sid, u in result.updates.items():
            if sid not in states or (not states[sid] and i > 1):
                continue
            if not states[sid]:
                updates[f"{node.id}/{sid}"] = u
            elif i <= depth:
                updates[f"{node.id}/{i}/{sid}"] = u
            else:  # a new iteration: the state of ``depth`` (equal past it) plus this change
                base = whole(f"{node.id}/{depth}/{sid}")
                df = stack(base, u.df) if u.kind == "append" and base is not None else u.df
                updates[f"{node.id}/{i}/{sid}"] = StateUpdate("replace", df, u.keys, u.sort_by)
        cur = ops.settle(ops.order(result.outputs["value"]))  # Δx_i (Spark: computed now)
        change = ops.consolidate(ops.plus(cur, ops.negate(prev)))  # the change of D_i
        unchanged = ops.is_empty(change)  # (on Spark each check is a job)
        if unchanged and i < depth:  # D_i as before, and not 0 (the loop went on past i): it goes on
            prev = cur
            continue
        old = old_diff(i) if i < depth else None  # read only where D_i changes: a small change
        now = ops.consolidate(ops.plus(old, change)) if old is not None else change  # leaves most alone
        stops = ops.is_empty(now) if old is not None else unchanged
        if not unchanged:
            diff_parts.append(ops.tag(change, i))
        if stops:
            return _finish(node, ops, cur, i, depth, old_diff, diff_parts, updates)
        prev = cur
    raise RecursionLimitExceeded(limit_message(node.origin, limit))


def _finish(node: Node, ops: Ops, last: Any, k: int, depth: int, old_diff: Callable[[int], Any],
            diff_parts: list[Any], updates: dict[str, StateUpdate]) -> Done:
    """Stopped at ``k``: the value's change is Δx_k minus the D_j of the iterations the loop no
    longer runs (k < j < depth), whose D_j become 0."""
    dropped = [(j, d) for j in range(k + 1, depth) if (d := old_diff(j)) is not None]
    out = ops.consolidate(ops.plus(last, *[ops.negate(d) for _, d in dropped])) if dropped else ops.consolidate(last)
    diff_parts += [ops.tag(ops.negate(d), j) for j, d in dropped]
    if diff_parts:
        updates[f"{node.id}/{DIFF}"] = StateUpdate("append", ops.plus(*diff_parts), (ITER,), (ITER,))
    if k != depth:
        updates[f"{node.id}/{DEPTH}"] = StateUpdate("replace", ops.depth(k))
    if not ops.is_empty(out):
        updates[f"{node.id}/{VALUE}"] = StateUpdate("append", out, tuple(node.columns))
    return Done(out, updates, k)


# ---- Arrow ----------------------------------------------------------------------------------------

def _arrow_ops(outer: Any, cols: list[str]) -> Ops:
    import pyarrow as pa

    from spark_jobs.executor.arrow import zsets
    from spark_jobs.executor.arrow.kernels import ArrowEngine

    def order(t: pa.Table) -> pa.Table:
        return zsets.consolidate(outer.table(t).select(cols + [WEIGHT]))

    def plus(*parts: pa.Table) -> pa.Table:
        parts = [outer.table(p) for p in parts]
        if len({p.schema for p in parts}) > 1:  # e.g. an int init and a double body output
            target = pa.schema([f.with_nullable(True) for f in parts[0].schema])
            parts = [p.cast(target) for p in parts]
        return zsets.total(parts)

    def tag(t: pa.Table, i: int) -> pa.Table:
        return zsets.with_column(t, ITER, zsets.constant(t.num_rows, i, pa.int32()))

    def depth(k: int) -> pa.Table:
        return pa.table({DEPTH: pa.array([k], pa.int32()), WEIGHT: pa.array([1], pa.int64())})

    return Ops(lambda: ArrowEngine(outer.policy, outer.timezone), zsets.consolidate, plus, zsets.negate,
               lambda t: t.num_rows == 0, order, tag, depth)


def arrow(s: "Step", node: Node) -> Any:
    """The loop in this process: incremental when the loop's state is committed, else from
    scratch over the whole inputs (read from their traces: ``NotLocal`` past the policy's lookup
    bound hands the step to Spark)."""
    import pyarrow as pa

    from spark_jobs.executor.arrow import zsets

    outer = s.engine
    cols = list(node.columns)
    ops = _arrow_ops(outer, cols)
    args = s.args(node)
    _, _, n = _shape(node)
    incremental_node = bool(node.param("incremental"))
    files = getattr(s.state, "trace_files", None)

    def read_whole(trace_id: str) -> pa.Table | None:
        found = files(trace_id) if files is not None else None
        if found is None:
            return None
        outer.charge(found.rows(), f"the trace {trace_id}")
        return found.read_all()

    depth_table = read_whole(f"{node.id}/{DEPTH}") if incremental_node and not s.first_step else None
    depth = max((r[DEPTH] for r in zsets.consolidate(depth_table).to_pylist() if r[WEIGHT] > 0), default=0) \
        if depth_table is not None else 0
    if depth > 0:  # the per-iteration state of the last step (depth 0: a Spark step wrote none)
        diff_files = files(f"{node.id}/{DIFF}")

        def old_diff(i: int) -> pa.Table | None:
            if diff_files is None:
                return None
            rows = diff_files.lookup(ITER, [i])
            return zsets.consolidate(rows.select(cols + [WEIGHT])) if rows.num_rows else None

        def stack(a: pa.Table, b: pa.Table) -> pa.Table:
            target = pa.schema([f.with_nullable(True) for f in b.schema])
            return pa.concat_tables([a.select(b.schema.names).cast(target), b.cast(target)])

        deltas = [outer.table(v) for v in args[:n]]
        done = incremental(node, deltas, s.state, depth, ops, old_diff, read_whole, stack)
    else:
        values = [outer.table(v) for v in args[n:]] if incremental_node else [outer.table(v) for v in args]
        previous = read_whole(f"{node.id}/{VALUE}") if incremental_node and not s.first_step else None
        done = scratch(node, values, ops.order(previous) if previous is not None else None, ops)
    for trace, update in done.updates.items():
        s.update(trace, update)
    return done.output


# ---- Spark ----------------------------------------------------------------------------------------

def spark(s: "Step", node: Node) -> Any:
    """The loop on Spark, on the state format of the in-process loop (either engine continues
    from the other's Parquet state): incremental when the loop's per-iteration state is
    committed, each iteration's change computed now (a local checkpoint: a job per iteration, and
    one per emptiness check); else from scratch over the integrated inputs, one job per iteration
    for the body and one for the comparison, writing the per-iteration state (a write per
    iteration and body state at commit) so the next step, on either engine, is incremental."""
    from pyspark.sql import functions as F
    from pyspark.sql.functions import col

    from spark_jobs.executor.spark import zset
    from spark_jobs.executor.spark.kernels import SparkEngine

    outer = s.engine
    args = s.args(node)
    _, _, n = _shape(node)
    incremental_node = bool(node.param("incremental"))
    values = args[n:] if incremental_node else args
    session = outer.session() or values[0].sparkSession
    cols = list(node.columns)

    def order(df: Any) -> Any:
        return zset.consolidate(df.select(*[col(c) for c in cols], col(WEIGHT)))

    def tag(df: Any, i: int) -> Any:
        return df.select(*[col(c) for c in zset.data_columns(df)], F.lit(i).cast("int").alias(ITER), col(WEIGHT))

    def depth_of(k: int) -> Any:
        return zset.from_tuples(session, [(k, 1)], f"{DEPTH} int, {WEIGHT} long")

    broadcast = bool(getattr(outer, "broadcast", False))
    ops = Ops(lambda: SparkEngine(session, outer.policy, broadcast=broadcast), zset.consolidate, zset.plus,
              zset.negate, lambda df: df.isEmpty(), order, tag, depth_of, settle=zset.cut_lineage)
    first = s.first_step or not incremental_node
    depth_df = None if first else s.state.read(f"{node.id}/{DEPTH}")
    depth = 0
    if depth_df is not None:
        totals = depth_df.groupBy(DEPTH).agg(F.sum(WEIGHT).alias(WEIGHT)).where(col(WEIGHT) > 0).collect()
        depth = max((r[DEPTH] for r in totals), default=0)
    if depth > 0:
        diff = s.state.read(f"{node.id}/{DIFF}")

        def old_diff(i: int) -> Any | None:
            if diff is None:
                return None
            return zset.consolidate(diff.where(col(ITER) == i).select(*[col(c) for c in cols], col(WEIGHT)))

        def stack(a: Any, b: Any) -> Any:
            return a.select(*[col(c).cast(b.schema[c].dataType) for c in b.columns]).unionByName(b)

        done = incremental(node, args[:n], s.state, depth, ops, old_diff, s.state.read, stack)
    else:
        previous = None if first else s.state.read(f"{node.id}/{VALUE}")
        done = scratch(node, values, order(previous) if previous is not None else None, ops)
    for trace, update in done.updates.items():
        s.update(trace, update)
    return done.output
