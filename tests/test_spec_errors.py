"""Malformed circuits: every problem names the file, the line, the node and what was expected."""
from __future__ import annotations

import pytest

from spark_jobs.spec import CircuitError, Problem, load_circuit_text
from tests.test_spec_load import BASE

RECURSIVE = """\
name: reach
inputs:
  edges: {schema: {src: long, dst: long}}
nodes:
  closure:
    op: recursive
    body:
      step: {op: join, left: paths, right: edges, left_on: [dst], right_on: [src]}
      hop: {op: select, input: step, columns: {src: src, dst: edges_dst}}
      paths: {op: union, inputs: [edges, hop]}
    outputs: [paths]
outputs: [closure]
"""


def problems(text: str) -> list[Problem]:
    with pytest.raises(CircuitError) as err:
        load_circuit_text(text, "c.yaml")
    assert str(err.value) == "\n".join(str(p) for p in err.value.problems)
    return err.value.problems


def edit(old: str, new: str, base: str = BASE) -> str:
    assert old in base, old
    return base.replace(old, new)


# (case id, text, line, node, fragments the message must contain)
CASES = [
    ("yaml syntax", edit("{op: aggregate,", "{op: aggregate: x,"), 13, None, ["YAML syntax error", "expected ','"]),
    ("top level not a mapping", "- a\n- b\n", 1, None, ["top level must be a mapping", "got a list"]),
    ("empty file", "", 1, None, ["top level must be a mapping", "empty file"]),
    ("missing outputs", BASE[:BASE.index("outputs:")], 1, None, ["missing required key 'outputs'"]),
    ("missing nodes", edit("nodes:\n", "nodez:\n"), 1, None, ["missing required key 'nodes'"]),
    ("unknown top-level key", edit("outputs:", "output:"), 15, None,
     ["unknown top-level key 'output'", "did you mean 'outputs'"]),
    ("unknown op", edit("op: filter", "op: fliter"), 11, "paid",
     ["'fliter' is not allowed", "expected one of: select, map, filter", "did you mean 'filter'"]),
    ("unknown field", edit("where:", "wher:"), 11, "paid",
     ["unknown field 'wher' for op 'filter'", "expected one of: op, input, where", "did you mean 'where'"]),
    ("missing field", edit(", where: \"status = 'paid'\"", ""), 11, "paid",
     ["missing required field 'where' for op 'filter'", "input, where"]),
    ("missing op", edit("op: filter, ", ""), 11, "paid", ["missing required field 'op'"]),
    ("on is not a list", edit("on: [customer_id]", "on: 5"), 12, "enriched",
     ["field 'on'", "expected a list of key column names", "got 5"]),
    ("where is not a string", edit("where: \"status = 'paid'\"", "where: [1]"), 11, "paid",
     ["field 'where'", "expected a Spark SQL boolean expression (a string)", "got a list [1]"]),
    ("unknown reference", edit("left: paid", "left: piad"), 12, "enriched",
     ["field 'left' names 'piad'", "not an input or node", "did you mean 'paid'"]),
    ("input and node share a name", edit("  paid:  ", "  orders:"), 11, "orders",
     ["name 'orders' is already used by an input (line 4)", "unique"]),
    ("duplicate yaml key", edit("  enriched:", "  paid: {op: distinct, input: orders}\n  enriched:"), 12, "paid",
     ["duplicate key 'paid'", "first defined on line 11"]),
    ("join key not a column", edit("on: [customer_id]", "on: [cust_id]"), 12, "enriched",
     ["column 'cust_id' in 'on' is not a column of left input 'paid'",
      "columns: order_id, customer_id, amount, status", "did you mean 'customer_id'"]),
    ("group_by not a column", edit("group_by: [region]", "group_by: [regoin]"), 13, "by_region",
     ["column 'regoin' in 'group_by'", "input 'enriched'", "did you mean 'region'"]),
    ("unknown column in where", edit("status = 'paid'", "stauts = 'paid' and amount > 0"), 11, "paid",
     ["unknown column 'stauts'", "expected a column of 'orders' (order_id, customer_id, amount, status)",
      "did you mean 'status'"]),
    ("unknown column in aggregate", edit("sum(amount)", "sum(amout)"), 14, "by_region",
     ["aggregate 'revenue': unknown column 'amout'", "did you mean 'amount'"]),
    ("cycle", edit("input: orders, where", "input: by_region, where"), 11, "paid",
     ["cycle paid -> by_region -> enriched -> paid", "recursive"]),
    ("source kind", edit("kind: changes", "kind: change"), 6, "orders",
     ["field 'source.kind'", "expected one of: changes, snapshots", "did you mean 'changes'"]),
    ("source format", edit("format: csv", "format: xml"), 9, "customers",
     ["field 'source.format'", "parquet, csv, json"]),
    ("source path missing", edit("path: inbox/orders, ", ""), 6, "orders", ["missing required field 'source.path'"]),
    ("bad type name", edit("amount: double", "amount: dubble"), 5, "orders",
     ["column 'amount': unknown type 'dubble'", "expected a Spark SQL type", "did you mean 'double'"]),
    ("bad decimal", edit("amount: double", 'amount: "decimal(50,2)"'), 5, "orders", ["1 <= p <= 38"]),
    ("unsupported aggregate", edit("sum(amount)", "median(amount)"), 14, "by_region",
     ["unsupported aggregate function 'median'", "count, sum, avg, min, max"]),
    ("not a single aggregate", edit("sum(amount)", "sum(amount) + 1"), 14, "by_region",
     ["is not an aggregate", "func(arg)"]),
    ("distinct outside count", edit("sum(amount)", "sum(distinct amount)"), 14, "by_region",
     ["only count supports distinct"]),
    ("left_on/right_on lengths", edit("on: [customer_id]", "left_on: [customer_id, status], right_on: [customer_id]"),
     12, "enriched", ["'left_on' has 2 columns and 'right_on' has 1", "same length"]),
    ("join without keys", edit(", on: [customer_id]", ""), 12, "enriched", ["join needs its key columns", "left_on"]),
    ("output names nothing", edit("  by_region:\n    expectations", "  by_regon:\n    expectations"), 16, "by_regon",
     ["output 'by_regon' names no input or node", "did you mean 'by_region'"]),
    ("invalid circuit name", edit("name: revenue_by_region", "name: revenue-by-region"), 1, None,
     ["field 'name'", "expected a circuit name (an identifier", "got 'revenue-by-region'"]),
    ("expectation not expect_", edit("- expect_column_values_to_not_be_null:", "- not_null:"), 18, "by_region",
     ["invalid name 'not_null'", "starting with 'expect_'"]),
    ("expectation not a mapping", edit(": {column: region}", ""), 18, "by_region",
     ["field 'expectations[0]'", "expected an expectation {expect_name: {kwargs}}"]),
    ("expectation with two keys", edit("- expect_column_values_to_not_be_null: {column: region}",
                                                "- {expect_column_values_to_not_be_null: {column: region}, expect_x: {}}"), 18, "by_region",
     ["expected an expectation {expect_name: {kwargs}}", "got 2 keys"]),
    ("unknown policy", edit("{column: region}", "{column: region, policy: never}"), 18, "by_region",
     ["policy", "'never' is not allowed", "fail, warn"]),
    ("expectation column", edit("{column: region}", "{column: regio}"), 18, "by_region",
     ["column 'regio' is not a column of 'by_region'", "region, revenue, orders"]),
    ("decimal cut by flow syntax", edit("amount: double", "amount: decimal(10, 2)"), 5, "orders",
     ["cut at its comma", "quote it"]),
    ("reserved _weight input", edit("amount: double", "_weight: double"), 5, "orders", ["'_weight' is reserved"]),
    ("reserved _weight select", edit("  enriched:", "  s: {op: select, input: orders, columns: {_weight: amount}}\n"
                                                  "  enriched:"), 12, "s", ["'_weight' is reserved"]),
    ("bad schedule", edit('"@hourly"', '"every hour"'), 2, None, ["schedule 'every hour'", "cron", "@hourly"]),
    ("union columns differ", edit("  enriched:", "  u: {op: union, inputs: [orders, customers]}\n  enriched:"), 12, "u",
     ["same columns", "'orders' has (order_id, customer_id, amount, status)", "'customers' has (customer_id, name, region)"]),
    ("union of one", edit("  enriched:", "  u: {op: union_all, inputs: [orders]}\n  enriched:"), 12, "u",
     ["field 'inputs'", "at least 2"]),
    ("select list column", edit("  enriched:", "  s: {op: select, input: orders, columns: [order_id, amout]}\n"
                                              "  enriched:"), 12, "s", ["unknown column 'amout'", "did you mean 'amount'"]),
    ("aggregate name twice", edit('orders: "count(*)"', 'region: "count(*)"'), 14, "by_region",
     ["output column 'region' is produced twice"]),
    ("join rename clash", edit("{customer_id: long, name: string, region: string}",
                               "{customer_id: long, amount: double, region: string}",
                               edit("amount: double, status: string", "amount: double, customers_amount: double")),
     12, "enriched", ["'amount' of 'customers' clashes", "'customers_amount'", "select"]),
    ("aggregate in where", edit("status = 'paid'", "max(amount) > 1"), 11, "paid",
     ["aggregate function 'max' in a row expression"]),
    ("unterminated string", edit("status = 'paid'", "status = 'paid"), 11, "paid", ["unterminated string"]),
    ("nullable not boolean", edit("amount: double", "amount: {type: double, nullable: maybe}"), 5, "orders",
     ["field 'schema.amount.nullable'", "expected true or false"]),
    ("python tag refused", edit('"@hourly"', "!!python/object:os.system x"), 2, None, ["YAML syntax error"]),
    # hostile names, paths, numbers and characters (tests/test_hostile_circuits.py found them)
    ("control character", edit("  paid:", "  \x00paid:"), 11, None, ["control character U+0000", "printable text"]),
    ("column name not an identifier", edit("amount: double", "'`amount`': double"), 5, "orders",
     ["invalid name '`amount`'", "an identifier"]),
    ("column name with a space", edit("amount: double", "'am ount': double"), 5, "orders", ["invalid name 'am ount'"]),
    ("internal column prefix", edit("amount: double", "__rows: double"), 5, "orders",
     ["column name '__rows' starts with '__'", "engine's internal columns"]),
    ("internal column produced", edit('orders: "count(*)"', '__n: "count(*)"'), 14, "by_region",
     ["column name '__n' starts with '__'"]),
    ("name too long", edit("  paid:  ", "  " + "p" * 129 + ":", edit("left: paid", "left: " + "p" * 129)), 11, "p" * 129,
     ["at most 128 characters"]),
    ("path is the data root", edit("path: inbox/orders", "path: ."), 6, "orders", ["is the data root itself"]),
    ("path in the state folder", edit("path: inbox/orders", "path: _dbsp/other"), 6, "orders",
     ["inside '_dbsp/'", "state"]),
    ("path with a scheme", edit("path: inbox/orders", "path: 'hdfs:/etc'"), 6, "orders", ["outside the data root"]),
    ("path with a NUL", edit("path: inbox/orders", 'path: "inbox/\\0x"'), 6, "orders", ["control character"]),
    ("publish path with a NUL", edit("  by_region:\n    expectations", '  by_region:\n    publish: {path: "a\\0b"}\n    expectations'),
     17, "by_region", ["control character"]),
    ("jsonl reader option", edit("format: parquet", "format: jsonl, options: {basePath: /}"), 6, "orders",
     ["reader option 'basePath' is not accepted for format json"]),
    ("recursive output", edit("outputs: [paths]", "outputs: [path]", RECURSIVE), 11, "closure",
     ["output 'path' is not a node of its body", "did you mean 'paths'"]),
    ("recursive body reference", edit("inputs: [edges, hop]", "inputs: [edgs, hop]", RECURSIVE), 10, "closure.paths",
     ["field 'inputs[0]' names 'edgs'", "did you mean 'edges'"]),
    ("recursive body op", edit("op: union", "op: unoin", RECURSIVE), 10, "closure.paths", ["'unoin' is not allowed"]),
]


