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

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

from spark_jobs.executor.engine import StateUpdate
from spark_jobs.executor.evaluate import evaluate_step
from spark_jobs.executor.loop import ITER, RecursionLimitExceeded
from spark_jobs.ir.graph import Node
from spark_jobs.ir.ops.iterate import BODY_ROW_GROUP_BYTES, DEPTH, DIFF, VALUE, body_states, incremental_body
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
    # an iteration's results computed together (Spark: one job), see ``settle_iteration``
    settle_all: Callable[[Any, Any, dict[str, Any]], tuple[Any, Any, dict[str, Any], bool]] | None = None
    is_zero: Callable[[Any], bool] | None = None  # of an unconsolidated value (default: consolidate, is_empty)
    cancels: Callable[[Any, Any], bool] | None = None  # is a + b zero? (default: consolidate, is_empty)


def settle_iteration(ops: Ops, value: Any, prev: Any, deltas: dict[str, Any]) -> tuple[Any, Any, dict[str, Any], bool]:
    """An iteration's value change ``Δx_i`` (ordered), its change against ``Δx_(i-1)``, the
    state deltas the body's evaluation produced, and whether that change is zero, each computed
    once: on Spark all of them in ONE job (``_SparkSettle``), so that neither the next iteration
    nor the commit's write recomputes an iteration's plans (a 1,000-edge step on 100k edges once
    re-ran every iteration's joins inside the commit's one write task and ran out of memory)."""
    if ops.settle_all is not None:
        return ops.settle_all(value, prev, deltas)
    cur = ops.settle(ops.order(value))
    change = ops.consolidate(ops.plus(cur, ops.negate(prev)))
    return cur, change, deltas, ops.is_empty(change)


def _is_zero(ops: Ops, value: Any) -> bool:
    return ops.is_zero(value) if ops.is_zero is not None else ops.is_empty(ops.consolidate(value))


def _cancels(ops: Ops, a: Any, b: Any) -> bool:
    return ops.cancels(a, b) if ops.cancels is not None else ops.is_empty(ops.consolidate(ops.plus(a, b)))


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
        kept = {sid: u for sid, u in result.updates.items() if sid in states and (states[sid] or i == 1)}
        # x_i, its change and the body's state, computed once (Spark: one job; the commit writes
        # these rows instead of re-running each iteration's joins)
        y, change, settled, unchanged = settle_iteration(ops, result.outputs["value"], x,
                                                          {sid: u.df for sid, u in kept.items()})
        for sid, u in kept.items():
            tid = f"{node.id}/{i}/{sid}" if states[sid] else f"{node.id}/{sid}"
            updates[tid] = StateUpdate("replace", settled[sid], u.keys, u.sort_by, BODY_ROW_GROUP_BYTES)
        if unchanged:
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
    the state of the previous one (``depth`` iterations; ``old_diff(i)``: D_i then, as stored (not
    necessarily consolidated: ``ops.cancels`` and ``_finish`` consolidate where they must);
    ``whole(trace)``: a trace's rows; ``stack(a, b)``: both tables' rows)."""
    body = incremental_body(node)
    loop, imports, _ = _shape(node)
    changes = dict(zip(imports, deltas[1:]))
    quiet = all(_is_zero(ops, d) for d in deltas[1:])
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
        kept = {sid: u for sid, u in result.updates.items()
                if sid in states and (states[sid] or i == 1)}
        cur, change, settled, unchanged = settle_iteration(  # Δx_i, and the change of D_i
            ops, result.outputs["value"], prev, {sid: u.df for sid, u in kept.items()})
        for sid, u in kept.items():
            u = StateUpdate(u.kind, settled[sid], u.keys, u.sort_by, BODY_ROW_GROUP_BYTES)
            if not states[sid]:
                updates[f"{node.id}/{sid}"] = u
            elif i <= depth:
                updates[f"{node.id}/{i}/{sid}"] = u
            else:  # a new iteration: the state of ``depth`` (equal past it) plus this change
                base = whole(f"{node.id}/{depth}/{sid}")
                df = stack(base, u.df) if u.kind == "append" and base is not None else u.df
                updates[f"{node.id}/{i}/{sid}"] = StateUpdate("replace", df, u.keys, u.sort_by, BODY_ROW_GROUP_BYTES)
        if unchanged and i < depth:  # D_i as before, and not 0 (the loop went on past i): it goes on
            prev = cur
            continue
        old = old_diff(i) if i < depth else None  # read only where D_i changes: a small change
        stops = _cancels(ops, old, change) if old is not None else unchanged  # leaves most alone
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
    dropped = [(j, ops.consolidate(d)) for j in range(k + 1, depth) if (d := old_diff(j)) is not None]
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

    def cancels(a: pa.Table, b: pa.Table) -> bool:
        both = plus(a, b)
        return not both.num_rows or (may_be_zero(both) and not zsets.consolidate(both).num_rows)

    return Ops(lambda: ArrowEngine(outer.policy, outer.timezone), zsets.consolidate, plus, zsets.negate,
               lambda t: t.num_rows == 0, order, tag, depth, cancels=cancels)


def may_be_zero(table: Any) -> bool:
    """False when the Z-set ``table`` (not consolidated) is certainly not zero, from sums alone,
    no grouping: a zero Z-set has every linear functional zero, here the sum of the weights and,
    per integer or date column, the sum of weight × value (NULL as 0), in wrapping 64-bit
    arithmetic (still linear, modulo 2^64). True: maybe zero, consolidate to know. Why: whether
    the loop stops at i asks if D_i + (its change) is zero; D_i has ~10^5 rows early on 1M edges,
    and consolidating it at every iteration cost more than the iteration."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    def numbers(column: Any) -> Any:
        column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        return pc.fill_null(column, 0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)

    w = numbers(table.column(WEIGHT))
    if int(w.sum()) != 0:
        return False
    for f in table.schema:
        if f.name == WEIGHT:
            continue
        if pa.types.is_integer(f.type) or pa.types.is_date32(f.type):
            base = pa.int32() if pa.types.is_date32(f.type) else f.type
            if int((w * numbers(table.column(f.name).cast(base))).sum()) != 0:
                return False
    return True


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
            """D_i as stored (``Ops.cancels`` consolidates it only when it may cancel: on 1M edges
            consolidating each iteration's D_i of ~10^5 rows was a third of a step's loop)."""
            if diff_files is None:
                return None
            rows = diff_files.lookup(ITER, [i])
            return rows.select(cols + [WEIGHT]) if rows.num_rows else None

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

