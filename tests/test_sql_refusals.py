"""Queries an sql node refuses: malformed, unknown names, and constructs that are not supported or
could not be maintained incrementally. Each refusal names the file, the YAML line of the query
line at fault, the position inside the query and what is wrong. No Spark needed."""
from __future__ import annotations

import pytest

from spark_jobs.spec.loader import check_text

BASE = """name: t
inputs:
  a:
    schema: {k: long, x: long, s: string}
    source: {kind: changes, path: a}
  b:
    schema: {k: long, y: long}
    source: {kind: changes, path: b}
nodes:
  q:
    op: sql
    query: |
      %s
outputs: [q]
"""
QUERY_LINE = 13  # the YAML line of the query's first line in BASE

# (query, words the message must contain, column inside the query line or None)
REFUSED = [
    ("SELECT k FROM a WHERE", "syntax error", 17),
    ("SELECT sum(x FROM a", "syntax error: Expecting )", 14),
    ("SELECT k FROM a WHERE s = 'x", "unterminated string literal", 27),
    ("SELECT k FROM a; SELECT k FROM b", "found 2 statements", None),
    ("INSERT INTO a SELECT * FROM b", "INSERT is not a query", None),
    ("DELETE FROM a", "DELETE is not a query", None),
    ("SELECT kk FROM a", "unknown column 'kk' (columns here: k, x, s) (did you mean 'k'?)", 8),
    ("SELECT k FROM aa", "unknown table 'aa'", 15),
    ("SELECT k FROM aa", "(did you mean 'a'?)", 15),
    ("SELECT a.xx FROM a", "'a' has no column 'xx' (columns: k, x, s) (did you mean 'x'?)", 8),
    ("SELECT z.k FROM a", "unknown table or alias 'z'", 8),
    ("SELECT k FROM a, b", "column 'k' is ambiguous", 8),
    ("SELECT a.k, b.k FROM a JOIN b ON a.k = b.k", "output column 'k' appears twice", 13),
    ("SELECT k, x + 1 FROM a", "give the expression 'x + 1' a name", 11),
    ("SELECT count(*) FROM a", "give the expression 'COUNT(*)' a name", 8),
    ("SELECT x AS _weight FROM a", "'_weight' is reserved", None),
    ("SELECT k, rand() AS r FROM a", "'rand' is nondeterministic", 11),
    ("SELECT k FROM a WHERE x > unix_timestamp()", "'unix_timestamp' reads the clock", None),
    ("SELECT k, current_date() AS d FROM a", "'current_date' reads the clock", 11),
    ("SELECT k, my_udf(x) AS u FROM a", "'my_udf'", 11),
    ("SELECT reflect('java.lang.System', 'getenv', 'HOME') AS h FROM a", "'reflect' calls Java methods", 8),
    ("SELECT java_method('java.lang.Runtime', 'getRuntime') AS r FROM a", "'java_method' calls Java methods", 8),
    ("SELECT k, lag(x) OVER (PARTITION BY k ORDER BY x) AS p FROM a", "window function", None),
    ("SELECT k FROM a LIMIT 3", "LIMIT without ORDER BY", 23),
    ("SELECT k FROM a ORDER BY k LIMIT 2 OFFSET 1", "OFFSET is not supported", None),
    ("SELECT k, collect_list(x) AS xs FROM a GROUP BY k", "aggregate function 'collect_list' is not supported", 11),
    ("SELECT k, sum(DISTINCT x, k) AS sx FROM a GROUP BY k", "sum(DISTINCT ...) of several columns", 11),
    ("SELECT k, x FROM a GROUP BY k", "column 'x' in the SELECT list is neither in GROUP BY nor inside an aggregate", 11),
    ("SELECT * FROM a GROUP BY k, x", "SELECT * in a grouped query: column 'a.s' is neither in GROUP BY", 8),
    ("SELECT b.* FROM a JOIN b ON a.k = b.k GROUP BY a.k, b.k", "column 'b.y' is neither in GROUP BY", 8),
    ("SELECT k FROM a WHERE sum(x) > 1", "aggregate function 'SUM(x)' in WHERE", 23),
    ("SELECT k, count(*) FILTER (WHERE x > 1) AS n FROM a GROUP BY k", "FILTER (WHERE ...) is not supported", None),
    ("SELECT k, count(*) AS n FROM a GROUP BY ROLLUP (k)", "GROUP BY ROLLUP is not supported", None),
    ("SELECT k FROM a WHERE (k, x) IN (SELECT k, y FROM b) OR k = 1", "(a, b) IN (subquery) in WHERE is not supported",
     None),
    ("SELECT k FROM a WHERE x > (SELECT y FROM b WHERE b.k = a.k)", "one that may return no row or several", None),
    ("SELECT k, x FROM a WHERE (k, x) NOT IN (SELECT k, y FROM b)", "NOT IN with several columns", None),
    ("SELECT k FROM a WHERE x > (SELECT y FROM b)", "a scalar subquery must be one aggregate", None),
    ("SELECT k, (SELECT max(y) FROM b WHERE b.k = a.x) AS m FROM a GROUP BY k", "is not a GROUP BY column", 45),
    ("SELECT k, s.n FROM a LEFT JOIN LATERAL (SELECT count(*) AS n FROM b WHERE b.k = a.k) AS s ON true", "LEFT JOIN LATERAL is not supported", None),
    ("SELECT k FROM a WHERE EXISTS (SELECT y FROM b WHERE b.k = a.k UNION SELECT x FROM a AS c)",
     "correlated reference", 59),
    ("SELECT k FROM a WHERE x IN (SELECT y, k FROM b)", "IN compares 1 value(s) with a subquery of 2 column(s)", None),
    ("SELECT k FROM a WHERE x = (SELECT 1 WHERE k > 2)", "a scalar subquery must be one aggregate", 35),
    ("SELECT * FROM VALUES (1, 2) AS v(p, q)", "VALUES is not supported", None),
    ("SELECT k FROM a NATURAL JOIN b", "NATURAL JOIN is not supported", None),
    ("SELECT k FROM a LATERAL VIEW explode(array(x)) t AS e", "LATERAL VIEW is not supported", None),
    ("SELECT k FROM db.a", "a qualified table name reads outside the circuit", 15),
    ("SELECT k FROM a TABLESAMPLE (10 PERCENT)", "TABLESAMPLE is not supported", None),
    ("SELECT k FROM a UNION SELECT k, y FROM b", "UNION needs the same number of columns", None),
    ("SELECT k FROM a SORT BY k", "SORT BY is not supported", None),
    ("SELECT DISTINCT ON (k) k, x FROM a", "DISTINCT ON is not supported", None),
    ("WITH t AS (SELECT k FROM a), t AS (SELECT k FROM b) SELECT k FROM t", "CTE 't' is defined twice", None),
    ("SELECT k FROM a CROSS JOIN b ON a.k = b.k", "CROSS JOIN takes no ON", None),
    ("SELECT k FROM a WHERE k IN (SELECT k FROM (SELECT k FROM b WHERE b.k = a.k) AS d)", "correlated reference",
     None),
    ("WITH RECURSIVE r AS (SELECT k FROM a UNION ALL SELECT k + 1 FROM r) SELECT k FROM r",
     "UNION ALL is not supported", None),
    ("WITH RECURSIVE r AS (SELECT k FROM r UNION SELECT k FROM a) SELECT k FROM r",
     "the first query of the UNION (the base case) must not read 'r'", None),
    ("SELECT * FROM (SELECT k, row_number() OVER (PARTITION BY k ORDER BY x) AS rn FROM a) t",
     "a ranking is supported as a top-k only", 26),
    ("SELECT * FROM (SELECT k, rank() OVER (ORDER BY x) AS r FROM a) t WHERE r >= 2",
     "must filter it with 'r <= k', 'r < k'", 26),
    ("SELECT * FROM (SELECT k, row_number() OVER (ORDER BY x) AS rn FROM a) t WHERE rn <= 2 OR k = 1",
     "a ranking is supported as a top-k only", 26),
    ("SELECT k, row_number() OVER (ORDER BY x) + 1 AS rn FROM a", "inside an expression is not supported", 11),
    ("SELECT k, rank() OVER (ORDER BY x) AS r, dense_rank() OVER (ORDER BY x) AS d FROM a",
     "one ranking window per SELECT", 42),
    ("SELECT k, row_number() OVER (PARTITION BY k) AS rn FROM a", "needs ORDER BY inside OVER", 11),
    ("SELECT k, count(*) AS n, rank() OVER (ORDER BY count(*)) AS r FROM a GROUP BY k",
     "over a grouped query is not supported", 26),
    ("SELECT k, row_number() OVER (ORDER BY x ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS rn FROM a",
     "a window frame", None),
    ("SELECT DISTINCT k, row_number() OVER (ORDER BY x) AS rn FROM a", "SELECT DISTINCT with a window", None),
    ("SELECT k FROM a ORDER BY k LIMIT x", "LIMIT takes a non-negative integer literal", 34),
    ("SELECT k FROM a ORDER BY 3 LIMIT 2", "ORDER BY position 3 is not in the SELECT list", 26),
    ("SELECT * FROM a JOIN b USING (z)", "USING (z): the left side has no column 'z'", None),
]


