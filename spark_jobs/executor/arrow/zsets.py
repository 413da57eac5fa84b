"""Z-set algebra on pyarrow Tables: sum, negation, consolidation, projection, joins, lookups.

Why: once a step's changes are small, its work is a few lookups of touched keys and joins of a
few hundred rows; Spark spends ~0.1 s of planning and a job on each whatever the size, Arrow a few
milliseconds. Semantics follow the DataFrame kernels exactly (``executor/spark/``): SQL ``=``
in an equi-join (NULL matches nothing), ``<=>`` where the Spark kernel is null-safe, weights
multiplied by a join, consolidation summing weights per tuple with NULLs equal.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.executor import weights
from spark_jobs.executor.engine import NotLocal
from spark_jobs.spec.model import WEIGHT
from spark_jobs.state.float_keys import canonical, canonical_columns, canonical_value, member

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
    return table.set_column(table.schema.get_field_index(WEIGHT), WEIGHT, pc.negate_checked(table.column(WEIGHT)))


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
    sums = group_sums(table, cols, [WEIGHT])
    out = sums.select(cols + [f"{WEIGHT}_sum"]).rename_columns(cols + [WEIGHT])
    schema = pa.schema([table.schema.field(c) for c in out.column_names])
    return out.filter(pc.not_equal(out.column(WEIGHT), 0)).cast(schema)


def group_sums(table: pa.Table, keys: Sequence[str], columns: Sequence[str]) -> pa.Table:
    """``group_by(keys).aggregate([(c, "sum") ...])`` of int64 weight columns, checked: Arrow's
    hash sum wraps around silently, so when ``rows × max |w|`` could leave the weight range the
    sums are taken exactly (as decimals) and one outside the range refuses the step
    (``weights.WeightOutOfRange``, an example group named). Float keys group as in Spark
    (``float_keys``: -0.0 is 0.0, one NaN), and come out canonical, as Spark's GROUP BY gives them."""
    table = canonical_columns(table, keys)
    risky = [c for c in columns if table.num_rows * _max_abs(table.column(c)) > weights.MAX_WEIGHT]
    if not risky:
        return table.group_by(keys, use_threads=False).aggregate([(c, "sum") for c in columns])
    exact = table
    for c in risky:
        exact = exact.set_column(exact.schema.get_field_index(c), c, exact.column(c).cast(pa.decimal128(38, 0)))
    sums = exact.group_by(keys, use_threads=False).aggregate([(c, "sum") for c in columns])
    for c in risky:
        name = f"{c}_sum"
        values = sums.column(name)
        low, high = pc.less(values, -weights.MAX_WEIGHT), pc.greater(values, weights.MAX_WEIGHT)
        bad = pc.or_(low, high)
        if pc.any(bad).as_py():
            at = pc.index(bad, True).as_py()
            example = {k: sums.column(k)[at].as_py() for k in keys}
            raise weights.refuse(f"a sum of weights ({values[at].as_py()})", example)
        sums = sums.set_column(sums.schema.get_field_index(name), name, values.cast(pa.int64()))
    return sums


def check_additions(terms: Sequence[np.ndarray], rows: Callable[[int], Any]) -> None:
    """Refuse the step when the element-wise sum of ``terms`` (int64 arrays, added by the caller
    in numpy, which wraps around) could leave the weight range and does, naming ``rows(i)``."""
    if sum(max(abs(int(t.min())), abs(int(t.max()))) if len(t) else 0 for t in terms) <= weights.MAX_WEIGHT:
        return
    for at, parts in enumerate(zip(*[t.tolist() for t in terms])):
        if not weights.in_range(sum(parts)):
            raise weights.refuse(f"the sum of weights {' + '.join(map(str, parts))}", rows(at))


def _max_abs(values: "pa.ChunkedArray | pa.Array") -> int:
    """The largest |value| of an integer column (0 when empty or all NULL)."""
    bounds = pc.min_max(values).as_py()
    return max(abs(bounds["min"] or 0), abs(bounds["max"] or 0))


