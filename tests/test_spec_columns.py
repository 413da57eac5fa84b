"""Output column rules (columns.py), including join clash renaming."""
from __future__ import annotations

import pytest

from spark_jobs.spec import CircuitError, body_columns, join_layout, load_circuit_text, output_columns
from spark_jobs.spec.columns import ColumnClash
from tests.test_spec_load import ALL_OPS, BASE


def columns_of(nodes: str, inputs: str = "") -> dict[str, tuple[str, ...]]:
    text = ("name: c\ninputs:\n"
            "  a: {schema: {k: long, x: string, y: double}}\n"
            "  b: {schema: {k: long, x: string, z: int}}\n" + inputs +
            "nodes:\n" + nodes + "outputs: [a]\n")
    return output_columns(load_circuit_text(text))


def test_base_circuit():
    cols = output_columns(load_circuit_text(BASE))
    assert cols["paid"] == ("order_id", "customer_id", "amount", "status")
    assert cols["enriched"] == ("customer_id", "order_id", "amount", "status", "name", "region")
    assert cols["by_region"] == ("region", "revenue", "orders")


def test_every_op():
    cols = output_columns(load_circuit_text(ALL_OPS))
    assert cols["sel"] == ("k", "v2") and cols["lst"] == ("k", "s")
    assert cols["u"] == cols["ua"] == cols["d"] == cols["i"] == ("k", "v", "s")
    assert cols["x"] == cols["z"] == cols["ii"] == cols["dd"] == ("k", "v", "s")
    assert cols["p"] == ("k", "v2", "lst_k", "s")  # product: right `k` clashes -> lst_k
    assert cols["aj"] == ("k", "v", "s")
    assert cols["g"] == ("n", "hi", "m")  # no group_by: one global group
    assert cols["rec"] == ("k", "v", "s")


def test_join_on_keys_once_in_left_order():
    cols = columns_of("  j: {op: join, left: a, right: b, on: [x, k]}\n")
    assert cols["j"] == ("k", "x", "y", "z")


def test_join_left_on_right_on_keeps_all_columns_and_renames_clashes():
    cols = columns_of("  j: {op: join, left: a, right: b, left_on: [k], right_on: [k]}\n")
    assert cols["j"] == ("k", "x", "y", "b_k", "b_x", "z")


def test_rename_clash_is_an_error_suggesting_select():
    with pytest.raises(CircuitError) as err:
        columns_of("  j: {op: product, left: a2, right: b}\n",
                   "  a2: {schema: {k: long, b_k: long}}\n")
    (p,) = err.value.problems
    assert p.node == "j" and "'k' of 'b' clashes" in p.message and "select" in p.message


def test_set_ops_use_first_input_order():
    cols = columns_of("  u: {op: union, inputs: [b2, b]}\n", "  b2: {schema: {z: int, x: string, k: long}}\n")
    assert cols["u"] == ("z", "x", "k")


def test_aggregate_group_by_then_aggregates():
    cols = columns_of("  g: {op: aggregate, input: a, group_by: [x, k], aggregates: {n: 'count(*)', s: 'sum(y)'}}\n")
    assert cols["g"] == ("x", "k", "n", "s")


def test_join_layout_pairs():
    lay = join_layout(("k", "v"), ("k", "v", "w"), "r", on=("k",))
    assert lay.left_out == (("k", "k"), ("v", "v"))
    assert lay.right_out == (("v", "r_v"), ("w", "w"))
    assert lay.columns == ("k", "v", "r_v", "w")
    assert join_layout(("a",), ("a",), "r").columns == ("a", "r_a")  # product
    with pytest.raises(ColumnClash):
        join_layout(("a", "r_a"), ("a",), "r")


def test_recursive_body_columns():
    spec = load_circuit_text(ALL_OPS)
    assert body_columns(spec, "rec") == {"step": ("k", "v", "s", "a_v", "a_s"), "back": ("k", "v", "s"),
                                         "all": ("k", "v", "s")}
