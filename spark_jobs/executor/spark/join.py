"""Equi-join and Cartesian product of Z-sets: (a ⋈ b)[(x, y)] = a[x] * b[y] (bilinear, Table 1).

Both sides are renamed to private positional names before joining, so shared column names and
self-joins (a delta joined with its own integral) never make Spark's column resolution ambiguous.
"""
from __future__ import annotations

from typing import Literal, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.executor import weights
from spark_jobs.executor.spark.zset import (IN_LIST_MAX, WEIGHT, col, in_range, key_prefilter, select_kept,
                                            weight_refusal)

_LW, _RW = "__lw", "__rw"


def _side(df: DataFrame, prefix: str, needed: Sequence[str], weight: str) -> tuple[DataFrame, dict[str, str]]:
    """``df`` reduced to the ``needed`` columns under private names; returns the renaming."""
    names = {c: f"{prefix}{i}" for i, c in enumerate(dict.fromkeys(needed))}
    return select_kept(df, ("join_side", tuple(names.items()), weight),
                       lambda: [*[col(c).alias(n) for c, n in names.items()], col(WEIGHT).alias(weight)]), names


def join(left: DataFrame, right: DataFrame, left_keys: Sequence[str], right_keys: Sequence[str],
         null_safe: bool, left_out: Sequence[tuple[str, str]], right_out: Sequence[tuple[str, str]], *,
         broadcast: Literal["left", "right"] | None = None, in_list_max: int = IN_LIST_MAX,
         within: Sequence | None = None) -> DataFrame:
    """Inner equi-join; no keys = Cartesian product. Output: left_out, right_out columns, weight product.

    ``null_safe`` compares keys with ``<=>`` (set operations: NULL matches NULL); otherwise SQL
    ``=`` (a NULL key never matches). ``broadcast`` names the small side (a delta joined with an
    integral), so the integral is scanned but not shuffled; a driver-local small side filters
    the other by an IN list instead (``zset.key_prefilter``, up to ``in_list_max`` keys).
    ``within`` (left time column, right time column, range in µs): an interval join, pairs whose
    times differ by at most the range (a NULL time matches nothing).
    """
    if len(left_keys) != len(right_keys):
        raise ValueError(f"join needs as many left keys as right keys: {left_keys} vs {right_keys}")
    lt, rt = ((within[0],), (within[1],)) if within else ((), ())
    lhs, lnames = _side(left, "__l", [*left_keys, *lt, *(s for s, _ in left_out)], _LW)
    rhs, rnames = _side(right, "__r", [*right_keys, *rt, *(s for s, _ in right_out)], _RW)
    if broadcast and left_keys:  # a small driver-local delta: filter the state by its keys instead
        lk, rk = (lnames[left_keys[0]], rnames[right_keys[0]])
        if broadcast == "left":
            pre = key_prefilter(rk, lhs, lk, null_safe, in_list_max)
            if pre is not None:
                lhs, rhs, broadcast = lhs.hint("shuffle_hash"), rhs.where(pre), None
        else:
            pre = key_prefilter(lk, rhs, rk, null_safe, in_list_max)
            if pre is not None:
                lhs, rhs, broadcast = lhs.where(pre), rhs.hint("shuffle_hash"), None
    if broadcast == "left":
        lhs = F.broadcast(lhs)
    elif broadcast == "right":
        rhs = F.broadcast(rhs)
    cond: Column | None = None
    for lk, rk in zip(left_keys, right_keys):
        a, b = col(lnames[lk]), col(rnames[rk])
        term = a.eqNullSafe(b) if null_safe else a == b
        cond = term if cond is None else cond & term
    if within:
        micros = [F.unix_micros(col(names[c]).cast("timestamp")) for names, c in ((lnames, within[0]), (rnames, within[1]))]
        term = F.abs(micros[0] - micros[1]) <= F.lit(int(within[2]))
        cond = term if cond is None else cond & term
    if cond is not None:
        joined = lhs.join(rhs, on=cond, how="inner")
    else:
        joined = lhs.crossJoin(rhs)
    pairs = tuple((lnames[s], o) for s, o in left_out) + tuple((rnames[s], o) for s, o in right_out)
    return select_kept(joined, ("join_out", pairs, weights.where()), lambda: _output(pairs))


def _output(pairs: Sequence[tuple[str, str]]) -> list[Column]:
    """A join's output columns (private name -> output name) and its weight, the product of the
    sides' weights, checked: a product outside the weight range refuses the step
    (``executor/weights.py``), naming the node being evaluated (kept per node: ``select_kept``)."""
    out = [col(private).alias(o) for private, o in pairs]
    named = [col(private).alias(o) for private, o in pairs]  # the example row of a refusal, by output names
    refusal = weight_refusal(["the product of weights ", col(_LW), " × ", col(_RW)], named)
    return [*out, F.coalesce(in_range(F.try_multiply(col(_LW), col(_RW))), refusal).alias(WEIGHT)]
