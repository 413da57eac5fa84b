"""distinct and its incremental form H, checked against Python and over a random stream.

The stream check is the DBSP correctness statement for one operator: integrating the outputs of
H(Δx, z⁻¹(I x)) equals distinct(I x) at every step, on insertions and deletions.
"""
from __future__ import annotations

import random
from collections import Counter

from pyspark.sql import functions as F

from spark_jobs.executor.spark import zset
from spark_jobs.executor.evaluate import StateUpdate
from spark_jobs.executor.spark.memory_state import MemoryState
from spark_jobs.executor.spark import distinct

SCHEMA = "k int, v string"


def ref_distinct(z: Counter) -> Counter:
    return Counter({t: 1 for t, w in z.items() if w > 0})


def random_delta(rng: random.Random, integral: Counter, n: int) -> list[tuple[tuple, int]]:
    """Inserts (multiplicities > 1), deletions of existing tuples, and arbitrary negative weights."""
    rows: list[tuple[tuple, int]] = []
    for _ in range(n):
        roll = rng.random()
        live = [t for t, w in integral.items() if w > 0]
        if roll < 0.35 and live:
            t = rng.choice(live)
            rows.append((t, -integral[t]))  # delete the tuple entirely
        else:
            t = (rng.choice([1, 2, 3, None]), rng.choice(["a", "b", None]))
            rows.append((t, rng.choice([1, 2, 3, -1])))
    if rows and rng.random() < 0.3:
        rows.append((rows[0][0], -rows[0][1]))  # a change that cancels inside the delta
    return rows


def test_distinct_is_a_set_of_positive_tuples(spark):
    rng = random.Random(7)
    rows = random_delta(rng, Counter(), 30)
    z: Counter = Counter()
    for t, w in rows:
        z[t] += w
    out = distinct.distinct(zset.from_rows(spark, rows, SCHEMA))
    assert zset.to_counter(out) == ref_distinct(z)


def test_distinct_h_first_step_without_integral(spark):
    rows = [((1, "a"), 2), ((None, None), 1), ((2, "b"), -1), ((3, None), 1), ((3, None), -1)]
    out = distinct.distinct_h(zset.from_rows(spark, rows, SCHEMA), None)
    assert zset.to_counter(out) == Counter({(1, "a"): 1, (None, None): 1})


def _tagged(df, tag: str):
    return df.select(F.lit(tag).alias("tag"), F.struct(*zset.data_columns(df)).alias("t"), zset.WEIGHT)


def test_distinct_h_stream_integrates_to_distinct(spark):
    rng = random.Random(11)
    state = MemoryState(compact=False)  # the integral stays a trace of deltas (several rows per tuple)
    integral: Counter = Counter()
    integrated_out: Counter = Counter()
    for step in range(20):
        rows = random_delta(rng, integral, rng.randint(0, 8))
        delta = zset.from_rows(spark, rows, SCHEMA)
        prev = state.read("I")
        out = distinct.distinct_h(delta, prev)
        after = delta if prev is None else zset.plus(prev, delta)
        checked = _tagged(out, "out").unionByName(_tagged(distinct.distinct(after), "full")).collect()
        state.apply({"I": StateUpdate("append", delta)})
        for t, w in rows:
            integral[t] += w
        out_rows = [(tuple(r["t"]), r[zset.WEIGHT]) for r in checked if r["tag"] == "out"]
        full = Counter({tuple(r["t"]): r[zset.WEIGHT] for r in checked if r["tag"] == "full"})
        assert len({t for t, _ in out_rows}) == len(out_rows), f"step {step}: output not consolidated"
        assert all(w in (1, -1) for _, w in out_rows), f"step {step}: H emits +-1 only"
        for t, w in out_rows:
            integrated_out[t] += w
        integrated_out = Counter({t: w for t, w in integrated_out.items() if w})
        assert integrated_out == ref_distinct(integral), f"step {step}"
        assert full == ref_distinct(integral), f"step {step}"
