"""One timestep of a recursive scope: the fixed-point loop over the inner clock, on 2-D deltas.

This is the one statement of the loop and of its 2-D rules; it is written over ``LoopKernels``,
with two implementations: ``spark/loop_kernels.py`` (DataFrames, a Spark job per iteration) and
``arrow/loop_kernels.py`` (pyarrow tables in this process, trace lookups reading only the
Parquet row groups the changes touch: an iteration costs what its changes cost). Which one runs
is the execution policy's choice (``spark/kernels.scope``, ``arrow/kernels.scope``).

A body relation's value is V[t][i]; its 2-D delta is d[t][i] = V[t][i] - V[t-1][i] - V[t][i-1]
+ V[t-1][i-1], so V[t][i] = Σ_{t'<=t, i'<=i} d[t'][i']. Per stream the loop knows

- ``cur``    = d[t][i], this timestep's delta at this iteration;
- ``before`` = Σ_{i'<i} d[t][i'], this timestep's deltas at earlier iterations;
- ``trace``  = rows (tuple, ``_iter`` = j, weight) holding Σ_{t'<t} d[t'][j]: so the old delta at
  exactly i is the rows with ``_iter = i`` and the old value V[t-1][i] those with ``_iter <= i``.

Iteration i computes d[t][i] of every body node (each operator's ``"loop"`` kernel, below), then
the kernels materialize what later iterations read and learn which deltas are empty. A zero change
at i is not the end by itself: old facts derived at deeper iterations may still meet this
timestep's changes (ARCHITECTURE.md, "IR and incrementalizer"). So when the back edges carry nothing at
i, the loop asks the traces whether any row beyond i matches the keys of this timestep's changes
so far (``deeper_probes``); if none does, every later iteration is provably zero and the loop
stops. A small change therefore runs as many iterations as its consequences need.

The scope's outer delta is ∫ (the sum over i) of its output's d[t][i]. State, per join/distinct
input stream: one trace with an ``_iter`` column, appended with this timestep's d[t][i] tagged
``_iter = i``; plus the depth (the iteration the loop stopped at; shown by status). In a query
circuit (no state: a fixed point from scratch) the same loop runs with empty traces: at t = 1 the
2-D rules are semi-naive evaluation (eq. 5.1 of the paper).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from spark_jobs.errors import DbspError, EXIT_FAILED
from spark_jobs.executor.engine import StateUpdate
from spark_jobs.ir.graph import Circuit, Node
from spark_jobs.ir.incrementalize import incrementalize_body
from spark_jobs.ir.operator import operator

ITER = "_iter"  # the iteration column of a per-iteration trace
DEPTH = "depth"
log = logging.getLogger(__name__)


class RecursionLimitExceeded(DbspError, RuntimeError):
    """The fixed point was not reached within ``settings.max_iterations`` iterations."""
    exit_code = EXIT_FAILED


def trace_id(scope: str, node_id: str) -> str:
    """The state id of a scope's per-iteration trace (or of its ``depth``)."""
    return f"{scope}/{node_id}"


@dataclass
class ScopeStep:
    output: Any  # consolidated: the change of the scope's value (its value, from scratch)
    updates: dict[str, StateUpdate] = field(default_factory=dict)  # per-iteration traces and the depth
    iterations: int = 0


@dataclass
class Delta:
    """d[t][i] of one body node: its value, whether it is known to be empty, and whether it is
    small enough to broadcast for a lookup (a hint to Spark's join planner; Arrow ignores it)."""

    value: Any
    empty: bool
    small: bool = True


@dataclass
class Stream:
    """What the 2-D rules need of one input stream at iteration i (see the module docstring)."""

    cur: Any
    before: Any
    trace: Any
    cur_empty: bool
    before_empty: bool
    cur_small: bool = True
    before_small: bool = True

    def parts(self) -> list[Any]:
        """This timestep's deltas up to and including i (cur + before), the non-empty ones."""
        return [v for v, empty in ((self.cur, self.cur_empty), (self.before, self.before_empty)) if not empty]


@dataclass(frozen=True)
class JoinSpec:
    """The parameters of a body join (see ``operators.join.join``)."""

    left_keys: Sequence[str]
    right_keys: Sequence[str]
    null_safe: bool
    left_out: Sequence[tuple[str, str]]
    right_out: Sequence[tuple[str, str]]


def join_spec(n: Node) -> JoinSpec:
    """The ``JoinSpec`` of a ``join_nested`` IR node."""
    return JoinSpec(n.param("left_keys", ()), n.param("right_keys", ()), bool(n.param("null_safe", False)),
                    n.param("left_out", ()), n.param("right_out", ()))


