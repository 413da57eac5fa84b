"""The Arrow expression compiler's contract, without Spark: the interface the in-process engine
uses, the cache, what is refused at compile time (and why), and how evaluation reports errors.
Values are compared with Spark in ``test_arrow_expr_spark.py``."""
from __future__ import annotations

import datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from spark_jobs.executor.arrow import compiler as arrow_expr
from spark_jobs.executor.arrow.compiler import ExpressionFailed, NotCovered, compile_expression

LINEITEM = pa.table({
    "l_extendedprice": pa.array([Decimal("100.00"), Decimal("2.50"), None], pa.decimal128(15, 2)),
    "l_discount": pa.array([Decimal("0.05"), Decimal("0.10"), Decimal("0.00")], pa.decimal128(15, 2)),
    "L_ShipDate": pa.array([datetime.date(1995, 3, 16), datetime.date(1994, 1, 1), None]),
    "status": pa.array(["paid", None, "open"]),
    "qty": pa.array([3, 0, None], pa.int32()),
    "ts": pa.array([0, 86_400_000_000, None], pa.timestamp("us", tz="UTC")),
})


def test_compiled_expression_reports_spark_type_arrow_type_and_columns():
    expr = compile_expression("l_extendedprice * (1 - l_discount)", LINEITEM.schema)
    assert expr.spark_type == "decimal(32,4)"
    assert expr.arrow_type == pa.decimal128(32, 4)
    assert expr.columns == ("l_extendedprice", "l_discount")
    out = expr.evaluate(LINEITEM)
    assert out.type == pa.decimal128(32, 4)
    assert out.to_pylist() == [Decimal("95.0000"), Decimal("2.2500"), None]


def test_columns_resolve_case_insensitively_to_the_input_name():
    expr = compile_expression("l_shipdate > date '1995-03-15'", LINEITEM.schema)
    assert expr.columns == ("L_ShipDate",)
    assert expr.evaluate(LINEITEM).to_pylist() == [True, False, None]


def test_predicate_keeps_true_rows_only():
    expr = compile_expression("status = 'paid' or qty > 0", LINEITEM.schema)
    assert expr.evaluate(LINEITEM).to_pylist() == [True, None, None]
    assert expr.predicate(LINEITEM).to_pylist() == [True, False, False]
    with pytest.raises(NotCovered, match="not a condition"):
        compile_expression("qty + 1", LINEITEM.schema).predicate(LINEITEM)


def test_compilation_is_cached_by_text_schema_and_time_zone():
    first = compile_expression("qty * 2", LINEITEM.schema)
    assert compile_expression("qty * 2", LINEITEM.schema) is first
    other = pa.schema([("qty", pa.int64())])
    assert compile_expression("qty * 2", other).spark_type == "bigint"
    with pytest.raises(NotCovered):
        compile_expression("try_cast(status as int)", LINEITEM.schema)
    with pytest.raises(NotCovered):  # refusals are cached too, and raised again
        compile_expression("try_cast(status as int)", LINEITEM.schema)


def test_evaluation_raises_where_spark_raises_and_skips_rows_spark_skips():
    with pytest.raises(ExpressionFailed) as err:
        compile_expression("10 / qty", LINEITEM.schema).evaluate(LINEITEM)
    assert err.value.condition == "DIVIDE_BY_ZERO"
    guarded = compile_expression("case when qty = 0 then null else 10 / qty end", LINEITEM.schema)
    assert guarded.evaluate(LINEITEM).to_pylist() == [10 / 3, None, None]
    with pytest.raises(ExpressionFailed) as err:
        compile_expression("cast(status as int)", LINEITEM.schema).evaluate(LINEITEM)
    assert err.value.condition == "CAST_INVALID_INPUT"


def test_an_empty_table_evaluates_to_an_empty_array_of_the_type():
    expr = compile_expression("l_extendedprice * 2", LINEITEM.schema)
    out = expr.evaluate(LINEITEM.slice(0, 0))
    assert len(out) == 0 and out.type == pa.decimal128(17, 2)  # 2 is a decimal(1,0) here


@pytest.mark.parametrize("text, reason", [
    ("try_cast(status as int)", "try_cast"),
    ("round(cast(qty as double), 1)", "Double.toString"),
    ("cast(cast(qty as double) as string)", "CAST from double to string"),
    ("cast(ts as string)", "CAST from timestamp to string"),
    ("cast(status as double)", "CAST from string to double"),
    ("sha2(status, 256)", "function 'sha2' is not covered"),
    ("status like 'a\\\\%'", "backslash"),
    ("l_shipdate + interval '1' hour", "interval"),
    ("l_shipdate - l_shipdate", "date - date"),
    ("cast(status as varchar(3))", "CHAR/VARCHAR"),
    ("nope + 1", "not an input column"),
    ("t.qty", "qualified name"),
    ("1 / 0", "constant part raises DIVIDE_BY_ZERO"),
    ("status like 'a!x' escape '!'", "LIKE pattern"),
    ("rand() > 0.5", "refused"),
    ("(select 1)", "refused"),
    ("cast(l_discount * 2 as int)", "through a double"),
])
def test_what_is_not_covered_is_refused_at_compile_time_with_a_reason(text, reason):
    with pytest.raises(NotCovered) as err:
        compile_expression(text, LINEITEM.schema)
    assert reason in err.value.reason


def test_ambiguous_columns_and_unreadable_input_types_are_refused():
    schema = pa.schema([("a", pa.int32()), ("A", pa.int32()), ("u", pa.uint32())])
    with pytest.raises(NotCovered, match="ambiguous"):
        compile_expression("a + 1", schema)
    with pytest.raises(NotCovered, match="uint32"):
        compile_expression("u + 1", schema)


def test_timestamps_outside_a_utc_session_are_refused():
    with pytest.raises(NotCovered, match="time zone"):
        compile_expression("hour(ts)", LINEITEM.schema, timezone="Europe/Paris")
    assert compile_expression("hour(ts)", LINEITEM.schema).evaluate(LINEITEM).to_pylist() == [0, 0, None]


def test_the_module_documents_its_coverage():
    doc = arrow_expr.__doc__ or ""
    for word in ("NotCovered", "ExpressionFailed", "compile_expression", "predicate", "Coverage"):
        assert word in doc
