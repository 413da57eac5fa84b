"""Aggregates over append_only inputs: the insert-only property the IR derives, the O(groups)
``aggregate_insert_only`` rule (min/max from the old extrema and the change), its kernels on both
engines against DuckDB at every step, and the refusals that make it sound."""
from __future__ import annotations

import datetime
import decimal
import math
import os
import random
from collections import Counter

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.ir.explain import explain_text, insert_only_nodes
from spark_jobs.ir.graph import state_of
from spark_jobs.ir.operator import is_insert_only
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.ir.compile import compile_spec
from spark_jobs.spec.columns import output_columns
from spark_jobs.spec.loader import load_circuit_text
from tests.engines import Bag, kernel_step, maybe, output_delta
from tests.policies import config, make_input_folders

CIRCUIT = """\
name: clicks
inputs:
  a:
    schema: {k: long, v: double, s: string, d: date, m: "decimal(10,2)"}
    source: {kind: append_only, path: inbox/a, format: parquet}
  b:
    schema: {k: long, w: long}
    source: {kind: append_only, path: inbox/b, format: parquet}
nodes:
  pos: {op: filter, input: a, where: "v IS NULL OR v > -5"}
  g:   {op: aggregate, input: pos, group_by: [k],
        aggregates: {c: "count(*)", cv: "count(v)", sv: "sum(v)", av: "avg(v)", lo: "min(v)", hi: "max(v)",
                     top: "max(s)", first: "min(d)", sm: "sum(m)"}}
  all: {op: aggregate, input: a, aggregates: {lo: "min(v)", hi: "max(s)", c: "count(*)"}}
  j:   {op: join, left: a, right: b, on: [k]}
  jg:  {op: aggregate, input: j, group_by: [w], aggregates: {hi: "max(v)", lo: "min(m)", c: "count(*)"}}
outputs: [g, all, jg]
"""

ORACLE = {  # the views from scratch, in DuckDB, over the integrated inputs
    "g": """SELECT k, count(*), count(v), sum(v), avg(v), min(v), max(v), max(s), min(d), sum(m)
            FROM a WHERE v IS NULL OR v > -5 GROUP BY k""",
    "all": "SELECT min(v), max(s), count(*) FROM a",
    "jg": "SELECT w, max(v), min(m), count(*) FROM a JOIN b ON a.k = b.k GROUP BY w",
}

A_COLS = {"k": "long", "v": "double", "s": "string", "d": "date", "m": "decimal(10,2)"}
A_DOMAIN = {"k": lambda r: maybe(r, [0, 1, 2], 0.1),
            # ties, NULLs, NaN (above every number in Spark's max), values the filter drops
            "v": lambda r: maybe(r, [0.5, 2.25, -1.0, 3.0, 3.0, -7.5, float("nan")], 0.2),
            "s": lambda r: maybe(r, ["x", "y", "Y", "é", ""]),
            "d": lambda r: maybe(r, [datetime.date(2024, 1, 1), datetime.date(1999, 12, 31)]),
            "m": lambda r: maybe(r, [decimal.Decimal("1.50"), decimal.Decimal("-2.25")])}
B_COLS = {"k": "long", "w": "long"}
B_DOMAIN = {"k": lambda r: r.choice([0, 1, 2, 3]), "w": lambda r: maybe(r, [10, 20])}


def _compiled(text: str):
    spec = load_circuit_text(text)
    return compile_spec(spec, output_columns(spec))


# ---- the property, derived from the IR ---------------------------------------------------------

def test_min_max_over_an_append_only_input_keeps_no_integral_of_it():
    compiled = _compiled(CIRCUIT)
    inc = compiled.incremental
    assert {n: inc[n].op for n in ("g", "all", "jg")} == {
        "g": "aggregate_insert_only", "all": "aggregate_insert_only", "jg": "aggregate_insert_only"}
    # state: one row per group for each aggregate, and the join's two integrals; no I(pos), I(a)
    # kept for an aggregate (I(a) and I(b) are the join's: Δa⋈z⁻¹(I b) and z⁻¹(I a)⋈Δb)
    stateful = {n.id: state_of(inc, n) for n in inc if state_of(inc, n)}
    assert sorted(stateful) == ["I(a)", "I(b)", "all", "g", "jg"], stateful
    assert "no integral of the input" in stateful["g"]
    text = explain_text(inc, "x", insert_only_nodes(compiled.optimized))
    assert "Insert-only (append_only inputs, no delete reaches them): a, b, pos, j" in text
    assert "I(pos)" not in text and "I(j)" not in text


