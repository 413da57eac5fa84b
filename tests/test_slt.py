"""The sqllogictest runner (``tests/slt``) on the project's own files (``tests/slt/cases``): every
query a view maintained in-process over inserts, deletes and re-inserts, equal to DuckDB's batch
answer at every step and to the file's values at the end; every ``statement error`` query refused.
(``make slt SLT_DIR=...`` runs any folder of .test files against Spark SQL.)"""
from __future__ import annotations

import glob
import os

import pytest

from tests.slt.parse import parse
from tests.slt.runner import Options, check_expected, run_file, schedule

CASES = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "slt", "cases", "*.test")))


@pytest.mark.parametrize("path", CASES, ids=os.path.basename)
def test_slt_case_file(tmp_path, path):
    report = run_file(path, Options(oracle="duckdb", steps=4, chunk=200, workdir=str(tmp_path)))
    bad = [f"line {o.line} {o.status}{' (expected: ' + o.expected + ')' if o.expected == 'differ' else ''}: "
           f"{o.sql}\n  {o.reason[:600]}" for o in report.outcomes
           if (o.status != "agree" and not (o.status == "refused" and o.must_refuse)) or o.expected == "differ"]
    assert not bad, "\n".join(bad)
    assert not report.unsupported
    assert sum(o.must_refuse for o in report.outcomes) >= 1


EXTENDED = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "slt", "cases", "extended", "*.test")))


@pytest.mark.parametrize("path", EXTENDED, ids=os.path.basename)
def test_slt_extended_sample(tmp_path, path):
    """Every 8th query of the larger files (correlated subqueries in grouped queries, HAVING and
    LATERAL; NULL semantics; aggregates); ``make slt`` runs them whole."""
    report = run_file(path, Options(oracle="duckdb", steps=3, chunk=200, workdir=str(tmp_path), subset=8))
    bad = [f"line {o.line} {o.status}{' (expected: ' + o.expected + ')' if o.expected == 'differ' else ''}: "
           f"{o.sql}\n  {o.reason[:600]}" for o in report.outcomes
           if (o.status != "agree" and not (o.status == "refused" and o.must_refuse)) or o.expected == "differ"]
    assert not bad, "\n".join(bad)
    assert sum(o.status == "agree" for o in report.outcomes) >= 5


def test_parse_directives():
    text = ("hash-threshold 8\n\nstatement ok\nCREATE TABLE t(a INTEGER)\n\nskipif dbsp\nquery I nosort\nSELECT 1\n"
            "----\n1\n\nonlyif sqlite\nquery I nosort\nSELECT 2\n----\n2\n\nonlyif dbsp\nquery II rowsort label-x\n"
            "SELECT a,\n a FROM t\n----\n3 values hashing to 0123456789abcdef0123456789abcdef\n\nhalt\n\n"
            "query I nosort\nSELECT 3\n----\n3\n")
    p = parse(text)
    assert p.halted and p.skipped == 2
    st, q = p.records
    assert st.ok and st.sql == "CREATE TABLE t(a INTEGER)"
    assert (q.types, q.sort, q.label, q.sql) == ("II", "rowsort", "label-x", "SELECT a,\n a FROM t")
    assert q.hashed == (3, "0123456789abcdef0123456789abcdef") and q.values is None


def test_schedule_ends_at_the_tables_and_deletes_on_the_way():
    import random
    from collections import Counter

    rows = Counter({(i,): 1 + i % 2 for i in range(30)})
    changes = schedule(rows, 4, random.Random(1))
    total = Counter()
    for c in changes:
        total.update(c)
    assert +total == rows
    assert any(w < 0 for c in changes for w in c.values())


def test_expected_values_formatting():
    from collections import Counter

    from tests.slt.parse import Query

    q = Query("", "IRT", "rowsort", None, ["1", "2.500", "(empty)", "NULL", "NULL", "x"], None, 1)
    assert check_expected(q, Counter({(1, 2.5, ""): 1, (None, None, "x"): 1})) == "match"
    assert check_expected(q, Counter({(1, 2.5, "y"): 1, (None, None, "x"): 1})) == "differ"
