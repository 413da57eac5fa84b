"""The built-in checks of ``builtin.py`` on Arrow tables, for a step that runs in-process.

Same per-tuple sums (delta rows, zero-weight rows, inserted rows, summed delta weight, and the
tuple's weight in the previous view), same checks, same report (``builtin.outcome``). The
previous view is looked up by the delta's tuples only (``previous_rows``: the caller reads the
view trace's row groups that can hold them), so the work is bounded by the delta.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.quality.builtin import (_DW, _INS, _NEW, _PW, _ROWS, _ZERO, CONSOLIDATED, EXAMPLES, IS_SET,
                                        WEIGHTS_POSITIVE, BuiltinOutcome, example, outcome)
from spark_jobs.spec.model import WEIGHT
from spark_jobs.state.float_keys import canonical_columns


def _tagged(table: pa.Table, cols: list[str], delta: bool) -> pa.Table:
    n = table.num_rows
    w = table.column(WEIGHT).cast(pa.int64())
    zeros = pa.array(np.zeros(n, np.int64))
    if delta:
        ones = pa.array(np.ones(n, np.int64))
        zero_w = pc.cast(pc.or_kleene(pc.is_null(w), pc.equal(w, 0)), pa.int64()).fill_null(1)
        ins = pc.cast(pc.greater(w, 0), pa.int64()).fill_null(0)
        sums = [ones, zero_w, ins, pc.fill_null(w, 0), zeros]
    else:
        sums = [zeros, zeros, zeros, zeros, pc.fill_null(w, 0)]
    return pa.table([table.column(c) for c in cols] + sums, names=cols + [_ROWS, _ZERO, _INS, _DW, _PW])


def check_view_delta_table(delta: pa.Table, previous_rows: pa.Table | None, *, is_set: bool,
                           target: str) -> BuiltinOutcome:
    """The built-in checks of one view delta; ``previous_rows`` are the previous view's rows of
    (at least) the delta's tuples (None: the view was empty)."""
    cols = [c for c in delta.column_names if c != WEIGHT]
    parts = [_tagged(delta, cols, True)]
    if previous_rows is not None and previous_rows.num_rows:
        parts.append(_tagged(previous_rows.select(cols + [WEIGHT]), cols, False))
    tagged = canonical_columns(pa.concat_tables(parts, promote_options="permissive"), cols)  # Spark's float equality
    sums = [(c, "sum") for c in (_ROWS, _ZERO, _INS, _DW, _PW)]
    per_tuple = (tagged.group_by(cols, use_threads=False).aggregate(sums) if cols else
                 pa.table({f"{c}_sum": [pc.sum(tagged.column(c)).as_py() or 0] for c, _ in sums}))
    per_tuple = per_tuple.rename_columns([c[:-4] if c.endswith("_sum") else c for c in per_tuple.column_names])
    per_tuple = per_tuple.filter(pc.greater(per_tuple.column(_ROWS), 0))  # tuples of the delta only
    get = {c: per_tuple.column(c).to_numpy(zero_copy_only=False) for c in (_ROWS, _ZERO, _INS, _DW, _PW)}
    new = get[_DW] + get[_PW]
    bad = {CONSOLIDATED: (get[_ROWS] > 1) | (get[_ZERO] > 0), WEIGHTS_POSITIVE: new < 0}
    if is_set:
        bad[IS_SET] = (new != 0) & (new != 1)
    totals = {"tuples": per_tuple.num_rows, "rows": int(get[_ROWS].sum()), "zero_rows": int(get[_ZERO].sum()),
              "inserted": int(get[_INS].sum()), "duplicated": int((get[_ROWS] > 1).sum()),
              **{name: int(mask.sum()) for name, mask in bad.items()}}
    examples = {}
    for name, mask in bad.items():
        if mask.any():
            rows = per_tuple.filter(pa.array(mask)).slice(0, EXAMPLES).to_pylist()
            examples[name] = [example({**r, _NEW: r[_DW] + r[_PW]}, cols) for r in rows]
    return outcome(totals, examples, is_set, target)
