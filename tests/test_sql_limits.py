"""Bounds on SQL text (``spark_jobs/spec/sql_limits.py``), checked before sqlglot parses it: deep
nesting, many set operations, a long query and too much query text in one circuit get one clean
problem naming the file, the node and the line, never a RecursionError traceback; texts at the
bounds still validate and compile."""
from __future__ import annotations

import pytest

from spark_jobs.cli.main import main
from spark_jobs.spec import validate_file
from spark_jobs.spec import loader
from spark_jobs.spec.sql_limits import (MAX_CHAIN, MAX_CIRCUIT_QUERY_CHARS, MAX_NESTING, MAX_QUERY_CHARS, MAX_SET_OPERATIONS,
                                        shape)

HEAD = """\
name: limits
inputs:
  t:
    schema: {k: long, v: long}
    source: {kind: changes, path: inbox/t, format: parquet}
nodes:
"""


def _sql_node(name: str, query: str) -> str:
    return f"  {name}:\n    op: sql\n    query: |\n      {query}\n"


def _file(tmp_path, body: str, outputs: str = "[q]"):  # noqa: ANN001, ANN202
    f = tmp_path / "c.yaml"
    f.write_text(HEAD + body + f"outputs: {outputs}\n")
    return f


def nested(n: int) -> str:
    q = "SELECT k, v FROM t"
    for i in range(n):
        q = f"SELECT k, v FROM ({q}) s{i}"
    return q


def union(branches: int) -> str:
    return " UNION ALL ".join(f"SELECT k FROM t WHERE v = {i}" for i in range(branches))


def nested_case(n: int) -> str:
    return "SELECT " + "CASE WHEN k = 1 THEN " * n + "1" + " ELSE 0 END" * n + " AS c FROM t"


def test_the_scan_skips_strings_comments_and_fields():
    assert shape("SELECT '(((' AS a, `((` , \"((\" -- ((((\n /* (( /* nested (( */ */ (k) FROM t").nesting == 1
    assert shape("SELECT CASE WHEN a THEN (b) END, window.end, w.case FROM t").nesting == 2
    assert shape("SELECT 'it''s (' FROM t").nesting == 0
    assert shape(union(4)).set_operations == 3
    assert shape("a AND (b OR c OR d) AND CASE WHEN x AND y THEN 1 END AND e").chain == 3


@pytest.mark.parametrize("query, fragment", [
    (nested(150), "it nests parentheses and CASE expressions 150 levels deep; at most 32"),
    (union(400), "the query has 399 UNION/INTERSECT/EXCEPT operations; at most 100"),
    (nested_case(60), "60 levels deep"),
    ("SELECT k FROM t WHERE " + " AND ".join(f"v<>{i}" for i in range(1_500)), "it chains 1499 AND/OR at one level"),
    ("SELECT k FROM t WHERE v IN (" + ", ".join(str(i) for i in range(120_000)) + ")",
     f"characters long; at most {MAX_QUERY_CHARS:,} are allowed"),
])
def test_past_a_bound_is_one_clean_problem_before_parsing(tmp_path, monkeypatch, capsys, query, fragment):
    f = _file(tmp_path, "  ok: {op: filter, input: t, where: \"k > 0\"}\n" + _sql_node("q", query))
    parsed: list[str] = []
    real = loader.parse_query
    monkeypatch.setattr(loader, "parse_query", lambda text: parsed.append(text) or real(text))
    (problem,) = validate_file(f)
    assert (problem.node, problem.line) == ("q", 11) and fragment in problem.message, problem
    assert parsed == []  # refused on the raw text: sqlglot never saw it
    assert len(str(problem)) < 1_000
    assert main(["validate", str(f)]) == 1
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err and fragment in out.out


def test_a_deeply_nested_expression_is_refused_with_its_node(tmp_path):
    where = "(" * 200 + "k" + ")" * 200 + " > 0"
    f = _file(tmp_path, f'  f: {{op: filter, input: t, where: "{where}"}}\n', "[f]")
    (problem,) = validate_file(f)
    assert problem.node == "f" and "200 levels deep" in problem.message


def test_the_circuits_query_text_has_a_budget(tmp_path):
    """Four queries of 19,000 characters: the one that passes 64,000 in total is refused by name;
    the others are checked as usual."""
    long_query = "SELECT k, '" + "x" * 18_960 + "' AS s FROM t"
    assert 18_000 < len(long_query) <= MAX_QUERY_CHARS and 4 * len(long_query) > MAX_CIRCUIT_QUERY_CHARS
    body = "".join(_sql_node(f"q{i}", long_query) for i in range(4))
    problems = validate_file(_file(tmp_path, body, "[q0]"))
    over = [p for p in problems if "queries come to more than 64,000 characters" in p.message]
    assert [p.node for p in over] == ["q3"]


@pytest.mark.parametrize("query", [nested(MAX_NESTING - 1), union(MAX_SET_OPERATIONS + 1),
                                   nested_case(MAX_NESTING),
                                   "SELECT k FROM t WHERE " + " AND ".join(f"v<>{i}" for i in range(MAX_CHAIN + 1)),
                                   # an IN list of 3,500 values (16,400 characters): every expression of
                                   # a query under MAX_QUERY_CHARS is accepted
                                   "SELECT k FROM t WHERE k IN (" + ",".join(map(str, range(3_500))) + ")"])
def test_texts_at_the_bounds_validate_and_compile(tmp_path, query):
    from spark_jobs.runtime.circuit import compile_file

    f = _file(tmp_path, _sql_node("q", query))
    assert validate_file(f) == []
    compiled = compile_file(str(f))
    assert compiled.incremental.outputs["q"]


def test_an_expression_over_its_bound_is_quoted_clipped(tmp_path):
    where = "k IN (" + ",".join(map(str, range(5_000))) + ")"
    (problem,) = validate_file(_file(tmp_path, f'  f: {{op: filter, input: t, where: "{where}"}}\n', "[f]"))
    assert problem.node == "f" and "at most 20,000 are allowed" in problem.message
    assert len(problem.message) < 400, problem.message
