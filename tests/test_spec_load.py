"""Valid circuits load into the right typed objects (layer 1, no Spark)."""
from __future__ import annotations

import pytest

from spark_jobs.spec import CircuitError, load_circuit, load_circuit_text, validate_file
from spark_jobs.spec.model import AggregateSpec, Column, Expectation, Source

BASE = """\
name: revenue_by_region
schedule: "@hourly"
inputs:
  orders:
    schema: {order_id: long, customer_id: long, amount: double, status: string}
    source: {kind: changes, path: inbox/orders, format: parquet}
  customers:
    schema: {customer_id: long, name: string, region: string}
    source: {kind: snapshots, path: snapshots/customers, format: csv}
nodes:
  paid:      {op: filter, input: orders, where: "status = 'paid'"}
  enriched:  {op: join, left: paid, right: customers, on: [customer_id]}
  by_region: {op: aggregate, input: enriched, group_by: [region],
              aggregates: {revenue: "sum(amount)", orders: "count(*)"}}
outputs:
  by_region:
    expectations:
      - expect_column_values_to_not_be_null: {column: region}
"""

ALL_OPS = """\
name: every_op
schedule: none
description: one node of each kind
settings: {max_iterations: 50}
inputs:
  a:
    schema:
      k: long
      v: {type: "decimal(10, 2)", nullable: false}
      s: string
    source:
      kind: changes
      path: inbox/a
      options: {header: true}
    expectations:
      - expect_column_values_to_be_unique: {column: k, policy: warn}
  b:
    schema: {k: long, v: "decimal(10,2)", s: string}
nodes:
  sel: {op: select, input: a, columns: {k: k, v2: "v * 2"}}
  lst: {op: map, input: a, columns: [k, s]}
  u:   {op: union, left: a, right: b}
  ua:  {op: union_all, inputs: [a, b, a]}
  d:   {op: difference, left: a, right: b}
  i:   {op: intersect, left: a, right: b}
  p:   {op: product, left: sel, right: lst}
  aj:  {op: antijoin, left: a, right: b, left_on: [k], right_on: [k]}
  x:   {op: distinct, input: u}
  z:   {op: delay, input: x}
  ii:  {op: integrate, input: z}
  dd:  {op: differentiate, input: ii}
  g:   {op: aggregate, input: a, aggregates: {n: "COUNT(DISTINCT s)", hi: "max(v)", m: "avg(v * 1.5)"}}
  rec:
    op: recursive
    body:
      step: {op: join, left: rec, right: a, on: [k]}
      back: {op: select, input: step, columns: {k: k, v: v, s: s}}
      all:  {op: union, inputs: [a, back]}
    outputs: all
outputs: [sel, p, aj, dd, g, rec, i, ua, d]
"""


def test_base_circuit_objects():
    spec = load_circuit_text(BASE, "revenue.yaml")
    assert spec.name == "revenue_by_region" and spec.path == "revenue.yaml" and spec.text == BASE
    assert spec.schedule == "@hourly"
    orders = spec.inputs["orders"]
    assert orders.column_names == ("order_id", "customer_id", "amount", "status")
    assert orders.columns[2] == Column("amount", "double", True, 5)
    assert orders.source == Source("changes", "inbox/orders", "parquet", {}, 6)
    assert spec.inputs["customers"].source.format == "csv"
    assert list(spec.nodes) == ["paid", "enriched", "by_region"]
    paid, enriched, agg = spec.nodes.values()
    assert (paid.op, paid.input, paid.where, paid.line) == ("filter", "orders", "status = 'paid'", 11)
    assert (enriched.left, enriched.right, enriched.on) == ("paid", "customers", ("customer_id",))
    assert agg.group_by == ("region",)
    assert agg.aggregates == (AggregateSpec("revenue", "sum", "amount", False, "sum(amount)"),
                              AggregateSpec("orders", "count", None, False, "count(*)"))
    out = spec.outputs["by_region"]
    assert out.line == 16
    assert out.expectations == (Expectation("expect_column_values_to_not_be_null", {"column": "region"}, "fail", 18),)


def test_every_op_loads():
    spec = load_circuit_text(ALL_OPS)
    assert spec.schedule is None and spec.description == "one node of each kind"
    assert spec.settings == {"max_iterations": 50}
    a = spec.inputs["a"]
    assert a.columns[1] == Column("v", "decimal(10, 2)", False, 9)
    assert a.source.format == "parquet" and a.source.options == {"header": True}
    assert a.expectations[0].policy == "warn" and a.expectations[0].kwargs == {"column": "k"}
    assert spec.inputs["b"].source is None
    n = spec.nodes
    assert n["sel"].columns == (("k", "k"), ("v2", "v * 2"))
    assert n["lst"].op == "map" and n["lst"].columns == (("k", "k"), ("s", "s"))
    assert n["u"].inputs == ("a", "b") and n["u"].left is None  # left/right of a union go to inputs
    assert n["ua"].inputs == ("a", "b", "a")
    assert (n["aj"].left_on, n["aj"].right_on) == (("k",), ("k",))
    assert n["g"].group_by == () and n["g"].aggregates[0] == AggregateSpec("n", "count", "s", True, "COUNT(DISTINCT s)")
    rec = n["rec"]
    assert rec.outputs == ("all",) and list(rec.body) == ["step", "back", "all"]
    assert rec.extra["body"]["step"]["op"] == "join"
    assert rec.dependencies == ("a",)
    assert rec.body["step"].references == ("rec", "a")
    assert list(spec.outputs) == ["sel", "p", "aj", "dd", "g", "rec", "i", "ua", "d"]


def test_yaml_on_key_is_not_a_boolean():
    # PyYAML reads a bare `on:` key as True (YAML 1.1); a join's `on` must survive.
    block = "  enriched:\n    op: join\n    left: paid\n    right: customers\n    on:\n      - customer_id\n"
    spec = load_circuit_text(BASE.replace("  enriched:  {op: join, left: paid, right: customers, on: [customer_id]}\n",
                                          block))
    assert spec.nodes["enriched"].on == ("customer_id",)
    assert load_circuit_text(BASE.replace("status = 'paid'", "status = 'yes'")).nodes["paid"].where == "status = 'yes'"


@pytest.mark.parametrize("value, expected", [("null", None), ('"none"', None), ('"0 * * * *"', "0 * * * *"),
                                             ('"@daily"', "@daily")])
def test_schedules(value, expected):
    assert load_circuit_text(BASE.replace('"@hourly"', value)).schedule == expected


def test_schedule_may_be_omitted():
    assert load_circuit_text(BASE.replace('schedule: "@hourly"\n', "")).schedule is None


def test_load_circuit_and_validate_file(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(BASE)
    assert load_circuit(good).path == str(good)
    assert validate_file(good) == []
    bad = tmp_path / "bad.yaml"
    bad.write_text(BASE.replace("left: paid", "left: piad"))
    problems = validate_file(bad)
    assert [(p.file, p.line, p.node) for p in problems] == [(str(bad), 12, "enriched")]
    with pytest.raises(CircuitError) as err:
        load_circuit(bad)
    assert str(err.value).startswith(f"{bad}:12: node 'enriched': field 'left' names 'piad'")


def test_missing_file_is_a_problem(tmp_path):
    problems = validate_file(tmp_path / "nope.yaml")
    assert len(problems) == 1 and "cannot read" in problems[0].message