class LoopKernels(Protocol):
    """The Z-set operations the 2-D rules are written in, and the loop's own needs, per engine."""

    name: str  # "spark" | "arrow" (for the profile log)

    def total(self, parts: list[Any]) -> Any:
        """The Z-set sum of ``parts`` (rows concatenated)."""

    def lookup(self, trace: Any, iters: tuple[int | None, int | None], probe: Any, trace_keys: Sequence[str],
               probe_keys: Sequence[str], small: bool) -> Any:
        """Trace rows with ``iters[0] <= _iter <= iters[1]`` (None: unbounded) whose keys match a
        row of ``probe`` (NULL matching NULL), with the ``_iter`` column."""

    def drop_iter(self, value: Any) -> Any: ...

    def join(self, left: Any, right: Any, spec: JoinSpec, side: str, small: bool) -> Any:
        """The bilinear join; ``side`` names the smaller input (a broadcast hint for Spark)."""

    def columns(self, value: Any) -> list[str]: ...

    def project(self, value: Any, cols: Sequence[str]) -> Any: ...

    def distinct_change(self, cur: Any, before: Any, old: Any, i: int, cols: Sequence[str]) -> Any:
        """Per touched tuple, the four sums of ``distinct_nested`` and their ``crossing``; an
        argument None is empty. ``old`` has the ``_iter`` column."""

    def linear(self, node: Node, value: Any) -> Any:
        """A linear body operator (map, filter, negate) applied to a delta."""

    def is_empty(self, value: Any) -> bool:
        """Known to be empty without running anything (Spark: only what a count said)."""

    def settle(self, node: Node, value: Any, zero: Any) -> Any:
        """d[t][i] of ``node`` as later iterations keep it (Arrow: the node's types; size checks)."""

    def hold(self, loop: "Loop", streams: list[str]) -> None:
        """Bring deltas computed this iteration that a lookup is keyed by to the driver first."""

    def materialize(self, loop: "Loop", kept: set[str], streams: set[str]) -> None:
        """Compute what later iterations read (``kept`` deltas, each stream's ``before`` + ``cur``)
        and record in ``loop`` which are empty and small."""

    def deeper_match(self, loop: "Loop", i: int) -> bool:
        """Does any trace row beyond iteration i match this timestep's changes (``deeper_probes``)?"""

    def consolidate(self, value: Any) -> Any: ...

    def with_iter(self, value: Any, i: int) -> Any:
        """``value`` with an ``_iter`` column of ``i``."""

    def depth(self, depth: int) -> Any:
        """The one-row ``depth`` state."""

    def jobs(self) -> int:
        """Spark jobs submitted so far (a profile figure; 0 on Arrow)."""


@dataclass
class Loop:
    """The per-iteration bookkeeping of one scope evaluation, shared by the loop kernels."""

    body: Circuit
    k: LoopKernels
    imports: Sequence[Any]
    traces: dict[str, Any]  # integrate_nested node id -> its trace (None: empty)
    zero: dict[str, Any]  # a typed empty value per body node
    broadcast_imports: bool = False
    cur: dict[str, Delta] = field(default_factory=dict)
    previous: dict[str, Delta] = field(default_factory=dict)
    before: dict[str, Delta] = field(default_factory=dict)  # stream -> Σ_{i'<i} d[t][i']
    history: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)

    def stream(self, x: str, t: str) -> Stream:
        c, b = self.cur[x], self.before[x]
        return Stream(c.value, b.value, self.traces[t], c.empty, b.empty, c.small, b.small)

    def empty(self, node_id: str) -> Delta:
        return Delta(self.zero[node_id], True, True)

    def inputs_small(self, n: Node) -> bool:
        """Are the (non-trace) inputs of ``n`` small or empty this iteration?"""
        return all(self.cur[x].small or self.cur[x].empty for x in n.inputs if self.body[x].op != "integrate_nested")


# ---- the loop kernels of the body operators (``Operator.kernels["loop"]``) -----------------------

def delta0(loop: Loop, n: Node, i: int) -> Delta:
    """δ0: the import at iteration 0, nothing after."""
    if i > 0:
        return loop.empty(n.id)
    value = loop.imports[n.param("port")]
    return Delta(value, loop.k.is_empty(value), loop.broadcast_imports)


def feedback(loop: Loop, n: Node, i: int) -> Delta:
    """z⁻¹ on the inner clock: the source's delta of iteration i-1."""
    prev = loop.previous.get(n.param("source"))
    if i == 0 or prev is None or prev.empty:
        return loop.empty(n.id)
    return Delta(prev.value, False, prev.small)


