"""The Spark engine: every operator's kernel on lazy DataFrames, and the Z-set algebra on them.

Nothing runs here: each kernel builds a plan over the input deltas and the *previous* committed
state; the runner decides when jobs run (writing outputs and state). The arithmetic lives in
the kernel library (``executor/spark/``); these functions wire a node's params and the
step's state into it. A small change (``broadcast``) looks state up by broadcasting the change,
or by narrowing the state on the driver first (``executor/spark/narrow.py``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from pyspark.sql import DataFrame, SparkSession

from spark_jobs.executor.spark import zset
from spark_jobs.executor.engine import NotLocal, StateUpdate
from spark_jobs.executor import loop as L
from spark_jobs.executor.loop import log as loop_log
from spark_jobs.executor.spark.local_relations import select_of
from spark_jobs.executor.spark.narrow import Narrowing
from spark_jobs.executor.spark import aggregate as agg
from spark_jobs.executor.spark import distinct as dist
from spark_jobs.executor.spark import join as jn
from spark_jobs.executor.spark import linear, stream
from spark_jobs.executor.spark.zset import WEIGHT, col
from spark_jobs.ir.graph import Node
from spark_jobs.ir.incrementalize import integral_row_group_bytes
from spark_jobs.ir.operator import delayed_integral_source, is_integral
from spark_jobs.policy import ExecutionPolicy

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_jobs.executor.evaluate import Step

log = logging.getLogger(__name__)


@dataclass
class SparkEngine:
    """``kernels.Engine`` on DataFrames. ``broadcast``: the step's change is small (look state
    up by broadcasting it, or by narrowing on the driver when the state has trace files)."""

    spark: SparkSession | None
    policy: ExecutionPolicy = field(default_factory=ExecutionPolicy)
    broadcast: bool = True
    # the step's changes are held on the driver (``execution.local_change_rows`` rows at most):
    # a join of two delta-sized values is a shuffled hash join (``join``)
    held: bool = False
    name: str = "spark"
    narrowing: Narrowing | None = None
    kept: list[DataFrame] = field(default_factory=list)  # what ``settle`` cached
    # IR operators in each node's Spark plan this step (an input read twice counts twice)
    plan_size: dict[str, int] = field(default_factory=dict)

    def begin(self, step: "Step") -> None:
        """Set up the step's driver-side lookups when its state has trace files."""
        self.plan_size.clear()
        files_of = getattr(step.state, "trace_files", None)
        session = self.session()
        if self.broadcast and files_of is not None and session is not None and self.policy.narrow.enabled:
            self.narrowing = Narrowing(session, step.circuit, step.value, files_of, self.policy.narrow)

    def end(self) -> None:
        if self.narrowing is not None:
            n = self.narrowing.lookups
            log.debug("%d state lookups narrowed on the driver", n, extra={"narrowed": n})

    def session(self) -> SparkSession | None:
        return self.spark or SparkSession.getActiveSession()

    def plus(self, *values: DataFrame) -> DataFrame:
        return zset.plus(*values)

    def negate(self, value: DataFrame) -> DataFrame:
        return zset.negate(value)

    def consolidate(self, value: DataFrame) -> DataFrame:
        return zset.consolidate(value)

    def empty_like(self, value: DataFrame) -> DataFrame:
        return zset.empty_like(value)

    def columns(self, value: DataFrame) -> list[str]:
        return zset.data_columns(value)

    def settle(self, node: Node, value: DataFrame, *, reused: bool) -> DataFrame:
        """Cut the lineage of a value whose plan would exceed ``policy.max_plan_operators`` IR
        operators: the bilinear rule reads a join's input three times (Δa·Δb, I(a)·Δb, Δa·I(b)),
        so a chain of k joins over an unmaterialized change plans ~3^k subtrees, and the TPC-H
        SQL circuit ran the driver out of heap in Spark's analyzer. Else cache a reused value."""
        size = 1 + sum(self.plan_size.get(i, 1) for i in node.inputs)
        if size > self.policy.max_plan_operators:
            value, size = zset.cut_lineage(value), 1
        elif reused and not zset.is_local(value):  # a local value is computed already
            value = value.persist()
            self.kept.append(value)
        self.plan_size[node.id] = size
        return value

    def release(self) -> None:
        for df in self.kept:
            df.unpersist()
        self.kept.clear()