@pytest.mark.parametrize("query, words, col", REFUSED, ids=[f"{i:02d}" for i in range(len(REFUSED))])
def test_refused_with_position_and_reason(query, words, col):
    spec, problems = check_text(BASE % query, "c.yaml")
    assert problems, f"accepted: {query}"
    text = str(problems[0])
    assert text.startswith("c.yaml:"), text
    assert "node 'q'" in text, text
    assert words in text, text
    if col is not None:
        assert f"query line 1, column {col}:" in text, text
        assert text.startswith(f"c.yaml:{QUERY_LINE}:"), text


def test_at_least_thirty_refusals():
    assert len({q for q, _, _ in REFUSED}) >= 30


def test_the_yaml_line_of_a_later_query_line():
    text = BASE % "SELECT k,\n      x\n      FROM a\n      WHERE yy > 2"
    _, problems = check_text(text, "c.yaml")
    (p,) = problems
    assert str(p).startswith(f"c.yaml:{QUERY_LINE + 3}: node 'q': query line 4, column 7: unknown column 'yy'"), str(p)


def test_a_one_line_query_points_at_its_own_line():
    text = BASE.replace("    query: |\n      %s", '    query: "SELECT kk FROM a"')
    _, problems = check_text(text, "c.yaml")
    (p,) = problems
    assert str(p).startswith("c.yaml:12: node 'q': query line 1, column 8: unknown column 'kk'"), str(p)


