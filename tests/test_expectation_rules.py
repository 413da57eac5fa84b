"""Expectations are checked at validation (spark_jobs/spec/expectation_rules.py): the catalog is
the installed Great Expectations' own, every GE expectation that carries SQL is refused by name
or has its SQL checked like a node's, and names, arguments and argument types are judged
before any step runs."""
from __future__ import annotations

import json

import pytest

from spark_jobs.cli.main import main
from spark_jobs.spec import validate_file
from spark_jobs.spec.expectation_rules import CATALOG, INTERNAL, expectations

HEAD = """\
name: checked
inputs:
  t:
    schema: {k: long, s: string, d: date}
    source: {kind: changes, path: inbox/t, format: parquet}
nodes:
  v: {op: filter, input: t, where: "k > 0"}
outputs:
  v:
    expectations:
"""
HOSTILE_CONDITION = "java_method('java.lang.Runtime', 'getRuntime') IS NOT NULL"


def _problems(tmp_path, name: str, kwargs: dict) -> list[str]:  # noqa: ANN001
    f = tmp_path / "c.yaml"
    f.write_text(HEAD + f"      - {name}: {json.dumps(kwargs)}\n")
    return [p.message for p in validate_file(f)]


def _value(kind: str, arg: dict):  # noqa: ANN202
    """A value of ``kind`` for a generated declaration (columns name the input's column k)."""
    return {"column": "k", "columns": ["k"], "number": 1, "integer": 1, "string": "x", "strings": ["x"],
            "list": [1], "dict": {}, "boolean": True, "date": "2024-01-01", "null": None}.get(
        kind, (arg.get("values") or [None])[0])


def _required(name: str) -> dict:
    args = expectations()[name]["args"]
    return {a: _value(spec["kinds"][0], spec) for a, spec in args.items() if spec["required"]}


def _ge_registry() -> dict:
    from spark_jobs.quality.expectations import _registry

    return _registry()


def test_the_catalog_is_the_installed_great_expectations():
    """Regenerate it: a GE upgrade that adds, removes or retypes an argument fails here
    (python -m spark_jobs.quality.catalog > spark_jobs/spec/ge_catalog.json)."""
    from spark_jobs.quality.catalog import catalog_from_ge

    assert json.loads(json.dumps(catalog_from_ge(), default=str)) == json.loads(CATALOG.read_text())
    assert set(expectations()) == set(_ge_registry())


def _sql_fields(cls: type) -> list[str]:
    """Arguments of a GE class that hold SQL or name other data, found from the class itself."""
    words = ("query", "sql", "table_name", "data_source", "row_condition")
    return [f for f in cls.__fields__ if any(w in f for w in words)]


def test_every_sql_bearing_expectation_is_refused_or_checked(tmp_path):
    """Each GE expectation class with an argument that holds SQL or names other data: a query
    or another table is refused by name; a row_condition is checked like a node's expression
    (a hostile one refused, a plain one accepted)."""
    refused, checked = [], []
    for name, cls in sorted(_ge_registry().items()):
        fields = _sql_fields(cls)
        if not fields:
            continue
        outside = [f for f in fields if f != "row_condition"]
        if outside:
            kwargs = {**_required(name), **{f: "SELECT * FROM {batch}" for f in outside}}
            found = _problems(tmp_path, name, kwargs)
            assert any(f"{name} is refused" in p for p in found), (name, found)
            refused.append(name)
            continue
        kwargs = {**_required(name), "row_condition": HOSTILE_CONDITION, "condition_parser": "spark"}
        assert any("java_method" in p for p in _problems(tmp_path, name, kwargs)), name
        kwargs["row_condition"] = "k > 1"
        assert _problems(tmp_path, name, kwargs) == [], name
        checked.append(name)
    assert {"expect_query_results_to_match_comparison", "unexpected_rows_expectation",
            "expect_table_row_count_to_equal_other_table"} <= set(refused)
    assert len(checked) > 40


def test_every_other_expectation_validates_with_its_required_arguments(tmp_path):
    for name in expectations():
        if set(_sql_fields(_ge_registry()[name])) - {"row_condition"}:
            continue  # refused by name (above)
        assert _problems(tmp_path, name, _required(name)) == [], name


def test_the_issues_base_query_is_refused_at_validation(tmp_path, capsys):
    kwargs = {"base_query": "SELECT TRANSFORM(k) USING 'cat /etc/passwd' FROM {batch}",
              "comparison_query": "SELECT 1", "comparison_data_source_name": "x"}
    f = tmp_path / "c.yaml"
    f.write_text(HEAD + f"      - expect_query_results_to_match_comparison: {json.dumps(kwargs)}\n")
    assert main(["validate", str(f)]) == 1
    out = capsys.readouterr().out
    assert "c.yaml:11: node 'v': expect_query_results_to_match_comparison is refused" in out, out


@pytest.mark.parametrize("name, kwargs, fragment", [
    ("expect_column_values_to_not_be_nul", {"column": "k"}, "did you mean expect_column_values_to_not_be_null"),
    ("expect_column_values_to_be_between", {"colum": "k", "min_value": 0}, "unknown argument 'colum' (did you mean 'column'?)"),
    ("expect_column_values_to_be_between", {"min_value": 0}, "missing argument(s) column"),
    ("expect_column_values_to_not_be_null", {"column": "k", "mostly": "high"}, "argument 'mostly' is \"high\"; expected a number"),
    ("expect_column_values_to_not_be_null", {"column": "k", "mostly": 2}, "argument 'mostly' is 2; expected a number between 0.0 and 1.0"),
    ("expect_column_values_to_not_be_null", {"column": 5}, "argument 'column' is 5; expected a column name"),
    ("expect_column_values_to_be_between", {"column": "k", "min_value": {"$PARAMETER": "low"}}, "suite parameter"),
    ("expect_column_values_to_not_be_null", {"column": "k", "result_format": "COMPLETE"}, "bookkeeping"),
    ("expect_column_values_to_be_in_set", {"column": "k", "value_set": "abc"}, "expected a list"),
    ("expect_column_pair_values_to_be_equal", {"column_A": "k", "column_B": "s", "ignore_row_if": "sometimes"},
     "expected one of 'both_values_are_missing'"),
    ("expect_column_values_to_not_be_null", {"column": "nope"}, "column 'nope' is not a column of 'v'"),
])
def test_names_arguments_and_types_are_checked(tmp_path, name, kwargs, fragment):
    found = _problems(tmp_path, name, kwargs)
    assert any(fragment in p for p in found), found


def test_bounds_must_fit_the_declared_column_type(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(HEAD.replace("outputs:\n  v:\n    expectations:\n", "outputs: [v]\n").replace(
        "source: {kind: changes, path: inbox/t, format: parquet}",
        "source: {kind: changes, path: inbox/t, format: parquet}\n    expectations:\n"
        "      - expect_column_values_to_be_between: {column: k, min_value: '2024-01-01'}\n"
        "      - expect_column_values_to_be_in_set: {column: s, value_set: [1, 2]}\n"
        "      - expect_column_values_to_be_between: {column: d, min_value: '2024-01-01'}"))
    messages = [p.message for p in validate_file(f)]
    assert any("min_value \"2024-01-01\" is not a number, but column 'k' is long" in m for m in messages), messages
    assert any("value_set 1 is a number, but column 's' is a string" in m for m in messages), messages
    assert len(messages) == 2


def test_internal_arguments_are_in_every_expectation():
    for spec in expectations().values():
        assert INTERNAL - {"library_metadata"} <= set(spec["args"])