def test_an_aggregate_after_a_minus_or_an_aggregate_is_not_insert_only():
    """Only operators that preserve insert-only streams carry it: a difference, an antijoin, an
    aggregate's output (rows replaced) and an input of kind ``changes`` do not, so min/max
    there still recompute the touched groups from the integrated input."""
    compiled = _compiled("""\
name: mixed
inputs:
  a:
    schema: {k: long, v: double}
    source: {kind: append_only, path: inbox/a, format: parquet}
  b:
    schema: {k: long, v: double}
    source: {kind: append_only, path: inbox/b, format: parquet}
  c:
    schema: {k: long, v: double}
    source: {kind: changes, path: inbox/c, format: parquet}
nodes:
  diff:  {op: difference, left: a, right: b}
  anti:  {op: antijoin, left: a, right: b, on: [k]}
  agg:   {op: aggregate, input: a, group_by: [k], aggregates: {hi: "max(v)"}}
  u:     {op: union, inputs: [a, b]}
  uc:    {op: union_all, inputs: [a, c]}
  over_diff: {op: aggregate, input: diff, group_by: [k], aggregates: {hi: "max(v)"}}
  over_anti: {op: aggregate, input: anti, group_by: [k], aggregates: {hi: "max(v)"}}
  over_agg:  {op: aggregate, input: agg, aggregates: {hi: "max(hi)"}}
  over_c:    {op: aggregate, input: uc, group_by: [k], aggregates: {lo: "min(v)"}}
  over_u:    {op: aggregate, input: u, group_by: [k], aggregates: {lo: "min(v)", c: "count(*)"}}
  dist_c:    {op: aggregate, input: a, group_by: [k], aggregates: {n: "count(distinct v)"}}
outputs: [over_diff, over_anti, over_agg, over_c, over_u, dist_c]
""")
    q, inc = compiled.optimized, compiled.incremental
    assert [n for n in ("a", "b", "c", "diff", "anti", "agg", "u", "uc") if is_insert_only(q, n)] == ["a", "b", "u"]
    ops = {v: inc[v].op for v in ("over_diff", "over_anti", "over_agg", "over_c", "over_u", "dist_c")}
    assert ops == {"over_diff": "aggregate_touched", "over_anti": "aggregate_touched",
                   "over_agg": "aggregate_touched", "over_c": "aggregate_touched",
                   "over_u": "aggregate_insert_only", "dist_c": "aggregate_touched"}


def test_the_property_is_not_taken_from_a_flag_on_a_derived_node():
    """``append_only`` means something on an input node only: a map that claims it is not
    insert-only unless its input is (the param is the source kind, set by the compiler)."""
    compiled = _compiled(CIRCUIT.replace("kind: append_only, path: inbox/a", "kind: changes, path: inbox/a"))
    q = compiled.optimized
    forged = q["pos"].with_(params=q["pos"].params + (("append_only", True),))
    q.replace_node("pos", forged)
    assert not is_insert_only(q, "pos") and not is_insert_only(q, "a") and is_insert_only(q, "b")
    assert compiled.incremental["g"].op == "aggregate_touched"


# ---- both engines, at every step, against DuckDB ------------------------------------------------

def _oracle(bags: dict[str, Counter], columns: dict[str, dict[str, str]], views: tuple[str, ...]) -> dict[str, Counter]:
    con = duckdb.connect()
    for name, bag in bags.items():
        cols = columns[name]
        table = pa.table({c: pa.array([r[i] for r, w in bag.items() for _ in range(w)],
                                      pa.float64() if t == "double" else None)
                          for i, (c, t) in enumerate(cols.items())}) if bag else None
        if table is None:
            types = {"long": "BIGINT", "double": "DOUBLE", "string": "VARCHAR", "date": "DATE"}
            con.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {types.get(t, t)}' for c, t in cols.items())})")
        else:
            con.register(f"{name}_arrow", table)
            con.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_arrow")
    return {view: Counter(_row(r) for r in con.execute(ORACLE[view]).fetchall()) for view in views}