def _engine(s: "Step") -> SparkEngine:
    return s.engine  # type: ignore[return-value]


# ---- linear operators -------------------------------------------------------------------------

def input(s: "Step", node: Node) -> DataFrame:  # noqa: A001 - the operator's name
    def empty(name: str, schema: object) -> DataFrame:
        spark = _engine(s).session()
        if spark is None:
            raise ValueError(f"input {name!r}: no delta and no SparkSession to build an empty Z-set")
        return zset.empty(spark, schema)  # type: ignore[arg-type]

    df, columns = s.input_delta(node, empty)
    columns = tuple(columns)
    selected = zset.select_kept(df, ("input", columns),
                                lambda: [*[col(c) for c in columns], col(WEIGHT).cast("long").alias(WEIGHT)])
    if dict(df.dtypes).get(WEIGHT) == "bigint":  # (the cast changes nothing): the change's rows, selected
        select_of(selected, df, [*columns, WEIGHT])
    return selected


def map(s: "Step", node: Node) -> DataFrame:  # noqa: A001
    return linear.map(s.value(node.inputs[0]), node.param("columns"))


def filter(s: "Step", node: Node) -> DataFrame:  # noqa: A001
    return linear.filter(s.value(node.inputs[0]), node.param("where"))


def plus(s: "Step", node: Node) -> DataFrame:
    return linear.plus(*s.args(node))


def negate(s: "Step", node: Node) -> DataFrame:
    return linear.negate(s.value(node.inputs[0]))


# ---- join ---------------------------------------------------------------------------------------

def join(s: "Step", node: Node) -> DataFrame:
    """A join term; when one side is an integral (state), the other (a delta) is broadcast, or
    the state is narrowed on the driver to the rows the delta's keys can touch (a local relation,
    then joined with a shuffle inside the step's job)."""
    left, right = s.args(node)
    broadcast = None
    if _engine(s).broadcast:
        left_state, right_state = (is_integral(s.circuit, i) for i in node.inputs)
        broadcast = "right" if left_state and not right_state else "left" if right_state and not left_state else None
        if left_state != right_state:
            pos = 0 if left_state else 1
            narrowed = _narrow_join_side(s, node, pos)
            if narrowed is not None:  # joined with a shuffle inside the step's job: broadcasting
                narrowed = narrowed.hint("shuffle_hash")  # even a local relation runs a job
                left, right = (narrowed, right) if pos == 0 else (left, narrowed)
                broadcast = None
        elif not left_state and _engine(s).held and node.param("left_keys", ()):
            # two delta-sized values (a driver-held step): a hash join built on the smaller side,
            # not a sort-merge join, whose two sorts are two more generated stages each
            left, right = left.hint("shuffle_hash"), right.hint("shuffle_hash")
    return jn.join(left, right, node.param("left_keys", ()), node.param("right_keys", ()),
                   bool(node.param("null_safe", False)), node.param("left_out", ()), node.param("right_out", ()),
                   broadcast=broadcast, in_list_max=_engine(s).policy.narrow.in_list_max,
                   within=node.param("within"))


def _narrow_join_side(s: "Step", node: Node, pos: int) -> DataFrame | None:
    """Side ``pos`` of a join term (a z⁻¹(I x)) narrowed to the rows the other side's keys touch."""
    keys = node.param("left_keys" if pos == 0 else "right_keys") or ()
    probe_keys = node.param("right_keys" if pos == 0 else "left_keys") or ()
    trace = delayed_integral_source(s.circuit, node.inputs[pos])
    if not keys or trace is None:
        return None
    found = _narrowed(s, trace, keys[0], node.inputs[1 - pos], probe_keys[0], bool(node.param("null_safe", False)),
                      side=(node.id, pos))
    return None if found is None else zset.select_names(found, s.value(node.inputs[pos]).columns)


def _narrowed(s: "Step", trace: str, column: str, probe: str, probe_column: str, null_matches: bool,
              side: tuple[str, int] | None = None) -> DataFrame | None:
    """Trace ``trace``'s committed state cut on the driver to what ``probe_column`` of node
    ``probe`` can hold this step (``Narrowing.narrow``); None when it is not narrowed."""
    state = s.state.read(trace)
    narrowing = _engine(s).narrowing
    if state is None or narrowing is None:
        return None
    return narrowing.narrow(trace, state, column, probe, probe_column, null_matches, side)


