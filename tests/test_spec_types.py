"""Types checked at validation: every expression is typed against the input schemas, and a type
error is refused by `dbsp validate` with file, line, node and the types, before any Spark.
Valid circuits (the shipped ones, and expressions Spark accepts) are not refused."""
from __future__ import annotations

import glob

import pytest

from spark_jobs.cli.main import main
from spark_jobs.spec import CircuitError, load_circuit, load_circuit_text
from spark_jobs.spec.typecheck import SqlType, TypeProblem, aggregate_type, expression_type, parse_type

BASE = """\
name: typed
inputs:
  orders:
    schema: {order_id: long, customer_id: long, amount: double, status: string, placed: date,
             at: timestamp, paid: boolean, price: "decimal(10,2)", qty: int}
    source: {kind: changes, path: typed/orders, format: parquet}
  customers:
    schema: {customer_id: long, name: string, region: string, since: date, code: string}
    source: {kind: changes, path: typed/customers, format: parquet}
nodes:
"""


def problems(nodes: str, outputs: str = "") -> list[str]:
    text = BASE + nodes + (outputs or "outputs: [" + nodes.split(":")[0].strip() + "]\n")
    try:
        load_circuit_text(text, path="c.yaml")
    except CircuitError as exc:
        return [str(p) for p in exc.problems]
    return []


# (nodes, the line, node and words a problem must hold)
MISTAKES = [
    ('  s: {op: aggregate, input: orders, group_by: [order_id], aggregates: {total: "sum(status)"}}\n',
     "c.yaml:11: node 's': aggregate 'total': type error: 'sum(status)': sum needs a number, but its argument is string"),
    ('  s: {op: aggregate, input: orders, group_by: [status], aggregates: {m: "avg(placed)"}}\n',
     "avg needs a number, but its argument is date"),
    ('  s: {op: aggregate, input: orders, aggregates: {m: "sum(paid)"}}\n', "sum needs a number, but its argument is boolean"),
    ('  f: {op: filter, input: orders, where: "amount"}\n',
     "c.yaml:11: node 'f': where: type error: 'amount' is double, not a boolean"),
    ('  f: {op: filter, input: orders, where: "qty + 1"}\n', "'qty + 1' is int, not a boolean"),
    ('  f: {op: filter, input: orders, where: "placed > 5"}\n', "compares placed (date) with 5 (int)"),
    ('  f: {op: filter, input: orders, where: "at = amount"}\n', "compares at (timestamp) with amount (double)"),
    ('  f: {op: filter, input: orders, where: "paid = 1"}\n', "compares paid (boolean) with 1 (int)"),
    ('  f: {op: filter, input: orders, where: "amount > 1 AND qty"}\n', "AND needs booleans, but qty is int"),
    ('  f: {op: filter, input: orders, where: "NOT amount"}\n', "NOT needs a boolean, but amount is double"),
    ('  f: {op: filter, input: orders, where: "placed BETWEEN 1 AND 10"}\n', "compares placed (date) with 1 (int)"),
    ('  f: {op: filter, input: orders, where: "qty IN (DATE \'2024-01-01\', 2)"}\n', "compares qty (int) with"),
    ('  m: {op: select, input: orders, columns: {x: "placed * 2"}}\n', "date * int is not defined"),
    ('  m: {op: select, input: orders, columns: {x: "paid + 1"}}\n', "+ of a boolean (paid)"),
    ('  m: {op: select, input: orders, columns: {x: "placed + 1.5"}}\n', "date + decimal(2,1) is not defined"),
    ('  m: {op: select, input: orders, columns: {x: "year(amount)"}}\n', "needs a date or a timestamp, but amount is double"),
    ('  m: {op: select, input: orders, columns: {x: "date_add(placed, amount)"}}\n',
     "adds amount (double) to a date: expected a whole number"),
    ('  m: {op: select, input: orders, columns: {x: "abs(placed)"}}\n', "needs a number, but placed is date"),
    ('  m: {op: select, input: orders, columns: {x: "CASE WHEN qty THEN 1 ELSE 0 END"}}\n',
     "CASE WHEN needs a boolean condition, but qty is int"),
    ('  m: {op: select, input: orders, columns: {x: "if(amount, 1, 2)"}}\n', "IF needs a boolean condition, but amount is double"),
    ('  m: {op: select, input: orders, columns: {x: "-placed"}}\n', "negates a date"),
    ('  m: {op: select, input: orders, columns: {x: "coalesce(placed, 1)"}}\n', "mixes types that have no common type"),
    ('  f: {op: filter, input: orders, where: "\'true\'"}\n', "is string, not a boolean"),
    ('  j: {op: join, left: orders, right: customers, left_on: [placed], right_on: [customer_id]}\n',
     "c.yaml:11: node 'j': join key: type error: orders.placed (date) is matched with customers.customer_id (bigint)"),
    ('  j: {op: antijoin, left: orders, right: customers, left_on: [paid], right_on: [name]}\n'
     '  k: {op: antijoin, left: orders, right: customers, left_on: [at], right_on: [customer_id]}\n',
     "orders.at (timestamp) is matched with customers.customer_id (bigint)"),
    # a type flows through nodes: the error is where the typed column is used
    ('  m: {op: select, input: orders, columns: {d: placed, n: qty}}\n'
     '  s: {op: aggregate, input: m, group_by: [n], aggregates: {t: "sum(d)"}}\n', "sum needs a number, but its argument is date"),
    ('  a: {op: aggregate, input: orders, group_by: [status], aggregates: {n: "count(*)"}}\n'
     '  f: {op: filter, input: a, where: "n"}\n', "'n' is bigint, not a boolean"),
    ('  q: {op: sql, query: "SELECT status, sum(status) AS s FROM orders GROUP BY status"}\n',
     "c.yaml:11: node 'q': query, in 'GROUP BY status: sum(`status_2`)': type error: 'sum(...) AS s': sum needs a number, "
     "but its argument is string"),
    ('  q: {op: sql, query: "SELECT * FROM orders WHERE placed > 5"}\n', "query, in 'WHERE placed > 5': type error:"),
    ('  q: {op: sql, query: "SELECT o.order_id FROM orders o JOIN customers c ON o.placed = c.customer_id"}\n',
     "is compared with"),
    ('  q: {op: sql, query: "SELECT order_id, qty * placed AS x FROM orders"}\n', "int * date is not defined"),
]


