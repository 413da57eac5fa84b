"""Exact running totals (issue 19): a retraction cancels bit for bit, whatever the order of addition.

Three levels, cheapest first:
- the arithmetic in plain Python (``exact_sum.float_limbs``/``finish_limbs``), on thousands of
  values and many random orders: limbs rebuild every double exactly, a total does not depend on
  the order its parts were added in, the finished value is within one ulp of the exact sum;
- the Spark SQL of that arithmetic against the Python reference, bit for bit (one job), and the
  refusals of values and totals out of range (one message naming the aggregate, no Java);
- a stream of inserts and deletes of doubles chosen to expose non-associativity: 300 steps of
  the kernel's bookkeeping in Python, and 240 steps on Spark through the aggregate kernels,
  stacked into a handful of Spark jobs (a step column leads the group key), with compaction
  forced at random points (checked against the store's own ``trace.consolidate``) and the
  totals' rows handed back in shuffled order: every step's view is a set with positive weights
  (the built-in checks), bit-identical to the from-scratch ``aggregate`` of the integrated input,
  and within the documented tolerance of the exact sums; plus 6 steps of the global aggregate's
  own path, one job per step.
"""
from __future__ import annotations

import decimal
import math
import os
import random
import struct
from collections import Counter, defaultdict
from fractions import Fraction

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType, DoubleType, LongType

from spark_jobs.executor.spark import zset
from spark_jobs.executor.spark.aggregate import aggregate, aggregate_linear_step, aggregate_touched_step
from spark_jobs.executor.spark.exact_sum import (LIMBS, LOWEST_EXP, ExactSum, FloatTotal, finish_limbs,
                                                     float_limbs)
from spark_jobs.executor.refusal import ValueRefused, refusals_from_spark
from spark_jobs.executor.spark.zset import WEIGHT
from spark_jobs.quality.builtin import IS_SET, WEIGHTS_POSITIVE, check_view_delta
from spark_jobs.state.trace import consolidate as compact
from tests.test_operators_aggregate import as_counter, assert_consolidated, collect_tagged

# Values whose float sums depend on the order of addition (the demo's 1813.12 + 768.99 is one).
NASTY = (0.1, 0.2, 0.3, 1e16, -1e16, 1813.12, 768.99, 2582.12, -0.1, 1e-3, 123456.789, 2.0 ** 60,
         -(2.0 ** 60) + 1.0, 3.0e-5, 9007199254740993.0, 1e100 / 1e80, -7.25)


def _random_double(rng: random.Random) -> float:
    """A random finite double from random bits, scaled into the exact range [2^-98, 2^100)."""
    while True:
        x = struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
        if math.isfinite(x) and x != 0:
            e = math.frexp(x)[1]
            return math.ldexp(math.frexp(x)[0], e % 197 - 97)


def _ulps(got: float, exact: Fraction) -> float:
    """|got - exact| in units in the last place of ``exact``'s double."""
    if exact == 0:
        return 0.0 if got == 0 else math.inf
    return float(abs(Fraction(got) - exact) / Fraction(math.ulp(float(exact))))


# ---- the arithmetic, in plain Python --------------------------------------------------------

def test_limbs_rebuild_every_double_in_range_exactly():
    rng = random.Random(1)
    for x in [*NASTY, 2.0 ** -98, -(2.0 ** 100) * (1 - 2 ** -53), *(_random_double(rng) for _ in range(5000))]:
        limbs = float_limbs(x)
        assert sum(Fraction(c) * Fraction(2) ** (LOWEST_EXP + 50 * k) for k, c in enumerate(limbs)) == Fraction(x)
        assert all(abs(c) <= 2 ** 50 for c in limbs)
    tiny = 1e-40  # below 2^-98: rounded to a multiple of 2^-150
    rebuilt = sum(Fraction(c) * Fraction(2) ** (LOWEST_EXP + 50 * k) for k, c in enumerate(float_limbs(tiny)))
    assert abs(rebuilt - Fraction(tiny)) <= Fraction(2) ** -151
    for bad in (math.inf, math.nan, 2.0 ** 100, -1e31):
        with pytest.raises(ValueError):
            float_limbs(bad)


