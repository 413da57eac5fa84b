"""The Arrow engine: every operator's kernel on pyarrow tables, in this process, no Spark job.

A delta is a Table. A state-sized value (an integral I(x), or z⁻¹(I x)) is an ``Integral``: the
trace's committed Parquet files plus this step's parts, never read whole: a kernel looks it up
by the keys its change holds (``rows_for``), reading only the row groups whose statistics admit
them (``state.lookup.TraceFiles``), as the Spark engine's narrowing does. Whatever these kernels
cannot serve within the policy (``execution.arrow``) raises ``NotLocal``: the step then runs on
Spark, and its summary says why.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.executor.arrow import aggregate as agg
from spark_jobs.executor.arrow import distinct as dist
from spark_jobs.executor.arrow import zsets
from spark_jobs.executor.arrow.expressions import apply_filter, apply_map
from spark_jobs.executor.engine import NotLocal, StateUpdate
from spark_jobs.ir.graph import Node
from spark_jobs.ir.incrementalize import integral_row_group_bytes
from spark_jobs.ir.operator import delayed_integral_source
from spark_jobs.policy import ExecutionPolicy
from spark_jobs.spec.model import WEIGHT
from spark_jobs.state import float_keys
from spark_jobs.state.lookup import Probe, TooMany, TraceFiles

if TYPE_CHECKING:
    from spark_jobs.executor.evaluate import Step


@dataclass
class Integral:
    """A state-sized Z-set: ``trace`` (committed files; None: empty) plus ``parts`` (tables of
    this step), with ``schema``. Looked up by key; read whole only when small (``whole``)."""

    trace: TraceFiles | None
    parts: list[pa.Table]
    schema: pa.Schema
    engine: "ArrowEngine"

    def __post_init__(self) -> None:  # rows read from files may hold NULLs where a delta had none
        self.schema = pa.schema([f.with_nullable(True) for f in self.schema])

    def rows_for(self, column: str, values: Sequence[Any]) -> pa.Table:
        """The rows whose ``column`` is one of ``values`` (NULL matches NULL)."""
        found = []
        if self.trace is not None:
            found.append(self.engine.lookup(self.trace, column, values).select(self.schema.names))
        if self.parts:
            wanted = pa.array(list(values), self.schema.field(column).type)
            for p in self.parts:
                found.append(p.filter(pc.fill_null(float_keys.member(p.column(column), wanted), False)))
        return self._concat(found)

    def whole(self) -> pa.Table:
        """Every row, if the trace is small enough to read (``execution.arrow.max_lookup_rows``)."""
        found = list(self.parts)
        if self.trace is not None:
            self.engine.charge(self.trace.rows(), "a whole trace")
            found.insert(0, self.trace.read_all().select(self.schema.names))
        return self._concat(found)

    def _concat(self, found: list[pa.Table]) -> pa.Table:
        if not found:
            return self.schema.empty_table()
        return pa.concat_tables([t.cast(self.schema) for t in found])


@dataclass
class ArrowEngine:
    """``kernels.Engine`` on Arrow tables; the step's state is read through ``files_of``."""

    policy: ExecutionPolicy = field(default_factory=ExecutionPolicy)
    timezone: str = "UTC"  # Spark's session time zone (the profile's spark.sql.session.timeZone)
    name: str = "arrow"
    files_of: Callable[[str], "TraceFiles | None"] | None = None
    decoded: int = 0  # trace rows decoded (and kept) by this step's lookups
    scanned: int = 0  # trace rows decoded by its streamed lookups (nothing kept but the matches)
    _files: dict[str, "TraceFiles | None"] = field(default_factory=dict)

    def begin(self, step: "Step") -> None:
        files_of = getattr(step.state, "trace_files", None)
        if files_of != self.files_of:  # another state (a change's bootstrap pass): not its footers
            self._files = {}
        self.files_of = files_of
        if self.files_of is None:
            raise NotLocal("the state is not in Parquet trace files")

    def trace(self, trace_id: str) -> TraceFiles | None:
        """The committed files of a trace (footers read once per step)."""
        if trace_id not in self._files:
            self._files[trace_id] = self.files_of(trace_id) if self.files_of is not None else None
        return self._files[trace_id]

    def lookup(self, trace: TraceFiles, column: str, values: Sequence[Any]) -> pa.Table:
        """The rows of ``trace`` whose ``column`` is one of ``values``. Decoded row groups are
        kept for later lookups of the step while they fit ``arrow.max_lookup_rows``; a lookup
        past that streams its row groups and keeps only the matches (a 100k-row change probes
        keys all over a large sorted trace: holding every group it touches would cost memory
        and time for no reuse), within ``arrow.max_scan_rows`` and ``arrow.max_found_rows``."""
        values = Probe(values)  # made once for the three calls below
        rows = trace.admitted_rows(column, values)
        arrow = self.policy.arrow
        if self.decoded + rows <= arrow.max_lookup_rows:
            self.decoded += rows
            return trace.lookup(column, values)
        self.scanned += rows
        if self.scanned > arrow.max_scan_rows:
            raise NotLocal(f"a lookup of {len(values)} key(s) streams {rows} trace rows: {self.scanned} this step "
                           f"(> execution.arrow.max_scan_rows = {arrow.max_scan_rows})")
        try:
            return trace.matching(column, values, arrow.max_found_rows)
        except TooMany as exc:
            raise NotLocal(f"a lookup of {len(values)} key(s): {exc} "
                           f"(execution.arrow.max_found_rows = {arrow.max_found_rows})") from None

    def charge(self, rows: int, what: str) -> None:
        """Count trace rows about to be decoded; NotLocal past ``arrow.max_lookup_rows``."""
        self.decoded += rows
        if self.decoded > self.policy.arrow.max_lookup_rows:
            raise NotLocal(f"{what} decodes {rows} trace rows: {self.decoded} this step "
                           f"(> execution.arrow.max_lookup_rows = {self.policy.arrow.max_lookup_rows})")

    def table(self, value: Any) -> pa.Table:
        """A value as a table (an integral read whole, when small)."""
        return value.whole() if isinstance(value, Integral) else value

    def plus(self, *values: Any) -> Any:
        if any(isinstance(v, Integral) for v in values):
            return self.plus(*[self.table(v) for v in values])
        return zsets.total(list(values))

    def negate(self, value: Any) -> pa.Table:
        return zsets.negate(self.table(value))

    def consolidate(self, value: Any) -> pa.Table:
        return zsets.consolidate(self.table(value))

    def empty_like(self, value: Any) -> pa.Table:
        return value.schema.empty_table()

    def columns(self, value: Any) -> list[str]:
        return [c for c in value.schema.names if c != WEIGHT]

    def settle(self, node: Node, value: Any, *, reused: bool) -> Any:
        return value  # computed already: no plan to cache or cut

    def release(self) -> None:
        pass


