"""The quality gate on changes held on the driver (a DAG run's staged Arrow tables): Great
Expectations on pandas gives the results it gives on Spark, without a Spark job."""
from __future__ import annotations

import datetime
import decimal

import pyarrow as pa

from spark_jobs.executor.spark.zset import from_rows
from spark_jobs.quality import run_gate
from spark_jobs.spec.model import Expectation

SCHEMA = "region string, revenue double, orders long, day date, price decimal(10,2)"
ROWS = {("eu", 3.0, 2, datetime.date(2024, 1, 1), decimal.Decimal("1.50")): 1,
        ("us", -2.0, 0, datetime.date(2024, 1, 2), decimal.Decimal("9.99")): 1,
        (None, 7.5, 4, None, None): 2,
        ("eu", 1.0, 1, datetime.date(2023, 12, 31), decimal.Decimal("0.10")): -1}
CHECKS = [
    Expectation("expect_column_values_to_not_be_null", {"column": "region"}, "fail", 1),
    Expectation("expect_column_values_to_be_between", {"column": "revenue", "min_value": 0}, "warn", 2),
    Expectation("expect_column_values_to_be_between", {"column": "orders", "min_value": 1}, "fail", 3),
    Expectation("expect_column_values_to_be_in_set", {"column": "region", "value_set": ["eu", "us"]}, "fail", 4),
    Expectation("expect_table_row_count_to_be_between", {"min_value": 1, "max_value": 10}, "fail", 5),
]


def _gate(spark, delta, local=None):
    return run_gate(spark, 1, view_deltas={"v": delta}, view_previous={"v": None}, set_views=set(),
                    view_expectations={"v": CHECKS}, input_deltas={}, input_expectations={}, local=local)


def test_pandas_and_spark_agree(spark):
    delta = from_rows(spark, ROWS, SCHEMA)
    on_spark = _gate(spark, delta)
    table = pa.Table.from_pylist([dict(zip(["region", "revenue", "orders", "day", "price", "_weight"], (*k, w)))
                                  for k, w in ROWS.items()])
    on_pandas = _gate(spark, delta, local={"view:v": table})
    summary = [(r.name, r.status, r.details.get("unexpected_count"), r.details.get("element_count"),
                sorted(map(str, r.details.get("partial_unexpected_list") or [])), r.details.get("observed_value"))
               for r in on_spark.results]
    assert summary == [(r.name, r.status, r.details.get("unexpected_count"), r.details.get("element_count"),
                        sorted(map(str, r.details.get("partial_unexpected_list") or [])), r.details.get("observed_value"))
                       for r in on_pandas.results]
    statuses = {(r.name, r.details.get("kwargs", {}).get("column")): r.status for r in on_pandas.results}
    assert statuses[("expect_column_values_to_not_be_null", "region")] == "FAIL"  # the row of weight 2
    assert statuses[("expect_column_values_to_be_between", "revenue")] == "WARN"
    assert statuses[("expect_column_values_to_be_between", "orders")] == "FAIL"