def plus(loop: Loop, n: Node, i: int) -> Delta:
    parts = [loop.cur[x].value for x in n.inputs if not loop.cur[x].empty]
    if not parts:
        return loop.empty(n.id)
    return Delta(loop.k.total(parts), False, loop.inputs_small(n))


def linear(loop: Loop, n: Node, i: int) -> Delta:
    """map, filter, negate: applied to the delta as is."""
    x = loop.cur[n.inputs[0]]
    if x.empty:
        return loop.empty(n.id)
    return Delta(loop.k.linear(n, x.value), False, x.small)


def _with_before_small(loop: Loop, n: Node, value: Any | None) -> Delta:
    if value is None:
        return loop.empty(n.id)
    small = loop.inputs_small(n) and all(loop.before[x].small for x in n.inputs if x in loop.before)
    return Delta(value, False, small)


def join_nested(loop: Loop, n: Node, i: int) -> Delta:
    a, b, ta, tb = n.inputs
    loop.k.hold(loop, [x for x, t in ((a, ta), (b, tb)) if loop.traces[t] is not None])
    terms = join_terms(loop.stream(a, ta), loop.stream(b, tb), i, join_spec(n), loop.k)
    return _with_before_small(loop, n, loop.k.total(terms) if terms else None)


def distinct_nested(loop: Loop, n: Node, i: int) -> Delta:
    x, tx = n.inputs
    loop.k.hold(loop, [x] if loop.traces[tx] is not None else [])
    return _with_before_small(loop, n, distinct_change(loop.stream(x, tx), i, loop.k))


# ---- the 2-D rules -----------------------------------------------------------------------------

def join_terms(a: Stream, b: Stream, i: int, spec: JoinSpec, k: LoopKernels) -> list[Any]:
    """The terms of d(A⋈B)[t][i]: Σ dA[t1][i1] ⋈ dB[t2][i2] over max(t1,t2)=t, max(i1,i2)=i.

    Splitting A's side by (this timestep or earlier) × (iteration i or earlier) gives four terms:
    A_cur⋈V_b[t][i] + A_before⋈(B_cur + B_old@i) + A_old@i⋈(B_cur + B_before) + V_a[t-1][i-1]⋈B_cur.
    At t = 1 (no traces) this is semi-naive evaluation: ΔR⋈E and R⋈ΔE. Empty terms are left out.
    """
    lk, rk = spec.left_keys, spec.right_keys

    def old(trace: Any, iters: tuple[int | None, int], probe: Any, trace_keys: Sequence[str],
            probe_keys: Sequence[str], small: bool) -> Any:
        return k.drop_iter(k.lookup(trace, iters, probe, trace_keys, probe_keys, small))

    terms: list[Any] = []
    if not a.cur_empty:
        parts = b.parts()
        if b.trace is not None:
            parts.append(old(b.trace, (None, i), a.cur, rk, lk, a.cur_small))
        if parts:
            terms.append(k.join(a.cur, k.total(parts), spec, "left", a.cur_small))
    if not a.before_empty:
        parts = [] if b.cur_empty else [b.cur]
        if b.trace is not None:
            parts.append(old(b.trace, (i, i), a.before, rk, lk, a.before_small))
        if parts:
            terms.append(k.join(a.before, k.total(parts), spec, "left", a.before_small))
    if a.trace is not None and b.parts():
        b_now = k.total(b.parts())
        small = b.cur_small and b.before_small
        terms.append(k.join(old(a.trace, (i, i), b_now, lk, rk, small), b_now, spec, "right", small))
    if a.trace is not None and not b.cur_empty and i >= 1:
        terms.append(k.join(old(a.trace, (None, i - 1), b.cur, lk, rk, b.cur_small), b.cur, spec, "right",
                            b.cur_small))
    return terms


def crossing(o: Any, oi: Any, b: Any, c: Any, pos: Callable[[Any], Any]) -> Any:
    """d(distinct V)[t][i] of one tuple from its four sums (Spark columns or numpy arrays alike):
    [V[t][i]] - [V[t-1][i]] - [V[t][i-1]] + [V[t-1][i-1]], with [v] = ``pos(v)`` = 1 if v > 0."""
    return pos(o + oi + b + c) - pos(o + oi) - pos(o + b) + pos(o)