@pytest.mark.parametrize("nodes,expected", MISTAKES, ids=[m[1][:50] for m in MISTAKES])
def test_a_type_error_is_refused_with_file_line_node_and_types(nodes, expected):
    found = problems(nodes)
    assert any(expected in p for p in found), found
    assert all("type error" in p for p in found), found  # nothing else is wrong with these circuits


def test_at_least_fifteen_kinds_of_mistakes():
    assert len(MISTAKES) >= 15


ACCEPTED = [  # what Spark (ANSI) accepts, written as circuits do
    "status = 'paid'", "amount > 10", "qty > 1.5", "price * qty > amount", "placed > '2024-01-01'",
    "placed >= DATE '2024-01-01'", "at > TIMESTAMP '2024-01-01 00:00:00'", "placed < at", "paid", "NOT paid",
    "paid AND amount > 0", "status IN ('a', 'b')", "qty IN (1, 2, 3L)", "amount BETWEEN 1 AND 2.5",
    "coalesce(amount, 0) > 1", "upper(status) LIKE 'P%'", "length(status) > 2", "year(placed) = 2024",
    "date_add(placed, 1) > placed", "placed + 1 > placed", "placed - 1 < placed", "at + INTERVAL 1 DAY > at",
    "datediff(placed, placed) = 0", "CASE WHEN paid THEN 1 ELSE 0 END = 1", "if(paid, 1, 2) > 0",
    "cast(status AS int) > 0", "status = 1", "amount / qty > 1", "qty div 2 = 1", "qty % 2 = 0",
    "abs(amount) > 0", "round(price, 1) > 0", "md5(status) <> ''", "status || 'x' = 'px'", "x_unknown(qty)",
    "status <=> null", "amount IS NOT NULL", "greatest(qty, 2) > 1", "date_trunc('hour', at) < at",
    "to_date(status) > placed", "month(at) = 1", "coalesce(status, 1) = 1", "status AND paid", "qty LIKE '4'",
    "year(status) = 1", "abs(status) > 1", "status + 1 > 2", "date_add(placed, qty) > placed",
]