def multiply_weights(a: "pa.ChunkedArray", b: "pa.ChunkedArray", rows: Callable[[int], Any]) -> "pa.ChunkedArray":
    """``a × b`` element-wise, checked: a product outside the weight range refuses the step,
    naming ``rows(i)`` (the output row the i-th product is the weight of)."""
    if _max_abs(a) * _max_abs(b) <= weights.MAX_WEIGHT:
        return pc.multiply(a, b)
    left, right = a.to_pylist(), b.to_pylist()
    for at, (x, y) in enumerate(zip(left, right)):
        if not weights.in_range(x * y):
            raise weights.refuse(f"the product of weights {x} × {y} = {x * y}", rows(at))
    return pc.multiply(a, b)


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
        joined = _take_pairs(lhs, rhs, li, ri)
    else:
        lk, rk = [ln[k] for k in left_keys], [rn[k] for k in right_keys]
        lhs, rhs = canonical_columns(lhs, lk), canonical_columns(rhs, rk)  # Spark's float equality
        lmatch, rmatch = _comparable_keys(lhs, rhs, lk, rk)
        joined = _take_pairs(lhs, rhs, *_matching_rows(lmatch, rmatch, lk, rk, null_safe))
    if within and joined.num_rows:
        micros = [_micros(joined.column(names[c])) for names, c in ((ln, within[0]), (rn, within[1]))]
        joined = joined.filter(pc.fill_null(pc.less_equal(pc.abs(pc.subtract(micros[0], micros[1])),
                                                          int(within[2])), False))
    if joined.num_rows == 0:
        return pa.schema(fields).empty_table()
    cols = [joined.column(ln[s]) for s, _ in left_out] + [joined.column(rn[s]) for s, _ in right_out]
    product = multiply_weights(joined.column("__lw"), joined.column("__rw"),
                               lambda at: dict(zip(out_names, (c[at].as_py() for c in cols))))
    out = pa.table(cols + [product], names=out_names)
    return out.cast(pa.schema(fields))


def _comparable_keys(lhs: pa.Table, rhs: pa.Table, lk: list[str], rk: list[str]) -> tuple[pa.Table, pa.Table]:
    """The two sides with each pair of numeric keys of different types cast to one type, as
    Spark compares them (an ``int`` literal with a ``bigint`` column as bigints, an integer with a
    floating point as doubles; a NULL-typed key as the other side's type). Only for matching: the
    output takes the columns as they were."""
    for a, b in zip(lk, rk):
        ta, tb = lhs.schema.field(a).type, rhs.schema.field(b).type
        if ta == tb:
            continue
        if pa.types.is_null(ta) or pa.types.is_null(tb):
            common = tb if pa.types.is_null(ta) else ta
        elif pa.types.is_integer(ta) and pa.types.is_integer(tb):
            common = pa.int64()
        elif all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in (ta, tb)):
            common = pa.float64()
        else:
            continue  # Arrow refuses the join: the step runs on Spark, which knows its casts
        lhs = lhs.set_column(lhs.schema.get_field_index(a), pa.field(a, common),
                             pc.cast(lhs.column(a), common, safe=False))
        rhs = rhs.set_column(rhs.schema.get_field_index(b), pa.field(b, common),
                             pc.cast(rhs.column(b), common, safe=False))
    return lhs, rhs


