"""min/max over a positive input that deletes too (``aggregate_touched`` with ``positive_input``):
the in-process kernel keeps the extrema it emitted and reads a group's rows of the integral only
when the change deletes a row at one of its extrema (or any row of a group whose extremum is
NULL). Random streams of inserts and deletes, many of them deletes of the current maximum or
minimum (every copy, or one of several tied rows), NULLs, NaN and -0.0: the views equal DuckDB's
GROUP BY at every step, and Spark's kernel (which recomputes every touched group) gives the same
deltas.
"""
from __future__ import annotations

import random
from collections import Counter
from contextlib import contextmanager
from typing import Iterator
from unittest import mock

import duckdb
import pyarrow as pa

from spark_jobs.executor.arrow import kernels as arrow_kernels
from spark_jobs.executor.arrow.kernels import ArrowEngine
from spark_jobs.executor.evaluate import evaluate_step, trace_kind
from spark_jobs.ir.graph import Circuit, make_node
from spark_jobs.ir.incrementalize import incrementalize
from spark_jobs.runtime.step_types import StoreReader
from spark_jobs.state.store import StateStore

COLUMNS = ("g", "v", "s")
SCHEMA = pa.schema([("g", pa.int64()), ("v", pa.float64()), ("s", pa.string()), ("_weight", pa.int64())])
AGGS = (("hi", "max", "v", False), ("lo", "min", "v", False), ("last", "max", "s", False))
SQL = "SELECT g, max(v), min(v), max(s) FROM x GROUP BY g"


def query() -> Circuit:
    q = Circuit("extrema", inputs={"x": COLUMNS})
    q.add(make_node("x", "input", out=COLUMNS, name="x"))
    q.add(make_node("m", "aggregate", ["x"], ("g", "hi", "lo", "last"), is_set=True, group_by=("g",), aggs=AGGS))
    q.outputs = {"m": "m"}
    return q


def stream(seed: int, steps: int) -> tuple[list[Counter], list[Counter], int]:
    """Changes and the bag after each: inserts (copies, ties), random deletes, and every other
    step a deletion at a group's maximum or minimum (all copies, or one of tied rows). Also
    returns how many steps deleted an extremum."""
    rng = random.Random(seed)
    nan = float("nan")
    bag: Counter = Counter()
    changes, bags, at_extremum = [], [], 0
    for t in range(steps):
        change: Counter = Counter()
        for _ in range(rng.choice((0, 2, 4, 6))):
            v = rng.choice([1.0, 2.0, 2.0, 5.0, -0.0, 0.0, 9.0, nan, None])
            change[(rng.choice([0, 1, 2, None]), v, rng.choice(["a", "b", None]))] += rng.choice((1, 1, 2))
        live = sorted((r for r, w in bag.items() for _ in range(w)), key=repr)
        for row in rng.sample(live, min(rng.choice((0, 1, 2)), len(live))):
            change[row] -= 1
        if t % 2 == 1 and bag:
            g = rng.choice(sorted({r[0] for r in bag}, key=repr))
            rows = [r for r in bag if r[0] == g and r[1] is not None and r[1] == r[1]]
            if rows:
                pick = (max if rng.random() < 0.5 else min)(rows, key=lambda r: r[1])
                change[pick] -= bag[pick] if rng.random() < 0.5 else 1
                at_extremum += 1
        change = Counter({r: w for r, w in change.items() if w})
        for r, w in change.items():  # never below zero: a bag
            if bag[r] + w < 0:
                change[r] = -bag[r]
        change = Counter({r: w for r, w in change.items() if w})
        bag.update(change)
        bag = +bag
        changes.append(change)
        bags.append(Counter(bag))
    return changes, bags, at_extremum


def duckdb_view(bag: Counter) -> Counter:
    rows = [r for r, w in bag.items() for _ in range(w)]
    con = duckdb.connect()
    con.register("x", pa.table({c: pa.array([r[i] for r in rows], SCHEMA.field(c).type)
                                for i, c in enumerate(COLUMNS)}))
    return Counter(tuple(r) for r in con.execute(SQL).fetchall())


def comparable(bag: Counter) -> Counter:
    return Counter({tuple("NaN" if v != v else v for v in r): w for r, w in bag.items() if w})


