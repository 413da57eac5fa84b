"""``aggregate.extrema_step`` in Arrow kernels (joins and element-wise compares), for the usual
shape: integer or date group keys without NULL, integer or date arguments, old output rows one
per group with weight 1. Anything else returns None and the row-by-row Python version runs.

Why: the loop of ``iterate`` (shortest paths: ``min(d) group by node``) calls it at every
iteration with thousands of rows when a deletion lies on shortest paths (a 10-edge step on 1M
edges: 25 iterations, 2-5k rows each); per row in Python that was a quarter of the loop, and its
tuples fed the garbage collector. Acero runs single-threaded here (the inputs are small; handing
them to a thread pool on a loaded machine cost more than the work). Same rules, same result
(``tests/test_extrema_columns.py`` checks both on random inputs): a deletion at an extremum leaves the group undecided unless the
change also inserts a value at or beyond it; an extremum that is NULL or a group without old row
is undecided on any deletion; decided groups take the extremum of the old one and the inserted.
"""
from __future__ import annotations

from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.spec.model import WEIGHT

_OLD, _INS, _HAS = "__old_", "__ins_", "__has_old"
# below this many rows of change the Python version is faster: the seven Acero calls here cost
# ~1.3 ms whatever their size (measured on the loop's own inputs: 459 rows 2.5 ms here, 0.9 ms
# in Python; 1,757 rows 1.6 ms against 3.2 ms; 8,702 rows 2.7 ms against 20 ms)
FROM_ROWS = 1000


def _plain(t: pa.DataType) -> bool:
    """Integers and dates: Spark's order is Arrow's, and equality is plain (no NaN, no -0.0)."""
    return pa.types.is_integer(t) or pa.types.is_date(t)


def extrema_columns(d: pa.Table, args: dict[int, Any], old: pa.Table, group_by: Sequence[str],
                    aggs: Sequence[tuple[str, str, Any, bool]], schema: pa.Schema
                    ) -> tuple[pa.Table, pa.Table | None] | None:
    """``extrema_step``'s ``(new, undecided)`` from the consolidated change ``d``, its arguments
    per aggregate (``args[i]``: an Arrow array over ``d``'s rows) and ``old``; None when the
    inputs are not of the shape this handles (the caller then runs the Python version)."""
    keys = list(group_by)
    if d.num_rows < FROM_ROWS or not keys or any(not _plain(d.schema.field(k).type) or d.column(k).null_count for k in keys):
        return None
    if any(not _plain(old.schema.field(k).type) or old.column(k).null_count for k in keys):
        return None
    if any(func not in ("min", "max") or not _plain(args[i].type) for i, (_, func, _, _) in enumerate(aggs)):
        return None
    if any(old.schema.field(k).type != d.schema.field(k).type for k in keys):
        return None
    outs = [out for out, *_ in aggs]
    olds = old.select(keys + outs).rename_columns(keys + [f"{_OLD}{i}" for i in range(len(aggs))])
    if old.num_rows:
        if pc.min(old.column(WEIGHT)).as_py() != 1 or pc.max(old.column(WEIGHT)).as_py() != 1:
            return None
        if olds.group_by(keys, use_threads=False).aggregate([]).num_rows != old.num_rows:  # one old row per group
            return None
    olds = olds.append_column(_HAS, pa.array([True] * olds.num_rows, pa.bool_()))
    values = d.select(keys).append_column(WEIGHT, d.column(WEIGHT))
    for i in range(len(aggs)):
        values = values.append_column(f"__arg_{i}", args[i])
    w = values.column(WEIGHT)
    inserted = values.filter(pc.greater(w, 0))
    extremes = inserted.group_by(keys, use_threads=False).aggregate([(f"__arg_{i}", func) for i, (_, func, _, _) in enumerate(aggs)])
    extremes = pa.table([extremes.column(k) for k in keys]
                        + [extremes.column(f"__arg_{i}_{func}").cast(old.schema.field(out).type)
                           for i, (out, func, _, _) in enumerate(aggs)],
                        names=keys + [f"{_INS}{i}" for i in range(len(aggs))])

    deleted = values.filter(pc.less(w, 0))
    undecided = None
    if deleted.num_rows:
        seen = deleted.join(olds, keys, join_type="left outer", use_threads=False).join(extremes, keys, join_type="left outer", use_threads=False)
        open_ = pc.invert(pc.fill_null(seen.column(_HAS), False))  # no old row: undecided
        for i, (_, func, _, _) in enumerate(aggs):
            ext, value, ins = seen.column(f"{_OLD}{i}"), seen.column(f"__arg_{i}"), seen.column(f"{_INS}{i}")
            at_or_beyond = pc.less_equal if func == "min" else pc.greater_equal
            at_ext = pc.fill_null(at_or_beyond(value, ext), False)  # value NULL: inside, decided
            settled_by_insert = pc.fill_null(at_or_beyond(ins, ext), False)
            open_ = pc.or_(open_, pc.or_(pc.is_null(ext), pc.and_(at_ext, pc.invert(settled_by_insert))))
        undecided = seen.filter(open_).select(keys).group_by(keys, use_threads=False).aggregate([])
        if not undecided.num_rows:
            undecided = None

    both = olds.join(extremes, keys, join_type="full outer", use_threads=False)
    if undecided is not None:
        both = both.join(undecided, keys, join_type="left anti", use_threads=False)
    columns = [both.column(k) for k in keys]
    for i, (_, func, _, _) in enumerate(aggs):
        pick = pc.min_element_wise if func == "min" else pc.max_element_wise
        columns.append(pick(both.column(f"{_OLD}{i}"), both.column(f"{_INS}{i}"), skip_nulls=True))
    columns.append(pa.array([1] * both.num_rows, pa.int64()))
    new = pa.Table.from_arrays([c.cast(f.type) for c, f in zip(columns, schema)], schema=schema)
    return new, undecided.cast(pa.schema([d.schema.field(k) for k in keys])) if undecided is not None else None
