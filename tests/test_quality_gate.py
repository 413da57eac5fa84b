"""run_gate end to end: user expectations with both policies, built-ins, inputs, empty deltas."""
from __future__ import annotations

import json
import os

import pytest

from spark_jobs.executor.spark.zset import from_rows
from spark_jobs.quality import (
    QualityGateFailed,
    UnknownExpectationError,
    enforce,
    run_gate,
    write_report,
)
from spark_jobs.quality.builtin import CONSOLIDATED, IS_SET, WEIGHTS_POSITIVE
from spark_jobs.spec.model import Expectation

SCHEMA = "region string, revenue double"


def exp(name: str, policy: str = "fail", **kwargs) -> Expectation:
    return Expectation(name=name, kwargs=kwargs, policy=policy, line=1)


def gate(spark, *, delta=None, previous=None, set_views=(), expectations=(), inputs=None,
         input_expectations=None, timestep=1):
    return run_gate(
        spark, timestep,
        view_deltas={"by_region": delta} if delta is not None else {},
        view_previous={"by_region": previous},
        set_views=set(set_views),
        view_expectations={"by_region": list(expectations)},
        input_deltas=inputs or {},
        input_expectations=input_expectations or {},
    )


def statuses(report):
    return [(r.target, r.name, r.status) for r in report.results]


def test_passing_expectations_with_both_policies(spark, tmp_path):
    previous = from_rows(spark, {("eu", 3.0): 1}, SCHEMA)
    delta = from_rows(spark, {("eu", 3.0): -1, ("eu", 5.0): 1, ("us", 2.0): 1}, SCHEMA)
    report = gate(spark, delta=delta, previous=previous, set_views={"by_region"}, expectations=[
        exp("expect_column_values_to_not_be_null", "fail", column="region"),
        exp("expect_column_values_to_be_between", "warn", column="revenue", min_value=0),
    ])
    assert statuses(report) == [
        ("view:by_region", CONSOLIDATED, "PASS"), ("view:by_region", WEIGHTS_POSITIVE, "PASS"),
        ("view:by_region", IS_SET, "PASS"),
        ("view:by_region", "expect_column_values_to_not_be_null", "PASS"),
        ("view:by_region", "expect_column_values_to_be_between", "PASS"),
    ]
    assert report.results[3].details["element_count"] == 2  # the two inserted rows only
    enforce(report)
    path = write_report(report, str(tmp_path))
    assert json.loads(open(path, encoding="utf-8").read())["passed"] is True
    assert os.path.exists(tmp_path / "index.html")


def test_failing_warn_expectation_is_reported_not_raised(spark):
    delta = from_rows(spark, {("eu", -5.0): 1, ("us", 2.0): 1}, SCHEMA)
    report = gate(spark, delta=delta, expectations=[
        exp("expect_column_values_to_be_between", "warn", column="revenue", min_value=0)])
    [warning] = report.warnings
    assert warning.details["unexpected_count"] == 1
    assert warning.details["partial_unexpected_list"] == [-5.0]
    assert not report.failed
    enforce(report)
    assert "WARN  view:by_region  expect_column_values_to_be_between" in report.summary()


def test_failing_fail_expectation_raises(spark):
    delta = from_rows(spark, {(None, 1.0): 1, ("us", 2.0): 1}, SCHEMA)
    report = gate(spark, delta=delta, expectations=[
        exp("expect_column_values_to_not_be_null", "fail", column="region"),
        exp("expect_column_values_to_be_between", "warn", column="revenue", min_value=0)])
    assert [r.name for r in report.failed] == ["expect_column_values_to_not_be_null"]
    assert not report.warnings
    with pytest.raises(QualityGateFailed) as info:
        enforce(report)
    assert info.value.report is report
    assert "expect_column_values_to_not_be_null(column=region)" in str(info.value)
    assert "FAIL  view:by_region" in report.summary()