def _engine(s: "Step") -> ArrowEngine:
    return s.engine  # type: ignore[return-value]


def _delta(s: "Step", node_id: str) -> pa.Table:
    return _engine(s).table(s.value(node_id))


def _state(s: "Step", trace_id: str, schema: pa.Schema) -> Integral:
    return Integral(_engine(s).trace(trace_id), [], schema, _engine(s))


# ---- linear operators -------------------------------------------------------------------------

def input(s: "Step", node: Node) -> pa.Table:  # noqa: A001 - the operator's name
    table, columns = s.input_delta(node, lambda name, schema: schema.empty_table())
    out = table.select(columns + [WEIGHT])
    return out.set_column(len(columns), WEIGHT, out.column(WEIGHT).cast(pa.int64()))


def map(s: "Step", node: Node) -> pa.Table:  # noqa: A001
    return apply_map(_delta(s, node.inputs[0]), node.param("columns"), _engine(s).timezone)


def filter(s: "Step", node: Node) -> pa.Table:  # noqa: A001
    return apply_filter(_delta(s, node.inputs[0]), node.param("where"), _engine(s).timezone)


def plus(s: "Step", node: Node) -> Any:
    return _engine(s).plus(*s.args(node))


def negate(s: "Step", node: Node) -> pa.Table:
    return _engine(s).negate(s.value(node.inputs[0]))


# ---- join ---------------------------------------------------------------------------------------

def join(s: "Step", node: Node) -> pa.Table:
    """A join term. A side that is an integral is looked up by the other side's first key (its
    values; NULL only for a null-safe join); the rest of the keys are matched by the join."""
    left, right = s.args(node)
    lk, rk = node.param("left_keys", ()), node.param("right_keys", ())
    null_safe = bool(node.param("null_safe", False))
    if isinstance(left, Integral) and isinstance(right, Integral):
        left, right = _settled(left, left.whole()), _settled(right, right.whole())
    elif isinstance(left, Integral):
        left = _settled(left, _side(left, lk, right, rk, null_safe))
    elif isinstance(right, Integral):
        right = _settled(right, _side(right, rk, left, lk, null_safe))
    return zsets.join(left, right, lk, rk, null_safe, node.param("left_out", ()), node.param("right_out", ()),
                      within=node.param("within"))


