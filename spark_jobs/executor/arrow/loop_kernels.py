"""``loop.LoopKernels`` on pyarrow tables: the fixed-point loop in this process, no Spark job.

Every value is a Table; each trace lookup reads only the Parquet row groups of the trace files
whose statistics admit the change's keys (``state.lookup.TraceFiles``; traces are compacted
sorted on their key, so few groups). An iteration then costs milliseconds instead of ~1 s of
planning and jobs. ``NotLocal`` (raised before anything is committed) hands the step to Spark:
deltas growing beyond ``recursion.local_rows`` or lookups decoding more than
``recursion.driver_trace_rows`` trace rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.executor import loop as L
from spark_jobs.executor.arrow import zsets
from spark_jobs.executor.arrow.expressions import apply_filter, apply_map
from spark_jobs.executor.engine import NotLocal
from spark_jobs.executor.loop import ITER, DEPTH, JoinSpec, Loop, ScopeStep, crossing, deeper_probes, trace_id
from spark_jobs.ir.graph import Circuit, Node
from spark_jobs.ir.operator import operator
from spark_jobs.policy import RecursionPolicy
from spark_jobs.spec.model import WEIGHT
from spark_jobs.state.lookup import TraceFiles

ReadFiles = Callable[[str], "TraceFiles | None"]


def run(node: Node, body: Circuit, imports: Sequence[pa.Table], files: ReadFiles | None,
        policy: RecursionPolicy, timezone: str) -> ScopeStep:
    """One timestep of scope ``node`` in this process (``files`` None: from scratch, no state;
    ``timezone``: Spark's session time zone, for expressions). Raises ``NotLocal`` where it
    cannot serve (nothing done that matters)."""
    traces = {n.id: (files(trace_id(node.id, n.id)) if files else None) for n in body if n.op == "integrate_nested"}
    k = ArrowLoopKernels(policy, list(traces.values()), timezone)
    zero = L.zeros(body, imports, lambda t: t.slice(0, 0), lambda n, args: L.typed(k, n, args))
    deepest = max([-1] + [m for t in traces.values() if t is not None and (m := t.max_of(ITER)) is not None])
    return L.run_loop(node, body, k, imports, traces, zero, deepest)


@dataclass
class ArrowLoopKernels:
    """``loop.LoopKernels`` on tables; traces are ``TraceFiles`` (Parquet read with pyarrow)."""

    policy: RecursionPolicy
    traces: list[Any]
    timezone: str = "UTC"
    name: str = "arrow"

    # ---- the 2-D rules' operations ----
    def total(self, parts: list[pa.Table]) -> pa.Table:
        return zsets.total(parts)

    def lookup(self, trace: TraceFiles, iters: tuple[int | None, int | None], probe: pa.Table,
               trace_keys: Sequence[str], probe_keys: Sequence[str], small: bool) -> pa.Table:
        if probe.num_rows == 0:
            return trace.schema.empty_table()
        if not trace_keys:  # a product: every row of the iterations
            return trace.scan(iters, ITER)
        found = trace.lookup(trace_keys[0], probe.column(probe_keys[0]).to_pylist(), iters, ITER)
        return zsets.semi(found, probe, trace_keys, probe_keys) if len(trace_keys) > 1 else found

    def drop_iter(self, value: pa.Table) -> pa.Table:
        return value.drop_columns([ITER])

    def join(self, left: pa.Table, right: pa.Table, spec: JoinSpec, side: str, small: bool) -> pa.Table:
        return zsets.join(left, right, spec.left_keys, spec.right_keys, spec.null_safe, spec.left_out, spec.right_out)

    def columns(self, value: pa.Table) -> list[str]:
        return zsets.data_columns(value)

    def project(self, value: pa.Table, cols: Sequence[str]) -> pa.Table:
        return value.select(list(cols))

    def distinct_change(self, cur: pa.Table | None, before: pa.Table | None, old: pa.Table | None, i: int,
                        cols: Sequence[str]) -> pa.Table:
        cols = list(cols)
        tags = ("__o", "__oi", "__b", "__c")
        rows = []

        def tagged(t: pa.Table, **weights: pa.Array) -> pa.Table:
            zero = pa.array(np.zeros(t.num_rows, np.int64))
            return pa.table([t.column(c) for c in cols] + [weights.get(g, zero) for g in tags], names=cols + list(tags))

        if cur is not None:
            rows.append(tagged(cur, __c=cur.column(WEIGHT)))
        if before is not None:
            rows.append(tagged(before, __b=before.column(WEIGHT)))
        if old is not None and old.num_rows:
            w, it = old.column(WEIGHT), old.column(ITER)
            rows.append(tagged(old, __o=pc.if_else(pc.less(it, i), w, 0), __oi=pc.if_else(pc.equal(it, i), w, 0)))
        schema = (cur if cur is not None else before).select(cols).schema.append(pa.field(WEIGHT, pa.int64()))
        if not rows:
            return schema.empty_table()
        sums = zsets.group_sums(zsets.total(rows), cols, tags)
        o, oi, b, c = (sums.column(f"{g}_sum").to_numpy(zero_copy_only=False) for g in tags)
        zsets.check_additions([o, oi, b, c], lambda at: {k: sums.column(k)[at].as_py() for k in cols})
        d = crossing(o, oi, b, c, lambda v: (v > 0).astype(np.int64))
        out = pa.table([sums.column(k) for k in cols] + [pa.array(d, pa.int64())], names=cols + [WEIGHT])
        return out.filter(pc.not_equal(out.column(WEIGHT), 0)).cast(schema)

    # ---- the loop's own ----
    def linear(self, node: Node, value: pa.Table) -> pa.Table:
        """A row-wise body operator: its ``loop.arrow`` kernel (``body_map``, ...)."""
        fn = operator(node.op).kernel("loop.arrow")
        if fn is None:
            raise NotLocal(f"operator {node.op!r} in a recursive body")
        return fn(node, value, self)

    def is_empty(self, value: pa.Table) -> bool:
        return value.num_rows == 0

    def settle(self, node: Node, value: pa.Table, zero: pa.Table) -> pa.Table:
        """The node's columns, order and types; NotLocal past ``local_rows``."""
        if value.num_rows > self.policy.local_rows:
            raise NotLocal(f"{value.num_rows} rows of {node.id!r} in one iteration "
                           f"(> execution.recursion.local_rows = {self.policy.local_rows})")
        return value.select(zero.column_names).cast(zero.schema)

    def hold(self, loop: Loop, streams: list[str]) -> None:
        """(Tables are in this process already.)"""

    def materialize(self, loop: Loop, kept: set[str], streams: set[str]) -> None:
        for x, d in loop.cur.items():  # a computed value may turn out empty: the loop skips it then
            if not d.empty and d.value.num_rows == 0:
                loop.cur[x] = loop.empty(x)
        for s in streams:
            c = loop.cur[s]
            if not c.empty:
                b = loop.before[s]
                loop.before[s] = L.Delta(c.value if b.empty else zsets.total([b.value, c.value]), False)
        decoded = sum(t.decoded_rows() for t in self.traces if t is not None)
        if decoded > self.policy.driver_trace_rows:
            raise NotLocal(f"trace lookups decoded {decoded} rows "
                           f"(> execution.recursion.driver_trace_rows = {self.policy.driver_trace_rows})")

    def deeper_match(self, loop: Loop, i: int) -> bool:
        return any(p.num_rows for p in deeper_probes(loop, i))

    def consolidate(self, value: pa.Table) -> pa.Table:
        return zsets.consolidate(value)

    def with_iter(self, value: pa.Table, i: int) -> pa.Table:
        return zsets.with_column(value, ITER, zsets.constant(value.num_rows, i, pa.int32()))

    def depth(self, depth: int) -> pa.Table:
        return pa.table({DEPTH: pa.array([depth], pa.int32()), WEIGHT: pa.array([1], pa.int64())})

    def jobs(self) -> int:
        return 0


# ---- the row-wise body operators (``loop.arrow`` kernels, named by their IR operators) ----------

def body_map(node: Node, value: pa.Table, k: ArrowLoopKernels) -> pa.Table:
    return apply_map(value, node.param("columns"), k.timezone)


def body_filter(node: Node, value: pa.Table, k: ArrowLoopKernels) -> pa.Table:
    return apply_filter(value, node.param("where"), k.timezone)


def body_negate(node: Node, value: pa.Table, k: ArrowLoopKernels) -> pa.Table:
    return zsets.negate(value)
