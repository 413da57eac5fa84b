"""Aggregates: the full kernel against Python SQL semantics, and the two incremental kernels over
random streams (integrating their outputs must give the full aggregate of the integrated input).

To keep Spark actions down, every step runs all kernels lazily and collects their results in one
job (``collect_tagged``); the state of the next step is rebuilt from the collected rows.
"""
from __future__ import annotations

import random
from collections import Counter, defaultdict
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.executor.spark import zset
from spark_jobs.executor.spark.aggregate import (aggregate, aggregate_linear_step, aggregate_touched_step,
                                                     output_schema)
from spark_jobs.executor.spark.zset import WEIGHT

SCHEMA = "g string, h int, x long, y double"
COLS = ["g", "h", "x", "y"]
LINEAR = (("n", "count", None, False), ("cx", "count", "x", False), ("sx", "sum", "x", False),
          ("ax", "avg", "x", False), ("sy", "sum", "y", False), ("ay", "avg", "y", False))
TOUCHED = LINEAR[:3] + (("mn", "min", "x", False), ("mx", "max", "y", False), ("cd", "count", "h", True),
                        ("my", "min", "y", False))


# ---- reference ------------------------------------------------------------------------------

def ref_aggregate(z: Counter, group_by: list[str], aggs) -> Counter:
    """SQL GROUP BY over the bag of positively weighted tuples; one row per group, weight 1."""
    groups: dict[tuple, list[tuple[dict, int]]] = defaultdict(list)
    for t, w in z.items():
        if w > 0:
            row = dict(zip(COLS, t))
            groups[tuple(row[g] for g in group_by)].append((row, w))
    if not group_by and not groups:
        groups[()] = []
    out: Counter = Counter()
    for key, rows in groups.items():
        values: list[Any] = []
        for _, func, arg, distinct in aggs:
            if arg is None:
                values.append(sum(w for _, w in rows))
                continue
            xs = [(r[arg], w) for r, w in rows if r[arg] is not None]
            if distinct:
                values.append(len({x for x, _ in xs}))
            elif func == "count":
                values.append(sum(w for _, w in xs))
            elif func == "sum":
                values.append(sum(x * w for x, w in xs) if xs else None)
            elif func == "avg":
                values.append(sum(x * w for x, w in xs) / sum(w for _, w in xs) if xs else None)
            else:
                values.append((min if func == "min" else max)(x for x, _ in xs) if xs else None)
        out[key + tuple(values)] += 1
    return out


def random_tuple(rng: random.Random) -> tuple:
    return (rng.choice(["a", "b", "c", None]), rng.choice([1, 2, None]),
            rng.choice([-3, 0, 1, 4, 7, None]), rng.choice([0.5, 1.5, -2.0, None]))


def random_delta(rng: random.Random, integral: Counter, n: int) -> list[tuple[tuple, int]]:
    """Inserts and deletions that keep the integral positive, incl. deleting a group's min/max
    row and a whole group."""
    live = Counter({t: w for t, w in integral.items() if w > 0})
    rows: list[tuple[tuple, int]] = []

    def delete(t: tuple, w: int) -> None:
        rows.append((t, -w))
        live[t] -= w

    roll = rng.random()
    if live and roll < 0.2:  # delete the current min x of a group entirely
        group = rng.choice(sorted({t[0] for t in live if live[t] > 0}, key=str))
        members = [t for t in live if t[0] == group and t[2] is not None and live[t] > 0]
        if members:
            t = min(members, key=lambda t: t[2])
            delete(t, live[t])
    elif live and roll < 0.35:  # a group disappears
        group = rng.choice(sorted({t[0] for t in live if live[t] > 0}, key=str))
        for t in [t for t in live if t[0] == group and live[t] > 0]:
            delete(t, live[t])
    for _ in range(n):
        candidates = [t for t, w in live.items() if w > 0]
        if candidates and rng.random() < 0.4:
            t = rng.choice(candidates)
            delete(t, rng.randint(1, live[t]))
        else:
            t, w = random_tuple(rng), rng.choice([1, 1, 2, 3])
            rows.append((t, w))
            live[t] += w
    if rows and rng.random() < 0.2:
        rows.append((rows[-1][0], -rows[-1][1]))  # a change that cancels within the delta
        live[rows[-1][0]] += rows[-1][1]
    return rows


