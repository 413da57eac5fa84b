"""Z-set kernels on pyarrow Tables, for the driver-side fixed-point loop (``recursion``).

Why: once a step's changes are small, an iteration of a recursive scope is a few lookups of
touched keys and joins of a few hundred rows; Spark spends ~1 s of planning and jobs on that
whatever the size, Arrow a few milliseconds. The 2-D rules themselves are not restated here:
``nested.join_nested`` / ``distinct_nested`` run on these ``Kernels`` as they run on Spark's.
A table here is a Z-set like a DataFrame: data columns plus the int64 ``_weight`` column.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.executor.operators.nested import ITER, JoinSpec, crossing
from spark_jobs.executor.zset import WEIGHT, is_local
from spark_jobs.state.lookup import TraceFiles

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_PLAIN = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*|`(?:[^`]|``)+`)$")


class NotLocal(Exception):
    """This step cannot run on the driver (an operator or size Arrow does not take): use Spark."""


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


def local_table(df: "DataFrame", max_rows: int) -> pa.Table:
    """A driver-held DataFrame's rows as a table (no Spark job: the rows of a local relation are
    read at planning); NotLocal if it is not held on the driver or has more than ``max_rows``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    if not is_local(df):
        raise NotLocal("a change is not held on the driver")
    rows = df.collect()
    if len(rows) > max_rows:
        raise NotLocal(f"a change of {len(rows)} rows")
    schema = to_arrow_schema(df.schema, timezone="UTC")  # timestamps: UTC instants, as Parquet holds them
    return pa.table([pa.array([r[k] for r in rows], f.type) for k, f in enumerate(schema)], schema=schema)


def select(table: pa.Table, columns: Sequence[tuple[str, str]]) -> pa.Table:
    """``linear.map`` restricted to plain column references (renames and reorders)."""
    names = table.column_names
    picked = [table.column(plain_column(expr, names)) for _, expr in columns]
    return pa.table(picked + [table.column(WEIGHT)], names=[out for out, _ in columns] + [WEIGHT])


def negate(table: pa.Table) -> pa.Table:
    return table.set_column(table.schema.get_field_index(WEIGHT), WEIGHT, pc.negate(table.column(WEIGHT)))


def consolidate(table: pa.Table) -> pa.Table:
    """One row per distinct tuple with the sum of its weights; zero weights dropped."""
    cols = [c for c in table.column_names if c != WEIGHT]
    if not cols:
        raise NotLocal("a Z-set without data columns")
    sums = table.group_by(cols, use_threads=False).aggregate([(WEIGHT, "sum")])
    out = sums.select(cols + [f"{WEIGHT}_sum"]).rename_columns(cols + [WEIGHT])
    schema = pa.schema([table.schema.field(c) for c in out.column_names])
    return out.filter(pc.not_equal(out.column(WEIGHT), 0)).cast(schema)


def _private(table: pa.Table, prefix: str, needed: Sequence[str], weight: str) -> tuple[pa.Table, dict[str, str]]:
    """``table`` reduced to ``needed`` under private names (as ``join._side``)."""
    names = {c: f"{prefix}{i}" for i, c in enumerate(dict.fromkeys(needed))}
    return pa.table([table.column(c) for c in names] + [table.column(WEIGHT)],
                    names=list(names.values()) + [weight]), names


def join(left: pa.Table, right: pa.Table, spec: JoinSpec) -> pa.Table:
    """``operators.join.join`` on tables: inner equi-join (SQL ``=``: NULL matches nothing),
    output ``left_out`` then ``right_out`` columns and the product of the weights."""
    if spec.null_safe or not spec.left_keys:
        raise NotLocal("null-safe joins and products run on Spark")
    lhs, ln = _private(left, "__l", [*spec.left_keys, *(s for s, _ in spec.left_out)], "__lw")
    rhs, rn = _private(right, "__r", [*spec.right_keys, *(s for s, _ in spec.right_out)], "__rw")
    out_names = [o for _, o in spec.left_out] + [o for _, o in spec.right_out] + [WEIGHT]
    if lhs.num_rows == 0 or rhs.num_rows == 0:
        joined = None
    else:
        joined = lhs.join(rhs, keys=[ln[k] for k in spec.left_keys], right_keys=[rn[k] for k in spec.right_keys],
                          join_type="inner", coalesce_keys=False, use_threads=False)
    if joined is None or joined.num_rows == 0:
        fields = [lhs.schema.field(ln[s]).with_name(o) for s, o in spec.left_out] + \
                 [rhs.schema.field(rn[s]).with_name(o) for s, o in spec.right_out] + [pa.field(WEIGHT, pa.int64())]
        return pa.schema(fields).empty_table()
    cols = [joined.column(ln[s]) for s, _ in spec.left_out] + [joined.column(rn[s]) for s, _ in spec.right_out]
    return pa.table(cols + [pc.multiply(joined.column("__lw"), joined.column("__rw"))], names=out_names)


def semi(table: pa.Table, probe: pa.Table, keys: Sequence[str], probe_keys: Sequence[str]) -> pa.Table:
    """Rows of ``table`` whose ``keys`` equal (NULL matching NULL) those of some ``probe`` row.
    The caller has already cut ``table`` to the probe's first-key values: the rest is small."""
    if len(keys) == 1 or table.num_rows == 0:
        return table
    wanted = set(zip(*[probe.column(k).to_pylist() for k in probe_keys]))
    have = zip(*[table.column(k).to_pylist() for k in keys])
    return table.filter(pa.array([t in wanted for t in have], pa.bool_()))


@dataclass(frozen=True)
class Kernels:
    """``nested.Kernels`` on tables; traces are ``TraceFiles`` (Parquet read with pyarrow)."""

    def total(self, parts: list[pa.Table]) -> pa.Table:
        """Rows concatenated by column name (as ``unionByName``; nullability and widths unified)."""
        names = parts[0].column_names
        return parts[0] if len(parts) == 1 else pa.concat_tables([p.select(names) for p in parts],
                                                                  promote_options="permissive")

    def lookup(self, trace: TraceFiles, iters: tuple[int | None, int | None], probe: pa.Table,
               trace_keys: Sequence[str], probe_keys: Sequence[str], small: bool) -> pa.Table:
        if probe.num_rows == 0:
            return trace.schema.empty_table()
        found = trace.lookup(trace_keys[0], probe.column(probe_keys[0]).to_pylist(), iters, ITER)
        return semi(found, probe, trace_keys, probe_keys)

    def drop_iter(self, df: pa.Table) -> pa.Table:
        return df.drop_columns([ITER])

    def join(self, left: pa.Table, right: pa.Table, spec: JoinSpec, side: str, small: bool) -> pa.Table:
        return join(left, right, spec)

    def columns(self, df: pa.Table) -> list[str]:
        return [c for c in df.column_names if c != WEIGHT]

    def project(self, df: pa.Table, cols: Sequence[str]) -> pa.Table:
        return df.select(list(cols))

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
        sums = self.total(rows).group_by(cols, use_threads=False).aggregate(
            [(g, "sum") for g in tags])
        o, oi, b, c = (sums.column(f"{g}_sum").to_numpy(zero_copy_only=False) for g in tags)
        d = crossing(o, oi, b, c, lambda v: (v > 0).astype(np.int64))
        out = pa.table([sums.column(k) for k in cols] + [pa.array(d, pa.int64())], names=cols + [WEIGHT])
        return out.filter(pc.not_equal(out.column(WEIGHT), 0)).cast(schema)
