"""The second check of a circuit's expressions: Spark's own parser, on the driver, before a step.

Validation judges every SQL text on sqlglot's parse (``spark_jobs/spec/sql_check.py``), and
Spark then receives the text as written. Two parsers can read one text differently (Spark
substitutes ``${env:...}`` before parsing, ends ``--`` comments elsewhere, reads ``a:b`` as a
JSON path); so before anything is evaluated, each text is parsed again by the session's Catalyst
parser (``sessionState.sqlParser.parseExpression``: the call ``F.expr`` makes, no Spark job) and
its unresolved tree is judged with the same catalog (``sql_functions.py``):

- every function call (``UnresolvedFunction``) must be an allowed built-in, unqualified;
- every node must be of a kind the allowed constructs produce (``_ALLOWED_NODES``): subqueries,
  windows, parameters, ``IDENTIFIER(...)``, JSON paths, ... are refused;
- the columns Spark reads must be the columns sqlglot found, so a text that is a column to one
  parser and a function or a keyword to the other is refused.

A Spark Connect client has no JVM in its process, so there this check is skipped (the first one
still holds); it runs in local and cluster mode, where the driver is this process.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from spark_jobs.spec import CircuitError, CircuitSpec, Problem
from spark_jobs.spec import sql_check, sql_functions
from spark_jobs.spec.sites import expression_sites

log = logging.getLogger(__name__)

# Catalyst node kinds (``nodeName``) the parser produces for the constructs sql_check allows.
_ALLOWED_NODES = frozenset("""
    Add Subtract Multiply Divide Remainder IntegralDivide UnaryMinus UnaryPositive BitwiseAnd
    BitwiseOr BitwiseXor BitwiseNot ShiftLeft ShiftRight ShiftRightUnsigned EqualTo EqualNullSafe
    LessThan LessThanOrEqual GreaterThan GreaterThanOrEqual And Or Not In Like ILike RLike IsNull
    IsNotNull CaseWhen Cast Literal Concat CreateNamedStruct Overlay StringLocate StringTrim
    StringTrimLeft StringTrimRight Substring TimestampAdd TimestampDiff LambdaFunction
    UnresolvedNamedLambdaVariable UnresolvedAttribute UnresolvedFunction UnresolvedExtractValue
    Alias UnresolvedStar
""".split())
_SUBQUERIES = ("Subquery", "ListQuery", "Exists")
_PARAMETERS = ("NamedParameter", "PosParameter")


@dataclass(frozen=True)
class SparkReading:
    """What Spark's parser found in a text: columns (first name part) and refusals."""

    columns: tuple[str, ...]
    refusals: tuple[str, ...]


def catalyst_parser(spark):
    """The session's SQL parser, or None for a Spark Connect session (no JVM here)."""
    try:
        return spark._jsparkSession.sessionState().sqlParser()
    except Exception:  # noqa: BLE001 - Connect sessions have no _jsparkSession
        return None


def _parts(node) -> list[str]:
    return list(node.nameParts().mkString("\u0001").split("\u0001"))


def read_with_spark(parser, text: str) -> SparkReading:
    """Parse ``text`` as Spark will and judge its tree (one Py4J round trip per node or so)."""
    try:
        with _quiet_parse_errors():
            root = parser.parseExpression(text)
    except Exception as exc:  # noqa: BLE001 - Spark's ParseException, over Py4J
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return SparkReading((), (f"Spark's parser cannot read it: {first[:200]}",))
    columns: list[str] = []
    refusals: list[str] = []
    stack: list[tuple[object, frozenset[str]]] = [(root, frozenset())]
    while stack:
        node, bound = stack.pop()
        kind = node.nodeName()
        if kind == "LambdaFunction":  # Spark's parser makes every name in the body a lambda variable
            names = node.arguments()
            bound = bound | {_parts(names.apply(i))[0].lower() for i in range(names.size())}
            stack.append((node.function(), bound))
            continue
        if kind == "UnresolvedNamedLambdaVariable":
            if _parts(node)[0].lower() not in bound:
                columns.append(_parts(node)[0])  # an outer column, read inside the lambda
            continue
        why = _judge(node, kind, columns)
        if why and why not in refusals:
            refusals.append(why)
        if why and kind != "UnresolvedFunction":
            continue
        children = node.children()
        stack.extend((children.apply(i), bound) for i in range(children.size()))
    return SparkReading(tuple(dict.fromkeys(columns)), tuple(refusals))


@contextmanager
def _quiet_parse_errors() -> Iterator[None]:
    """PySpark logs every parse error with its JVM stack; here a parse error is an answer.

    The logger is made as PySpark makes it (a ``PySparkLogger``): a plain ``logging.Logger``
    created here first would be the one PySpark gets later, and its ``exception(...,
    errorClass=...)`` call on it raises TypeError, hiding the user's real Spark error."""
    from pyspark.logger import PySparkLogger

    logger = PySparkLogger.getLogger("SQLQueryContextLogger")
    before, logger.disabled = logger.disabled, True
    try:
        yield
    finally:
        logger.disabled = before


def _judge(node, kind: str, columns: list[str]) -> str | None:
    if kind == "UnresolvedFunction":
        parts = _parts(node)
        if len(parts) > 1:
            return sql_check.QUALIFIED
        verdict = sql_functions.verdict(parts[0], int(node.arguments().size()))
        return None if verdict.allowed else f"'{verdict.name}' {verdict.reason}"
    if kind == "UnresolvedAttribute":
        columns.append(_parts(node)[0])
        return None
    if kind in _ALLOWED_NODES:
        return None
    if any(s in kind for s in _SUBQUERIES):
        return sql_check.SUBQUERY
    if "Window" in kind:
        return sql_check.OVER
    if kind in _PARAMETERS:
        return sql_check.PARAMETER
    return f"Spark reads part of it as {kind}, which is not an allowed expression form"


_CACHE: dict[tuple[int, str], SparkReading] = {}


def check_circuit(spark, spec: CircuitSpec) -> int:
    """Refuse (``CircuitError``) a circuit whose SQL texts Spark reads as something the
    checker did not allow; returns how many texts were checked (0 without a JVM)."""
    parser = catalyst_parser(spark)
    if parser is None:
        log.debug("Spark Connect session: expressions were checked at validation only")
        return 0
    problems: list[Problem] = []
    sites = list(expression_sites(spec))
    for site in sites:
        key = (id(spark), site.text)
        if key not in _CACHE:
            _CACHE[key] = read_with_spark(parser, site.text)
        reading = _CACHE[key]
        reasons = list(reading.refusals)
        try:
            expected = {c.lower() for c in sql_check.check(site.text).columns}
        except sql_check.ExpressionError as exc:
            reasons.append(f"the checker cannot read it: {exc}")
            expected = None
        if expected is not None:
            reasons += [f"Spark reads '{c}' as a column where the checker found none (a keyword or a "
                        f"built-in such as current_date to it)" for c in reading.columns
                        if c.lower() not in expected]
        problems += [Problem(spec.path, site.line, site.label,
                             f"{site.what}: '{site.text}' is refused by the check with Spark's parser: {why}")
                     for why in reasons]
    if problems:
        raise CircuitError(problems)
    return len(sites)