def test_totals_do_not_depend_on_the_order_and_finish_within_one_ulp():
    rng = random.Random(2)
    for trial in range(300):
        pool = NASTY if trial % 2 else [_random_double(rng) for _ in range(8)]
        pairs = [(rng.choice(pool), rng.choice([1, 1, 2, -1, 3])) for _ in range(rng.randint(1, 40))]
        exact = sum(Fraction(x) * w for x, w in pairs)
        values = set()
        for _ in range(5):  # parts added in another order, some pre-merged (as compaction does)
            rng.shuffle(pairs)
            cut = rng.randint(0, len(pairs))
            a, b = FloatTotal.of(pairs[:cut]), FloatTotal.of(pairs[cut:])
            merged = [x + y for x, y in zip(b.limbs, a.limbs)]
            values.add(struct.pack("d", finish_limbs(merged)))
        assert len(values) == 1, f"trial {trial}: the value depends on the order"
        value = struct.unpack("d", values.pop())[0]
        assert _ulps(value, exact) <= 1.0, (trial, value, float(exact))
    # the cancellation that made the naive sum 0.0: exact here
    assert FloatTotal.of([(1e16, 1), (0.1, 1), (-1e16, 1)]).value() == 0.1


def test_infinities_and_nan_follow_ieee_addition():
    assert FloatTotal.of([(math.inf, 1), (1.0, 1)]).value() == math.inf
    assert FloatTotal.of([(-math.inf, 2), (1.0, 1)]).value() == -math.inf
    assert math.isnan(FloatTotal.of([(math.inf, 1), (-math.inf, 1)]).value())
    assert math.isnan(FloatTotal.of([(math.nan, 1), (1.0, 1)]).value())
    assert FloatTotal.of([(math.inf, 1), (math.inf, -1), (2.5, 1)]).value() == 2.5  # a deleted inf is gone


def _running_totals_stream(steps: int, seed: int, exact: bool) -> tuple[int, float]:
    """The linear aggregate's bookkeeping in plain Python: per group, the running total is a list
    of parts (one per step that touched the group); compaction merges a random subset of them; the
    old row is finished from the parts added up in a new random order every step. Returns how many
    old rows differed from the row emitted for the group before, and the worst error in ulps."""
    rng = random.Random(seed)
    live: Counter = Counter()
    parts: dict[str, list] = defaultdict(list)
    emitted: dict[str, float] = {}
    mismatches, worst = 0, 0.0

    def value(group_parts: list) -> float:
        order = group_parts[:]
        rng.shuffle(order)
        if exact:
            return finish_limbs([sum(limbs) for limbs in zip(*order)] if order else [0] * LIMBS)
        total = 0.0
        for part in order:
            total += part
        return total

    for _ in range(steps):
        touched: dict[str, list[tuple[float, int]]] = defaultdict(list)
        for _ in range(rng.randint(1, 5)):
            g = rng.choice("abc")
            present = [t for t, w in live.items() if t[0] == g and w > 0]
            if present and rng.random() < 0.45:
                t = rng.choice(present)
                w = -rng.randint(1, live[t])
            else:
                t, w = (g, rng.choice(NASTY)), rng.choice([1, 1, 2, 3])
            live[t] += w
            touched[g].append((t[1], w))
        for g, pairs in touched.items():
            if g in emitted:
                old = value(parts[g])
                if struct.pack("d", old) != struct.pack("d", emitted[g]):
                    mismatches += 1
            delta = FloatTotal.of(pairs).limbs if exact else sum(x * w for x, w in pairs)
            parts[g].append(delta)
            new = value(parts[g])
            emitted[g] = new
            exact_sum = sum(Fraction(x) * w for (gg, x), w in live.items() if gg == g)
            worst = max(worst, _ulps(new, exact_sum))
            if len(parts[g]) > 2 and rng.random() < 0.3:  # compaction of a random run of parts
                i, j = sorted(rng.sample(range(len(parts[g]) + 1), 2))
                run = parts[g][i:j]
                merged = [sum(limbs) for limbs in zip(*run)] if exact else value(run)
                parts[g][i:j] = [merged] if run else []
    return mismatches, worst