def run_arrow(tmp_path, changes: list[Counter], steps_reading: list[int] | None = None) -> list[Counter]:
    """The view after each change, in-process; ``steps_reading``: gets the number of each step
    that reads the integral (once per read)."""
    inc = incrementalize(query())
    assert inc["m"].op == "aggregate_touched" and inc["m"].param("positive_input") is True
    store = StateStore(lambda: None, str(tmp_path), "extrema", "fp")
    view: Counter = Counter()
    seen = []
    for t, change in enumerate(changes, start=1):
        rows = [dict(zip([*COLUMNS, "_weight"], (*r, w))) for r, w in change.items()]
        with store.begin() as txn:
            txn.in_process = True
            with _counting(steps_reading, t):
                result = evaluate_step(inc, {"x": pa.Table.from_pylist(rows, schema=SCHEMA)}, StoreReader(store),
                                       first_step=t == 1, engine=ArrowEngine())
            for nid, u in result.updates.items():
                txn.append_table(nid, u.df, kind=trace_kind(inc, nid), keys=u.keys, sort_by=u.sort_by)
            for row in result.outputs["m"].to_pylist():
                w = row.pop("_weight")
                view[tuple("NaN" if v != v else v for v in row.values())] += w  # one NaN key
            txn.commit()
        seen.append(comparable(view))
    return seen


@contextmanager
def _counting(steps_reading: list[int] | None, t: int) -> Iterator[None]:
    """Record ``t`` in ``steps_reading`` at each ``Integral.rows_for`` of some group inside (if a list)."""
    if steps_reading is None:
        yield
        return
    rows_for = arrow_kernels.Integral.rows_for
    with mock.patch.object(arrow_kernels.Integral, "rows_for",
                           lambda self, c, v: (len(v) and steps_reading.append(t)) or rows_for(self, c, v)):
        yield


def test_kept_extrema_equal_duckdb_and_read_only_the_groups_whose_extremum_was_deleted(tmp_path, monkeypatch):
    reads: list[int] = []
    rows_for = arrow_kernels.Integral.rows_for
    monkeypatch.setattr(arrow_kernels.Integral, "rows_for",
                        lambda self, column, values: reads.append(len(values)) or rows_for(self, column, values))
    changes, bags, at_extremum = stream(seed=2, steps=40)
    got = run_arrow(tmp_path, changes)
    for t, (mine, bag) in enumerate(zip(got, bags), start=1):
        assert mine == comparable(duckdb_view(bag)), f"step {t}: {changes[t - 1]}"
    assert at_extremum >= 10
    # the integral is read only on steps that deleted at an extremum (or in a NULL-extremum
    # group): fewer reads than steps with a change, each of a few groups
    assert 0 < len(reads) < sum(1 for c in changes if c), (reads, len(changes))


def test_only_inserts_and_deletes_inside_the_extrema_never_read_the_integral(tmp_path, monkeypatch):
    monkeypatch.setattr(arrow_kernels.Integral, "rows_for", lambda *a: (_ for _ in ()).throw(AssertionError("read")))
    changes = [Counter({(1, 5.0, "a"): 2, (1, 1.0, "c"): 1, (1, 3.0, "a"): 1, (2, 7.0, "c"): 1}),
               Counter({(1, 3.0, "a"): -1, (1, 9.0, "a"): 1}),  # inside every extremum; a new max
               Counter({(2, 8.0, "d"): 1, (1, 5.0, "a"): -1})]  # 5.0 is inside [1, 9]
    bags, bag = [], Counter()
    for c in changes:
        bag.update(c)
        bags.append(Counter(+bag))
    got = run_arrow(tmp_path, changes)
    assert got == [comparable(duckdb_view(b)) for b in bags]


EXTREMA_YAML = """\
name: engines_extrema
inputs:
  a:
    schema: {k: long, s: string, d: date, m: "decimal(10,2)"}
    source: {kind: changes, path: inbox/a, format: parquet}
nodes:
  by_k: {op: aggregate, input: a, group_by: [k], aggregates: {hi: "max(m)", lo: "min(d)", top: "max(s)"}}
  by_s: {op: aggregate, input: a, group_by: [s, k], aggregates: {lo: "min(m)"}}
outputs: [by_k, by_s]
"""


def test_both_engines_agree(spark, tmp_path):
    """Spark recomputes each touched group from the integral, Arrow keeps the extrema: the same
    deltas and types at every step, each engine reading the state the other wrote."""
    from tests.engines import run_both
    from tests.test_engines import A

    assert run_both(tmp_path, EXTREMA_YAML, {"a": A}, steps=3, seed=9) == ["arrow", "spark", "arrow"]