class _SparkSettle:
    """An iteration's results on Spark computed ONCE, in one job: ``Δx_i``, its change and the
    body's state deltas. While they fit ``local_rows`` (a small change: ``driver``), they come to
    this process as Arrow tables (``collect_arrow``) and go on as local relations: the next
    iteration's lookups narrow the state on the driver, its emptiness checks are no jobs, and
    the commit writes rows held here. Past that, they are computed together as one local
    checkpoint (a tagged union, its row count per part in a second, cheap job) and read back
    part by part. Either way the commit's write reads computed rows, never an iteration's plan
    (written as one union with one task, 20 iterations of joins ran out of execution memory)."""

    def __init__(self, spark: Any, order: Callable[[Any], Any], local_rows: int, driver: bool) -> None:
        self.spark, self.order, self.local_rows, self.driver = spark, order, local_rows, driver
        self.rows: dict[int, tuple[Any, int]] = {}  # id(df) -> (df, rows) of settled values

    def settle(self, value: Any, prev: Any, deltas: dict[str, Any]) -> tuple[Any, Any, dict[str, Any], bool]:
        from spark_jobs.executor.spark import zset

        cur = self.order(value)
        frames = {"cur": cur, "change": zset.consolidate(zset.plus(cur, zset.negate(prev))), **deltas}
        done = self._collect(frames) if self.driver else None
        if done is None:
            self.driver = False  # too many rows for the driver: the rest of the loop checkpoints
            done = self._checkpoint(frames)
        for df, n in done.values():
            self.rows[id(df)] = (df, n)
        out = {k: df for k, (df, _) in done.items()}
        return out.pop("cur"), out.pop("change"), out, done["change"][1] == 0

    def _collect(self, frames: dict[str, Any]) -> dict[str, tuple[Any, int]] | None:
        from spark_jobs.executor.spark.local_relations import collect_arrow

        tables = collect_arrow(self.spark, frames, self.local_rows)[0]
        if tables is None:
            return None
        return {k: (to_local(self.spark, t, frames[k].schema), t.num_rows) for k, t in tables.items()}

    def _checkpoint(self, frames: dict[str, Any]) -> dict[str, tuple[Any, int]]:
        from pyspark.sql import functions as F

        slot = "__iter_slot"
        names = list(frames)
        layout = [[f"p{i}_{k}" for k in range(len(frames[n].columns))] for i, n in enumerate(names)]
        union = None
        for i, n in enumerate(names):
            tagged = frames[n].toDF(*layout[i]).withColumn(slot, F.lit(i))
            union = tagged if union is None else union.unionByName(tagged, allowMissingColumns=True)
        assert union is not None
        # a union has its parts' partitions, and the next iteration's union holds this one's: without
        # the coalesce the tasks per iteration grew with the iterations (4, 9, 16, ... 72 at the
        # tenth; the commit's collect of 30 such parts ran 1,215 tasks)
        width = int(self.spark.conf.get("spark.sql.shuffle.partitions", "4") or 4)
        done = union.coalesce(max(1, width)).localCheckpoint(eager=True)
        counts = {r[0]: r[1] for r in done.groupBy(slot).count().collect()}
        out = {}
        for i, n in enumerate(names):
            part = done.where(F.col(slot) == i).select(
                *[F.col(a).cast(f.dataType).alias(f.name) for a, f in zip(layout[i], frames[n].schema.fields)])
            out[n] = (part, counts.get(i, 0))
        return out

    def known(self, df: Any) -> int | None:
        hit = self.rows.get(id(df))
        return hit[1] if hit is not None and hit[0] is df else None

    def is_empty(self, df: Any) -> bool:
        from spark_jobs.executor.spark import zset

        n = self.known(df)
        if n is not None:
            return n == 0
        return not df.collect() if zset.is_local(df) else df.isEmpty()  # local: no job

    def is_zero(self, df: Any) -> bool:
        """Is ``df`` (not consolidated) the zero Z-set? Held on the driver: summed here, no job."""
        from spark_jobs.executor.spark import zset

        if zset.is_local(df):
            return not _python_total(df.collect())
        return zset.consolidate(df).isEmpty()

    def cancels(self, a: Any, b: Any) -> bool:
        from spark_jobs.executor.spark import zset

        if zset.is_local(a) and zset.is_local(b):
            cols = list(b.columns)
            return not _python_total(a.select(*cols).collect() + b.collect())
        return zset.consolidate(zset.plus(a, b)).isEmpty()


