"""What an sql node compiles to, without Spark: the operators, the text Spark receives, the state
the incremental circuit keeps, and what explain and draw show."""
from __future__ import annotations

from spark_jobs.ir.explain import sql_lowering_text, state_role, to_dot
from spark_jobs.ir.graph import state_of
from tests.streams import compile_path, compile_text

INPUTS = """
inputs:
  a:
    schema: {k: long, x: long, s: string}
    source: {kind: changes, path: a}
  b:
    schema: {k: long, y: long}
    source: {kind: changes, path: b}
"""


def _one(query: str):
    return compile_text("name: t\n" + INPUTS + f"nodes:\n  q: {{op: sql, query: \"{query}\"}}\noutputs: [q]\n")


def test_spark_receives_the_authors_text_with_columns_replaced():
    # sqlglot would print to_date(s) (dropping the format: a different result in Spark)
    c = _one("SELECT k, to_date(s, 'yyyy-MM-dd') AS d, regexp_extract(s, '(a)(b)', 1) AS r FROM a")
    (cols,) = [n.param("columns") for n in c.query if n.id == "q"]
    assert dict(cols) == {"k": "`k`", "d": "to_date(`s`, 'yyyy-MM-dd')", "r": "regexp_extract(`s`, '(a)(b)', 1)"}


def test_boolean_and_null_literals_and_a_cast_in_a_conjunct_reach_spark_whole():
    """Found by tests/test_sql_fuzz.py: sqlglot keeps no position of TRUE/FALSE/NULL, so a query
    selecting one was refused; and the text of ``x = CAST(2.0 AS DOUBLE)`` beside another
    conjunct lost its last ')' (sqlglot parses the cut text to the same tree), so Spark refused it."""
    c = _one("SELECT k, true AS t, NULL AS n, NOT false AS nf FROM a WHERE (x IN (0, 1) AND k = CAST(2.0 AS DOUBLE))")
    (cols,) = [n.param("columns") for n in c.query if n.id == "q"]
    assert dict(cols) == {"k": "`k`", "t": "TRUE", "n": "NULL", "nf": "NOT FALSE"}
    filters = {n.param("where") for n in c.query if n.op == "filter"}
    assert filters == {"(`x` IN (0, 1)) AND (`k` = CAST(2.0 AS DOUBLE))"}, filters


def test_a_self_outer_join_filters_its_preserved_side_by_the_inputs_names():
    """Found by tests/test_sql_fuzz.py: in ``a l RIGHT JOIN a r ON l.k = r.k AND r.s >= 'x'`` the
    condition on r filters r before the join, where r's columns are not yet renamed apart from
    l's (``s``, not ``r_s``): Spark failed on the unknown column at the first step."""
    c = _one("SELECT l.x, r.k AS rk FROM a AS l RIGHT JOIN a AS r ON l.k = r.k AND r.s >= 'x' AND r.x > 1")
    filters = {n.param("where") for n in c.query if n.op == "filter"}
    assert filters == {"(`s` >= 'x') AND (`x` > 1)"}, filters


def test_an_outer_or_semi_join_matching_one_column_twice_keys_it_once():
    """Found by tests/test_sql_fuzz.py: ``l.k = r.k AND l.k = r.y`` made key columns (k, k), and
    the key set of an outer join (or semi-join) holding a column twice failed at the first step
    ('Field "k" exists 2 times'). The repeated equality is kept as a condition beyond the keys."""
    import pytest

    from spark_jobs.spec import CircuitError

    for query in ("SELECT l.x, r.y FROM a AS l RIGHT JOIN b AS r ON l.k = r.k AND l.k = r.y",
                  "SELECT * FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.k AND b.k = a.x)"):
        c = _one(query)
        for n in c.query:
            for keys in ("left_keys", "right_keys", "keys"):
                value = n.param(keys) if n.op in ("join", "semijoin", "distinct", "keyset") else None
                assert not value or len(set(value)) == len(value), (query, n.op, value)
    with pytest.raises(CircuitError, match="matched against two columns"):
        _one("SELECT * FROM a WHERE (k, k) IN (SELECT k, y FROM b)")