def _narrowed_state(s: "Step", trace: str, probe: str, keys: tuple[str, ...], columns: list[str]) -> DataFrame | None:
    """State ``trace`` narrowed by the first of ``keys`` (NULL matches NULL, as in a group or a
    tuple) to what node ``probe``'s change can touch, as ``columns``; else its whole value."""
    return _narrowed_or_whole(s, trace, probe, keys, columns)[0]


def _narrowed_or_whole(s: "Step", trace: str, probe: str, keys: tuple[str, ...], columns: list[str]
                       ) -> tuple[DataFrame | None, bool]:
    """``_narrowed_state`` and whether it was narrowed (a local relation of the rows found)."""
    found = _narrowed(s, trace, keys[0], probe, keys[0], True) if keys else None
    state = found if found is not None else s.state.read(trace)
    return (None if state is None else zset.select_names(state, columns)), found is not None


# ---- stream operators ---------------------------------------------------------------------------

def integrate(s: "Step", node: Node) -> DataFrame:
    (delta,) = s.args(node)
    # Appended as is: a trace is a sum of Z-sets, so nothing reading it needs one row per tuple
    # (readers sum weights; compaction consolidates). Consolidating here cost a shuffle per trace.
    keys = s.state_keys(node)  # kept sorted on them: lookups read few row groups
    s.update(node.id, StateUpdate("append", delta, keys, sort_by=keys,
                                  row_group_bytes=integral_row_group_bytes(s.circuit, node.id)))
    return stream.integrate_value(s.state.read(node.id), delta)


def delay(s: "Step", node: Node) -> DataFrame:
    (current,) = s.args(node)
    source = delayed_integral_source(s.circuit, node.id)
    if source is not None:  # z^-1(I x): the integrator's committed state
        return stream.delay_value(s.state.read(source), current)
    s.update(node.id, StateUpdate("replace", zset.consolidate(current), s.state_keys(node)))
    return stream.delay_value(s.state.read(node.id), current)


def differentiate(s: "Step", node: Node) -> DataFrame:
    (current,) = s.args(node)
    s.update(node.id, StateUpdate("replace", zset.consolidate(current), s.state_keys(node)))
    return stream.differentiate_value(current, s.state.read(node.id))


# ---- distinct -----------------------------------------------------------------------------------

def distinct(s: "Step", node: Node) -> DataFrame:
    return dist.distinct(s.value(node.inputs[0]))


def distinct_h(s: "Step", node: Node) -> DataFrame:
    delta, prev_integral = s.args(node)
    trace = delayed_integral_source(s.circuit, node.inputs[1])
    broadcast = _engine(s).broadcast
    if broadcast and trace is not None and s.state.read(trace) is not None:
        prev_integral = _narrowed_state(s, trace, node.inputs[0], tuple(zset.data_columns(delta)),
                                        prev_integral.columns)
    return dist.distinct_h(delta, prev_integral, broadcast_delta=broadcast,
                           in_list_max=_engine(s).policy.narrow.in_list_max)


# ---- aggregates ---------------------------------------------------------------------------------

def aggregate(s: "Step", node: Node) -> DataFrame:
    return agg.aggregate(s.value(node.inputs[0]), tuple(node.param("group_by", ())), node.param("aggs"), node=node.id)


def aggregate_linear(s: "Step", node: Node) -> DataFrame:
    return _from_own_state(s, node, agg.aggregate_linear_step)


def aggregate_insert_only(s: "Step", node: Node) -> DataFrame:
    """min/max (and count/sum/avg) over an insert-only input: no integral of the input."""
    return _from_own_state(s, node, agg.aggregate_insert_only_step)


def _from_own_state(s: "Step", node: Node, step: Callable[..., tuple[DataFrame, DataFrame]]) -> DataFrame:
    """An aggregate kept as one state row set per group (running totals; for insert-only inputs
    also extrema): ``step`` reads the rows of the groups the delta touches (narrowed on the
    driver when small) and returns the output change and the rows to append to the state."""
    (delta,) = s.args(node)
    group_by = tuple(node.param("group_by", ()))
    prev = s.state.read(node.id)
    broadcast = _engine(s).broadcast
    narrowed = False
    if broadcast and prev is not None:
        prev, narrowed = _narrowed_or_whole(s, node.id, node.inputs[0], group_by, prev.columns)
    out, state = step(delta, prev, group_by, node.param("aggs"), s.first_step, broadcast_delta=broadcast,
                      node=node.id, in_list_max=_engine(s).policy.narrow.in_list_max, prev_narrowed=narrowed)
    s.update(node.id, StateUpdate("append", state, group_by, sort_by=group_by))
    return out