def test_three_hundred_steps_in_process_every_retraction_cancels():
    """300 steps of inserts and deletes of non-associative doubles: with exact totals every old row
    is the row emitted before, and every value is within 1 ulp of the exact sum. The same stream
    with float totals does drift (so the stream does expose the problem)."""
    mismatches, worst = _running_totals_stream(300, seed=5, exact=True)
    assert mismatches == 0 and worst <= 1.0, (mismatches, worst)
    float_mismatches, _ = _running_totals_stream(300, seed=5, exact=False)
    assert float_mismatches > 0


# ---- the Spark SQL of the arithmetic ----------------------------------------------------------

def test_spark_sql_agrees_with_the_python_reference_bit_for_bit(spark):
    rng = random.Random(3)
    values = [*NASTY, 5e-324, -1e-300, 2.0 ** 99, -(2.0 ** 99) * 1.75, -0.0, math.inf, -math.inf, math.nan,
              *(_random_double(rng) for _ in range(400))]
    rows = [(i % 9, x, rng.choice([1, 2, -1, 1_000_000_007])) for i, x in enumerate(values)]
    df = spark.createDataFrame(rows, "g long, x double, _weight long")
    total = ExactSum("__s", "x", DoubleType(), DoubleType(), "test", "`_weight`")
    columns = total.columns()
    sums = (df.selectExpr("g", *[f"{c.term} AS {c.name}" for c in columns]).groupBy("g")
            .agg(*[F.expr(f"sum({c.name}) AS {c.name}") for c in columns]))
    got = {r["g"]: r for r in sums.selectExpr("*", f"{total.value()} AS v").collect()}
    for g, row in got.items():
        ref = FloatTotal.of([(x, w) for gg, x, w in rows if gg == g])
        assert [int(row[f"__s_l{k}"]) for k in range(LIMBS)] == ref.limbs
        assert (row["__s_nan"], row["__s_pinf"], row["__s_ninf"]) == (ref.nan, ref.pos_inf, ref.neg_inf)
        v = ref.value()
        assert struct.pack("d", row["v"]) == struct.pack("d", v) or (math.isnan(v) and math.isnan(row["v"]))


def test_out_of_range_values_and_totals_are_refused_with_one_message(spark):
    df = zset.from_rows(spark, [(("a", 1e31), 1)], "g string, x double")
    with pytest.raises(ValueRefused) as info, refusals_from_spark():
        aggregate(df, ["g"], (("s", "sum", "x", False),), node="by_g").collect()
    text = str(info.value)
    assert "aggregate 's' (sum(x)) of node 'by_g'" in text and "1.0E31" in text and "2^100" in text
    assert "\n" not in text and "at org.apache" not in text
    big = zset.from_rows(spark, [(("a", 2 ** 62), 2)], "g string, i long")
    with pytest.raises(ValueRefused, match="aggregate 't' .* of node 'n': the sum overflows bigint"), \
            refusals_from_spark():
        aggregate(big, ["g"], (("t", "sum", "i", False),), node="n").collect()


def test_integer_and_decimal_totals_are_exact(spark):
    """decimal(38,18) times a weight is rounded by Spark's decimal product: summed exactly anyway;
    integers and decimal(12,4) equal Spark's native sum and avg on the bag the weights stand for."""
    D = decimal.Decimal
    schema = "g string, m decimal(38,18), k decimal(12,4), i long"
    rows = [(("a", D("12345678901.123456789012345678"), D("12.3456"), 2 ** 61), 3),
            (("a", D("-0.000000000000000001"), D("-0.0001"), -5), 7),
            (("b", D("1.5"), D("99999999.9999"), 7), -1), (("b", D("2.25"), D("0.0003"), 9), 2)]
    df = zset.from_rows(spark, rows, schema)
    aggs = (("sm", "sum", "m", False), ("sk", "sum", "k", False), ("ak", "avg", "k", False),
            ("si", "sum", "i", False), ("ai", "avg", "i", False))
    bag = spark.createDataFrame([t for t, w in rows if w > 0 for _ in range(w)], schema)
    native = bag.groupBy("g").agg(*[F.expr(f"{func}({arg}) AS {out}") for out, func, arg, _ in aggs])
    got = collect_tagged({"ours": aggregate(df.where(f"{WEIGHT} > 0"), ["g"], aggs).drop(WEIGHT),
                          "native": native})
    ours = {t[0]: t for t, _ in got["ours"]}
    with decimal.localcontext(prec=60):  # Python's default of 28 digits would round the reference
        assert ours["a"][1] == 3 * D("12345678901.123456789012345678") - 7 * D("0.000000000000000001")
    assert ours["a"][4] == 3 * 2 ** 61 - 35
    assert sorted(got["ours"]) == sorted(got["native"])


