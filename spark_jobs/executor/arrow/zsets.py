"""Z-set algebra on pyarrow Tables: sum, negation, consolidation, projection, joins, lookups.

Why: once a step's changes are small, its work is a few lookups of touched keys and joins of a
few hundred rows; Spark spends ~0.1 s of planning and a job on each whatever the size, Arrow a few
milliseconds. Semantics follow the DataFrame kernels exactly (``executor/spark/``): SQL ``=``
in an equi-join (NULL matches nothing), ``<=>`` where the Spark kernel is null-safe, weights
multiplied by a join, consolidation summing weights per tuple with NULLs equal.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.executor.engine import NotLocal
from spark_jobs.spec.model import WEIGHT

_PLAIN = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*|`(?:[^`]|``)+`)$")


def data_columns(table: pa.Table) -> list[str]:
    return [c for c in table.column_names if c != WEIGHT]


def plain_column(expr: str, columns: Sequence[str]) -> str:
    """The input column a ``select`` expression names, if it only names one (Spark resolves
    names case-insensitively); NotLocal for any other expression."""
    expr = expr.strip()
    if not _PLAIN.match(expr):
        raise NotLocal(f"expression {expr!r} is not a plain column")
    name = expr[1:-1].replace("``", "`") if expr.startswith("`") else expr
    found = [c for c in columns if c.lower() == name.lower()]
    if len(found) != 1:
        raise NotLocal(f"column {name!r} is not (uniquely) among {list(columns)}")
    return found[0]


def negate(table: pa.Table) -> pa.Table:
    return table.set_column(table.schema.get_field_index(WEIGHT), WEIGHT, pc.negate(table.column(WEIGHT)))


def total(parts: Sequence[pa.Table]) -> pa.Table:
    """Z-set sum: rows concatenated by column name (as ``unionByName``; types of the first)."""
    names = parts[0].column_names
    if len(parts) == 1:
        return parts[0]
    return pa.concat_tables([p.select(names) for p in parts], promote_options="permissive")


def consolidate(table: pa.Table) -> pa.Table:
    """One row per distinct tuple with the sum of its weights; zero weights dropped."""
    cols = data_columns(table)
    if not cols:
        raise NotLocal("a Z-set without data columns")
    if table.num_rows == 0:
        return table
    sums = table.group_by(cols, use_threads=False).aggregate([(WEIGHT, "sum")])
    out = sums.select(cols + [f"{WEIGHT}_sum"]).rename_columns(cols + [WEIGHT])
    schema = pa.schema([table.schema.field(c) for c in out.column_names])
    return out.filter(pc.not_equal(out.column(WEIGHT), 0)).cast(schema)


def _private(table: pa.Table, prefix: str, needed: Sequence[str], weight: str) -> tuple[pa.Table, dict[str, str]]:
    """``table`` reduced to ``needed`` under private names (as ``join._side``)."""
    names = {c: f"{prefix}{i}" for i, c in enumerate(dict.fromkeys(needed))}
    return pa.table([table.column(c) for c in names] + [table.column(WEIGHT)],
                    names=list(names.values()) + [weight]), names


def join(left: pa.Table, right: pa.Table, left_keys: Sequence[str], right_keys: Sequence[str], null_safe: bool,
         left_out: Sequence[tuple[str, str]], right_out: Sequence[tuple[str, str]],
         within: Sequence | None = None) -> pa.Table:
    """``operators.join.join`` on tables: inner equi-join (``=``: NULL matches nothing; with
    ``null_safe``, ``<=>``), no keys = Cartesian product; output ``left_out`` then ``right_out``
    columns and the product of the weights; ``within``: an interval join (as ``operators.join``)."""
    if len(left_keys) != len(right_keys):
        raise ValueError(f"join needs as many left keys as right keys: {left_keys} vs {right_keys}")
    lt, rt = ((within[0],), (within[1],)) if within else ((), ())
    lhs, ln = _private(left, "__l", [*left_keys, *lt, *(s for s, _ in left_out)], "__lw")
    rhs, rn = _private(right, "__r", [*right_keys, *rt, *(s for s, _ in right_out)], "__rw")
    out_names = [o for _, o in left_out] + [o for _, o in right_out] + [WEIGHT]
    fields = [lhs.schema.field(ln[s]).with_name(o) for s, o in left_out] + \
             [rhs.schema.field(rn[s]).with_name(o) for s, o in right_out] + [pa.field(WEIGHT, pa.int64())]
    if lhs.num_rows == 0 or rhs.num_rows == 0:
        return pa.schema(fields).empty_table()
    if not left_keys:
        li = np.repeat(np.arange(lhs.num_rows), rhs.num_rows)
        ri = np.tile(np.arange(rhs.num_rows), lhs.num_rows)
        joined = pa.table({**{c: lhs.column(c).take(li) for c in lhs.column_names},
                           **{c: rhs.column(c).take(ri) for c in rhs.column_names}})
    else:
        lk, rk = [ln[k] for k in left_keys], [rn[k] for k in right_keys]
        if null_safe:  # <=>: Arrow's join matches no NULL, so NULL-ness becomes a key of its own
            lhs, rhs, lk, rk = _null_safe_keys(lhs, rhs, lk, rk)
        joined = lhs.join(rhs, keys=lk, right_keys=rk, join_type="inner", coalesce_keys=False, use_threads=False)
    if within and joined.num_rows:
        micros = [_micros(joined.column(names[c])) for names, c in ((ln, within[0]), (rn, within[1]))]
        joined = joined.filter(pc.fill_null(pc.less_equal(pc.abs(pc.subtract(micros[0], micros[1])),
                                                          int(within[2])), False))
    if joined.num_rows == 0:
        return pa.schema(fields).empty_table()
    cols = [joined.column(ln[s]) for s, _ in left_out] + [joined.column(rn[s]) for s, _ in right_out]
    out = pa.table(cols + [pc.multiply(joined.column("__lw"), joined.column("__rw"))], names=out_names)
    return out.cast(pa.schema(fields))


def _micros(values: "pa.ChunkedArray") -> "pa.ChunkedArray":
    """A timestamp column as microseconds since the epoch (int64)."""
    return pc.cast(pc.cast(values, pa.timestamp("us", tz=values.type.tz)), pa.int64())


def _null_safe_keys(lhs: pa.Table, rhs: pa.Table, lk: list[str], rk: list[str]
                    ) -> tuple[pa.Table, pa.Table, list[str], list[str]]:
    """Both sides with, per key pair, the key with NULLs filled (by a value of the column) and a
    NULL flag: an equi-join on those is ``<=>`` on the keys."""
    new_l, new_r = [], []
    for j, (a, b) in enumerate(zip(lk, rk)):
        ca, cb = lhs.column(a), rhs.column(b)
        present = pc.drop_null(pa.chunked_array(ca.chunks + cb.cast(ca.type).chunks, ca.type))
        fill = present[0] if len(present) else None
        for side, col, name in ((0, ca, a), (1, cb, b)):
            filled = pc.fill_null(col, fill) if fill is not None else pa.nulls(len(col), pa.int8()).fill_null(0)
            flag = pc.is_null(col)
            table = lhs if side == 0 else rhs
            table = table.append_column(f"{name}__v", filled).append_column(f"{name}__n", flag)
            if side == 0:
                lhs = table
                new_l += [f"{name}__v", f"{name}__n"]
            else:
                rhs = table
                new_r += [f"{name}__v", f"{name}__n"]
    return lhs, rhs, new_l, new_r


def semi(table: pa.Table, probe: pa.Table, keys: Sequence[str], probe_keys: Sequence[str]) -> pa.Table:
    """Rows of ``table`` whose ``keys`` equal (NULL matching NULL) those of some ``probe`` row."""
    if table.num_rows == 0:
        return table
    if probe.num_rows == 0:
        return table.slice(0, 0)
    if len(keys) == 1:
        values = probe.column(probe_keys[0])
        wanted = pc.unique(values.cast(table.schema.field(keys[0]).type))
        return table.filter(pc.is_in(table.column(keys[0]), value_set=wanted, skip_nulls=False))
    wanted = set(zip(*[map(_as_key, probe.column(k).to_pylist()) for k in probe_keys]))
    have = zip(*[map(_as_key, table.column(k).to_pylist()) for k in keys])
    return table.filter(pa.array([t in wanted for t in have], pa.bool_()))


_NAN = object()


def _as_key(value: object) -> object:
    """A value as Spark compares keys: NaN equals NaN, -0.0 equals 0.0 (Python: NaN != NaN)."""
    if isinstance(value, float):
        return _NAN if value != value else value + 0.0
    return value


def with_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    """``table`` with column ``name`` before the weight."""
    at = table.schema.get_field_index(WEIGHT)
    return table.add_column(at, name, values)


def constant(n: int, value: int, dtype: pa.DataType) -> pa.Array:
    return pa.array(np.full(n, value), dtype)