def _row(values) -> tuple:
    return tuple("NaN" if isinstance(v, float) and math.isnan(v) else round(v, 6) if isinstance(v, float) else v
                 for v in values)


def _run_against_duckdb(spark, tmp_path, text: str, views: tuple[str, ...], kinds: tuple[str, ...], steps: int) -> None:
    """``steps`` random insert-only timesteps (bags, NULL groups and values, ties, NaN, several
    groups, the global group) through ``kernel_step`` on each of ``kinds`` ("arrow", "spark",
    "mixed": Spark every third step, Arrow in between, each reading the state the other wrote); after every step the
    integrated view deltas equal DuckDB's from-scratch result, and the aggregates' state stays
    one row per group (up to the deltas compaction has not folded yet)."""
    path = tmp_path / "clicks.yaml"
    path.write_text(text)
    rts = {kind: open_circuit(str(path), config(tmp_path / kind, engine=kind if kind != "mixed" else "auto"))
           for kind in kinds}
    rng = random.Random(5)
    bags = {"a": Bag(A_COLS, A_DOMAIN, rng), "b": Bag(B_COLS, B_DOMAIN, rng)}
    columns = {"a": A_COLS, "b": B_COLS}
    integrated = {kind: {v: Counter() for v in views} for kind in kinds}
    for t in range(1, steps + 1):
        deltas = {"a": bags["a"].change(rng.choice([0, 3, 6]), 0), "b": bags["b"].change(1 if t < 5 else 0, 0)}
        for kind, rt in rts.items():
            kernel_step(spark, rt, kind if kind != "mixed" else ("spark" if t % 3 == 0 else "arrow"), deltas, columns)
        expected = _oracle({n: b.rows for n, b in bags.items()}, columns, views)
        for kind, rt in rts.items():
            for view in views:
                integrated[kind][view].update(output_delta(rt, view)[0])
                got = Counter({_row(r): w for r, w in integrated[kind][view].items() if w})
                assert got == expected[view], f"step {t} {kind} {view}: {dict(got)} != {dict(expected[view])}"
    for kind, rt in rts.items():
        traces = rt.store.manifest().traces
        for view, groups in (("g", 4), ("all", 1)):  # k in 0, 1, 2, NULL; the global group
            assert traces[view].rows <= 6 * groups, (kind, view, traces[view].rows)


def test_insert_only_aggregates_equal_duckdb_at_every_step_in_process(spark, tmp_path):
    """24 steps on Arrow, with the aggregate over a join of two append_only inputs."""
    _run_against_duckdb(spark, tmp_path, CIRCUIT, ("g", "all", "jg"), ("arrow",), 24)


def test_insert_only_aggregates_equal_duckdb_at_every_step_on_spark_and_alternating(spark, tmp_path):
    """21 steps, Spark on every third (7 Spark steps: CI time) and Arrow in between: the Spark
    kernel's rows, and each engine reading the state the other wrote (before and after
    compactions)."""
    text = CIRCUIT.replace("  jg:", "  # jg:").replace("outputs: [g, all, jg]", "outputs: [g, all]")
    _run_against_duckdb(spark, tmp_path, text, ("g", "all"), ("mixed",), 21)


# ---- soundness: the promise is enforced where the rows come in, and checked again by the kernel ----

