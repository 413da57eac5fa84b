"""Kernels of ``iterate`` (``ir/ops/iterate.py``): the while loop on either engine.

One statement of the loop (``run``) over both engines: each iteration evaluates the body's
circuit once on whole relations, the loop variable being the previous iteration's value, with
``evaluate_step`` itself (a first step over no state: Q^Δ at t = 1 on the whole input is Q), so
the body may hold any operator that has kernels, and each engine runs it with its own kernels.
The loop stops at the first iteration whose value equals the previous one (as Z-sets); one that
still changes after ``max_iterations`` body applications raises ``RecursionLimitExceeded``
before anything is committed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from spark_jobs.executor.evaluate import evaluate_step
from spark_jobs.executor.loop import RecursionLimitExceeded
from spark_jobs.ir.graph import Node
from spark_jobs.ir.incrementalize import incrementalize
from spark_jobs.spec.model import WEIGHT

if TYPE_CHECKING:
    from spark_jobs.executor.evaluate import Step


class NoState:
    """The body is evaluated from scratch each iteration: no committed state, no trace files."""

    def read(self, node_id: str) -> None:
        return None

    def trace_files(self, node_id: str) -> None:
        return None


def limit_message(node: str, limit: int) -> str:
    return (f"iterate node {node!r} did not converge within {limit} iterations: its value still changed at "
            f"iteration {limit} (settings.max_iterations = {limit}). The loop may never converge (a value "
            f"that grows without bound, such as n + 1, or one that oscillates between values); if it only "
            f"converges slowly, raise settings.max_iterations in the circuit file. Nothing was committed "
            f"for this timestep.")


def run(node: Node, values: Sequence[Any], engine: Callable[[], Any], same: Callable[[Any, Any], bool],
        order: Callable[[Any], Any], settle: Callable[[Any], Any] = lambda v: v) -> tuple[Any, int]:
    """The loop's value and the number of body applications. ``values``: init, then the imports
    (whole relations); ``engine()``: a fresh engine for one evaluation of the body; ``same``:
    Z-set equality; ``order``: a value with the loop's columns in their order; ``settle``: a
    value computed now (Spark: its lineage cut, so iteration k does not plan k bodies)."""
    body = incrementalize(node.param("body"))
    loop = node.param("loop")
    fixed = dict(zip(node.param("imports"), values[1:]))
    limit = int(node.param("max_iterations"))
    x = order(values[0])
    for i in range(1, limit + 1):
        result = evaluate_step(body, {**fixed, loop: x}, NoState(), first_step=True, engine=engine())
        y = settle(order(result.outputs["value"]))
        result.release()
        if same(x, y):
            return y, i
        x = y
    raise RecursionLimitExceeded(limit_message(node.origin, limit))


# ---- Arrow ----------------------------------------------------------------------------------------

def arrow(s: "Step", node: Node) -> Any:
    """The loop in this process (the whole inputs read from their traces: ``NotLocal`` past the
    policy's lookup bound hands the step to Spark)."""
    import pyarrow as pa

    from spark_jobs.executor.arrow import zsets
    from spark_jobs.executor.arrow.kernels import ArrowEngine

    outer: ArrowEngine = s.engine
    values = [outer.table(v) for v in s.args(node)]
    cols = list(node.columns)

    def order(t: pa.Table) -> pa.Table:
        return zsets.consolidate(t.select(cols + [WEIGHT]))

    def same(a: pa.Table, b: pa.Table) -> bool:
        if a.schema != b.schema:
            try:
                a = a.cast(b.schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return False
        return zsets.consolidate(zsets.total([b, zsets.negate(a)])).num_rows == 0

    value, _ = run(node, values, lambda: ArrowEngine(outer.policy, outer.timezone), same, order)
    return value


# ---- Spark ----------------------------------------------------------------------------------------

def spark(s: "Step", node: Node) -> Any:
    """The loop on Spark: one job per iteration for the body (its value checkpointed) and one
    for the comparison with the previous iteration."""
    from pyspark.sql.functions import col

    from spark_jobs.executor.spark import zset
    from spark_jobs.executor.spark.kernels import SparkEngine

    outer: SparkEngine = s.engine
    values = s.args(node)
    session = outer.session() or values[0].sparkSession
    cols = list(node.columns)

    def order(df: Any) -> Any:
        return zset.consolidate(df.select(*[col(c) for c in cols], col(WEIGHT)))

    def same(a: Any, b: Any) -> bool:
        return zset.consolidate(zset.plus(b, zset.negate(a))).isEmpty()

    value, _ = run(node, values, lambda: SparkEngine(session, outer.policy, broadcast=False), same, order,
                   settle=zset.cut_lineage)
    return value