def _matching_rows(lhs: pa.Table, rhs: pa.Table, lk: list[str], rk: list[str], null_safe: bool
                   ) -> tuple["pa.ChunkedArray", "pa.ChunkedArray"]:
    """The (left row, right row) index pairs whose keys are equal.

    Why indexes: Acero's hash join allocates buffers per payload column, so joining two wide
    tables of a few rows (a join of 40 tables carries 120 columns) cost ~25 MB and ~0.1 s each
    (a 64-table join went out of memory); joined on the keys and a row number, the columns are
    then taken once, at the size of the output."""
    left = lhs.select(list(dict.fromkeys(lk)))
    right = rhs.select(list(dict.fromkeys(rk)))
    if null_safe:  # <=>: Arrow's join matches no NULL, so NULL-ness becomes a key of its own
        left, right, lk, rk = _null_safe_keys(left, right, lk, rk)
    left = left.append_column("__li", pa.array(np.arange(lhs.num_rows, dtype=np.int64)))
    right = right.append_column("__ri", pa.array(np.arange(rhs.num_rows, dtype=np.int64)))
    pairs = left.join(right, keys=lk, right_keys=rk, join_type="inner", coalesce_keys=False, use_threads=False)
    return pairs.column("__li"), pairs.column("__ri")


def _take_pairs(lhs: pa.Table, rhs: pa.Table, li: Any, ri: Any) -> pa.Table:
    """Rows ``li`` of ``lhs`` beside rows ``ri`` of ``rhs`` (their column names are apart)."""
    return pa.table({**{c: lhs.column(c).take(li) for c in lhs.column_names},
                     **{c: rhs.column(c).take(ri) for c in rhs.column_names}})


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
        if ca.null_count == 0 and cb.null_count == 0 and not pa.types.is_null(ca.type):  # as they are
            new_l.append(a)
            new_r.append(b)
            continue
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
        wanted = pc.unique(canonical(values.cast(table.schema.field(keys[0]).type)))
        return table.filter(pc.fill_null(member(table.column(keys[0]), wanted), False))
    return table.filter(matches(table, probe, keys, probe_keys))


def anti(table: pa.Table, probe: pa.Table, keys: Sequence[str], probe_keys: Sequence[str]) -> pa.Table:
    """Rows of ``table`` whose ``keys`` equal (NULL matching NULL) those of no ``probe`` row."""
    if table.num_rows == 0 or probe.num_rows == 0:
        return table
    return table.filter(pc.invert(matches(table, probe, keys, probe_keys)))


def matches(table: pa.Table, probe: pa.Table, keys: Sequence[str], probe_keys: Sequence[str]) -> pa.Array:
    """Per row of ``table``: do its ``keys`` equal those of some ``probe`` row (``<=>``, floats
    as Spark compares them)? One hash join of the key columns (no Python per row: a 100k-row
    change probes a large trace's rows this way)."""
    if table.num_rows == 0:
        return pa.array([], pa.bool_())
    if probe.num_rows == 0:
        return pa.array([False] * table.num_rows, pa.bool_())
    names = [f"__k{j}" for j in range(len(keys))]
    lhs = pa.table([table.column(k) for k in keys], names=names)
    lhs = lhs.append_column("__row", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    rhs = pa.table([probe.column(k).cast(table.schema.field(t).type) for k, t in zip(probe_keys, keys)], names=names)
    lhs, rhs = canonical_columns(lhs, names), canonical_columns(rhs, names)
    lhs, rhs, lk, rk = _null_safe_keys(lhs, rhs, names, names)  # NULLs (a NULL-typed column too) as keys
    lhs, rhs = lhs.select([*lk, "__row"]), rhs.select(rk).group_by(rk, use_threads=False).aggregate([])
    found = lhs.join(rhs, keys=lk, right_keys=rk, join_type="left semi", use_threads=False).column("__row")
    mask = np.zeros(table.num_rows, dtype=bool)
    mask[found.to_numpy()] = True
    return pa.array(mask)


def _as_key(value: object) -> object:
    """A value as Spark compares keys: NaN equals NaN, -0.0 equals 0.0 (Python: NaN != NaN)."""
    return canonical_value(value)


def with_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    """``table`` with column ``name`` before the weight."""
    at = table.schema.get_field_index(WEIGHT)
    return table.add_column(at, name, values)


def constant(n: int, value: int, dtype: pa.DataType) -> pa.Array:
    return pa.array(np.full(n, value), dtype)