# ---- long streams through the kernels, with compaction ----------------------------------------

SCHEMA = "g string, x double"
LINEAR = (("n", "count", None, False), ("c", "count", "x", False), ("s", "sum", "x", False),
          ("a", "avg", "x", False))
TOUCHED = LINEAR + (("mn", "min", "x", False), ("mx", "max", "x", False))
GROUPS = ("a", "b", None)


def _reference(integral: Counter, grouped: bool, empty_row: bool = True) -> dict[tuple, tuple]:
    """Exact SQL aggregates over the positively weighted bag: key -> (n, c, exact sum, min, max).
    Without ``group_by`` the one row exists even over no rows (unless ``empty_row`` is False)."""
    groups: dict[tuple, list] = defaultdict(list)
    for (g, x), w in integral.items():
        if w > 0:
            groups[(g,) if grouped else ()].append((x, w))
    if not grouped and not groups and empty_row:
        groups[()] = []
    out = {}
    for key, rows in groups.items():
        xs = [(x, w) for x, w in rows if x is not None]
        out[key] = (sum(w for _, w in rows), sum(w for _, w in xs),
                    sum(Fraction(x) * w for x, w in xs) if xs else None,
                    min((x for x, _ in xs), default=None), max((x for x, _ in xs), default=None))
    return out


def _agrees(view: Counter, ref: dict[tuple, tuple], width: int, touched: bool, label: str) -> None:
    """The documented tolerance: the view (a set) has the reference's groups, counts, min and max
    exactly, the sum within one ulp of the exact sum and the average within three ulps of the
    exact average."""
    assert set(view.values()) <= {1}, f"{label}: not a set: {view}"
    rows = {t[:width]: t[width:] for t in view}
    assert set(rows) == set(ref), f"{label}: groups {sorted(rows, key=repr)} != {sorted(ref, key=repr)}"
    for key, (n, c, s, mn, mx) in ref.items():
        got = rows[key]
        assert got[:2] == (n, c), f"{label} {key}: counts {got[:2]} != {(n, c)}"
        if s is None:
            assert got[2] is None and got[3] is None, f"{label} {key}: {got}"
        else:
            assert _ulps(got[2], s) <= 1.0, f"{label} {key}: sum {got[2]!r}, exact {float(s)!r}"
            assert _ulps(got[3], s / c) <= 3.0, f"{label} {key}: avg {got[3]!r}, exact {float(s / c)!r}"
        if touched:
            assert got[4:] == (mn, mx), f"{label} {key}: min/max {got[4:]} != {(mn, mx)}"


def _delta(rng: random.Random, integral: Counter, force: str = "") -> list[tuple[tuple, int]]:
    """A random change: up to 4 inserts (of ``NASTY`` values, sometimes NULL) and deletes of live
    rows; 5% of changes delete everything (``force="all"`` always), 10% a whole group."""
    live = Counter({t: w for t, w in integral.items() if w > 0})
    rows: list[tuple[tuple, int]] = []
    roll = rng.random()
    if live and (force == "all" or (not force and roll < 0.05)):  # the global count goes back to 0
        return [(t, -w) for t, w in live.items()]
    if live and roll < 0.15:  # a group disappears
        g = rng.choice(sorted({t[0] for t in live}, key=str))
        rows += [(t, -w) for t, w in live.items() if t[0] == g]
        for t, _ in rows:
            live[t] = 0
    for _ in range(rng.randint(1 if force == "insert" else 0, 4)):
        candidates = [t for t, w in live.items() if w > 0]
        if candidates and force != "insert" and rng.random() < 0.45:
            t = rng.choice(candidates)
            w = -rng.randint(1, live[t])
        else:
            t, w = (rng.choice(GROUPS), None if rng.random() < 0.05 else rng.choice(NASTY)), rng.choice([1, 1, 2, 3])
        rows.append((t, w))
        live[t] += w
    return rows