def _settled(state: Integral, rows: pa.Table) -> pa.Table:
    """Rows read from a trace of several files, consolidated. Why: until compaction, a row
    deleted and inserted again is three records (+1, -1, +1), and a join multiplies them: down a
    chain of joins a step's change grew ~1.1x per join with rows that cancel (a 64-table join of
    10-row tables went from 10 rows to ~10^5 and out of memory). A single committed file holds no
    rows that cancel (a merge of deltas nets them out, ``arrow_trace.settle``; it may keep one
    tuple on several positive rows, which every reader sums), so this changes no value, only how
    many records carry it; this step's own parts are left as they are."""
    if state.parts or state.trace is None or len(state.trace.paths) < 2 or rows.num_rows < 2 \
            or not zsets.data_columns(rows):
        return rows
    return zsets.consolidate(rows)


def _side(state: Integral, keys: Sequence[str], probe: pa.Table, probe_keys: Sequence[str],
          null_safe: bool) -> pa.Table:
    """The rows of ``state`` the ``probe``'s keys can match (all of it for a product)."""
    if not keys:
        return state.whole()
    values = pc.unique(probe.column(probe_keys[0])).to_pylist()
    return state.rows_for(keys[0], values if null_safe else [v for v in values if v is not None])


# ---- stream operators ---------------------------------------------------------------------------

def integrate(s: "Step", node: Node) -> Integral:
    delta = _delta(s, node.inputs[0])
    keys = s.state_keys(node)
    s.update(node.id, StateUpdate("append", delta, keys, sort_by=keys,
                                  row_group_bytes=integral_row_group_bytes(s.circuit, node.id)))
    return Integral(_engine(s).trace(node.id), [delta], delta.schema, _engine(s))


def delay(s: "Step", node: Node) -> Any:
    source = delayed_integral_source(s.circuit, node.id)
    current = s.value(node.inputs[0])
    schema = current.schema
    if source is not None:  # z^-1(I x): the integrator's committed state
        return _state(s, source, schema)
    s.update(node.id, StateUpdate("replace", _engine(s).consolidate(current), s.state_keys(node)))
    return _state(s, node.id, schema).whole()


def differentiate(s: "Step", node: Node) -> pa.Table:
    current = _engine(s).table(s.value(node.inputs[0]))
    s.update(node.id, StateUpdate("replace", zsets.consolidate(current), s.state_keys(node)))
    previous = _state(s, node.id, current.schema).whole()
    return zsets.total([current, zsets.negate(previous)]) if previous.num_rows else current


# ---- distinct -----------------------------------------------------------------------------------

def distinct(s: "Step", node: Node) -> pa.Table:
    return dist.distinct(_delta(s, node.inputs[0]))


def distinct_h(s: "Step", node: Node) -> pa.Table:
    delta, integral = s.args(node)
    delta = _engine(s).table(delta)
    cols = zsets.data_columns(delta)
    before = None
    if isinstance(integral, Integral):
        if delta.num_rows:
            found = integral.rows_for(cols[0], pc.unique(delta.column(cols[0])).to_pylist())
            before = zsets.semi(found, delta, cols, cols) if len(cols) > 1 else found
    else:
        before = integral
    return dist.distinct_h(delta, before)


# ---- aggregates ---------------------------------------------------------------------------------

def aggregate(s: "Step", node: Node) -> pa.Table:
    table = _delta(s, node.inputs[0])
    return agg.aggregate(table, tuple(node.param("group_by", ())), node.param("aggs"), table.schema,
                         _engine(s).timezone, node.id)


def aggregate_linear(s: "Step", node: Node) -> pa.Table:
    """count/sum/avg from the delta and the running totals of the groups it touches."""
    return _from_own_state(s, node, agg.linear_step)


def aggregate_insert_only(s: "Step", node: Node) -> pa.Table:
    """min/max (and count/sum/avg) over an insert-only input from the state rows (totals and
    extrema) of the groups the delta touches: ``arrow/aggregate.insert_only_step``."""
    return _from_own_state(s, node, agg.insert_only_step)


def _from_own_state(s: "Step", node: Node, step: Callable[..., tuple[pa.Table, pa.Table]]) -> pa.Table:
    """``step`` on the delta and this node's state rows of the groups it touches; the rows it
    returns are appended to the state."""
    delta = _delta(s, node.inputs[0])
    group_by = tuple(node.param("group_by", ()))
    out, state = step(delta, _own_rows(s, node, delta, group_by), group_by, node.param("aggs"), s.first_step,
                      _engine(s).timezone, node.id)
    s.update(node.id, StateUpdate("append", state, group_by, sort_by=group_by))
    return out


