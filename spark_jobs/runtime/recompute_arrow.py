"""An in-process recompute in two passes: the inputs' linear prefixes streamed, the rest whole.

Why: the first in-process recompute read every input integral whole (every column, every
row), netted it, evaluated the circuit over it on one thread and rewrote every trace, the
integrals of each input's filters and projections included: at W1 SF10 (76.5M rows) 79 s and
16 GiB against DuckDB's 0.8 s. Most of a circuit's first operators are linear functions of one
input (filters, projections): Q over the integrated input ``I(x) + Δx`` needs only their value,
which is a fraction of the rows and columns, and a linear function can be evaluated batch by
batch (``f(a + b) = f(a) + f(b)``). And an integral of such a node after the step is its
committed trace plus the node's value on the change: what an incremental step appends, so a
recompute need not rewrite it.

The passes (``recompute``):

1. the change pass: the prefix (``linear_prefix``) on this step's checked changes, as an
   incremental step evaluates it; its integrals' updates are the recompute's writes of those
   traces (appended, as ``recompute.appended`` did for the input integrals alone);
2. the batch pass: for each input, its committed integral read in batches of
   ``BATCH_ROWS`` rows plus its change, each batch through the prefix nodes the rest reads (the
   frontier); the frontier values concatenated and netted (``step_engines._settled``: a deleted
   tuple cancels its insertion);
3. the rest of the circuit once, from no state, over the frontier values
   (``evaluate_step(only=..., external=...)``): joins, aggregates, distinct as a first step
   evaluates them; their traces are replaced, as before.

The views and every trace hold the same Z-sets as the single-pass recompute
(``tests/test_recompute_arrow.py`` compares both with incremental steps on random streams).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from spark_jobs.ir.graph import Circuit
    from spark_jobs.runtime.circuit import CircuitRuntime

BATCH_ROWS = 1_000_000  # rows of an integral evaluated at once in the batch pass (memory: ~a batch of decoded rows)
READ_THREADS = 2  # integral files decoded at once in the batch pass (``TraceFiles.batches``)


@dataclass
class Recomputed:
    """A recompute's new views (whole values, not yet deltas) and its state writes."""

    views: dict[str, Any]
    writes: list[Any]


def linear_prefix(circuit: "Circuit") -> dict[str, str]:
    """Node id -> the one input it is a linear function of: the inputs, every stateless linear
    operator whose inputs are all such nodes of the same input (no integral among them), and the
    integrals of such nodes (their value after a step is the trace plus the node on the change)."""
    from spark_jobs.ir.operator import LINEAR, operator

    root: dict[str, str] = {}
    for node in circuit:  # dependency order
        op = operator(node.op)
        if node.op == "input":
            root[node.id] = node.param("name") or node.id
        elif node.op == "integrate" and node.inputs and node.inputs[0] in root and not _integral(circuit, node.inputs[0]):
            root[node.id] = root[node.inputs[0]]
        elif (op.linearity == LINEAR and op.state is None and node.body is None and node.inputs
              and all(i in root and not _integral(circuit, i) for i in node.inputs)
              and len({root[i] for i in node.inputs}) == 1):
            root[node.id] = root[node.inputs[0]]
    return root


def _integral(circuit: "Circuit", node_id: str) -> bool:
    return circuit[node_id].op == "integrate"


def plan(circuit: "Circuit") -> tuple[dict[str, str], set[str], set[str]]:
    """(prefix, rest, frontier): ``rest`` the nodes evaluated once over whole values (every node
    off the prefix, and the prefix integrals they read), ``frontier`` the prefix nodes whose whole
    value the rest or a view reads (computed by the batch pass)."""
    prefix = linear_prefix(circuit)
    off = [n for n in circuit if n.id not in prefix]
    rest = {n.id for n in off} | {i for n in off for i in n.inputs if i in prefix and _integral(circuit, i)}
    rest |= {nid for nid in circuit.outputs.values() if nid in prefix and _integral(circuit, nid)}
    frontier = {i for nid in rest for i in circuit[nid].inputs if i in prefix and not _integral(circuit, i)}
    frontier |= {nid for nid in circuit.outputs.values() if nid in prefix and not _integral(circuit, nid)}
    return prefix, rest, frontier


def read_columns(circuit: "Circuit", name: str, nodes: set[str], frontier: set[str]) -> set[str] | None:
    """The columns of input ``name`` the prefix ``nodes`` (the ancestors of ``frontier`` over
    it) read; None: every column. Why: an integral's unread columns (W1: a line item's flag, a
    customer's name) are most of its decoding. A frontier node needs all its columns; a filter
    its predicate's and what its readers need; a projection its expressions'; any other operator
    all its input's columns."""
    need: dict[str, set[str] | None] = {f: set(circuit[f].columns) for f in frontier if f in nodes}
    for node in reversed([n for n in circuit if n.id in nodes]):  # readers before what they read
        wanted = need.get(node.id, set())
        if node.op == "input":
            continue
        if wanted is None:
            refs = None
        elif node.op == "filter":
            refs = _refs([node.param("where")])
            refs = None if refs is None else refs | wanted
        elif node.op == "map":
            refs = _refs([expr for _, expr in node.param("columns") or ()])
        else:
            refs = None
        for i in node.inputs:
            if refs is None or need.get(i, set()) is None:
                need[i] = None
            else:
                need[i] = need.get(i, set()) | refs
    input_node = next(n.id for n in circuit if n.op == "input" and (n.param("name") or n.id) == name)
    got = need.get(input_node, set())
    if got is None:
        return None
    lower = {c.lower() for c in got}
    return {c for c in circuit[input_node].columns if c.lower() in lower}