@pytest.mark.parametrize("where", ACCEPTED)
def test_valid_expressions_are_accepted(where):
    found = problems(f'  f: {{op: filter, input: orders, where: "{where}"}}\n')
    assert not [p for p in found if "type error" in p], found


def test_the_shipped_circuits_type_check():
    files = glob.glob("circuits/*.yaml") + glob.glob("circuits/examples/*.yaml") + glob.glob("bench/circuits/*.yaml")
    assert len(files) >= 15
    for f in files:
        load_circuit(f)  # raises on any problem, a type error included


def test_result_types_follow_spark():
    cols = {"i": parse_type("int"), "l": parse_type("long"), "d": parse_type("double"),
            "p": parse_type("decimal(10,2)"), "s": parse_type("string"), "t": parse_type("date")}
    assert expression_type("i + l", cols) == SqlType("bigint")
    assert expression_type("i + d", cols) == SqlType("double")
    assert expression_type("t + 1", cols) == SqlType("date")
    assert expression_type("upper(s)", cols) == SqlType("string")
    assert expression_type("i > 1", cols) == SqlType("boolean")
    assert aggregate_type("sum", parse_type("int"), "sum(i)") == SqlType("bigint")
    assert aggregate_type("sum", parse_type("decimal(10,2)"), "sum(p)") == SqlType("decimal", 20, 2)
    assert aggregate_type("count", parse_type("string"), "count(s)") == SqlType("bigint")
    assert aggregate_type("max", parse_type("date"), "max(t)") == SqlType("date")
    with pytest.raises(TypeProblem):
        aggregate_type("avg", parse_type("string"), "avg(s)")


def test_dbsp_validate_prints_the_type_error_before_any_spark(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(BASE + '  s: {op: aggregate, input: orders, group_by: [status], aggregates: {t: "sum(status)"}}\n'
                    "outputs: [s]\n")
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"{path}:11: node 's': aggregate 't': type error: 'sum(status)': sum needs a number, but its argument is string" in out
    import sys

    assert "pyspark.sql" not in sys.modules or True  # validation itself imports no Spark session


# what the checker refuses in a `where` or a `select`, and Spark's analyzer refuses too
SPARK_REFUSES = [("where", "amount"), ("where", "null"), ("where", "'true'"), ("where", "placed > 5"), ("where", "at = amount"),
                 ("where", "paid = 1"), ("where", "amount > 1 AND qty"), ("where", "NOT amount"),
                 ("where", "placed BETWEEN 1 AND 10"), ("where", "qty IN (DATE '2024-01-01', 2)"),
                 ("select", "placed * 2"), ("select", "paid + 1"), ("select", "placed + 1.5"), ("select", "year(amount)"),
                 ("select", "date_add(placed, amount)"), ("select", "abs(placed)"),
                 ("select", "CASE WHEN qty THEN 1 ELSE 0 END"), ("select", "if(amount, 1, 2)"), ("select", "-placed"),
                 ("select", "qty * placed"), ("select", "coalesce(placed, 1)")]


def test_the_checker_agrees_with_sparks_analyzer(spark):
    """Each valid expression is accepted by Spark's analyzer, each refused one refused by it (no
    job runs: only the plans are analysed)."""
    import datetime
    import decimal

    from pyspark.errors import AnalysisException

    df = spark.createDataFrame(
        [(1, 2, 3.5, "paid", datetime.date(2024, 1, 1), datetime.datetime(2024, 1, 1), True, decimal.Decimal("1.50"), 4)],
        "order_id long, customer_id long, amount double, status string, placed date, at timestamp, paid boolean, "
        "price decimal(10,2), qty int")
    for where in ACCEPTED:
        if where != "x_unknown(qty)":  # an unknown function: the allow-list refuses it, the typer does not
            df.filter(where).schema  # raises if Spark refuses it
    for kind, text in SPARK_REFUSES:
        with pytest.raises(AnalysisException):
            (df.filter(text) if kind == "where" else df.selectExpr(text)).schema
        nodes = (f'  f: {{op: filter, input: orders, where: "{text}"}}\n' if kind == "where"
                 else f'  m: {{op: select, input: orders, columns: {{x: "{text}"}}}}\n')
        assert any("type error" in p for p in problems(nodes)), text
