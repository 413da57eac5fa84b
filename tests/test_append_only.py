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
from spark_jobs.spec.loader import load_circuit_text
from spark_jobs.ir.compile import compile_spec
from spark_jobs.spec.columns import output_columns
from tests.engines import Bag, kernel_step, maybe, output_delta
from tests.policies import config

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

def _oracle(bags: dict[str, Counter], columns: dict[str, dict[str, str]]) -> dict[str, Counter]:
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
    return {view: Counter(_row(r) for r in con.execute(sql).fetchall()) for view, sql in ORACLE.items()}


def _row(values) -> tuple:
    return tuple("NaN" if isinstance(v, float) and math.isnan(v) else round(v, 6) if isinstance(v, float) else v
                 for v in values)


def test_insert_only_aggregates_equal_duckdb_at_every_step_on_both_engines(spark, tmp_path):
    """24 random insert-only steps (bags, NULL groups and values, ties, NaN, several groups, the
    global group): the integrated view deltas of Spark, Arrow and both alternately equal DuckDB's
    from-scratch result after every step; the state stays one row per group."""
    path = tmp_path / "clicks.yaml"
    path.write_text(CIRCUIT)
    kinds = ("spark", "arrow", "mixed")
    rts = {kind: open_circuit(str(path), config(tmp_path / kind, engine=kind if kind != "mixed" else "auto"))
           for kind in kinds}
    rng = random.Random(5)
    bags = {"a": Bag(A_COLS, A_DOMAIN, rng), "b": Bag(B_COLS, B_DOMAIN, rng)}
    columns = {"a": A_COLS, "b": B_COLS}
    views: dict[str, dict[str, Counter]] = {kind: {v: Counter() for v in ORACLE} for kind in kinds}
    for t in range(1, 25):
        deltas = {"a": bags["a"].change(rng.choice([0, 3, 6]), 0), "b": bags["b"].change(1 if t < 5 else 0, 0)}
        for kind, rt in rts.items():
            engine = kind if kind != "mixed" else ("arrow" if t % 2 else "spark")
            kernel_step(spark, rt, engine, deltas, columns)
        expected = _oracle({n: b.rows for n, b in bags.items()}, columns)
        for kind, rt in rts.items():
            for view in ORACLE:
                delta, _ = output_delta(rt, view)
                views[kind][view].update(delta)
                got = Counter({_row(r): w for r, w in views[kind][view].items() if w})
                assert got == expected[view], f"step {t} {kind} {view}: {dict(got)} != {dict(expected[view])}"
    groups = {"g": 4, "all": 1}  # k in 0, 1, 2, NULL; the global group
    for kind, rt in rts.items():
        manifest = rt.store.manifest()
        for view, n in groups.items():
            assert manifest.traces[view].rows <= 2 * n + 2 * 24, (kind, view, manifest.traces[view].rows)