def test_vectorized_min_max_equals_the_per_group_path(monkeypatch):
    """The Acero group-by of a full min/max aggregate (integer/string/date keys and arguments)
    gives the per-group path's rows: bags with negative and zero weights, NULL keys and values,
    groups whose every row is deleted; float arguments or keys and other aggregates keep the
    per-group path (Spark's order of NaN and -0.0)."""
    import datetime
    from decimal import localcontext

    from spark_jobs.executor.arrow import aggregate as agg
    from spark_jobs.executor.totals import EXACT
    from spark_jobs.executor.arrow.zsets import consolidate

    def rows(table: pa.Table) -> Counter:
        return Counter({tuple(r.values()): 1 for r in consolidate(table).to_pylist()})

    monkeypatch.setattr(agg, "VECTORIZED_ROWS", 0)  # small tables too (in use: from 1,024 rows)
    rng = random.Random(7)
    schema = pa.schema([("g", pa.int64()), ("h", pa.string()), ("v", pa.int32()), ("s", pa.string()),
                        ("t", pa.date32()), ("f", pa.float64()), ("_weight", pa.int64())])
    aggs = (("lo", "min", "v", False), ("hi", "max", "s", False), ("day", "min", "t", False),
            ("plus", "max", "v + 1", False))
    for n in (0, 1, 50, 400):
        pick = lambda values: [rng.choice(values) for _ in range(n)]  # noqa: E731
        table = pa.table({"g": pick([1, 2, 3, None]), "h": pick(["a", "b", None]), "v": pick([5, -3, 7, None]),
                          "s": pick(["x", "yy", "é", None]), "t": pick([datetime.date(2020, 1, d) for d in (1, 9)]),
                          "f": pick([0.5, float("nan"), -0.0]), "_weight": pick([1, 2, -1, 0])}, schema=schema)
        for group_by in (("g",), ("g", "h")):
            fast = agg._vectorized_extrema(table, group_by, aggs, schema, "UTC")
            assert fast is not None
            with localcontext(EXACT):
                slow = agg._per_group(table, group_by, aggs, schema, "UTC", "m")
            assert fast.schema == slow.schema and rows(fast) == rows(slow)
    assert agg._vectorized_extrema(table, ("g",), (("x", "max", "f", False),), schema, "UTC") is None
    assert agg._vectorized_extrema(table, ("f",), (("x", "max", "v", False),), schema, "UTC") is None
    assert agg._vectorized_extrema(table, ("g",), (("x", "count", "v", False),), schema, "UTC") is None
    assert agg._vectorized_extrema(table, (), (("x", "min", "v", False),), schema, "UTC") is None


def test_a_deleted_extremum_replaced_by_a_value_beyond_it_reads_no_integral(tmp_path):
    """A change that deletes a group's max (or min) and inserts a value at or beyond it (as a
    shortest path that gets shorter retracts its old distance and inserts the new one) is decided
    from the kept extrema: those steps read no integral. Random such steps (ties, NaN beyond every
    number, NULLs among the other rows), mixed with deletions at the max that only the integral
    can decide (which must read it): the views equal DuckDB's at every step."""
    rng = random.Random(5)
    bag: Counter = Counter()
    changes, bags, replacing, plain = [], [], set(), set()
    for step in range(1, 41):
        change: Counter = Counter()
        if step == 1:
            for g in (0, 1, 2):
                for v in (3.0, 4.0, 4.0, None, 6.0):
                    change[(g, v, rng.choice(["a", "b"]))] += 1
        else:
            g = rng.choice([0, 1, 2])
            rows = [r for r in bag if r[0] == g and r[1] is not None and r[1] == r[1]]
            kind = rng.choice(("max", "min", "both", "plain"))
            if kind in ("max", "both"):
                top = max(rows, key=lambda r: r[1])
                change[top] -= bag[top] if rng.random() < 0.5 else 1
                change[(g, rng.choice((top[1], top[1] + 1.0, float("nan"))), "z")] += 1
            if kind in ("min", "both"):
                low = min(rows, key=lambda r: r[1])
                change[low] -= bag[low] if rng.random() < 0.5 else 1
                change[(g, rng.choice((low[1], low[1] - 1.0)), "z")] += 1
            if kind == "plain":
                top = max(rows, key=lambda r: r[1])
                change[top] -= bag[top]
                change[(g, top[1] - 0.5, "a")] += 1
            spread = min(r[1] for r in rows) < max(r[1] for r in rows)  # one extremum deleted, not both
            (plain if kind == "plain" else replacing if spread else set()).add(step)
        change = Counter({r: w for r, w in change.items() if w})
        bag.update(change)
        bag = +bag
        changes.append(change)
        bags.append(Counter(bag))
    reads: list[int] = []
    got = run_arrow(tmp_path, changes, reads)
    for step, (mine, b) in enumerate(zip(got, bags), start=1):
        assert mine == comparable(duckdb_view(b)), f"step {step}: {changes[step - 1]}"
    assert len(replacing) >= 10 and not replacing & set(reads), [(s, changes[s - 1]) for s in replacing & set(reads)]
    assert plain & set(reads), "a deletion at the max with nothing beyond it reads the integral"
