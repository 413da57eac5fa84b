"""The top-k operator (``spark_jobs/ir/ops/topk.py``): its rule, and random streams on both engines.

At every timestep of a random stream (inserts, deletes, bags, NULLs, ties), the integrated view
deltas equal DuckDB's window query on the integrated input, in-process on Arrow; the Spark
kernels give the same deltas as the Arrow ones on the first steps (Spark steps are the slow part).
"""
from __future__ import annotations

import json
import random
from collections import Counter

import duckdb
import pyarrow as pa

from spark_jobs.executor.evaluate import evaluate_step, state_keys, trace_kind
from spark_jobs.executor.arrow.kernels import ArrowEngine
from spark_jobs.executor.spark.memory_state import MemoryState
from spark_jobs.executor.spark.zset import from_rows
from spark_jobs.ir.explain import explain_text
from spark_jobs.ir.graph import Circuit, make_node, state_of
from spark_jobs.ir.incrementalize import incrementalize
from spark_jobs.ir.ops.topk import output_columns
from spark_jobs.runtime.step_types import StoreReader
from spark_jobs.state.store import StateStore

COLUMNS = ("g", "h", "v", "s")
TYPES = {"g": pa.int64(), "h": pa.string(), "v": pa.float64(), "s": pa.string()}
SPARK_SCHEMA = "g long, h string, v double, s string"

# name -> (partition_by, order_by, k, rank, rank_column); order_by: (column, desc, nulls_first)
VIEWS = {
    "rn": (("g",), (("v", True, False),), 2, "row_number", None),
    "rn_col": (("g", "h"), (("v", False, True),), 2, "row_number", "rn"),
    "rk": (("g",), (("v", True, False),), 2, "rank", "r"),
    "dense": (("h",), (("v", False, False), ("s", True, True)), 2, "dense_rank", "d"),
    "global": ((), (("v", True, True),), 3, "row_number", "n"),
}


def query(views=VIEWS, append_only: bool = False) -> Circuit:
    q = Circuit("topk", inputs={"x": COLUMNS})
    q.add(make_node("x", "input", out=COLUMNS, name="x", **({"append_only": True} if append_only else {})))
    for name, (part, order, k, rank, rank_column) in views.items():
        q.add(make_node(name, "topk", ["x"], output_columns(COLUMNS, rank_column), partition_by=part,
                        order_by=order, k=k, rank=rank, rank_column=rank_column))
    q.outputs = {name: name for name in views}
    return q


def duckdb_sql(part, order, k, rank, rank_column) -> str:
    """The same top-k as a window query (``row_number`` ties broken as the operator documents)."""
    def key(c, desc, nulls_first):
        return f"{c} {'DESC' if desc else 'ASC'} NULLS {'FIRST' if nulls_first else 'LAST'}"
    keys = [key(*o) for o in order]
    if rank == "row_number":
        keys += [key(c, False, True) for c in COLUMNS if c not in {o[0] for o in order} and c not in part]
    over = (f"PARTITION BY {', '.join(part)} " if part else "") + "ORDER BY " + ", ".join(keys)
    out = ", ".join(COLUMNS) + (f", CAST(__r AS INTEGER) AS {rank_column}" if rank_column else "")
    return f"SELECT {out} FROM (SELECT *, {rank}() OVER ({over}) AS __r FROM x) WHERE __r <= {k}"


def duckdb_views(bag: Counter, views=VIEWS) -> dict[str, Counter]:
    rows = [r for r, w in bag.items() for _ in range(w)]
    con = duckdb.connect()
    con.register("x", pa.table({c: pa.array([r[i] for r in rows], TYPES[c]) for i, c in enumerate(COLUMNS)}))
    return {name: Counter(tuple(r) for r in con.execute(duckdb_sql(*spec)).fetchall())
            for name, spec in views.items()}