def _refs(texts: list[object]) -> set[str] | None:
    """The column names Spark SQL expression texts reference (None: one could not be parsed)."""
    import sqlglot

    from spark_jobs.spec.sql.exprs import columns_of

    out: set[str] = set()
    for text in texts:
        if not isinstance(text, str):
            return None
        try:
            tree = sqlglot.parse_one(text, read="spark")
        except Exception:  # noqa: BLE001 - not parsed here: read every column
            return None
        out |= {c.name for c in columns_of(tree)}
    return out


def _ancestors(circuit: "Circuit", targets: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(targets)
    while todo:
        nid = todo.pop()
        if nid not in seen:
            seen.add(nid)
            todo.extend(circuit[nid].inputs)
    return seen


def recompute(rt: "CircuitRuntime", engine: Any, deltas: Mapping[str, Any], own: Mapping[str, tuple],
              state: Any, batch_rows: int | None = None) -> Recomputed:
    """The recomputed views and state writes of an in-process step (``engine``: ``ArrowSteps``;
    ``own``: the inputs' own traces, snapshots and cdc; ``batch_rows``: default ``BATCH_ROWS``; see the
    module docstring)."""
    import pyarrow as pa

    from spark_jobs.executor.engine import NotLocal
    from spark_jobs.executor.arrow import inputs as arrow_inputs
    from spark_jobs.executor.arrow.zsets import consolidate
    from spark_jobs.executor.evaluate import evaluate_step
    from spark_jobs.runtime.recipe import Write, state_writes
    from spark_jobs.runtime.recompute import NoState, integral_traces
    from spark_jobs.runtime.step_engines import _padded, _settled

    batch_rows = batch_rows or BATCH_ROWS
    circuit = rt.compiled.incremental
    spec = rt.compiled.spec
    kernels = engine.engine
    schemas = {name: arrow_inputs.schema(inp) for name, inp in spec.inputs.items()}
    prefix, rest, frontier = plan(circuit)
    limit = rt.config.policy.cost.arrow_rows
    traces = integral_traces(rt)

    # 1. the change pass: the prefix on the change; its integrals' updates are appended
    changed = evaluate_step(circuit, deltas, NoState(), first_step=True, input_schemas=schemas, engine=kernels,
                            only=set(prefix))
    appends = {nid: u for nid, u in changed.updates.items() if nid in prefix}
    writes = state_writes(rt, _Updates(appends), {}, {}, False)
    from spark_jobs.executor.sources.own_traces import input_trace

    own = {**{n: t for n, t in ((n, input_trace(i)) for n, i in spec.inputs.items()) if t is not None}, **own}
    for name, (trace, sort_by) in own.items():  # snapshots / cdc: the change appended, an input without one too
        change = deltas.get(name)
        value = schemas[name].empty_table() if change is None or change.num_rows == 0 else _padded(change, schemas[name])
        writes.append(Write(trace, value, "zset", (), tuple(sort_by), False))

    # 2. the batch pass: each input's integral plus its change through the frontier's prefix
    whole: dict[str, Any] = {}
    for name in spec.inputs:
        wanted = {f for f in frontier if prefix[f] == name}
        if not wanted:
            continue
        nodes = _ancestors(circuit, wanted) & set(prefix)
        files = state.trace_files(traces[name])
        if files is not None and files.rows() > limit:
            raise NotLocal(f"input {name}'s integral holds {files.rows()} rows > execution.cost.arrow_rows ({limit})")
        parts: dict[str, list[pa.Table]] = {f: [] for f in wanted}
        change = deltas.get(name)
        columns = read_columns(circuit, name, nodes, wanted)
        sources = [*(files.batches(batch_rows, columns, threads=READ_THREADS) if files is not None else ()),
                   change if change is not None else schemas[name].empty_table()]
        for batch in sources:
            batch = _padded(batch, schemas[name])
            values = evaluate_step(circuit, {name: batch}, NoState(), first_step=True, input_schemas=schemas,
                                   engine=kernels, only=nodes).values
            for f in wanted:
                parts[f].append(kernels.table(values[f]))
        for f in wanted:
            whole[f] = _settled(pa.concat_tables(parts.pop(f)), consolidate)

    # 3. the rest once, from no state, over the frontier's whole values
    result = evaluate_step(circuit, {}, NoState(), first_step=True, input_schemas=schemas, engine=kernels,
                           only=rest, external=whole.__getitem__)
    kept = {nid: u for nid, u in result.updates.items() if nid not in prefix}
    writes += state_writes(rt, _Updates(kept), {}, {}, True)
    views = {}
    for view, nid in circuit.outputs.items():
        views[view] = result.outputs[view] if view in result.outputs else kernels.consolidate(whole[nid])
    return Recomputed(views, writes)


@dataclass
class _Updates:
    """The part of a ``StepResult`` ``recipe.state_writes`` reads."""

    updates: dict[str, Any]


__all__ = ["BATCH_ROWS", "Recomputed", "linear_prefix", "plan", "recompute"]
