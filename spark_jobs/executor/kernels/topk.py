"""Spark and Arrow kernels of the top-k operator (its definition and rule: ``ir/ops/topk.py``).

Both give Spark SQL's semantics on bags, as the definition's docstring says; the tests compare
them with each other and with DuckDB at every step."""
from __future__ import annotations

from typing import Any, Sequence

from spark_jobs.ir.graph import Node
from spark_jobs.ir.ops.topk import RANK_TYPE, _partition, tie_break


# ---- Arrow kernels ------------------------------------------------------------------------------

def _sort_keys(table: Any, node: Node, columns: Sequence[str]) -> tuple[Any, list[tuple[str, str, str]], list[str]]:
    """``table`` with helper columns, the pyarrow sort keys that put it in Spark's order (groups
    together, then ``order_by``, then, for ``row_number``, the tie-break), and the order columns.

    pyarrow places NULLs and NaNs by one global option; Spark puts NULLs first ascending and last
    descending (unless told), and NaN above every number: helper columns (is NULL, is NaN) sort
    ahead of each key to say so."""
    import pyarrow as pa
    import pyarrow.compute as pc

    order = [tuple(o) for o in node.param("order_by")]
    if node.param("rank") == "row_number":
        order += [(c, False, True) for c in tie_break(columns, node)]
    keys = [(p, "ascending", "at_end") for p in _partition(node)]  # any order that keeps a group together
    for j, (column, desc, nulls_first) in enumerate(order):
        values = table.column(column)
        table = table.append_column(f"__null{j}", pc.is_null(values))
        keys.append((f"__null{j}", "descending" if nulls_first else "ascending", "at_end"))
        if pa.types.is_floating(values.type):
            table = table.append_column(f"__nan{j}", pc.fill_null(pc.is_nan(values), False))
            keys.append((f"__nan{j}", "descending" if desc else "ascending", "at_end"))
        keys.append((column, "descending" if desc else "ascending", "at_end"))
    return table, keys, [c for c, _, _ in node.param("order_by")]


def topk_table(table: Any, node: Node, consolidated: bool = True) -> Any:
    """Top-k of a Z-set table (rows of positive weight count; others are not in the bag): sorted
    with pyarrow, then one pass that numbers the copies of each group's rows. ``consolidated=False``
    when every record's weight is >= 0 already (an insert-only change): copies of a row in several
    records are ranked alike without the hash aggregate that merges them first, and the caller
    consolidates the (small) result."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_jobs.executor.arrow.zsets import consolidate
    from spark_jobs.spec.model import WEIGHT

    k, rank, rank_column = int(node.param("k")), node.param("rank"), node.param("rank_column")
    columns = [c for c in table.column_names if c != WEIGHT]
    fields = [table.schema.field(c) for c in columns] + ([pa.field(rank_column, pa.int32())] if rank_column else [])
    schema = pa.schema(fields + [pa.field(WEIGHT, pa.int64())])
    rows = consolidate(table) if table.num_rows and consolidated else table
    rows = rows.filter(pc.greater(rows.column(WEIGHT), 0)) if rows.num_rows else rows
    if rows.num_rows == 0:
        return schema.empty_table()
    import numpy as np

    helped, keys, ordered = _sort_keys(rows, node, columns)
    rows = rows.take(pc.sort_indices(helped, sort_keys=keys))
    # one vectorized pass over the sorted rows (was a Python loop: seconds for a 100k-row change)
    group_start = _starts(rows, _partition(node))
    w = rows.column(WEIGHT).to_numpy()
    ends = np.cumsum(w)
    group_id = np.cumsum(group_start) - 1
    before = ends - w - (ends - w)[np.flatnonzero(group_start)][group_id]  # weight of earlier rows in the group
    if rank == "row_number":
        kept = np.clip(k - before, 0, w)
        at = np.flatnonzero(kept > 0)
        if rank_column:  # one row per copy, numbered
            take = np.repeat(at, kept[at])
            offsets = np.arange(len(take)) - np.repeat(np.cumsum(kept[at]) - kept[at], kept[at])
            ranks = before[take] + 1 + offsets
            out_weights = np.ones(len(take), np.int64)
        else:
            take, ranks, out_weights = at, before[at] + 1, kept[at]
    else:
        peer_start = group_start | _starts(rows, ordered)
        peer_id = np.cumsum(peer_start) - 1
        if rank == "rank":
            value = before[np.flatnonzero(peer_start)][peer_id] + 1
        else:
            value = peer_id - peer_id[np.flatnonzero(group_start)][group_id] + 1
        take = np.flatnonzero(value <= k)
        ranks, out_weights = value[take], w[take]
    out = rows.take(pa.array(take, pa.int64())).select(columns)
    if rank_column:
        out = out.append_column(rank_column, pa.array(np.asarray(ranks, np.int64), pa.int64()).cast(pa.int32()))
    return out.append_column(WEIGHT, pa.array(np.asarray(out_weights, np.int64), pa.int64())).cast(schema)


def _starts(rows: Any, columns: Sequence[str]) -> Any:
    """Per row of ``rows`` (sorted so that equal values are adjacent): does it start a run of
    equal ``columns``, as Spark compares them (NULL = NULL, NaN = NaN, -0.0 = 0.0)? A numpy
    bool array; the first row starts one."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_jobs.state.float_keys import canonical

    first = np.zeros(rows.num_rows, dtype=bool)
    if rows.num_rows:
        first[0] = True
    for c in columns:
        col = canonical(rows.column(c).combine_chunks())
        if len(col) < 2:
            continue
        a, b = col.slice(1), col.slice(0, len(col) - 1)
        differ = pc.fill_null(pc.not_equal(a, b), False)
        differ = pc.or_(differ, pc.not_equal(pc.is_null(a), pc.is_null(b)))
        if pa.types.is_floating(col.type):  # NaN is one value (canonical: no -0.0 left)
            differ = pc.and_(differ, pc.invert(pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False)))
        first[1:] |= differ.to_numpy(zero_copy_only=False)
    return first