def _bits(view: Counter) -> Counter:
    """A view keyed by the exact text of its tuples (``repr`` tells every double apart, -0.0 too)."""
    return Counter({repr(t): w for t, w in view.items()})


def _by_step(rows, steps: int) -> list[list]:
    """Stacked rows ``((t, *tuple), weight)`` split per step, ``t`` dropped."""
    out: list[list] = [[] for _ in range(steps)]
    for t, w in rows:
        out[t[0]].append((tuple(t[1:]), w))
    return out


def _add_totals(rows: list[tuple], width: int) -> list[tuple]:
    """What compaction makes of trace rows of running totals (``trace.consolidate(kind="sum")``):
    one row per key (the first ``width`` columns), totals summed exactly, all-zero rows dropped."""
    sums: dict[tuple, list[int]] = {}
    types: list[type] = []
    for row in rows:
        key, totals = row[:width], row[width:]
        types = [type(v) for v in totals]
        acc = sums.setdefault(key, [0] * len(totals))
        for i, v in enumerate(totals):
            acc[i] += v if isinstance(v, float) else int(v)  # decimals as Python integers: exact
    return [(*key, *[tp(v) for tp, v in zip(types, acc)]) for key, acc in sums.items() if any(acc)]


STACK_STEPS = int(os.environ.get("DBSP_EXACT_STACK_STEPS", "240"))