def test_unknown_tables_and_cycles_through_sql_nodes():
    text = """name: t
inputs:
  a:
    schema: {k: long}
    source: {kind: changes, path: a}
nodes:
  p: {op: sql, query: "SELECT k FROM q"}
  q: {op: sql, query: "SELECT k FROM p"}
  r: {op: sql, query: "SELECT k FROM A"}
outputs: [p, r]
"""
    _, problems = check_text(text, "c.yaml")
    messages = [str(p) for p in problems]
    assert any("cycle p -> q -> p" in m for m in messages), messages
    assert not any("node 'r'" in m for m in messages), messages  # names match case-insensitively, as in Spark


def test_an_sql_node_inside_a_recursive_body_is_refused():
    text = """name: t
inputs:
  e:
    schema: {s: long, d: long}
    source: {kind: changes, path: e}
nodes:
  r:
    op: recursive
    body:
      step: {op: sql, query: "SELECT s, d FROM e"}
    outputs: [step]
outputs: [r]
"""
    _, problems = check_text(text, "c.yaml")
    assert any("cannot be inside a recursive body" in str(p) and "WITH RECURSIVE" in str(p) for p in problems), problems


def test_a_missing_query_is_a_schema_error():
    text = BASE.replace("    query: |\n      %s", "    where: x")
    _, problems = check_text(text, "c.yaml")
    assert any("missing required field 'query' for op 'sql'" in str(p) for p in problems), problems