def collect_tagged(frames: dict[str, DataFrame]) -> dict[str, list[tuple[tuple, int | None]]]:
    """Collect several (differently shaped) DataFrames in one Spark job: tag -> [(tuple, weight)]."""
    parts = []
    for tag, df in frames.items():
        data = [c for c in df.columns if c != WEIGHT]
        weight = F.col(WEIGHT) if WEIGHT in df.columns else F.lit(None).cast("long")
        parts.append(df.select(F.lit(tag).alias("tag"), F.struct(*data).alias(f"t_{tag}"), weight.alias("w")))
    union = parts[0]
    for p in parts[1:]:
        union = union.unionByName(p, allowMissingColumns=True)
    result: dict[str, list] = {tag: [] for tag in frames}
    for row in union.collect():
        result[row["tag"]].append((tuple(row[f"t_{row['tag']}"]), row["w"]))
    return result


def as_counter(rows) -> Counter:
    out: Counter = Counter()
    for t, w in rows:
        out[t] += w
    return Counter({t: w for t, w in out.items() if w})


def assert_consolidated(rows, label: str) -> None:
    tuples = [t for t, _ in rows]
    assert len(set(tuples)) == len(tuples) and all(w != 0 for _, w in rows), f"{label}: not consolidated"


# ---- full aggregate --------------------------------------------------------------------------

def test_full_aggregate_matches_sql_semantics(spark):
    rng = random.Random(3)
    rows = [(random_tuple(rng), rng.choice([1, 2, 3, -1])) for _ in range(40)]
    rows += [(rows[0][0], 2), (rows[1][0], -rows[1][1])]  # duplicates and a cancelled tuple
    z = as_counter(rows)
    df = zset.from_rows(spark, rows, SCHEMA)
    empty = zset.empty_like(df)
    got = collect_tagged({"g": aggregate(df, ["g"], TOUCHED), "gh": aggregate(df, ["g", "h"], LINEAR),
                          "all": aggregate(df, [], TOUCHED), "empty": aggregate(empty, [], TOUCHED),
                          "empty_g": aggregate(empty, ["g"], TOUCHED)})
    assert as_counter(got["g"]) == ref_aggregate(z, ["g"], TOUCHED)
    assert as_counter(got["gh"]) == ref_aggregate(z, ["g", "h"], LINEAR)
    assert as_counter(got["all"]) == ref_aggregate(z, [], TOUCHED)
    assert got["empty"] == [((0, 0, None, None, None, 0, None), 1)]  # SQL: one row, counts 0
    assert got["empty_g"] == []


def test_values_equal_sparks_native_aggregate_on_the_bag(spark):
    """Z-set weights vs the bag they stand for: decimals, floats, ints, nulls; same rows as Spark SQL."""
    import decimal
    schema = "g string, i int, f float, m decimal(10,2)"
    rng = random.Random(9)
    rows = [((rng.choice(["a", "b", None]), rng.choice([1, 7, None]), rng.choice([0.5, -1.25, None]),
              rng.choice([decimal.Decimal("1.10"), decimal.Decimal("2.25"), None])), rng.choice([1, 2, 3]))
            for _ in range(25)]
    rows += [(rows[0][0], -rows[0][1])]  # a deleted tuple must not count
    weighted = zset.from_rows(spark, rows, schema)
    bag = zset.from_tuples(spark, [t for t, w in as_counter(rows).items() for _ in range(w)], schema)
    aggs = tuple((f"{func}_{c}", func, c, False) for func in ("count", "sum", "avg", "min", "max")
                 for c in ("i", "f", "m")) + (("n", "count", None, False), ("cdm", "count", "m", True))
    native = bag.groupBy("g").agg(*[F.expr(f"{func}({'DISTINCT ' if dist else ''}{arg or '1'})").alias(out)
                                    for out, func, arg, dist in aggs])
    ours = aggregate(weighted, ["g"], aggs).drop(WEIGHT)
    got = collect_tagged({"ours": ours, "native": native})
    assert sorted(got["ours"], key=repr) == sorted(got["native"], key=repr)
    assert ours.schema == native.schema or [f.dataType for f in ours.schema] == [f.dataType for f in native.schema]