def changes(seed: int, steps: int, deletes: bool = True) -> tuple[list[Counter], list[Counter]]:
    """Random changes (inserts with multiplicity, deletes of live rows unless ``deletes`` is
    False, NULLs, many ties) and the integrated input after each."""
    rng = random.Random(seed)
    nan = float("nan")
    maybe = lambda values: None if rng.random() < 0.15 else rng.choice(values)  # noqa: E731
    bag: Counter = Counter()
    out, integrated = [], []
    for t in range(steps):
        change: Counter = Counter()
        live = sorted((r for r, w in bag.items() for _ in range(w)), key=repr)
        for row in rng.sample(live, min(0 if t % 7 == 6 or not deletes else 3, len(live))):
            change[row] -= 1
        for _ in range(0 if t % 7 == 6 else 5):
            change[(maybe([1, 2, 3]), maybe(["p", "q"]), maybe([1.0, 2.0, 3.0, nan]),
                    maybe(["a", "b"]))] += rng.choice((1, 1, 2, 3))
        change = Counter({r: w for r, w in change.items() if w})
        bag.update(change)
        bag = +bag
        out.append(change)
        integrated.append(Counter(bag))
    return out, integrated


def run(spark, tmp_path, engine: str, steps: list[Counter], views=VIEWS,
        append_only: bool = False) -> list[dict[str, Counter]]:
    """Each step on ``engine`` through evaluate_step; the integrated views after each step. Arrow
    commits its state to a Parquet store (looked up by row groups); Spark keeps it in memory
    (``MemoryState``: a Parquet store costs several Spark jobs per step, and the Parquet path on
    Spark is the one every other operator shares)."""
    inc = incrementalize(query(views, append_only))
    schema = pa.schema([*TYPES.items(), ("_weight", pa.int64())])
    integrated = {name: Counter() for name in views}
    store = StateStore(lambda: spark, str(tmp_path / engine), "topk", "fp") if engine == "arrow" else None
    memory = MemoryState(compact=True, partitions=1) if engine == "spark" else None
    seen = []
    for t, change in enumerate(steps, start=1):
        if engine == "arrow":
            rows = [dict(zip([*COLUMNS, "_weight"], (*r, w))) for r, w in change.items()]
            with store.begin() as txn:
                txn.in_process = True  # compaction with pyarrow too: no Spark at all
                result = evaluate_step(inc, {"x": pa.Table.from_pylist(rows, schema=schema)}, StoreReader(store),
                                       first_step=t == 1, engine=ArrowEngine())
                for nid, u in result.updates.items():
                    txn.append_table(nid, u.df, kind=trace_kind(inc, nid), keys=u.keys, sort_by=u.sort_by)
                got = outputs_arrow(result.outputs)
                txn.commit()
        else:
            result = evaluate_step(inc, {"x": from_rows(spark, change, SPARK_SCHEMA)}, memory, first_step=t == 1,
                                   spark=spark, broadcast_deltas=True)
            got = outputs_spark(result.outputs)
            memory.apply(result.updates)
        for view, row in got:
            integrated[view][tuple(v for c, v in row.items() if c != "_weight")] += row["_weight"]
        seen.append({view: Counter({r: w for r, w in bag.items() if w}) for view, bag in integrated.items()})
    return seen


def outputs_arrow(outputs: dict) -> list[tuple[str, dict]]:
    return [(view, row) for view, table in outputs.items() for row in table.to_pylist()]


def outputs_spark(outputs: dict) -> list[tuple[str, dict]]:
    """Every view's delta in one Spark job (a union of rows as JSON): test time is per job."""
    from pyspark.sql import functions as F

    parts = [df.select(F.lit(view).alias("view"), F.to_json(F.struct(*df.columns), {"ignoreNullFields": "false"})
                       .alias("row")) for view, df in outputs.items()]
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    return [(r["view"], json.loads(r["row"])) for r in union.collect()]


def comparable(views: dict[str, Counter]) -> dict[str, Counter]:
    """NaN as a marker (NaN != NaN would make equal bags differ)."""
    out = {}
    for name, bag in views.items():
        out[name] = Counter()
        for r, w in bag.items():
            out[name][tuple("NaN" if v != v else v for v in r)] += w
    return out