@pytest.mark.parametrize("engine", ["arrow", "spark"])
def test_a_delete_in_an_append_only_input_is_refused_and_nothing_is_committed(spark, tmp_path, engine):
    """What makes the O(groups) state sound: a file that deletes is refused by the reader (of
    either engine) before anything runs; the step commits nothing, the aggregate's state and view
    stay as they were."""
    from spark_jobs.executor.sources import InputRefused
    from spark_jobs.runtime.step import run_step

    path = tmp_path / "c.yaml"
    path.write_text(CIRCUIT.replace("  jg:", "  # jg:").replace("outputs: [g, all, jg]", "outputs: [g]"))
    rt = open_circuit(str(path), config(tmp_path, engine=engine))
    make_input_folders(rt)  # input b receives nothing: an empty folder
    inbox = tmp_path / "inbox" / "a"
    rows = {"k": pa.array([1, 1], pa.int64()), "v": [2.0, 5.0], "s": ["x", "y"],
            "d": pa.array([None, None], pa.date32()), "m": pa.array([None, None], pa.decimal128(10, 2))}
    pq.write_table(pa.table(rows), inbox / "t1.parquet")
    assert run_step(rt).engine == engine
    before = rt.store.manifest()
    assert output_delta(rt, "g")[0] == Counter({(1, 2, 2, 7.0, 3.5, 2.0, 5.0, "y", None, None): 1})
    pq.write_table(pa.table({**rows, "_weight": pa.array([1, -1], pa.int64())}), inbox / "t2.parquet")
    with pytest.raises(InputRefused) as refused:
        run_step(rt)
    (file, why), = refused.value.problems
    assert file.endswith("t2.parquet") and "append_only" in why and "delete" in why
    after = rt.store.manifest()
    assert rt.store.last_committed() == 1 and after.traces["g"].rows == before.traces["g"].rows
    assert output_delta(rt, "g")[0] == Counter({(1, 2, 2, 7.0, 3.5, 2.0, 5.0, "y", None, None): 1})


def test_the_kernels_refuse_a_delete_that_reaches_them(spark):
    """Belt and braces: should a delete reach an insert-only aggregate by another road, the step
    fails (Spark: a refusal inside the job; Arrow: the step goes to Spark, which refuses it)."""
    from spark_jobs.executor.spark import zset
    from spark_jobs.executor.arrow.aggregate import insert_only_step
    from spark_jobs.executor.engine import NotLocal
    from spark_jobs.executor.spark.aggregate import aggregate_insert_only_step
    from spark_jobs.executor.refusal import ValueRefused, refusals_from_spark

    aggs = (("hi", "max", "v", False),)
    delta = zset.from_rows(spark, Counter({(1, 2.0): 1, (1, 5.0): -1}), "k bigint, v double")
    out, _ = aggregate_insert_only_step(delta, None, ("k",), aggs, True, node="g")
    with pytest.raises(ValueRefused, match="'g': a change deletes rows"), refusals_from_spark():
        out.collect()
    table = pa.table({"k": [1, 1], "v": [2.0, 5.0], "_weight": pa.array([1, -1], pa.int64())})
    with pytest.raises(NotLocal, match="deletes rows"):
        insert_only_step(table, None, ("k",), aggs, True, "UTC", "g")


def test_dbsp_explain_shows_no_input_integral_for_the_aggregate(tmp_path, capsys):
    """The measured case: count(*), sum(v), max(v) over an append_only input keeps one state,
    the aggregate's per-group row; before, it also kept I(ev), the whole input."""
    from spark_jobs.cli.main import main

    path = tmp_path / "ev.yaml"
    path.write_text("""\
name: ev
inputs:
  ev:
    schema: {k: long, v: double}
    source: {kind: append_only, path: inbox/ev, format: parquet}
nodes:
  g: {op: aggregate, input: ev, group_by: [k], aggregates: {n: "count(*)", s: "sum(v)", hi: "max(v)"}}
outputs: [g]
""")
    assert main(["explain", str(path)]) == 0
    out = capsys.readouterr().out
    state = out[out.index("State kept between timesteps"):out.index("Views:")].splitlines()
    assert state == ["State kept between timesteps: 1 operator(s)",
                     "  g: per-group running totals and extrema (inserts only: no integral of the input) of 'g'"]
    assert "agg(insert-only) (aggregate_insert_only)" in out and "I(ev)" not in out
    assert "Insert-only (append_only inputs, no delete reaches them): ev" in out