def test_deleted_rows_are_not_checked(spark):
    previous = from_rows(spark, {(None, 1.0): 1}, SCHEMA)
    delta = from_rows(spark, {(None, 1.0): -1, ("us", 2.0): 1}, SCHEMA)
    report = gate(spark, delta=delta, previous=previous, expectations=[
        exp("expect_column_values_to_not_be_null", column="region")])
    enforce(report)


def test_no_inserted_rows_pass_trivially_except_table_level(spark):
    previous = from_rows(spark, {("eu", 1.0): 1}, SCHEMA)
    delta = from_rows(spark, {("eu", 1.0): -1}, SCHEMA)  # a step that only deletes
    report = gate(spark, delta=delta, previous=previous, expectations=[
        exp("expect_column_values_to_not_be_null", column="region"),
        exp("expect_column_mean_to_be_between", column="revenue", min_value=10),  # GE alone: fail
        exp("expect_table_row_count_to_be_between", "warn", min_value=1),
        exp("expect_column_to_exist", column="revenue"),
    ])
    by_name = {r.name: r for r in report.results}
    assert by_name["expect_column_values_to_not_be_null"].success
    assert by_name["expect_column_mean_to_be_between"].success
    assert by_name["expect_column_mean_to_be_between"].details["element_count"] == 0
    assert "no inserted rows" in by_name["expect_column_mean_to_be_between"].details["note"]
    row_count = by_name["expect_table_row_count_to_be_between"]  # run by GE on the empty frame
    assert not row_count.success and row_count.details["observed_value"] == 0
    assert by_name["expect_column_to_exist"].success
    assert [r.name for r in report.warnings] == ["expect_table_row_count_to_be_between"]
    enforce(report)


def test_builtin_failure_fails_the_gate(spark):
    previous = from_rows(spark, {("eu", 1.0): 1}, SCHEMA)
    delta = from_rows(spark, {("eu", 1.0): 1}, SCHEMA)
    report = gate(spark, delta=delta, previous=previous, set_views={"by_region"})
    assert [(r.name, r.builtin) for r in report.failed] == [(IS_SET, True)]
    with pytest.raises(QualityGateFailed, match="dbsp_view_is_set"):
        enforce(report)


def test_input_expectations_on_inserted_rows(spark):
    with_weight = spark.createDataFrame([(1, -3.0, -1), (2, 4.0, 1)],
                                        "order_id long, amount double, _weight long")
    without_weight = spark.createDataFrame([(7, "x")], "customer_id long, region string")
    report = gate(spark, inputs={"orders": with_weight, "customers": without_weight},
                  input_expectations={
                      "orders": [exp("expect_column_values_to_be_between", column="amount",
                                     min_value=0)],
                      "customers": [exp("expect_column_values_to_be_in_set", "warn",
                                        column="region", value_set=["eu", "us"])],
                      "products": [exp("expect_column_values_to_not_be_null", column="sku")],
                  })
    assert statuses(report) == [
        ("input:orders", "expect_column_values_to_be_between", "PASS"),  # -3.0 was deleted
        ("input:customers", "expect_column_values_to_be_in_set", "WARN"),
        ("input:products", "expect_column_values_to_not_be_null", "PASS"),  # no change
    ]


def test_unknown_expectation_fails_before_any_check(spark):
    delta = from_rows(spark, {("eu", 1.0): 1}, SCHEMA)
    with pytest.raises(UnknownExpectationError, match="view:by_region.*expect_revenue_to_rise"):
        gate(spark, delta=delta, expectations=[exp("expect_revenue_to_rise", column="revenue")])


def test_uncached_delta_is_released_after_the_gate(spark):
    delta = from_rows(spark, {("eu", 1.0): 1}, SCHEMA)
    gate(spark, delta=delta, expectations=[exp("expect_column_values_to_not_be_null",
                                               column="region")])
    assert not delta.is_cached
    cached = from_rows(spark, {("eu", 1.0): 1}, SCHEMA).cache()
    gate(spark, delta=cached)
    assert cached.is_cached  # the caller's cache is left alone
    cached.unpersist()
