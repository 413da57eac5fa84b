"""Declared expectations through real Great Expectations on real Spark DataFrames."""
from __future__ import annotations

import logging

import pytest

from spark_jobs.quality import ExpectationConfigError, UnknownExpectationError, check_declarations
from spark_jobs.quality import expectations as ge
from spark_jobs.spec.model import Expectation


def exp(name: str, policy: str = "fail", line: int = 0, **kwargs) -> Expectation:
    return Expectation(name=name, kwargs=kwargs, policy=policy, line=line)


def test_unknown_expectation_names_the_expectation_view_and_line():
    with pytest.raises(UnknownExpectationError) as info:
        check_declarations("view:by_region",
                           [exp("expect_column_values_to_not_be_nul", line=14, column="region")])
    message = str(info.value)
    assert "'expect_column_values_to_not_be_nul'" in message
    assert "view:by_region" in message and "line 14" in message
    assert "did you mean expect_column_values_to_not_be_null" in message


def test_bad_arguments_are_a_configuration_error():
    with pytest.raises(ExpectationConfigError) as info:
        check_declarations("input:orders",
                           [exp("expect_column_values_to_be_between", line=3, colum="amount")])
    message = str(info.value)
    assert "input:orders (line 3)" in message and "expect_column_values_to_be_between" in message
    assert "colum" in message


def test_names_resolve_by_camel_case_and_by_ge_name():
    gx = ge.gx_module()
    cls = ge.expectation_class(exp("expect_column_values_to_not_be_null"), "view:v")
    assert cls is gx.expectations.ExpectColumnValuesToNotBeNull
    kl = ge.expectation_class(exp("expect_column_kl_divergence_to_be_less_than"), "view:v")
    assert kl is gx.expectations.ExpectColumnKLDivergenceToBeLessThan
    assert "expect_table_row_count_to_be_between" in ge.known_expectations()


def test_ge_loggers_are_quiet():
    ge.warm_up()
    assert logging.getLogger("great_expectations").getEffectiveLevel() >= logging.WARNING
    assert logging.getLogger("great_expectations.data_context.types.base").getEffectiveLevel() \
        >= logging.WARNING


def test_results_map_back_in_declaration_order(spark, capsys):
    df = spark.createDataFrame([(1, "a", 5.0), (2, None, 20.0), (3, "c", -1.0)],
                               "id long, name string, amount double")
    declared = [
        exp("expect_column_values_to_be_between", "warn", column="amount", min_value=0,
            max_value=10),
        exp("expect_column_values_to_not_be_null", column="id"),
        exp("expect_column_values_to_not_be_null", column="name"),
        exp("expect_column_mean_to_be_between", column="amount", min_value=0, max_value=100),
        exp("expect_column_values_to_not_be_null", column="missing"),
    ]
    results = ge.validate(df, "view:t1", declared)
    assert [r.name for r in results] == [e.name for e in declared]
    assert [r.success for r in results] == [False, True, False, True, False]
    assert [r.policy for r in results] == ["warn", "fail", "fail", "fail", "fail"]
    between, _, name_null, mean, missing = results
    assert between.details["unexpected_count"] == 2
    assert sorted(between.details["partial_unexpected_list"]) == [-1.0, 20.0]
    assert between.details["kwargs"] == {"column": "amount", "min_value": 0, "max_value": 10}
    assert name_null.details["unexpected_count"] == 1 and name_null.details["element_count"] == 3
    assert mean.details["observed_value"] == pytest.approx(8.0)
    assert "missing" in missing.details["exception"]
    assert not df.is_cached  # the batch was cached only for the run
    out = capsys.readouterr()
    assert "Calculating Metrics" not in out.out + out.err  # no progress bars


def test_suite_is_reused_for_the_same_declarations(spark):
    declared = [exp("expect_column_values_to_not_be_null", column="id")]
    df = spark.createDataFrame([(1,)], "id long")
    ge.validate(df, "view:t2", declared)
    before = dict(ge._runtime().validations)
    ge.validate(spark.createDataFrame([(None,)], "id long"), "view:t2", declared)
    assert ge._runtime().validations == before
    changed = [exp("expect_column_values_to_not_be_null", column="id", mostly=0.5)]
    assert ge.validate(df, "view:t2", changed)[0].success
    assert len(ge._runtime().validations) == len(before) + 1