def test_long_stream_of_nasty_doubles_with_compactions_stacked_into_few_jobs(spark):
    """240 steps (``DBSP_EXACT_STACK_STEPS``) of inserts and deletes of non-associative doubles for count/sum/avg (linear kernel)
    and count/sum/avg/min/max (touched-groups kernel), grouped by ``g`` and as one group per step.

    Why it is cheap (a few Spark jobs, not one per step): the steps are **stacked**, a column ``t``
    (the step) leading every group key. A kernel's groups do not see each other, so the kernel run
    once over all steps' changes is each step's run. Each step gets its own inputs:
    - the linear kernel: the step's change and the totals trace as it stands before the step: the
      earlier steps' totals rows (from the kernel itself, job 1), **compacted** at ~30% of the steps
      (a random run of the trace's parts merged into one, zero totals dropped, as the store does;
      every compaction is also run through the store's own ``trace.consolidate`` and must agree),
      its rows shuffled anew at every step; its output deltas are integrated step by step;
    - the touched kernel: the integrated input after the step, and the view after the step before,
      which is the from-scratch aggregate of job 1 and is checked to be the integral of the
      kernel's own outputs (by induction over the steps: the same as running them one by one).
    Checked at every step: each view is a set with positive weights (here and with the built-in
    checks, all steps in one job each), bit-identical to the from-scratch ``aggregate``, and within
    the documented tolerance of exact rational sums. With float running totals it fails (the
    retracted rows no longer cancel).

    The one group per step runs the grouped code path; the global aggregate's own path (a row even
    over no input) is the per-step test below.
    """
    steps = STACK_STEPS
    rng = random.Random(2019)
    deltas, integrals = [], []
    integral: Counter = Counter()
    for t in range(steps):
        rows = [] if t % 37 in (3, 4) else _delta(rng, integral)  # empty steps emit nothing
        for tup, w in rows:
            integral[tup] += w
        integral = Counter({tup: w for tup, w in integral.items() if w})
        deltas.append(rows)
        integrals.append(dict(integral))
    stacked = "t long, g string, x double"
    delta_all = zset.from_rows(spark, [((t, *tup), w) for t, rows in enumerate(deltas) for tup, w in rows], stacked)
    integral_all = zset.from_rows(spark, [((t, *tup), w) for t, i in enumerate(integrals) for tup, w in i.items()],
                                  stacked)
    variants = {"g": ["t", "g"], "all": ["t"]}

    # job 1: each step's totals rows (they depend on the step's change only) and from-scratch views
    frames = {}
    for v, keys in variants.items():
        _, frames[f"tot_{v}"] = aggregate_linear_step(delta_all, None, keys, LINEAR, True, broadcast_delta=False)
        frames[f"full_{v}"] = aggregate(integral_all, keys, TOUCHED)
    got = collect_tagged(frames)

    # the totals traces each step reads: compacted at random steps, shuffled at every step
    frames2 = {}
    compacted: dict[str, list] = {}  # variant -> [(rows merged, the merged part)], in order
    for v, keys in variants.items():
        width = len(keys) - 1  # key columns after t
        new_parts = [[row for row, _ in part] for part in _by_step(got[f"tot_{v}"], steps)]
        parts: list[list[tuple]] = []
        read, events = [], []
        for t in range(steps):
            trace = [row for part in parts for row in part]
            rng.shuffle(trace)
            read += [(t, *row) for row in trace]
            parts.append(new_parts[t])
            if len(parts) > 2 and rng.random() < 0.3:
                i, j = sorted(rng.sample(range(len(parts) + 1), 2))
                run = [row for part in parts[i:j] for row in part]
                parts[i:j] = [_add_totals(run, width)]
                events.append((run, parts[i]))
        totals_schema = frames[f"tot_{v}"].schema
        prev_all = zset.from_tuples(spark, read, totals_schema)
        frames2[f"lin_{v}"], _ = aggregate_linear_step(delta_all, prev_all, keys, LINEAR, False, broadcast_delta=False)
        view_schema = frames[f"full_{v}"].drop(WEIGHT).schema
        before = [((t[0] + 1, *t[1:]), w) for t, w in got[f"full_{v}"] if t[0] + 1 < steps]
        frames2[f"tch_{v}"] = aggregate_touched_step(delta_all, integral_all, zset.from_rows(spark, before, view_schema),
                                                     keys, TOUCHED, False, broadcast_delta=False)
        runs = [(e, *row) for e, (run, _) in enumerate(events) for row in run]
        frames2[f"cmp_{v}"] = compact(zset.from_tuples(spark, runs, totals_schema), "sum", tuple(keys))
        compacted[v] = events
    got.update(collect_tagged(frames2))
    assert all(len(events) >= steps // 5 for events in compacted.values()), {v: len(e) for v, e in compacted.items()}

    for v, keys in variants.items():
        width = len(keys) - 1
        events = compacted[v]
        spark_merged = _by_step(got[f"cmp_{v}"], len(events))
        for e, (_, merged) in enumerate(events):
            assert Counter(t for t, _ in spark_merged[e]) == Counter(merged), f"compaction {e} of {v}"
        full = _by_step(got[f"full_{v}"], steps)
        outputs = {kind: _by_step(got[f"{kind}_{v}"], steps) for kind in ("lin", "tch")}
        views: dict[str, Counter] = {"lin": Counter(), "tch": Counter()}
        for t in range(steps):
            expected = as_counter(full[t])
            ref = _reference(Counter(integrals[t]), bool(width), empty_row=False)
            for kind, aggs in (("lin", LINEAR), ("tch", TOUCHED)):
                label = f"step {t} {kind}_{v}"
                assert_consolidated(outputs[kind][t], label)
                views[kind] = as_counter(list(views[kind].items()) + outputs[kind][t])
                assert all(w > 0 for w in views[kind].values()), f"{label}: negative weight"
                _agrees(views[kind], ref, width, kind == "tch", label)
                scratch = Counter({row[:width + len(aggs)]: w for row, w in expected.items()})
                assert _bits(views[kind]) == _bits(scratch), f"{label}: not the from-scratch aggregate"

    # the real built-in checks on every step's change at once (``t`` keeps the steps apart)
    for v, keys in variants.items():
        for kind, aggs in (("lin", LINEAR), ("tch", TOUCHED)):
            schema = frames2[f"{kind}_{v}"].drop(WEIGHT).schema
            integrated: Counter = Counter()
            before_rows = []
            for t, rows in enumerate(_by_step(got[f"{kind}_{v}"], steps)):
                before_rows += [((t, *row), w) for row, w in integrated.items()]
                integrated = as_counter(list(integrated.items()) + rows)
            results = check_view_delta(f"{kind}_{v}", zset.from_rows(spark, got[f"{kind}_{v}"], schema),
                                       zset.from_rows(spark, before_rows, schema), is_set=True).results
            failed = [r for r in results if r.name in (IS_SET, WEIGHTS_POSITIVE) and not r.success]
            assert not failed, f"{kind}_{v}: {failed}"


def test_global_aggregate_steps_with_compactions(spark):
    """The global aggregate's own path, step by step (one Spark job each): the row exists on the
    first step even over no input, after every input row is deleted (count 0, sum NULL) and its
    totals compacted away, and on empty steps nothing is emitted. 6 steps in CI (the grouped path
    and long streams are the stacked test above); ``DBSP_EXACT_STREAM_STEPS`` runs more (random
    changes after the sixth)."""
    rng = random.Random(19)
    variants: dict[str, list[str]] = {"all": []}
    schedule = {0: "empty", 1: "insert", 2: "insert", 3: "all", 4: "empty", 5: "insert"}
    integral: Counter = Counter()
    parts: dict[str, list[tuple]] = {v: [] for v in variants}  # the totals trace: rows of any order
    parts_schema: dict[str, object] = {}
    outputs: dict[str, list] = {f"{k}_{v}": [] for v in variants for k in ("lin", "tch")}
    out_schema: dict[str, object] = {}
    steps = int(os.environ.get("DBSP_EXACT_STREAM_STEPS", "6"))
    for step in range(steps):
        first = step == 0
        force = schedule.get(step, "")
        rows = [] if force == "empty" else _delta(rng, integral, force)
        delta = zset.from_rows(spark, rows, SCHEMA)
        after = integral + Counter()
        for t, w in rows:
            after[t] += w
        integral_after = zset.from_rows(spark, {t: w for t, w in after.items() if w}, SCHEMA)
        frames = {}
        for v, group_by in variants.items():
            # compaction (zero totals dropped, as the store does) at random steps and after step 3
            if v in parts_schema and (step == 4 or rng.random() < 0.3):
                merged = compact(zset.from_tuples(spark, parts[v], parts_schema[v]), "sum", tuple(group_by))
                frames[f"compact_{v}"] = merged
            rng.shuffle(parts[v])
            prev = zset.from_tuples(spark, parts[v], parts_schema[v]) if parts[v] else None
            out, totals = aggregate_linear_step(delta, prev, group_by, LINEAR, first, broadcast_delta=False,
                                                node=f"lin_{v}")
            frames[f"lin_{v}"], frames[f"tot_{v}"] = out, totals
            parts_schema[v] = totals.schema
            key = f"tch_{v}"
            prev_out = None if first else zset.from_rows(spark, as_counter(outputs[key]), out_schema[key])
            frames[key] = aggregate_touched_step(delta, integral_after, prev_out, group_by, TOUCHED, first,
                                                 broadcast_delta=False, node=key)
            frames[f"full_{v}"] = aggregate(integral_after, group_by, TOUCHED)  # from scratch
        got = collect_tagged(frames)
        for key in outputs:
            out_schema.setdefault(key, frames[key].drop(WEIGHT).schema)
        integral = Counter({t: w for t, w in after.items() if w})
        for v, group_by in variants.items():
            if f"compact_{v}" in got:
                parts[v] = [t for t, _ in got[f"compact_{v}"]]
            parts[v] += [t for t, _ in got[f"tot_{v}"]]
            ref = _reference(integral, bool(group_by))
            for kind, aggs in (("lin", LINEAR), ("tch", TOUCHED)):
                key = f"{kind}_{v}"
                assert_consolidated(got[key], f"step {step} {key}")
                if force == "empty" and not first:
                    assert got[key] == [], f"step {step} {key}: an empty step emitted {got[key]}"
                outputs[key] += got[key]
                view = as_counter(outputs[key])
                assert all(w > 0 for w in view.values()), f"step {step} {key}: negative weight"
                _agrees(view, ref, len(group_by), kind == "tch", f"step {step} {key}")
                full = as_counter(got[f"full_{v}"])
                scratch = Counter({t[:len(group_by) + len(aggs)]: w for t, w in full.items()})
                assert _bits(scratch) == _bits(view), f"step {step} {key}: not the from-scratch aggregate"
        if step == 4:
            assert parts["all"] == [], "the global totals add up to zero: compaction drops them"
