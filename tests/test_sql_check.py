"""Expressions are judged on their parse tree with an allow-list (no Spark): hostile and
non-incrementalizable ones are refused by `dbsp validate` with file, line, node and reason."""
from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.config import PROJECT_ROOT
from spark_jobs.spec import validate_file
from spark_jobs.spec.sql_check import ExpressionError, check
from spark_jobs.spec.sql_functions import ALLOWED, verdict

# Columns named like keywords and like the file-reading trick of issue #13.
CIRCUIT = """\
name: hostile
inputs:
  t:
    schema: {k: long, v: long, ts: timestamp, s: string, SELECT: string, value: string, text: string}
    source: {kind: changes, path: inbox/t}
nodes:
  f: {op: filter, input: t, where: "k > 0"}
  m:
    op: select
    input: f
    columns:
      k: k
      out: "v + 1"
  g: {op: aggregate, input: f, group_by: [k], aggregates: {n: "sum(v)"}}
outputs: [m, g]
"""
WHERE_LINE, SELECT_LINE, AGG_LINE = 7, 13, 14

# (expression, fragment of the reason); each is written into `where`, a select column and (if a
# row expression can be an aggregate's argument) an aggregate's argument.
HOSTILE = [
    ("lag(v) over (partition by k order by v) > 0", "OVER (...) makes a window function"),
    ("row_number() over (order by v) = 1", "use an 'aggregate' node"),
    ("sum(v) over (partition by k) > 0", "and its 'window' for windows over time"),
    ("rand() < 0.5", "'rand' is nondeterministic"),
    ("uuid() = s", "'uuid' is nondeterministic"),
    ("shuffle(split(s, ','))[0] = 'a'", "'shuffle' is nondeterministic"),
    ("monotonically_increasing_id() > 3", "'monotonically_increasing_id' is nondeterministic"),
    ("spark_partition_id() = 0", "'spark_partition_id' is nondeterministic"),
    ("ts < current_timestamp()", "'current_timestamp' reads the clock"),
    ("ts < current_timestamp", "'current_timestamp' reads the clock"),
    ("date(ts) = current_date", "no operator for views over the current time exists yet"),
    ("ts < now()", "'now' reads the clock"),
    ("v < unix_timestamp()", "'unix_timestamp' reads the clock"),
    ("reflect('java.lang.System', 'load', '/path/x.so') is null", "'reflect' calls Java methods"),
    ("java_method('java.lang.System', 'getenv', 'HOME') = s", "'java_method' calls Java methods"),
    ("`java_method`('java.lang.System', 'getenv', 'HOME') = s", "a circuit may not run code"),
    ("try_reflect('java.lang.Runtime', 'getRuntime') is null", "'try_reflect' calls Java methods"),
    ("`SELECT` = (SELECT first(value) FROM text.`/etc/passwd`)", "a subquery (SELECT ...)"),
    ("k in (select id from range(10))", "a subquery (SELECT ...)"),
    ("exists(select 1)", "a subquery (SELECT ...)"),
    ("input_file_name() = s", "'input_file_name' reads files"),
    ("current_user() = s", "'current_user' reads the environment"),
    ("my_udf(v) > 0", "'my_udf' is not an allowed function"),
    ("default.my_udf(v) > 0", "a qualified function name (db.function)"),
    ("s = '${env:HOME}'", "Spark's variable substitution"),
    ("s = ${system:user.name}", "Spark's variable substitution"),
    ("v > 0 --\r or (SELECT 1) = 1", "comments are not allowed"),
    ("window(ts, '1 hour').start is not null", "use an 'aggregate' node with window: {column: ts"),
    ("size(explode(split(s, ','))) > 0", "is a generator"),
    ("raise_error('stop') is null", "raises an error on purpose"),
    ("max(v) > 1", "aggregate function 'max' in a row expression"),
    ("transform(array(v), x -> x + rand())[0] > 0", "'rand' is nondeterministic"),
    ("s = 'a' 'b'", "two string literals side by side"),
    ("s:a", "an alias inside an expression"),
    ("v > :limit", "parameter markers"),
]


def _problems(tmp_path: Path, text: str) -> list:
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    return validate_file(path)


def test_the_circuit_is_valid_as_written(tmp_path):
    assert _problems(tmp_path, CIRCUIT) == []


@pytest.mark.parametrize("expr, fragment", HOSTILE, ids=[h[0][:40] for h in HOSTILE])
def test_hostile_expression_refused_everywhere(tmp_path, expr, fragment):
    quoted = expr.replace("\\", "\\\\").replace('"', '\\"').replace("\r", "\\r")
    for old, line, node in [('"k > 0"', WHERE_LINE, "f"), ('"v + 1"', SELECT_LINE, "m"),
                            ('"sum(v)"', AGG_LINE, "g")]:
        text = CIRCUIT.replace(old, f'"{quoted}"' if old != '"sum(v)"' else f'"sum({quoted})"')
        found = _problems(tmp_path, text)
        match = [p for p in found if fragment in p.message]
        if node == "g" and "aggregate function" in fragment:
            match = [p for p in found if "nests aggregate" in p.message]
        assert match, f"{expr!r} in node {node}: no problem mentions {fragment!r}: {found}"
        p = match[0]
        assert (Path(p.file).name, p.line, p.node) == ("hostile.yaml", line, node), p