def arrow_topk(s: Any, node: Node) -> Any:
    return topk_table(s.engine.table(s.value(node.inputs[0])), node)


def arrow_topk_touched(s: Any, node: Node) -> Any:
    """Δtopk of the touched groups from this node's own state (its output so far: each group's
    current top-k rows) and the change, new − old; the integral is read only for the groups
    where that cannot decide (``_undecided``: a change that deletes enough of a group's top-k
    rows). The output is appended to the own state."""
    import pyarrow as pa

    from spark_jobs.executor.arrow.zsets import anti, consolidate, negate, semi, total
    from spark_jobs.executor.engine import StateUpdate

    delta, integral = s.args(node)
    delta = s.engine.table(delta)
    delta = delta.cast(pa.schema([f.with_nullable(True) for f in delta.schema]))  # as rows read from files
    empty = topk_table(delta.slice(0, 0), node)
    part = _partition(node)
    if delta.num_rows == 0:
        out = empty
    else:
        delta = consolidate(delta)
        top = _own_top(s, node, delta, part)
        undecided = _undecided(top, delta, node)
        slow = empty
        if undecided:  # read those groups of the integral
            groups = pa.table([pa.array([g[j] for g in undecided], delta.schema.field(c).type)
                               for j, c in enumerate(part)], names=list(part)) if part else None
            slow_delta = semi(delta, groups, part, part) if part else delta
            old = _integral_rows(s, integral, slow_delta, part)
            slow = total([topk_table(total([old, slow_delta]), node), negate(topk_table(old, node))])
            delta = anti(delta, groups, part, part) if part else delta.slice(0, 0)
            top = anti(top, groups, part, part) if part else top.slice(0, 0)
        fast = total([topk_table(total([top, delta]), node), negate(topk_table(top, node))])
        out = consolidate(total([fast.cast(empty.schema), slow.cast(empty.schema)])).cast(empty.schema)
    s.update(node.id, StateUpdate("append", out, part, sort_by=part))
    return out