def to_local(spark: Any, table: Any, schema: Any) -> Any:
    """An Arrow table as a local relation of ``schema``'s types (no job: a projection of a
    LocalRelation is folded into one by the optimizer)."""
    from pyspark.sql.functions import col

    df = spark.createDataFrame(table)
    return df.select(*[col(f"`{f.name}`").cast(f.dataType).alias(f.name) for f in schema.fields])


def _python_total(rows: list[Any]) -> dict[tuple, int]:
    """Rows with a weight in the last column, summed per tuple, zeros dropped."""
    total: dict[tuple, int] = {}
    for r in rows:
        key = tuple(r[:-1])
        total[key] = total.get(key, 0) + r[-1]
    return {k: w for k, w in total.items() if w}


def spark(s: "Step", node: Node) -> Any:
    """The loop on Spark, on the state format of the in-process loop (either engine continues
    from the other's Parquet state): incremental when the loop's per-iteration state is
    committed, each iteration's results computed once in one job (``_SparkSettle``: to the
    driver while the change is small, else a local checkpoint); else from scratch over the
    integrated inputs, each iteration settled the same way (its value, change and body state in
    one job: the commit writes computed rows, never an iteration's plan), writing the
    per-iteration state (a write per iteration and body state at commit) so the next step, on
    either engine, is incremental."""
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
    first = s.first_step or not incremental_node
    files = getattr(s.state, "trace_files", None)
    driver = broadcast and files is not None and all(zset.is_local(d) for d in args[:n])
    settler = _SparkSettle(session, order, outer.policy.local_change_rows, driver)
    ops = Ops(lambda: SparkEngine(session, outer.policy, broadcast=broadcast), zset.consolidate, zset.plus,
              zset.negate, settler.is_empty, order, tag, depth_of, settle=zset.cut_lineage)
    depth = 0 if first else _spark_depth(s, node, files)
    ops = replace(ops, settle_all=settler.settle)
    if depth > 0:
        ops = replace(ops, is_zero=settler.is_zero, cancels=settler.cancels)
        diff = s.state.read(f"{node.id}/{DIFF}")
        diff_files = files(f"{node.id}/{DIFF}") if files is not None else None

        def old_diff(i: int) -> Any | None:
            if diff is None:
                return None
            if settler.driver and diff_files is not None:  # looked up in this process: a local relation
                from spark_jobs.executor.arrow import zsets

                rows = diff_files.lookup(ITER, [i])
                if not rows.num_rows:
                    return None
                part = diff.select(*[col(c) for c in cols], col(WEIGHT))
                return to_local(session, zsets.consolidate(rows.select(cols + [WEIGHT])), part.schema)
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


def _spark_depth(s: "Step", node: Node, files: Callable[[str], Any] | None) -> int:
    """Where the committed loop stopped (0: no per-iteration state), read in this process when
    the store's files are reachable (no Spark job)."""
    from pyspark.sql import functions as F
    from pyspark.sql.functions import col

    found = files(f"{node.id}/{DEPTH}") if files is not None else None
    if found is not None:
        from spark_jobs.executor.arrow import zsets

        table = zsets.consolidate(found.read_all())
        return max((r[DEPTH] for r in table.to_pylist() if r[WEIGHT] > 0), default=0)
    depth_df = s.state.read(f"{node.id}/{DEPTH}")
    if depth_df is None:
        return 0
    totals = depth_df.groupBy(DEPTH).agg(F.sum(WEIGHT).alias(WEIGHT)).where(col(WEIGHT) > 0).collect()
    return max((r[DEPTH] for r in totals), default=0)