def test_at_least_twenty_hostile_cases():
    assert len(HOSTILE) >= 20


ALLOWED_EXPRESSIONS = [
    "coalesce(s, 'x') || '!'", "nvl(v, 0) + nullif(k, 0)", "if(v > 1, 'big', 'small')",
    "case when v is null then 0 when v > 9 then 2 else 1 end", "cast(v as double) / 2",
    "try_cast(s as int) is not null", "upper(substr(s, 1, 3)) like 'A%'", "regexp_extract(s, '([0-9]+)', 1)",
    "round(sqrt(abs(v)), 2) between 0 and 10", "date_add(to_date(ts), 1) > date '2024-01-01'",
    "date_trunc('hour', ts)", "year(ts) * 100 + month(ts)", "datediff(to_date(ts), date '2024-01-01')",
    "unix_timestamp(ts) > 0", "ts >= timestamp '2024-01-01 00:00:00' - interval 2 days",
    "named_struct('a', v, 'b', s).a", "array(v, k)[0]", "map('k', v)['k']", "element_at(arr, 1)",
    "transform(arr, x -> x * v)", "aggregate(arr, 0L, (acc, x) -> acc + x)", "filter(arr, x -> x > k)",
    "sha2(s, 256) <> md5(s)", "xxhash64(k, s)", "get_json_object(s, '$.a.b')", "`SELECT` || value || text",
    "greatest(v, k, 0)", "v % 7 = pmod(k, 7)", "v div 2", "bit_count(v) & 1 = 1", "hex(v) = 'FF'",
    "from_json(s, 'a INT').a", "parse_url(s, 'HOST')", "format_string('%05d', v)", "s rlike '^[a-z]+$'",
]


@pytest.mark.parametrize("expr", ALLOWED_EXPRESSIONS)
def test_allowed_expressions(expr):
    assert check(expr).refusals == ()


def test_columns_come_from_the_tree():
    found = check("`SELECT` || value || text || 'SELECT value FROM text' || s.f || m['k'] || "
                  "transform(arr, x -> x + k)[0]")
    assert found.columns == ("SELECT", "value", "text", "s", "m", "arr", "k")  # x is a lambda variable
    assert check("select").refusals  # a bare SELECT is a query, not a column: backquote it


def test_unknown_column_in_expression_names_the_column_with_did_you_mean(tmp_path):
    found = _problems(tmp_path, CIRCUIT.replace('"v + 1"', '"valeu + 1"'))
    assert [p.message for p in found if "unknown column 'valeu'" in p.message and "did you mean 'value'" in p.message]


def test_bare_clock_word_as_unknown_column_is_explained(tmp_path):
    found = _problems(tmp_path, CIRCUIT.replace('"k > 0"', '"ts < localtimestamp"'))
    assert [p for p in found if "unknown column 'localtimestamp'" in p.message and "reads the clock" in p.message]


@pytest.mark.parametrize("expr", ["s = 'open", "(v + 1", "v + 1)", "`open", "v /* no end", "", "v; k", "v,"])
def test_unreadable(expr):
    with pytest.raises(ExpressionError):
        check(expr)


def test_long_and_deep_expressions_are_refused_quickly():
    with pytest.raises(ExpressionError, match="at most"):
        check("v + " * 5000 + "1")
    with pytest.raises(ExpressionError):
        check("(" * 3000 + "v" + ")" * 3000)


def test_catalog_verdicts():
    assert verdict("COALESCE").allowed and verdict("unix_timestamp", 1).allowed
    assert not verdict("unix_timestamp", 0).allowed
    assert verdict("reflect").reason and not verdict("reflect").allowed
    assert "aggregate node" in verdict("stddev").reason
    assert not set(ALLOWED) & {"rand", "uuid", "now", "reflect", "java_method", "input_file_name", "lag"}


def test_row_condition_of_an_expectation_is_checked(tmp_path):
    exp = ("outputs:\n  m:\n    expectations:\n      - expect_column_values_to_not_be_null:\n"
           "          {column: k, row_condition: \"java_method('java.lang.System', 'getenv', 'HOME') = 'x'\", "
           "condition_parser: spark}\n  g: {}\n")
    found = _problems(tmp_path, CIRCUIT.replace("outputs: [m, g]\n", exp))
    assert [p for p in found if "'java_method' calls Java methods" in p.message and p.node == "m" and p.line == 18]
    other_parser = exp.replace("condition_parser: spark", "condition_parser: great_expectations")
    found = _problems(tmp_path, CIRCUIT.replace("outputs: [m, g]\n", other_parser))
    assert [p for p in found if "needs 'condition_parser: spark'" in p.message]
    fine = exp.replace("java_method('java.lang.System', 'getenv', 'HOME') = 'x'", "out > 1")
    assert _problems(tmp_path, CIRCUIT.replace("outputs: [m, g]\n", fine)) == []


@pytest.mark.parametrize("path", sorted((PROJECT_ROOT / "circuits").glob("*.yaml"))
                         + sorted((PROJECT_ROOT / "bench" / "circuits").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_every_example_circuit_still_validates(path):
    assert validate_file(path) == []