def arrow_topk_insert_only(s: Any, node: Node) -> Any:
    """Δtopk over an insert-only input: top-k of (the touched groups' top-k so far + the change)
    − the top-k so far; appended to the own state. A deletion would be a broken promise of the
    IR (the input is append_only): the step goes to Spark, which refuses it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_jobs.executor.arrow.zsets import consolidate, negate, total
    from spark_jobs.executor.engine import NotLocal, StateUpdate
    from spark_jobs.spec.model import WEIGHT

    (delta,) = s.args(node)
    delta = s.engine.table(delta)
    delta = delta.cast(pa.schema([f.with_nullable(True) for f in delta.schema]))  # as rows read from files
    empty = topk_table(delta.slice(0, 0), node)
    part = _partition(node)
    out = empty
    if delta.num_rows:
        if pc.min(delta.column(WEIGHT)).as_py() < 0:
            raise NotLocal(f"top-k {node.id!r}: a change deletes rows but its input is insert-only: Spark reports it")
        # the change's own top-k first: a row behind k rows of the change is behind them in (top-k
        # so far + change) too, so only these can enter (one sort of the change, no hash of it)
        columns = [c for c in delta.column_names if c != WEIGHT]
        best = topk_table(delta, node, consolidated=False).select([*columns, WEIGHT]).cast(delta.schema)
        top = _own_top(s, node, best, part)
        out = consolidate(total([topk_table(total([top, best]), node).cast(empty.schema),
                                 negate(topk_table(top, node)).cast(empty.schema)])).cast(empty.schema)
    s.update(node.id, StateUpdate("append", out, part, sort_by=part))
    return out


def _own_top(s: Any, node: Node, delta: Any, part: Sequence[str]) -> Any:
    """The current top-k rows (input columns, positive weights) of the groups ``delta`` touches,
    from this node's own trace (its output so far, the rank column dropped)."""
    import pyarrow.compute as pc

    from spark_jobs.executor.arrow.zsets import consolidate, semi
    from spark_jobs.spec.model import WEIGHT

    trace = s.engine.trace(node.id)
    if trace is None:
        return delta.slice(0, 0)
    if not part:
        s.engine.charge(trace.rows(), "the state of a global top-k")
        rows = trace.read_all()
    else:
        rows = s.engine.lookup(trace, part[0], pc.unique(delta.column(part[0])).to_pylist())
        rows = semi(rows, delta, part, part) if len(part) > 1 else rows
    rows = consolidate(rows.select(delta.column_names).cast(delta.schema))
    return rows.filter(pc.greater(rows.column(WEIGHT), 0)) if rows.num_rows else rows


def _undecided(top: Any, delta: Any, node: Node) -> list[tuple]:
    """The groups (partition values) whose new top-k the old top-k and the change do not decide.

    Why the rest are: a row outside a group's top-k comes after every row in it (rank and
    dense_rank: strictly worse on ``order_by``; row_number: later in the total order, or a copy
    of a kept row). So if the top-k held less than k (rows, or distinct values for dense_rank),
    the group has no other row; and if what is left of it after the change's deletions, with the
    inserted rows at least as good as its worst row, still holds k, no other row can reach rank k
    (every such row is behind k rows of the new top-k). Otherwise the group is read from the
    integral."""
    import pyarrow.compute as pc

    from spark_jobs.executor.arrow.zsets import consolidate, total
    from spark_jobs.spec.model import WEIGHT

    k, rank, part = int(node.param("k")), node.param("rank"), list(_partition(node))
    deletes = delta.filter(pc.less(delta.column(WEIGHT), 0))
    if deletes.num_rows == 0 or top.num_rows == 0:
        return []
    ordered = [c for c, _, _ in node.param("order_by")]
    before = _measure(top, part, ordered, rank)
    # an inserted row at least as good as the old top-k's worst counts too (an aggregate's -old
    # +new row of a count that grows is no deletion of the top)
    inserts = delta.filter(pc.greater(delta.column(WEIGHT), 0))
    left = consolidate(total([top, deletes, inserts.filter(_as_good(top, inserts, node))]))
    left = left.filter(pc.greater(left.column(WEIGHT), 0))
    after = _measure(left, part, ordered, rank)
    return [g for g, m in before.items() if m >= k and after.get(g, 0) < k]


