"""The expression tokenizer finds the columns an expression uses, and aggregates parse."""
from __future__ import annotations

import pytest

from spark_jobs.spec.expressions import ExpressionError, analyze, parse_aggregate, unknown_columns
from spark_jobs.spec.model import AggregateSpec


@pytest.mark.parametrize("expr, columns", [
    ("status = 'paid'", ("status",)),
    ("a = 'b = c' or a = \"it\\\"s d\"", ("a",)),
    ("`my col` + `x``y` > 1", ("my col", "x`y")),
    ("upper(name) LIKE 'A%' AND amount BETWEEN 1 AND 10", ("name", "amount")),
    ("CASE WHEN x IS NOT NULL THEN cast(x AS decimal(10, 2)) ELSE 0 END", ("x",)),
    ("exists(arr, e -> e > lim) and transform(arr, (v, i) -> v + i) is not null", ("arr", "lim")),
    ("s.field = 1 and m['k'] = 2", ("s", "m")),
    ("ts > current_timestamp - interval 2 days and d < date'2020-01-01'", ("ts", "d")),
    ("x'0A' = b -- comment a\n and /* c */ 1.5e3 > 2L", ("b",)),
    ("amount * 2 as doubled", ("amount",)),
    ("v::int > 0", ("v",)),
])
def test_columns_found(expr, columns):
    assert analyze(expr).columns == columns


def test_functions_and_case_insensitive_lookup():
    assert analyze("COALESCE(a, b) + abs(c)").functions == ("coalesce", "abs")
    assert unknown_columns("Amount > 1 and amout < 2", ("amount",)) == ["amout"]


@pytest.mark.parametrize("expr", ["a = 'open", "(a + 1", "a + 1)", "`open", "a /* no end"])
def test_unreadable(expr):
    with pytest.raises(ExpressionError):
        analyze(expr)


@pytest.mark.parametrize("text, spec", [
    ("count(*)", AggregateSpec("n", "count", None, False, "count(*)")),
    (" SUM( a * b ) ", AggregateSpec("n", "sum", "a * b", False, " SUM( a * b ) ")),
    ("count(DISTINCT x)", AggregateSpec("n", "count", "x", True, "count(DISTINCT x)")),
    ("max(coalesce(x, 0))", AggregateSpec("n", "max", "coalesce(x, 0)", False, "max(coalesce(x, 0))")),
    ("avg(distinct_count)", AggregateSpec("n", "avg", "distinct_count", False, "avg(distinct_count)")),
])
def test_parse_aggregate(text, spec):
    assert parse_aggregate("n", text) == spec


@pytest.mark.parametrize("text, fragment", [
    ("median(x)", "unsupported aggregate function"),
    ("sum(x) + sum(y)", "not a single aggregate"),
    ("x + 1", "not an aggregate"),
    ("sum(*)", "only count(*)"),
    ("count(distinct *)", "only count(*)"),
    ("min(distinct x)", "only count supports distinct"),
    ("sum()", "no argument"),
    ("sum(count(x))", "nests aggregate"),
])
def test_bad_aggregates(text, fragment):
    with pytest.raises(ExpressionError, match=fragment.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        parse_aggregate("n", text)