def test_output_types_are_sparks_native_types(spark):
    df = zset.empty(spark, "g string, i int, l long, f float, d double, m decimal(10,2), s string")
    aggs = tuple((f"{func}_{c}", func, c, False) for func in ("count", "sum", "avg", "min", "max")
                 for c in ("i", "l", "f", "d", "m")) + (("n", "count", None, False), ("mins", "min", "s", False),
                                                         ("cds", "count", "s", True), ("sdi", "sum", "i", True))
    native = df.drop(WEIGHT).groupBy("g").agg(
        *[F.expr(f"{func}({'DISTINCT ' if dist else ''}{arg or '1'})").alias(out) for out, func, arg, dist in aggs])
    expected = [(f.name, f.dataType) for f in native.schema.fields]
    assert [(f.name, f.dataType) for f in output_schema(df, ["g"], aggs).fields] == expected
    full = aggregate(df, ["g"], aggs)
    assert [(f.name, f.dataType) for f in full.schema.fields][:-1] == expected
    linear = tuple(a for a in aggs if a[1] in ("count", "sum", "avg") and not a[3])
    out, _ = aggregate_linear_step(df, None, ["g"], linear, True)
    assert [(f.name, f.dataType) for f in out.schema.fields][:-1] == [e for e in expected
                                                                      if e[0] in {"g"} | {a[0] for a in linear}]
    touched = aggregate_touched_step(df, df, full, ["g"], aggs, False)
    assert [f.dataType for f in touched.schema.fields] == [f.dataType for f in full.schema.fields]


# ---- incremental kernels over streams --------------------------------------------------------