def aggregate_touched(s: "Step", node: Node) -> DataFrame:
    delta, integral = s.args(node)
    group_by = tuple(node.param("group_by", ()))
    prev = s.state.read(node.id)
    broadcast = _engine(s).broadcast
    if broadcast and group_by and prev is not None:
        prev = _narrowed_state(s, node.id, node.inputs[0], group_by, prev.columns)
        source = s.circuit[node.inputs[1]]
        if source.op == "integrate" and s.state.read(source.id) is not None:
            before = _narrowed_state(s, source.id, node.inputs[0], group_by, integral.columns)
            integral = zset.local_plus(before, s.value(source.inputs[0]))  # type: ignore[arg-type]
    out = agg.aggregate_touched_step(delta, integral, prev, group_by, node.param("aggs"), s.first_step,
                                     broadcast_delta=broadcast, in_list_max=_engine(s).policy.narrow.in_list_max,
                                     node=node.id)
    s.update(node.id, StateUpdate("append", out, group_by, sort_by=group_by))
    return out


# ---- recursion ----------------------------------------------------------------------------------

def scope(s: "Step", node: Node) -> DataFrame:
    """A recursive scope: its fixed-point loop runs now (``executor/loop.py``). An incremental
    step whose changes are held on the driver runs the loop in-process on Arrow
    (``recursion.driver_loop``), else, or when that cannot serve, on Spark."""
    import pyarrow as pa

    from spark_jobs.executor.arrow import loop_kernels as arrow_loop
    from spark_jobs.executor.spark import loop_kernels as spark_loop

    incremental = bool(node.param("incremental"))
    body = L.scope_body(node)
    engine = _engine(s)
    policy = engine.policy.recursion
    imports = s.args(node)
    read = s.state.read if incremental else None
    files = getattr(s.state, "trace_files", None) if incremental else None
    spark = engine.session() or imports[0].sparkSession
    done = None
    if read is not None and files is not None and policy.driver_loop:
        try:
            tables = [to_arrow(df, policy.local_rows) for df in imports]
            done = arrow_loop.run(node, body, tables, files, policy, spark.conf.get("spark.sql.session.timeZone"))
            done.output = to_spark(spark, done.output)
            done.updates = {k: StateUpdate(u.kind, to_spark(spark, u.df), u.keys, u.sort_by)
                            for k, u in done.updates.items()}
        except NotLocal as why:
            loop_log.debug("scope %s: loop on Spark (%s)", node.id, why)
            done = None
        except pa.ArrowException as why:  # a type Arrow cannot join or convert: Spark can
            loop_log.info("scope %s: loop on Spark, Arrow refused: %s", node.id, why)
            done = None
    if done is None:
        done = spark_loop.run(node, body, imports, read, spark, policy, engine.broadcast and incremental)
    if incremental:
        for trace, update in done.updates.items():
            s.update(trace, update)
    return done.output


def to_arrow(df: DataFrame, limit: int) -> "pa.Table":
    """A driver-held DataFrame's rows as a table (no Spark job); NotLocal if it is not held or
    has more than ``limit`` rows."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    if not zset.is_local(df):
        raise NotLocal("an input change is not held on the driver")
    try:
        rows = df.collect()
    except (ValueError, OverflowError) as exc:  # PySpark's datetime.fromtimestamp fails near year 1
        raise NotLocal(f"a value Python cannot convert ({exc})") from None
    if len(rows) > limit:
        raise NotLocal(f"an input change of {len(rows)} rows")
    schema = to_arrow_schema(df.schema, timezone="UTC")  # timestamps: UTC instants, as Parquet holds them
    return pa.table([pa.array([r[k] for r in rows], f.type) for k, f in enumerate(schema)], schema=schema)


def to_spark(spark: SparkSession, table: "pa.Table") -> DataFrame:
    """A table as a Spark local relation (no job: the optimizer sees a LocalRelation)."""
    return spark.createDataFrame(table)