def distinct_change(x: Stream, i: int, k: LoopKernels) -> Any | None:
    """d(distinct V)[t][i] = [V[t][i]] - [V[t-1][i]] - [V[t][i-1]] + [V[t-1][i-1]], [v] = 1 if v > 0.

    Only tuples touched at this timestep (in ``cur`` or ``before``) can change; for those the four
    values come from the trace (restricted to them), ``before`` and ``cur``. None = known empty.
    """
    if x.cur_empty and (x.before_empty or x.trace is None):
        return None  # nothing new at i, and no old activity at i can meet an earlier change
    cols = k.columns(x.cur)
    old = None
    if x.trace is not None:
        keys = k.total([k.project(v, cols) for v in x.parts()])
        old = k.lookup(x.trace, (None, i), keys, cols, cols, x.cur_small and x.before_small)
    return k.distinct_change(None if x.cur_empty else x.cur, None if x.before_empty else x.before, old, i, cols)


def deeper_probes(loop: Loop, i: int) -> list[Any]:
    """The trace rows of iterations beyond i that match this timestep's changes so far (``before``),
    per join or distinct of the body: once the back edges are quiet at i, later iterations can
    only be non-zero if one of these is non-empty. (Sums are not consolidated: a match may be
    spurious, which costs iterations, never facts.)"""
    found: list[Any] = []
    for n in loop.body:
        probes = operator(n.op).kernel("loop_probe")  # the operators that look a trace up
        if probes is not None:
            found += probes(loop, n, i)
    return found


def _probe(loop: Loop, i: int, trace: Any, changes: str, trace_keys: Sequence[str], keys: Sequence[str]) -> list[Any]:
    b = loop.before[changes]
    if trace is None or b.empty:
        return []
    return [loop.k.lookup(trace, (i + 1, None), b.value, trace_keys, keys, b.small)]


def join_probes(loop: Loop, n: Node, i: int) -> list[Any]:
    """A body join looks each side's trace up by the other side's changes."""
    a, b, ta, tb = n.inputs
    lk, rk = n.param("left_keys", ()), n.param("right_keys", ())
    return _probe(loop, i, loop.traces[ta], b, lk, rk) + _probe(loop, i, loop.traces[tb], a, rk, lk)


def distinct_probes(loop: Loop, n: Node, i: int) -> list[Any]:
    """A body distinct looks its trace up by its changes' tuples."""
    x, tx = n.inputs
    cols = loop.k.columns(loop.before[x].value)
    return _probe(loop, i, loop.traces[tx], x, cols, cols)


def typed(k: Any, n: Node, args: list[Any]) -> Any:
    """Body node ``n``'s operator applied to empty values ``args`` (its result's columns and
    types): its ``loop_type`` kernel, or a row-wise operator applied to its first argument."""
    fn = operator(n.op).kernel("loop_type")
    return fn(k, n, args) if fn is not None else k.linear(n, args[0])


def join_type(k: Any, n: Node, args: list[Any]) -> Any:
    return k.join(args[0], args[1], join_spec(n), "left", False)


def first_type(k: Any, n: Node, args: list[Any]) -> Any:
    """An operator whose result has its first input's columns (a distinct)."""
    return args[0]


# ---- the loop ------------------------------------------------------------------------------------

def scope_body(node: Node) -> Circuit:
    """The body a scope's loop runs: on 2-D deltas (incremental in Q^Δ; from scratch otherwise)."""
    body = node.body if node.param("incremental") else incrementalize_body(node.body)
    outputs = node.param("outputs") or ()
    if not outputs or outputs[0] not in body.outputs:
        raise ValueError(f"recursive scope {node.id!r}: its body defines no output {outputs[:1]}")
    return body


def run_loop(node: Node, body: Circuit, k: LoopKernels, imports: Sequence[Any], traces: dict[str, Any],
             zero: dict[str, Any], deepest: int, broadcast_imports: bool = False) -> ScopeStep:
    """Iterate scope ``node``'s body (``body``: on 2-D deltas) to its fixed point for one timestep.

    ``traces`` are the per-iteration traces (by ``integrate_nested`` id; None: empty), ``zero``
    a typed empty value per body node, ``deepest`` the deepest iteration any trace holds (-1:
    none). Raises ``RecursionLimitExceeded`` past ``max_iterations``.
    """
    limit = int(node.param("max_iterations"))
    streams = {body[t].inputs[0] for t in traces}
    sources = {n.param("source") for n in body if n.op == "feedback"}
    out = body.outputs[node.param("outputs")[0]]
    kept = sources | streams | {out}
    loop = Loop(body, k, imports, traces, zero, broadcast_imports)
    loop.before = {s: loop.empty(s) for s in streams}
    loop.history = {x: [] for x in streams | {out}}
    profile = _Profile(k)
    for i in range(limit):
        loop.previous, loop.cur = loop.cur, {}
        for n in body:
            if n.op == "integrate_nested":
                continue
            kernel = operator(n.op).kernel("loop")
            if kernel is None:
                raise ValueError(f"operator {n.op!r} (node {n.id!r}) cannot run inside a recursive scope")
            d = kernel(loop, n, i)
            if not d.empty:
                d.value = k.settle(n, d.value, zero[n.id])
            loop.cur[n.id] = d
        k.materialize(loop, kept, streams)
        for x, rows in loop.history.items():
            if not loop.cur[x].empty:
                rows.append((i, loop.cur[x].value))
        quiet = all(loop.cur[s].empty for s in sources)
        profile.lap()
        if quiet and (i >= deepest or not k.deeper_match(loop, i)):
            profile.log(node.id)
            return _finish(node, loop, out, i)
    raise RecursionLimitExceeded(limit_message(node.id, limit))


