"""``IS [NOT] DISTINCT FROM`` (and ``<=>``) on the in-process Arrow engine, compared with DuckDB:
every pair of NULL / non-NULL values of several types, alone, negated and in conditions, and a
SQL view over a random stream with NULLs that must run in-process (no fallback to Spark)."""
from __future__ import annotations

import datetime
from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest

from spark_jobs.executor.arrow.compiler import compile_expression
from tests.sql_streams import SqlStream
from tests.test_sql_streams import INPUTS, relations

# every (left, right) combination of a NULL, a value and an equal value, per type
_VALUES = {
    "i": ([1, 1, None, None, 2, 0], pa.int32()),
    "j": ([1, None, 1, None, 3, 0], pa.int64()),
    "d": ([1.5, 1.5, None, None, -0.0, 0.0], pa.float64()),
    "e": ([1.5, None, 1.5, None, 0.0, 2.0], pa.float64()),
    "m": ([Decimal("1.50"), Decimal("1.50"), None, None, Decimal("2.00"), Decimal("0.00")], pa.decimal128(5, 2)),
    "s": (["x", "x", None, None, "", "y"], pa.string()),
    "t": (["x", None, "x", None, "", "z"], pa.string()),
    "a": ([datetime.date(2020, 1, 1), None, None, None, datetime.date(2021, 1, 1), datetime.date(2020, 1, 1)],
          pa.date32()),
    "b": ([True, None, True, None, False, True], pa.bool_()),
}
TABLE = pa.table({name: pa.array(values, dtype) for name, (values, dtype) in _VALUES.items()})

EXPRESSIONS = [
    "i IS DISTINCT FROM j", "i IS NOT DISTINCT FROM j", "NOT (i IS DISTINCT FROM j)", "i <=> j",
    "d IS DISTINCT FROM e", "e IS NOT DISTINCT FROM d", "m IS DISTINCT FROM i", "i IS DISTINCT FROM m",
    "s IS DISTINCT FROM t", "s IS NOT DISTINCT FROM t", "a IS DISTINCT FROM DATE '2020-01-01'",
    "b IS DISTINCT FROM TRUE", "b IS NOT DISTINCT FROM NULL", "i IS DISTINCT FROM NULL", "NULL IS DISTINCT FROM j",
    "NULL IS DISTINCT FROM NULL", "NULL IS NOT DISTINCT FROM NULL", "i IS DISTINCT FROM i",
    "i + 1 IS DISTINCT FROM j + 1", "(i IS DISTINCT FROM j) IS DISTINCT FROM (s IS DISTINCT FROM t)",
    "CASE WHEN i IS DISTINCT FROM j THEN s ELSE t END", "i IS DISTINCT FROM j AND s IS NOT DISTINCT FROM t",
    "i IS DISTINCT FROM j OR d IS NOT DISTINCT FROM e",
]


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_distinct_from_equals_duckdb_on_nulls(text):
    got = compile_expression(text, TABLE.schema).evaluate(TABLE).to_pylist()
    con = duckdb.connect()
    con.register("t", TABLE)
    want = [r[0] for r in con.execute(f"SELECT {text.replace('<=>', 'IS NOT DISTINCT FROM')} FROM t").fetchall()]
    assert got == want, text


def test_distinct_from_is_a_condition_and_never_null():
    expr = compile_expression("i IS DISTINCT FROM j", TABLE.schema)
    assert expr.spark_type == "boolean" and None not in expr.evaluate(TABLE).to_pylist()
    assert expr.predicate(TABLE).to_pylist() == [False, True, True, False, True, False]


CIRCUIT = "name: distinct_from\n" + INPUTS + """
nodes:
  changed: {op: sql, query: "SELECT k, x, s FROM a WHERE x IS DISTINCT FROM k"}
  same: {op: sql, query: "SELECT k, x IS NOT DISTINCT FROM k AS eq, s IS DISTINCT FROM 'p' AS not_p FROM a"}
  matched:
    op: sql
    query: "SELECT a.k, a.x, b.y FROM a JOIN b ON a.k = b.k AND a.x IS NOT DISTINCT FROM b.y"
  counted: {op: sql, query: "SELECT s, count(*) AS n FROM a WHERE NOT (x IS DISTINCT FROM 2) GROUP BY s"}
outputs: [changed, same, matched, counted]
"""


def test_distinct_from_views_run_in_process_and_equal_duckdb(tmp_path):
    stream = SqlStream(tmp_path, CIRCUIT, in_process=True)  # asserts every step ran on Arrow
    rels = relations(seed=29)
    for t in range(8):
        inserts, deletes = (8, 2) if t < 3 else (4, 4)
        stream.step({name: rel.change(inserts, deletes) for name, rel in rels.items()})
    assert stream.t == 8
