"""A step past the in-process memory bound, run in-process as sub-steps of one transaction.

Why: past ``execution.arrow.max_memory_bytes`` an in-process step used to go to Spark, which cost
4-8x the in-process step (W1 SF10): the bound moved the cliff, it did not remove it. The
incremental circuit is linear in its inputs' integration (DBSP): evaluating Q^Δ on Δ1 and then,
from the state it leaves, on Δ2 gives view deltas whose sum is Q^Δ of Δ1 + Δ2 on the first state,
and the same state. So the timestep's checked change is split into sub-changes of at most
``ExecutionPolicy.chunk_rows()`` rows, each evaluated against the committed state plus the
previous sub-steps' writes (the open transaction's traces: ``Transaction.trace_files``; their
files are written as each sub-step ends and listed by no manifest until the commit), and the
timestep commits once: one quality gate over the summed view deltas, against the committed views.

What stays whole: phases 1-3 (the change is read, its late rows counted and its deletes checked
once, over the whole change: a bad file refuses the whole timestep, as before) and the commit.
The split is tuple-disjoint (every row of one tuple goes to one sub-change, by the value of a
column whose equal values compare equal), so after any sub-step each input's integral is the
committed one with some tuples' whole changes applied: a bag the bag check already accepted,
never a negative weight in between. A crash or a refusal between sub-steps commits nothing
(the transaction aborts and removes its files; a later writer's ``recover`` does too).

Memory: the whole change and the summed view deltas are held, plus one sub-step's working set
(the estimate per sub-step: ``base_memory_bytes + chunk x bytes_per_change_row``). A circuit
with a stream operator of its own (``delay``, ``integrate``, ``differentiate`` as nodes) is
not split: its views depend on the timesteps, and sub-steps would be extra timesteps.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from spark_jobs.executor.engine import NotLocal
from spark_jobs.runtime import recipe
from spark_jobs.state.failpoints import failpoint

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_jobs.executor.sources import InputFile
    from spark_jobs.runtime.circuit import CircuitRuntime
    from spark_jobs.state.store import Transaction

__all__ = ["TransactionReader", "compute", "split", "sub_step_rows"]


def sub_step_rows(rt: "CircuitRuntime", path: Any) -> int:
    """Rows of one sub-step when ``path`` (an in-process incremental step) is past the memory
    bound and can be split; 0: run it whole."""
    policy, rows = rt.config.policy, path.change_rows
    if path.mode != "incremental" or rows is None or rows <= policy.arrow.max_change_rows:
        return 0
    if policy.inprocess_memory(rows) <= policy.arrow.max_memory_bytes or rt.committed.last_committed() == 0:
        return 0
    chunk = policy.chunk_rows()
    return chunk if 0 < chunk < rows and stream_node(rt) is None else 0


def stream_node(rt: "CircuitRuntime") -> str | None:
    """A node of the circuit as written whose value depends on the timesteps (None: none)."""
    from spark_jobs.ir.operator import STREAM, operator

    for node in rt.compiled.query:
        op = operator(node.op)
        if op.linearity == STREAM and not op.in_body_only:
            return node.origin or node.id
    return None


class TransactionReader:
    """The executor's state reader over an open transaction: the committed state plus what the
    transaction wrote so far (a sub-step reads the previous sub-steps' state). pyarrow only."""

    def __init__(self, txn: "Transaction") -> None:
        self.txn = txn
        self._files: dict[str, Any] = {}

    def read(self, node_id: str) -> Any:
        raise NotLocal("a sub-step of a chunked step reads its state in-process only")

    def trace_files(self, node_id: str) -> Any:
        if node_id not in self._files:
            self._files[node_id] = self.txn.trace_files(node_id)
        return self._files[node_id]

    def bytes_read(self) -> int:
        return sum(f.bytes_read for f in self._files.values() if f is not None)


def _exact(dtype: "pa.DataType") -> bool:
    """Equal values of this type hash and compare equal (no NaN, no -0.0 against 0.0)."""
    import pyarrow as pa

    return (pa.types.is_integer(dtype) or pa.types.is_date(dtype) or pa.types.is_timestamp(dtype)
            or pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_boolean(dtype)
            or pa.types.is_decimal(dtype) or pa.types.is_binary(dtype))


def part_of(table: "pa.Table", n: int) -> "Any":
    """Each row's sub-change, 0..n-1 (a numpy array), equal for every row of one tuple: by the
    distinct values of the first exactly comparable column, dealt round-robin; None: the table has
    no such column (it is kept whole)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_jobs.spec.model import WEIGHT

    column = next((c for c in table.column_names if c != WEIGHT and _exact(table.schema.field(c).type)), None)
    if column is None:
        return None
    values = table.column(column)
    index = pc.index_in(values, value_set=pc.unique(values), skip_nulls=False)
    return pc.fill_null(pc.cast(index, pa.int64()), 0).to_numpy() % n


def split(deltas: Mapping[str, "pa.Table"], n: int) -> list[dict[str, "pa.Table"]]:
    """``deltas`` as ``n`` tuple-disjoint sub-changes whose sum is ``deltas`` (an input without an
    exactly comparable column goes whole into the first)."""
    import numpy as np

    parts: list[dict[str, Any]] = [{} for _ in range(n)]
    for name, table in deltas.items():
        where = part_of(table, n) if n > 1 else None
        if where is None:
            parts[0][name] = table
            continue
        for i in range(n):
            rows = np.flatnonzero(where == i)
            if len(rows):
                parts[i][name] = table.take(rows)
    return parts


def _summed(parts: Sequence["pa.Table"]) -> "pa.Table":
    """The view delta of the whole timestep: the sub-steps' deltas added and consolidated."""
    from spark_jobs.executor.arrow.zsets import consolidate, total

    if len(parts) == 1:
        return parts[0]
    schema = parts[0].schema
    return consolidate(total([p.select(schema.names).cast(schema) for p in parts]))


def compute(rt: "CircuitRuntime", engine: Any, work: "recipe.Work", files: Mapping[str, Sequence["InputFile"]],
            state: Any, txn: "Transaction", chunk: int, say: recipe.Progress) -> recipe.Computed:
    """``recipe.compute`` of an incremental in-process step past the memory bound: phases 1-3 on
    the whole change, phase 4 in sub-steps of at most ``chunk`` rows whose state updates go into
    ``txn`` as each ends, phase 5 once on the summed view deltas (against the committed views);
    ``work.writes`` keeps the inputs' own traces and ``work.outputs`` the summed deltas."""
    t, spec = work.timestep, rt.compiled.spec
    say(f"timestep {t}: reading inputs (in-process, in sub-steps of at most {chunk:,} rows)")
    reports: list = []
    deltas, own = recipe.read_inputs(rt, engine, list(spec.inputs), files, state, work, reports)
    recipe.check_inputs(rt, engine, deltas, files, state, work, reports, say)
    checked = {n: d for n, d in deltas.items() if spec.inputs[n].expectations}
    rows = sum(d.num_rows for d in deltas.values())
    n = max(1, -(-rows // chunk))
    txn.index_bags(recipe.bag_index_traces(rt))  # the sub-steps' integrals get their sidecars too
    outputs: dict[str, list] = {}
    for i, part in enumerate(split(deltas, n)):
        say(f"timestep {t}: sub-step {i + 1} of {n}: evaluating {sum(d.num_rows for d in part.values()):,} changed rows")
        engine.reset()  # a fresh step: its lookups' memory and counters start again
        reader = TransactionReader(txn)  # a new one each sub-step: no row groups kept from the last
        result = engine.evaluate(part, reader, first_step=False, full=False)
        work.bytes_read = (work.bytes_read or 0) + reader.bytes_read()
        for view, value in result.outputs.items():
            outputs.setdefault(view, []).append(value)
        recipe.write_values(txn, recipe.state_writes(rt, result, part, {}, False), {}, batched=False)
        if i + 1 < n:
            failpoint("between_sub_steps")
    summed = {view: _summed(parts) for view, parts in outputs.items()}
    work.writes = [recipe.Write(trace, deltas[name], "zset", (), tuple(sort_by)) for name, (trace, sort_by) in own.items()]
    work.notes.append(f"in-process in {n} sub-steps of at most {chunk:,} changed rows, one commit "
                      f"(past execution.arrow.max_memory_bytes)")
    say(f"timestep {t}: checking view deltas ({len(summed)} view(s))")
    gate = engine.gate(t, summed, checked, False, work.clock.report(), state)
    work.outputs = summed
    return recipe.Computed(work, reports, gate)