def limit_message(scope: str, limit: int) -> str:
    return (f"recursive node {scope!r} did not reach a fixed point within {limit} iterations: its relations "
            f"still changed at iteration {limit}. The recursion may diverge (e.g. a value that grows without "
            f"bound, such as n + 1); if it only converges slowly, raise settings.max_iterations in the circuit "
            f"file. Nothing was committed for this timestep.")


def _finish(node: Node, loop: Loop, out: str, depth: int) -> ScopeStep:
    """∫ of the output's deltas, and the state: each stream's deltas tagged with their iteration
    (consolidated), looked up by (key, ``_iter``), so compaction sorts them on that: their row
    groups then cover narrow key ranges (``state.lookup``); and the depth."""
    k = loop.k
    parts = [v for _, v in loop.history[out]]
    output = k.consolidate(k.total(parts)) if parts else loop.zero[out]
    step = ScopeStep(output, iterations=depth + 1)
    for t in loop.traces:
        rows = [k.with_iter(v, i) for i, v in loop.history[loop.body[t].inputs[0]]]
        if rows:
            keys = tuple(loop.body[t].param("keys") or ()) + (ITER,)
            step.updates[trace_id(node.id, t)] = StateUpdate("append", k.consolidate(k.total(rows)), keys, keys)
    step.updates[trace_id(node.id, DEPTH)] = StateUpdate("replace", k.depth(depth))
    return step


class _Profile:
    """Seconds and Spark jobs per iteration, logged at DEBUG for benchmarks (``extra["profile"]``)."""

    def __init__(self, k: LoopKernels) -> None:
        self.k, self.seconds = k, []
        self.started, self.first_job = time.time(), k.jobs()

    def lap(self) -> None:
        now = time.time()
        self.seconds.append(now - self.started)
        self.started = now

    def log(self, scope: str) -> None:
        jobs = self.k.jobs() - self.first_job
        driver = self.k.name == "arrow"
        log.debug("scope %s: %d iterations, %.2f s, %d Spark jobs%s", scope, len(self.seconds), sum(self.seconds),
                  jobs, " (in-process, Arrow)" if driver else "",
                  extra={"profile": {"iterations": len(self.seconds), "seconds": self.seconds, "jobs": jobs,
                                     "driver": driver}})


def zeros(body: Circuit, imports: Sequence[Any], empty_like: Callable[[Any], Any],
          typed: Callable[[Node, list[Any]], Any]) -> dict[str, Any]:
    """An empty, typed value per body node (nothing computed).

    Back edges make the body cyclic, so types are found by passes until every node has one: a
    feedback node takes its source's type, a plus the type of whichever inputs are known; other
    operators type ``typed(node, input zeros)`` (their operator applied to empty values).
    """
    zero: dict[str, Any] = {}
    for _ in range(len(body.nodes) + 1):
        before = len(zero)
        for n in body:
            if n.id in zero:
                continue
            if n.op == "delta0":
                zero[n.id] = empty_like(imports[n.param("port")])
            elif n.op == "feedback":
                if n.param("source") in zero:
                    zero[n.id] = zero[n.param("source")]
            elif n.op == "plus":
                known = [zero[i] for i in n.inputs if i in zero]
                if known:
                    zero[n.id] = known[0]
            elif n.op == "integrate_nested":
                if n.inputs[0] in zero:
                    zero[n.id] = zero[n.inputs[0]]
            elif all(i in zero for i in n.inputs):
                zero[n.id] = empty_like(typed(n, [zero[i] for i in n.inputs]))
        if len(zero) == before:
            break
    missing = [n.id for n in body if n.id not in zero]
    if missing:
        raise ValueError(f"cannot type the body nodes {missing}: no path from an input reaches them")
    return zero