def test_rule_state_and_explain():
    inc = incrementalize(query({"rn": VIEWS["rn"]}))
    assert [n.op for n in inc] == ["input", "integrate", "delay", "topk_touched"]
    assert state_of(inc, inc["rn"]) and state_keys(inc, inc["rn"]) == ("g",)  # its top-k so far, by partition
    assert state_of(inc, inc["I(x)"]) and state_keys(inc, inc["I(x)"]) == ("g",)  # sorted on the partition
    text = explain_text(inc)
    assert "top-k(touched)" in text and "top-k 'rn': rows of the touched groups" in text


def test_random_stream_equals_duckdb_at_every_step_on_arrow(tmp_path):
    steps, integrated = changes(seed=3, steps=24)
    got = run(None, tmp_path, "arrow", steps)
    for t, (mine, bag) in enumerate(zip(got, integrated), start=1):
        want = duckdb_views(bag)
        assert comparable(mine) == comparable(want), f"step {t}"


def test_spark_kernels_equal_arrow_kernels(spark, tmp_path):
    steps, _ = changes(seed=4, steps=4)
    views = {name: VIEWS[name] for name in ("rn_col", "rk", "dense", "global")}
    on_spark = [comparable(v) for v in run(spark, tmp_path, "spark", steps, views)]
    assert on_spark == [comparable(v) for v in run(spark, tmp_path, "arrow", steps, views)]


def test_an_insert_only_input_keeps_no_integral_and_equals_duckdb_on_both_engines(spark, tmp_path):
    """Over an append_only input no row leaves a group: ``topk_insert_only`` keeps only the top-k
    so far (no integral of the input) and gives DuckDB's views at every step (ties, copies of a
    row straddling k, NULLs, NaN, a global top-k) in-process; Spark's kernel gives the same
    deltas. A deletion is a broken promise: the in-process kernel hands it to Spark."""
    import pytest

    from spark_jobs.executor.engine import NotLocal

    inc = incrementalize(query({"rn": VIEWS["rn"]}, append_only=True))
    assert [n.op for n in inc] == ["input", "topk_insert_only"]
    assert "top-k(insert-only)" in explain_text(inc) and "no integral" in explain_text(inc)
    steps, integrated = changes(seed=8, steps=16, deletes=False)
    got = run(None, tmp_path / "a", "arrow", steps, append_only=True)
    for t, (mine, bag) in enumerate(zip(got, integrated), start=1):
        assert comparable(mine) == comparable(duckdb_views(bag)), f"step {t}"
    views = {name: VIEWS[name] for name in ("rn_col", "rk", "dense", "global")}
    on_spark = run(spark, tmp_path / "s", "spark", steps[:3], views, append_only=True)
    assert [comparable(v) for v in on_spark] == [comparable({n: v[n] for n in views}) for v in got[:3]]
    with pytest.raises(NotLocal, match="insert-only"):
        run(None, tmp_path / "d", "arrow", [steps[0], Counter({next(iter(steps[0])): -1})], append_only=True)


TOPK_YAML = """\
name: engines_topk
inputs:
  a:
    schema: {k: long, s: string, d: date, m: "decimal(10,2)"}
    source: {kind: changes, path: inbox/a, format: parquet}
nodes:
  by_k: {op: topk, input: a, partition_by: [k], order_by: [m DESC, d], k: 2, rank_column: rn}
  by_s: {op: topk, input: a, partition_by: [s], order_by: ["d DESC NULLS FIRST"], k: 1, rank: rank, rank_column: r}
  overall: {op: topk, input: a, order_by: [m], k: 3, rank: dense_rank}
outputs: [by_k, by_s, overall]
"""


def test_both_engines_agree_through_run_step(spark, tmp_path):
    """YAML ``topk`` nodes through ``run_step`` with Parquet state on Spark, on Arrow and alternating
    (each engine reads the integral the other wrote): the same deltas and column types (decimals,
    dates, strings, NULL groups and keys) at every step."""
    from tests.engines import run_both
    from tests.test_engines import A

    assert run_both(tmp_path, TOPK_YAML, {"a": A}, steps=3, seed=5) == ["arrow", "spark", "arrow"]