@pytest.mark.parametrize("text, line, node, fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed(text, line, node, fragments):
    found = problems(text)
    match = [p for p in found if all(f in p.message for f in fragments)]
    assert match, f"no problem mentions {fragments}: {found}"
    assert (match[0].file, match[0].line, match[0].node) == ("c.yaml", line, node), found


def test_case_ids_are_distinct():
    assert len({c[0] for c in CASES}) == len(CASES) >= 20


def test_all_problems_are_reported_in_one_go():
    text = edit("left: paid", "left: piad", edit("kind: changes", "kind: change", edit("where:", "wher:")))
    found = problems(text)
    assert [(p.line, p.node) for p in found] == [(6, "orders"), (11, "paid"), (11, "paid"), (12, "enriched")]
    assert [p.line for p in found] == sorted(p.line for p in found)


@pytest.mark.parametrize("old, new", [("on: [customer_id]", "on: 5"), ("where: \"status = 'paid'\"", "where: [1]"),
                                      ("amount: double", "amount: 5"), ("op: filter", "op: fliter")])
def test_shape_errors_are_reported_once(old, new):
    # The schema owns these; the Python checks must not add follow-on errors for the same thing.
    assert len(problems(edit(old, new))) == 1


def test_no_follow_on_errors_from_a_broken_node():
    found = problems(edit("group_by: [region]", "group_by: [regoin]"))
    assert len(found) == 1  # the output's expectation on `region` is not blamed as well


def test_problem_format_without_node():
    assert str(Problem("f.yaml", 3, None, "boom")) == "f.yaml:3: boom"
    assert str(Problem("f.yaml", 3, "n", "boom")) == "f.yaml:3: node 'n': boom"


def test_missing_op_lists_the_operators():
    (p,) = problems(edit("op: filter, ", ""))
    assert "missing required field 'op' (one of: select, map, filter" in p.message


def test_body_node_names_must_not_shadow_outer_names():
    found = problems(edit("      hop:", "      edges:", edit("[edges, hop]", "[step, edges]", RECURSIVE)))
    assert any(p.node == "closure.edges" and "already used by an input" in p.message for p in found)


def test_invalid_output_name_is_reported_by_the_schema_only():
    (p,) = problems(edit("outputs:\n  by_region:", "outputs:\n  by-region:"))
    assert (p.line, p.node) == (16, "by-region") and "invalid name 'by-region'" in p.message