class Stream:
    """Runs the incremental kernels step by step, keeping their state as collected rows."""

    def __init__(self, spark, variants: dict[str, list[str]]) -> None:
        self.spark = spark
        self.variants = variants
        self.integral: Counter = Counter()
        self.trace: list[tuple[tuple, int]] = []  # every delta row so far: an unconsolidated integral
        self.totals: dict[str, list[tuple]] = {v: [] for v in variants}
        self.totals_schema: dict[str, Any] = {}
        self.outputs: dict[str, list[tuple[tuple, int]]] = {f"{k}_{v}": [] for v in variants for k in ("lin", "tch")}
        self.out_schema: dict[str, Any] = {}
        self.step = 0

    def compact(self) -> None:
        """Consolidate the totals as the state store's compaction does: one row per group,
        groups whose totals are all zero dropped."""
        for v, group_by in self.variants.items():
            sums: dict[tuple, list] = {}
            for row in self.totals[v]:
                key, values = row[:len(group_by)], row[len(group_by):]
                acc = sums.setdefault(key, [0] * len(values))
                for i, x in enumerate(values):
                    acc[i] += x or 0
            self.totals[v] = [(*k, *acc) for k, acc in sums.items() if any(acc)]

    def _frame(self, rows, schema) -> DataFrame | None:
        return zset.from_tuples(self.spark, rows, schema)

    def run(self, rows: list[tuple[tuple, int]], check_full: bool = False) -> None:
        first = self.step == 0
        delta = zset.from_rows(self.spark, rows, SCHEMA)
        prev_integral = zset.from_rows(self.spark, self.trace, SCHEMA)
        integral_after = zset.plus(prev_integral, delta)
        frames: dict[str, DataFrame] = {}
        for v, group_by in self.variants.items():
            prev_totals = self._frame(self.totals[v], self.totals_schema.get(v)) if not first else None
            # no broadcast hints here: the inputs are single local partitions, and each broadcast
            # is one more Spark job per step (test_evaluate runs the kernels with them)
            out, totals = aggregate_linear_step(delta, prev_totals, group_by, LINEAR, first, broadcast_delta=False)
            frames[f"lin_{v}"], frames[f"tot_{v}"] = out, totals
            self.totals_schema[v] = totals.schema
            key = f"tch_{v}"
            prev_out = None if first else zset.from_rows(self.spark, self.outputs[key], self.out_schema[key])
            frames[key] = aggregate_touched_step(delta, integral_after, prev_out, group_by, TOUCHED, first,
                                                 broadcast_delta=False)
            if check_full:
                frames[f"full_{v}"] = aggregate(integral_after, group_by, TOUCHED)
        for key in self.outputs:
            self.out_schema.setdefault(key, frames[key].drop(WEIGHT).schema)
        got = collect_tagged(frames)
        self.trace += rows
        for t, w in rows:
            self.integral[t] += w
        for v, group_by in self.variants.items():
            self.totals[v] += [t for t, _ in got[f"tot_{v}"]]
            for kind, aggs in (("lin", LINEAR), ("tch", TOUCHED)):
                key = f"{kind}_{v}"
                assert_consolidated(got[key], f"step {self.step} {key}")
                self.outputs[key] += got[key]
                expected = ref_aggregate(self.integral, group_by, aggs)
                assert as_counter(self.outputs[key]) == expected, f"step {self.step} {key}"
            if check_full:
                assert as_counter(got[f"full_{v}"]) == ref_aggregate(self.integral, group_by, TOUCHED)
        if "all" in self.variants:  # the global row exists from the first step on
            assert len(as_counter(self.outputs["lin_all"])) == 1 and len(as_counter(self.outputs["tch_all"])) == 1
        self.step += 1


def test_stream_random_deletes_min_max_and_groups(spark):
    rng = random.Random(20)
    stream = Stream(spark, {"g": ["g"], "all": []})
    for step in range(20):
        n = 0 if step in (5, 6) else rng.randint(1, 7)  # empty deltas: nothing may be emitted
        stream.run(random_delta(rng, stream.integral, n), check_full=step == 19)


def test_scenario_min_max_and_vanishing_group(spark):
    stream = Stream(spark, {"gh": ["g", "h"], "all": []})
    a1, a5, a9, b3 = ("a", 1, 1, 1.5), ("a", 1, 5, 0.5), ("a", 1, 9, -2.0), ("b", None, 3, None)
    stream.run([])  # first step on an empty input: the global row with count 0
    assert as_counter(stream.outputs["tch_all"]) == Counter({(0, 0, None, None, None, 0, None): 1})
    stream.run([(a1, 1), (a5, 2), (a9, 1), (b3, 1)])
    stream.run([(a1, -1), (a9, -1)])  # delete min and max of group a
    stream.run([(b3, -1), (a5, 1)])  # group b disappears
    assert not [t for t in as_counter(stream.outputs["tch_gh"]) if t[0] == "b"]
    stream.run([(a5, -3)])  # everything gone: global counts back to 0, sums null
    assert as_counter(stream.outputs["lin_all"]) == Counter({(0, 0, None, None, None, None): 1})
    stream.compact()  # the store's compaction drops the global row's all-zero totals...
    stream.run([(b3, 1)])  # ...and the count = 0 row must still be retracted (issue 13)
    assert as_counter(stream.outputs["lin_all"]) == Counter({(1, 1, 3, 3.0, None, None): 1})