def test_the_top_k_so_far_decides_a_step_and_the_integral_only_the_groups_it_cannot(tmp_path, monkeypatch):
    """A step reads a group's rows of the integral only when the change deletes so much of the
    group's top-k that fewer than k are left (here: the current maximum of a group, k = 1, deleted
    every third step, ties and copies included); every other step is decided by the top-k so far
    and the change (a maximum replaced by a peer or a better row, as an aggregate's -old +new row
    of a growing count is, is no deletion of the top). At every step the views equal DuckDB's
    window query."""
    from spark_jobs.executor.kernels import topk as kernels

    reads: list[int] = []
    integral_rows = kernels._integral_rows
    monkeypatch.setattr(kernels, "_integral_rows",
                        lambda s, integral, delta, part: reads.append(delta.num_rows) or
                        integral_rows(s, integral, delta, part))
    views = {"max": (("g",), (("v", True, False),), 1, "rank", "r"),
             "top2": (("g",), (("v", True, False),), 2, "row_number", "n"),
             "dense": (("g",), (("v", True, False),), 1, "dense_rank", None)}
    steps, integrated, deletes_top, peers = _update_stream(7, 18)
    got = run(None, tmp_path, "arrow", steps, views)
    for t, (mine, want) in enumerate(zip(got, integrated), start=1):
        assert comparable(mine) == comparable(duckdb_views(want, views)), f"step {t}"
    # a deleted maximum: each view reads its group; a maximum replaced: at most row_number's
    assert deletes_top and peers and 0 < len(reads) <= 3 * len(deletes_top) + len(peers), (reads, deletes_top)
    assert all(n <= 8 for n in reads)  # only the undecided group's change, not the step's


def _update_stream(seed: int, n: int) -> tuple[list[Counter], list[Counter], list[int], list[int]]:
    """Inserts; every third step all copies of a group's maximum deleted, or the maximum replaced
    by a peer or a better row, or a low row deleted. Returns the changes, the integrated input
    after each, and the steps that deleted a maximum and that replaced one."""
    rng = random.Random(seed)
    bag: Counter = Counter()
    steps, integrated, deletes_top, peers = [], [], [], []
    for t in range(n):
        change: Counter = Counter()
        for _ in range(4):
            change[(rng.choice([1, 2]), "p", float(rng.randint(1, 40)), rng.choice(["a", "b"]))] += rng.choice((1, 2))
        if t % 3 == 2:  # delete every copy of a group's current maximum
            g = rng.choice([1, 2])
            top = max((r for r in bag if r[0] == g), key=lambda r: r[2], default=None)
            if top is not None:
                change[top] -= bag[top]
                deletes_top.append(t + 1)
        elif t % 3 == 0 and bag:  # the maximum replaced by a peer or a better row (an aggregate's -old +new)
            top = max(bag, key=lambda r: r[2])
            change[top] -= 1
            change[(top[0], "q", top[2] + rng.choice([0.0, 0.0, 3.0]), top[3])] += 1
            peers.append(t + 1)
        elif t % 3 == 1 and bag:  # delete a row that is not a maximum (the top-k decides)
            g_max = {g: max(r[2] for r in bag if r[0] == g) for g in {r[0] for r in bag}}
            low = sorted(r for r in bag if r[2] < g_max[r[0]] - 10)
            if low:
                change[low[0]] -= 1
        change = Counter({r: w for r, w in change.items() if w})
        bag.update(change)
        bag = +bag
        steps.append(change)
        integrated.append(Counter(bag))
    return steps, integrated, deletes_top, peers


def test_updates_of_the_top_rows_equal_duckdb_on_every_view(tmp_path):
    """The update-shaped stream above through every view of ``VIEWS`` (ties, copies, partitions of
    two columns, a global top-k; NULLs and NaN are the other stream's): DuckDB's window query at
    every step."""
    steps, integrated, _, _ = _update_stream(11, 21)
    got = run(None, tmp_path, "arrow", steps)
    for t, (mine, want) in enumerate(zip(got, integrated), start=1):
        assert comparable(mine) == comparable(duckdb_views(want)), f"step {t}"
