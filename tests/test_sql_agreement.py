"""sqlglot (validation) and Spark's own parser (before a step) agree on what an expression is.

Spark receives the author's text; ``executor/spark/parse_check.py`` parses it with the session's Catalyst
parser and judges that tree with the same catalog. These tests run both readers on the example
circuits, the allowed expressions and the hostile ones of ``test_sql_check.py``.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.executor.spark.parse_check import catalyst_parser, check_circuit, read_with_spark
from spark_jobs.ir.compile import compile_spec
from spark_jobs.runtime.circuit import CircuitRuntime
from spark_jobs.spec import CircuitError, load_circuit, output_columns
from spark_jobs.spec.loader import build_spec, read_yaml
from spark_jobs.spec.sites import expression_sites
from spark_jobs.spec.sql_check import check
from tests.test_sql_check import ALLOWED_EXPRESSIONS, CIRCUIT, HOSTILE

EXAMPLES = sorted((PROJECT_ROOT / "circuits").glob("*.yaml")) + sorted((PROJECT_ROOT / "bench" / "circuits").glob("*.yaml"))
# Texts Spark itself reads as harmless (a literal), refused at validation for what they do
# before or instead of parsing: the substitution reads the environment, two literals are joined.
SPARK_HARMLESS = {"s = '${env:HOME}'", "s = 'a' 'b'"}


@pytest.fixture(scope="module")
def parser(spark):
    return catalyst_parser(spark)


def _same_reading(parser, text: str) -> None:
    ours, spark = check(text), read_with_spark(parser, text)
    assert ours.refusals == () and spark.refusals == (), (text, ours.refusals, spark.refusals)
    assert {c.lower() for c in spark.columns} == {c.lower() for c in ours.columns}, text


def test_example_circuits_read_alike(parser):
    texts = {site.text for path in EXAMPLES for site in expression_sites(load_circuit(path))}
    assert len(texts) >= 10
    for text in sorted(texts):
        _same_reading(parser, text)


def test_allowed_expressions_read_alike(parser):
    for text in ALLOWED_EXPRESSIONS:
        _same_reading(parser, text)


@pytest.mark.parametrize("expr", [h[0] for h in HOSTILE])
def test_spark_side_refuses_hostile_texts_on_its_own(parser, expr):
    spark = read_with_spark(parser, expr)
    sqlglot_columns = {c.lower() for c in check(expr).columns}
    extra_columns = {c.lower() for c in spark.columns} - sqlglot_columns
    refused = bool(spark.refusals) or bool(extra_columns)
    assert refused == (expr not in SPARK_HARMLESS), (expr, spark)


def test_variable_substitution_is_why_the_text_rule_exists(parser):
    """sqlglot reads a plain string; Spark puts the environment in it before parsing."""
    literal = parser.parseExpression("'${env:HOME}'")
    assert literal.nodeName() == "Literal" and str(literal.toString()) == os.environ["HOME"]
    assert check("'${env:HOME}'").refusals  # refused at validation


def test_a_json_path_is_an_alias_to_sqlglot_and_a_call_to_spark(parser):
    assert check("s:a").refusals and read_with_spark(parser, "s:a").refusals


def _unvalidated(text: str, path: str = "c.yaml"):
    """A spec built without validation: what a step would see if the first check missed."""
    return build_spec(read_yaml(text, path))[0]


def test_check_circuit_refuses_with_file_line_and_node(spark):
    spec = _unvalidated(CIRCUIT.replace('"k > 0"', "\"java_method('java.lang.System', 'getenv', 'HOME') = s\""))
    with pytest.raises(CircuitError) as err:
        check_circuit(spark, spec)
    (problem,) = err.value.problems
    assert (problem.file, problem.line, problem.node) == ("c.yaml", 7, "f")
    assert "Spark's parser" in problem.message and "'java_method' calls Java methods" in problem.message


def test_check_circuit_refuses_a_column_that_spark_reads_as_a_builtin(spark):
    spec = _unvalidated(CIRCUIT.replace('"v + 1"', '"current_date"'))
    with pytest.raises(CircuitError, match="node 'm'.*Spark reads 'current_date' as a column"):
        check_circuit(spark, spec)


def test_check_circuit_passes_the_examples(spark):
    assert sum(check_circuit(spark, load_circuit(p)) for p in EXAMPLES) >= 10


def test_the_runtime_checks_before_handing_out_the_session(spark, tmp_path: Path):
    spec = _unvalidated(CIRCUIT.replace('"v + 1"', "\"reflect('java.lang.System', 'exit', 1)\""))
    spec_ok = _unvalidated(CIRCUIT)
    compiled = compile_spec(spec, output_columns(spec_ok))
    rt = CircuitRuntime(load_config(data_root=str(tmp_path)), compiled, "c.yaml")
    with pytest.raises(CircuitError, match="'reflect' calls Java methods"):
        rt.spark  # noqa: B018 - the property is the check


def test_quieting_parse_errors_leaves_pysparks_own_logger_in_place():
    """The parse check silences PySpark's query-context logger through PySpark's own logger
    class: a plain ``logging.Logger`` made first would be what PySpark logs a later analysis
    error with, and its ``errorClass=`` keyword would raise TypeError instead of the error.
    (A fresh process: this test session may have made the logger already.)"""
    import subprocess
    import sys

    code = ("import logging\n"
            "from pyspark.logger import PySparkLogger\n"
            "from spark_jobs.executor.spark.parse_check import _quiet_parse_errors\n"
            "with _quiet_parse_errors():\n"
            "    pass\n"
            "logger = logging.getLogger('SQLQueryContextLogger')\n"
            "assert isinstance(logger, PySparkLogger), type(logger)\n"
            "logger.propagate = False\n"
            "logger.exception('boom', errorClass='X')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
