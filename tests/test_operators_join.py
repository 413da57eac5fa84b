"""Join kernel against a pure-Python Z-set join: weights multiply, NULL keys per null_safe."""
from __future__ import annotations

import random
from collections import Counter

from spark_jobs.executor.spark import zset
from spark_jobs.executor.spark import join

LEFT = "k int, v string, x long"
RIGHT = "k int, v string, y long"
LCOLS, RCOLS = ["k", "v", "x"], ["k", "v", "y"]


def random_zset(rng: random.Random, n: int) -> Counter:
    """Small domains so keys repeat; nulls in keys and values; weights of both signs, > 1."""
    z: Counter = Counter()
    for _ in range(n):
        t = (rng.choice([1, 2, 3, None]), rng.choice(["a", "b", None]), rng.choice([1, 2, None]))
        z[t] += rng.choice([1, 1, 2, 3, -1, -2])
    return z


def ref_join(left: Counter, right: Counter, lkeys, rkeys, null_safe, lout, rout,
             lcols=LCOLS, rcols=RCOLS) -> Counter:
    out: Counter = Counter()
    for lt, lw in left.items():
        lrow = dict(zip(lcols, lt))
        for rt, rw in right.items():
            rrow = dict(zip(rcols, rt))
            pairs = [(lrow[a], rrow[b]) for a, b in zip(lkeys, rkeys)]
            ok = all(a == b if null_safe else (a is not None and b is not None and a == b) for a, b in pairs)
            if ok:
                key = tuple(lrow[s] for s, _ in lout) + tuple(rrow[s] for s, _ in rout)
                out[key] += lw * rw
    return Counter({k: w for k, w in out.items() if w})


def _frames(spark, seed: int):
    rng = random.Random(seed)
    left, right = random_zset(rng, 25), random_zset(rng, 25)
    # the same key on both sides in one step, with duplicates rows (unconsolidated input)
    rows_l = list(left.items()) + [((2, "a", 1), 1), ((2, "a", 1), 1)]
    rows_r = list(right.items()) + [((2, "b", 2), -1)]
    for t, w in rows_l[-2:]:
        left[t] += w
    for t, w in rows_r[-1:]:
        right[t] += w
    return (zset.from_rows(spark, rows_l, LEFT), zset.from_rows(spark, rows_r, RIGHT),
            _nonzero(left), _nonzero(right))


def _nonzero(z: Counter) -> Counter:
    return Counter({t: w for t, w in z.items() if w})


def _check(spark, seed, lkeys, rkeys, null_safe, lout, rout):
    ldf, rdf, left, right = _frames(spark, seed)
    out = join.join(ldf, rdf, lkeys, rkeys, null_safe, lout, rout)
    assert out.columns == [o for _, o in lout] + [o for _, o in rout] + [zset.WEIGHT]
    assert zset.to_counter(out) == ref_join(left, right, lkeys, rkeys, null_safe, lout, rout)


def test_equi_join_sql_nulls_never_match_and_shared_names(spark):
    _check(spark, 1, ["k"], ["k"], False, [("k", "k"), ("v", "v"), ("x", "x")], [("v", "v_r"), ("y", "y")])


def test_null_safe_composite_keys(spark):
    _check(spark, 2, ["k", "v"], ["k", "v"], True, [("k", "k"), ("v", "v")], [("y", "y")])


def test_cartesian_product(spark):
    _check(spark, 3, [], [], False, [("x", "x")], [("k", "rk"), ("y", "y")])


def test_self_join(spark):
    ldf, _, left, _ = _frames(spark, 4)
    out = join.join(ldf, ldf, ["k"], ["k"], False, [("k", "k"), ("x", "x")], [("v", "v2")])
    expected = ref_join(left, left, ["k"], ["k"], False, [("k", "k"), ("x", "x")], [("v", "v2")],
                        rcols=LCOLS)
    assert zset.to_counter(out) == expected