def _as_good(top: Any, inserts: Any, node: Node) -> Any:
    """Per row of ``inserts``: is it at least as good (in the top-k's order; for row_number its
    total order) as the worst row of its group's ``top``? Both sorted together in Spark's order,
    an insert ahead of a top row it ties with; an insert is as good when a top row of its group
    comes after it. Vectorized: a large change is decided without a Python pass over its rows."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_jobs.spec.model import WEIGHT
    from spark_jobs.state.float_keys import canonical_columns

    if inserts.num_rows == 0 or top.num_rows == 0:
        return pa.array([False] * inserts.num_rows, pa.bool_())
    part = list(_partition(node))
    columns = [c for c in inserts.column_names if c != WEIGHT]
    both = pa.concat_tables([top.select(columns).cast(inserts.select(columns).schema), inserts.select(columns)])
    both = canonical_columns(both, part)
    tag = np.concatenate([np.zeros(top.num_rows, np.int8), np.ones(inserts.num_rows, np.int8)])
    helped, keys, _ = _sort_keys(both.append_column("__tag", pa.array(tag)), node, columns)
    order = pc.sort_indices(helped, sort_keys=keys + [("__tag", "descending", "at_end")]).to_numpy()
    first = _starts(both.take(pa.array(order)), part)
    group = np.cumsum(first) - 1
    tags = tag[order]
    positions = np.arange(len(order))
    last_top = np.full(group[-1] + 1, -1)
    np.maximum.at(last_top, group[tags == 0], positions[tags == 0])
    good_sorted = (tags == 1) & (positions < last_top[group])
    good = np.zeros(len(order), dtype=bool)
    good[order] = good_sorted
    return pa.array(good[top.num_rows:])


def _measure(table: Any, part: Sequence[str], ordered: Sequence[str], rank: str) -> dict[tuple, int]:
    """Per group (floats as Spark groups them): its rows (rank, row_number) or distinct
    ``order_by`` values (dense_rank)."""
    from spark_jobs.spec.model import WEIGHT
    from spark_jobs.state.float_keys import canonical_columns

    if table.num_rows == 0:
        return {}
    table = canonical_columns(table, [*part, *ordered])  # one NaN, one zero: Spark's groups and peers
    if rank == "dense_rank":
        per = table.group_by([*part, *ordered], use_threads=False).aggregate([(WEIGHT, "count")])
        sums = per.group_by(list(part), use_threads=False).aggregate([(f"{WEIGHT}_count", "count")])
        name = f"{WEIGHT}_count_count"
    else:
        sums = table.group_by(list(part), use_threads=False).aggregate([(WEIGHT, "sum")])
        name = f"{WEIGHT}_sum"
    keys = list(zip(*[sums.column(p).to_pylist() for p in part])) if part else [()]
    return dict(zip(keys, sums.column(name).to_pylist()))


def _integral_rows(s: Any, integral: Any, delta: Any, part: Sequence[str]) -> Any:
    """The integral's rows of the groups ``delta`` touches (row groups admitted by its partition
    values), in the delta's columns and types."""
    import pyarrow.compute as pc

    from spark_jobs.executor.arrow.kernels import Integral
    from spark_jobs.executor.arrow.zsets import semi

    if not part:
        old = s.engine.table(integral)
    elif isinstance(integral, Integral):
        found = integral.rows_for(part[0], pc.unique(delta.column(part[0])).to_pylist())
        old = semi(found, delta, part, part) if len(part) > 1 else found
    else:
        old = semi(integral, delta, part, part)
    return old.select(delta.column_names).cast(delta.schema)


# ---- Spark kernels ------------------------------------------------------------------------------

