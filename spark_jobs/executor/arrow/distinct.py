"""distinct and its incremental form H (Proposition 4.7) on Arrow tables (``spark/distinct.py``)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.executor.arrow.zsets import check_additions, consolidate, data_columns, group_sums, total
from spark_jobs.spec.model import WEIGHT

_D, _I = "__d", "__i"


def distinct(table: pa.Table) -> pa.Table:
    """distinct(m)[x] = 1 if m[x] > 0 else 0 (a consolidated set)."""
    positive = consolidate(table)
    positive = positive.filter(pc.greater(positive.column(WEIGHT), 0))
    return positive.set_column(positive.schema.get_field_index(WEIGHT), WEIGHT,
                               pa.array(np.ones(positive.num_rows, np.int64)))


def distinct_h(delta: pa.Table, before: pa.Table | None) -> pa.Table:
    """H(i, d): the change of distinct(I x) caused by ``delta``; weights in {+1, -1}.

    ``before`` holds the rows of z⁻¹(I x) for (at least) the delta's tuples: rows of other tuples
    are harmless (only tuples with a non-zero delta are emitted); None means empty.
    """
    cols = data_columns(delta)
    zero = pa.array(np.zeros(delta.num_rows, np.int64))
    parts = [pa.table([delta.column(c) for c in cols] + [delta.column(WEIGHT), zero], names=cols + [_D, _I])]
    if before is not None and before.num_rows:
        z = pa.array(np.zeros(before.num_rows, np.int64))
        parts.append(pa.table([before.column(c) for c in cols] + [z, before.column(WEIGHT).cast(pa.int64())],
                              names=cols + [_D, _I]))
    tagged = total(parts)
    if tagged.num_rows == 0:
        return delta.select(cols + [WEIGHT]).slice(0, 0)
    sums = group_sums(tagged, cols, [_D, _I])
    d = sums.column(f"{_D}_sum").to_numpy(zero_copy_only=False)
    i = sums.column(f"{_I}_sum").to_numpy(zero_copy_only=False)
    check_additions([i, d], lambda at: {c: sums.column(c)[at].as_py() for c in cols})  # i + d below
    sign = np.where((i <= 0) & (i + d > 0), 1, np.where((i > 0) & (i + d <= 0), -1, 0)).astype(np.int64)
    out = pa.table([sums.column(c) for c in cols] + [pa.array(sign)], names=cols + [WEIGHT])
    keep = pc.and_(pc.not_equal(out.column(WEIGHT), 0), pa.array(d != 0))
    schema = pa.schema([delta.schema.field(c) for c in cols] + [pa.field(WEIGHT, pa.int64())])
    return out.filter(keep).cast(schema)