def _own_rows(s: "Step", node: Node, delta: pa.Table, group_by: Sequence[str]) -> pa.Table | None:
    """The rows of ``node``'s own trace for the groups ``delta`` touches (looked up by the first
    group column; without group_by the whole trace); None when it has none yet."""
    trace = _engine(s).trace(node.id)
    if trace is None:
        return None
    if not group_by:
        _engine(s).charge(trace.rows(), "the state of a global aggregate")
        return trace.read_all()
    keys = pc.unique(delta.column(group_by[0])).to_pylist() if delta.num_rows else []
    return _engine(s).lookup(trace, group_by[0], keys) if keys else trace.schema.empty_table()


def aggregate_touched(s: "Step", node: Node) -> pa.Table:
    """Recompute the groups the delta touches from the integral (its rows of those groups), and
    retract their previous output rows (this node's state): ``aggregate_touched_step``."""
    delta, integral = s.args(node)
    delta = _engine(s).table(delta)
    group_by = tuple(node.param("group_by", ()))
    aggs = node.param("aggs")
    state = _engine(s).trace(node.id)
    if state is None:  # nothing emitted yet: every group is new
        out = agg.aggregate(_engine(s).table(integral), group_by, aggs, delta.schema, _engine(s).timezone, node.id)
    elif group_by and node.param("positive_input") and delta.num_rows:
        out = _extrema_step(s, node, delta, integral, state, group_by, aggs)
    elif group_by:
        keys = pc.unique(delta.column(group_by[0])).to_pylist()
        rows = integral.rows_for(group_by[0], keys) if isinstance(integral, Integral) else integral
        touched = zsets.semi(rows, delta, group_by, group_by)
        new = agg.aggregate(touched, group_by, aggs, delta.schema, _engine(s).timezone, node.id)
        old = zsets.semi(_engine(s).lookup(state, group_by[0], keys).select(new.column_names), delta,
                         group_by, group_by)
        out = zsets.consolidate(zsets.total([new, zsets.negate(old.cast(new.schema))]))
    elif s.first_step or delta.num_rows:  # the one group: touched when the delta has a row
        new = agg.aggregate(_engine(s).table(integral), group_by, aggs, delta.schema, _engine(s).timezone, node.id)
        old = state.read_all().select(new.column_names).cast(new.schema)
        out = zsets.consolidate(zsets.total([new, zsets.negate(old)]))
    else:
        out = agg.aggregate(delta.slice(0, 0), group_by, aggs, delta.schema, _engine(s).timezone, node.id).slice(0, 0)
    s.update(node.id, StateUpdate("append", out, group_by, sort_by=group_by))
    return out


def _extrema_step(s: "Step", node: Node, delta: pa.Table, integral: Any, state: TraceFiles,
                  group_by: Sequence[str], aggs: Sequence[Any]) -> pa.Table:
    """``aggregate_touched`` of min/max only over a positive input, from the extrema it emitted
    (``arrow/aggregate.extrema_step``): the integral is read for the groups whose extremum row the
    change deletes, and only those; -old +new rows of the groups that changed."""
    keys = pc.unique(delta.column(group_by[0])).to_pylist()
    empty = agg.aggregate(delta.slice(0, 0), group_by, aggs, delta.schema, _engine(s).timezone, node.id).slice(0, 0)
    old = zsets.semi(_engine(s).lookup(state, group_by[0], keys).select(empty.column_names), delta,
                     group_by, group_by).cast(empty.schema)
    old = zsets.consolidate(old) if old.num_rows else old
    new, undecided = agg.extrema_step(delta, old, group_by, aggs, empty.schema, _engine(s).timezone)
    parts = [new]
    if undecided is not None and undecided.num_rows:
        first = pc.unique(undecided.column(group_by[0])).to_pylist()
        rows = integral.rows_for(group_by[0], first) if isinstance(integral, Integral) else integral  # I(x): with Δx
        touched = zsets.semi(rows, undecided, group_by, group_by)
        parts.append(agg.aggregate(touched, group_by, aggs, delta.schema, _engine(s).timezone, node.id)
                     .cast(empty.schema))
    return zsets.consolidate(zsets.total([*parts, zsets.negate(old)])).cast(empty.schema)


# ---- recursion ----------------------------------------------------------------------------------

def scope(s: "Step", node: Node) -> pa.Table:
    """A recursive scope: its fixed-point loop in this process (``arrow/loop_kernels.py``)."""
    from spark_jobs.executor.arrow import loop_kernels as arrow_loop
    from spark_jobs.executor.loop import scope_body

    incremental = bool(node.param("incremental"))
    imports = [_engine(s).table(v) for v in s.args(node)]
    done = arrow_loop.run(node, scope_body(node), imports, _engine(s).trace if incremental else None,
                          _engine(s).policy.recursion, _engine(s).timezone)
    if incremental:
        for trace, update in done.updates.items():
            s.update(trace, update)
    return done.output