def topk_frame(df: Any, node: Node) -> Any:
    """Top-k of a Z-set DataFrame with window functions over its consolidated positive rows."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from spark_jobs.executor.spark.zset import WEIGHT, col, consolidate, data_columns

    columns = data_columns(df)
    k, rank, rank_column = int(node.param("k")), node.param("rank"), node.param("rank_column")

    def sort(column: str, desc: bool, nulls_first: bool) -> Any:
        c = col(column)
        if desc:
            return c.desc_nulls_first() if nulls_first else c.desc_nulls_last()
        return c.asc_nulls_first() if nulls_first else c.asc_nulls_last()

    order = [sort(*o) for o in node.param("order_by")]
    groups = [col(p) for p in _partition(node)]
    rows = consolidate(df).where(col(WEIGHT) > 0)
    w = col(WEIGHT)
    if rank == "row_number":
        full = order + [col(c).asc_nulls_first() for c in tie_break(columns, node)]
        window = Window.partitionBy(*groups).orderBy(*full).rowsBetween(Window.unboundedPreceding, -1)
        rows = rows.withColumn("__before", F.coalesce(F.sum(w).over(window), F.lit(0)).cast("long"))
        rows = rows.where(col("__before") < k).withColumn("__kept", F.least(w, F.lit(k) - col("__before")))
        if rank_column:
            first, last = col("__before") + 1, col("__before") + col("__kept")
            numbers = F.sequence(first.cast(RANK_TYPE), last.cast(RANK_TYPE))
            return rows.select(*[col(c) for c in columns], F.explode(numbers).alias(rank_column),
                               F.lit(1).cast("long").alias(WEIGHT))
        return rows.select(*[col(c) for c in columns], col("__kept").cast("long").alias(WEIGHT))
    if rank == "rank":
        upto = F.sum(w).over(Window.partitionBy(*groups).orderBy(*order))  # RANGE frame: peers included
        peers = F.sum(w).over(Window.partitionBy(*groups, *[col(c) for c, _, _ in node.param("order_by")]))
        value = upto - peers + 1
    else:
        value = F.dense_rank().over(Window.partitionBy(*groups).orderBy(*order))
    rows = rows.withColumn("__rank", value.cast(RANK_TYPE)).where(col("__rank") <= k)
    extra = [col("__rank").alias(rank_column)] if rank_column else []
    return rows.select(*[col(c) for c in columns], *extra, w)


def spark_topk(s: Any, node: Node) -> Any:
    return topk_frame(s.value(node.inputs[0]), node)


def _spark_topk_change(s: Any, node: Node, old: Any, delta: Any, part: Sequence[str]) -> Any:
    """The top-k's change: top-k of (old + change) minus top-k of old, over the groups the change
    touches only (``old`` restricted to the change's partition values, so Parquet skips row groups)."""
    from spark_jobs.executor.spark.zset import consolidate, negate, plus, restrict

    if part:
        old = restrict(old, delta, part, part, broadcast=s.engine.broadcast,
                       in_list_max=s.engine.policy.narrow.in_list_max)
    return consolidate(plus(topk_frame(plus(old, delta), node), negate(topk_frame(old, node))))


def spark_topk_touched(s: Any, node: Node) -> Any:
    """The touched groups' rows of the integral (a semi join with the change's partition values,
    pre-filtered by the first one so Parquet skips row groups), top-k before and after, new − old;
    appended to the own state (the output so far, which the Arrow kernel reads first)."""
    from spark_jobs.executor.engine import StateUpdate

    delta, integral = s.args(node)
    part = _partition(node)
    out = _spark_topk_change(s, node, integral.select(*delta.columns), delta, part)
    s.update(node.id, StateUpdate("append", out, part, sort_by=part))
    return out


def spark_topk_insert_only(s: Any, node: Node) -> Any:
    """Over an insert-only input: the touched groups' top-k so far (the own state, the output so
    far, without its rank column) plus the change, top-k before and after, new − old. A negative
    weight fails the step (the IR proved the input insert-only: a broken promise, never a silent
    wrong answer)."""
    from spark_jobs.executor.engine import StateUpdate
    from spark_jobs.executor.refusal import raise_sql
    from spark_jobs.executor.spark.zset import WEIGHT, consolidate
    from spark_jobs.executor.totals import q

    (delta,) = s.args(node)
    part = _partition(node)
    refuse = raise_sql(f"top-k {node.id!r}: a change deletes rows (negative _weight) but its input is insert-only "
                       "(append_only)", "bigint")
    data = [q(c) for c in delta.columns if c != WEIGHT]
    delta = delta.selectExpr(*data, f"CASE WHEN {q(WEIGHT)} < 0 THEN {refuse} ELSE {q(WEIGHT)} END AS {q(WEIGHT)}")
    prev = s.state.read(node.id)
    if prev is None:
        out = consolidate(topk_frame(delta, node))
    else:
        out = _spark_topk_change(s, node, prev.select(*delta.columns), delta, part)
    s.update(node.id, StateUpdate("append", out, part, sort_by=part))
    return out


