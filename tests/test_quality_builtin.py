"""The built-in DBSP checks on view deltas: each catches its violation, a clean delta passes."""
from __future__ import annotations

import pytest

from spark_jobs.executor.spark.zset import from_rows
from spark_jobs.quality.builtin import CONSOLIDATED, IS_SET, WEIGHTS_POSITIVE, check_view_delta

SCHEMA = "region string, n long"


def by_name(outcome):
    return {r.name: r for r in outcome.results}


def test_clean_delta_passes_everything(spark):
    previous = from_rows(spark, {("eu", 1): 1, ("us", 2): 1}, SCHEMA)
    delta = from_rows(spark, {("eu", 1): -1, ("eu", 3): 1, ("asia", 4): 1}, SCHEMA)
    out = check_view_delta("v", delta, previous, is_set=True)
    res = by_name(out)
    assert set(res) == {CONSOLIDATED, WEIGHTS_POSITIVE, IS_SET}
    assert all(r.success and r.builtin and r.policy == "fail" for r in out.results)
    assert all(r.target == "view:v" for r in out.results)
    assert out.inserted_rows == 2
    assert res[CONSOLIDATED].details["delta_rows"] == 3
    assert "examples" not in res[CONSOLIDATED].details


def test_empty_delta_passes(spark):
    delta = from_rows(spark, {}, SCHEMA)
    out = check_view_delta("v", delta, None, is_set=True)
    assert all(r.success for r in out.results)
    assert out.inserted_rows == 0


def test_duplicated_tuple_is_caught_null_safe(spark):
    # (None, 1) appears twice: nulls compare equal, as in GROUP BY
    delta = from_rows(spark, [((None, 1), 1), ((None, 1), 2), (("eu", 1), 1)], SCHEMA)
    res = by_name(check_view_delta("v", delta, None, is_set=False))
    bad = res[CONSOLIDATED]
    assert not bad.success
    assert bad.details["duplicated_tuples"] == 1
    assert bad.details["distinct_tuples"] == 2
    [example] = bad.details["examples"]
    assert example["row"] == {"region": None, "n": 1}
    assert example["delta_rows"] == 2 and example["delta_weight"] == 3
    assert res[WEIGHTS_POSITIVE].success
    assert IS_SET not in res  # not a set view


def test_zero_weight_is_caught(spark):
    delta = from_rows(spark, {("eu", 1): 0, ("us", 2): 1}, SCHEMA)
    bad = by_name(check_view_delta("v", delta, None, is_set=False))[CONSOLIDATED]
    assert not bad.success
    assert bad.details["zero_weight_rows"] == 1
    assert bad.details["examples"][0]["row"] == {"region": "eu", "n": 1}


def test_deletion_driving_weight_negative_is_caught(spark):
    previous = from_rows(spark, {("eu", 1): 1, ("us", 2): 3}, SCHEMA)
    delta = from_rows(spark, {("eu", 1): -2, ("us", 2): -3, ("asia", 9): -1}, SCHEMA)
    bad = by_name(check_view_delta("v", delta, previous, is_set=False))[WEIGHTS_POSITIVE]
    assert not bad.success
    assert bad.details["negative_tuples"] == 2  # eu: 1-2, asia: 0-1; us goes to exactly 0
    got = {(e["row"]["region"], e["previous_weight"], e["new_weight"]) for e in bad.details["examples"]}
    assert got == {("eu", 1, -1), ("asia", 0, -1)}


def test_deleting_without_previous_view_is_negative(spark):
    delta = from_rows(spark, {("eu", 1): -1}, SCHEMA)
    assert not by_name(check_view_delta("v", delta, None, is_set=False))[WEIGHTS_POSITIVE].success


def test_lookup_of_previous_is_null_safe(spark):
    previous = from_rows(spark, {(None, None): 1}, SCHEMA)
    delta = from_rows(spark, {(None, None): -1}, SCHEMA)
    out = check_view_delta("v", delta, previous, is_set=True)
    assert all(r.success for r in out.results)


def test_set_view_reaching_weight_two_is_caught(spark):
    previous = from_rows(spark, {("eu", 1): 1}, SCHEMA)
    delta = from_rows(spark, {("eu", 1): 1}, SCHEMA)
    res = by_name(check_view_delta("v", delta, previous, is_set=True))
    bad = res[IS_SET]
    assert not bad.success
    assert bad.details["non_set_tuples"] == 1
    assert bad.details["examples"][0]["new_weight"] == 2
    assert res[CONSOLIDATED].success and res[WEIGHTS_POSITIVE].success
    # the same change on a multiset view is fine
    assert all(r.success for r in check_view_delta("v", delta, previous, is_set=False).results)


def test_set_view_insert_with_weight_two_is_caught(spark):
    delta = from_rows(spark, {("eu", 1): 2}, SCHEMA)
    assert not by_name(check_view_delta("v", delta, None, is_set=True))[IS_SET].success


def test_only_the_deltas_tuples_are_looked_up(spark):
    # a broken tuple the delta does not touch is not this step's business
    previous = from_rows(spark, {("eu", 1): 1, ("bad", 0): 5}, SCHEMA)
    delta = from_rows(spark, {("us", 2): 1}, SCHEMA)
    assert all(r.success for r in check_view_delta("v", delta, previous, is_set=True).results)


def test_examples_are_capped_but_counts_are_not(spark):
    delta = from_rows(spark, [((f"r{i}", i), 1) for i in range(7)] * 2, SCHEMA)
    bad = by_name(check_view_delta("v", delta, None, is_set=False))[CONSOLIDATED]
    assert bad.details["duplicated_tuples"] == 7
    assert len(bad.details["examples"]) == 5


@pytest.mark.parametrize("weights", [[1, 1], [2, -1]])
def test_previous_view_need_not_be_consolidated(spark, weights):
    previous = from_rows(spark, [(("eu", 1), w) for w in weights], SCHEMA)  # sums to 2 or 1
    delta = from_rows(spark, {("eu", 1): -1}, SCHEMA)
    res = by_name(check_view_delta("v", delta, previous, is_set=True))
    assert res[WEIGHTS_POSITIVE].success
    assert res[IS_SET].success == (sum(weights) - 1 in (0, 1))


def test_odd_column_names(spark):
    schema = "`a.b` string, `c d` long"
    previous = from_rows(spark, {("x", 1): 1}, schema)
    delta = from_rows(spark, {("x", 1): -2}, schema)
    bad = by_name(check_view_delta("v", delta, previous, is_set=False))[WEIGHTS_POSITIVE]
    assert bad.details["examples"][0]["row"] == {"a.b": "x", "c d": 1}