def test_join_conditions_become_keys_and_pushed_filters():
    c = _one("SELECT a.k, y FROM a, b WHERE a.k = b.k AND b.y > 2 AND a.x < b.y AND s = 'p'")
    joins = [n for n in c.query if n.op == "join"]
    assert len(joins) == 1 and joins[0].param("left_keys") == ("k",) and joins[0].param("right_keys") == ("k",)
    filters = {n.param("where") for n in c.query if n.op == "filter"}
    assert filters == {"`s` = 'p'", "`y` > 2", "`x` < `y`"}
    # the one-table filters run before the join: the join integrates the filtered relations
    j = c.query[joins[0].id]
    assert all(c.query[i].op == "filter" for i in j.inputs)


def test_a_left_join_keeps_only_the_state_it_needs():
    c = _one("SELECT a.k, a.x, b.y FROM a LEFT JOIN b ON a.k = b.k AND b.y > 2")
    inc = c.incremental
    stateful = sorted(n.id for n in inc if state_of(inc, n))
    # I(a): the preserved side, joined and semi-joined (one trace, shared, also read by the bag
    # check); I(b): b's own integral, kept for the bag check only (deletes must not exceed inserts);
    # I(σ b): the inner join's right side; the integral of b's keys (for H) and of the key set (for
    # the semi-join)
    assert stateful == ["I(a)", "I(b)", "I(q.distinct4)", "I(q.filter1)", "I(q.map3)"], stateful
    assert "the bag check" in (state_role(inc, inc["I(b)"]) or ""), state_role(inc, inc["I(b)"])
    assert inc["q.map3"].columns == ("k",)  # only b's keys, not its rows
    text = sql_lowering_text(c.optimized, inc)
    assert "(keys with a match) LEFT OUTER JOIN b" in text and "H: looks up only the changed tuples" in text
    assert "(NULL-padded left rows)" in text


def test_explain_and_draw_show_the_fragments():
    c = compile_path("circuits/tpch_sql.yaml")
    text = sql_lowering_text(c.optimized, c.incremental)
    assert "q13:" in text and "LEFT OUTER JOIN orders ON" in text
    assert "q21:" in text and "NOT EXISTS" in text and "EXISTS" in text
    assert "q18:" in text and "HAVING" in text
    dot = to_dot(c.optimized)
    assert "LEFT OUTER JOIN orders" in dot


def test_a_cte_read_twice_is_lowered_once():
    c = _one("WITH big AS (SELECT k, x FROM a WHERE x > 2) SELECT b1.k, b2.x FROM big b1 JOIN big b2 ON b1.k = b2.k")
    assert len([n for n in c.query if n.op == "filter"]) == 1


def test_sql_and_yaml_nodes_read_each_other():
    c = compile_text("name: t\n" + INPUTS + """
nodes:
  big: {op: filter, input: a, where: "x > 2"}
  per_k: {op: sql, query: "SELECT k, count(*) AS n FROM big GROUP BY k"}
  many: {op: filter, input: per_k, where: "n > 1"}
outputs: [many]
""")
    assert c.query["many"].inputs == ("per_k",) and c.query["per_k"].columns == ("k", "n")


def test_with_recursive_becomes_a_recursive_scope():
    c = _one("WITH RECURSIVE r (k, x) AS (SELECT k, x FROM a UNION SELECT r.k, a.x FROM r JOIN a ON r.x = a.k) "
             "SELECT k, x FROM r")
    (scope,) = [n for n in c.incremental if n.op == "scope"]
    ops = {n.op for n in scope.body}
    assert {"feedback", "join_nested", "distinct_nested"} <= ops, ops


def test_an_sql_node_is_bound_once(monkeypatch):
    """Validation (columns, types, expressions, event time) and the IR's lowering all read the one
    plan kept on the node's parsed query: the binder runs once per sql node, however many checks
    read it."""
    from spark_jobs.spec.sql import node as sql_node

    calls: list[str] = []
    bind = sql_node._bind
    monkeypatch.setattr(sql_node, "_bind", lambda parsed, *a: calls.append(parsed.text) or bind(parsed, *a))
    c = compile_text("name: t\n" + INPUTS + "nodes:\n"
                     "  q: {op: sql, query: \"SELECT a.k, x + y AS z FROM a JOIN b ON a.k = b.k WHERE x > 0\"}\n"
                     "  r: {op: sql, query: \"SELECT k, count(*) AS n FROM q GROUP BY k\"}\n"
                     "outputs: [r]\n")
    assert sorted(calls) == sorted({*calls}) and len(calls) == 2, calls
    assert {n.id for n in c.query} >= {"q", "r"}
