"""Spark errors that a user's data caused, turned into messages (not Java stack traces).

Two kinds reach Spark although the input checks ran before it:

- an input file that Spark cannot read although its footer or header looked fine (a Parquet file
  with corrupt pages): ``input_errors`` turns it into ``InputRefused`` naming the file (exit 2);
- a value that breaks an operator's arithmetic (an overflow in a sum, a cast or a division in an
  expression): ``data_error`` turns it into one line naming the error and, when Spark's message
  quotes the failing expression, the circuit node that holds it (exit 1).

And one kind the circuit causes although validation passed it: an expression Spark's analyser
refuses (``analysis_error``, exit 1), e.g. a field of a column that is not a struct.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator, Mapping, Sequence
from urllib.parse import quote

from spark_jobs.executor.sources import InputFile, InputRefused
from spark_jobs.executor.sources.checks import own_key, spark_path_key

_CONDITION = re.compile(r"\[([A-Z][A-Z0-9_]+(?:\.[A-Z0-9_]+)?)\]")
# Error conditions of values, not of the engine (Spark's error classes; ANSI mode raises them)
DATA_CONDITIONS = ("ARITHMETIC_OVERFLOW", "DIVIDE_BY_ZERO", "CAST_OVERFLOW", "CAST_INVALID_INPUT",
                   "NUMERIC_VALUE_OUT_OF_RANGE", "DATETIME_OVERFLOW", "INVALID_ARRAY_INDEX",
                   "INVALID_FRACTION_OF_SECOND", "BINARY_ARITHMETIC_OVERFLOW", "INTERVAL_ARITHMETIC_OVERFLOW",
                   "DECIMAL_PRECISION_EXCEEDS_MAX_PRECISION", "INVALID_PARAMETER_VALUE", "ROUND_OVERFLOW")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:/[^\s'\"]+")  # a path Spark quotes in its message (no spaces: encoded)
_READ_FAILED = ("FAILED_READ_FILE", "Encountered error while reading file", "CANNOT_READ_FILE_FOOTER")


def _text(exc: BaseException) -> str:
    return str(exc)


def root_cause(exc: BaseException) -> str:
    """The innermost Java cause of a Spark error, as "Class: message" (or the error's first line)."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            cause = java
            while cause.getCause() is not None:
                cause = cause.getCause()
            return f"{cause.getClass().getSimpleName()}: {cause.getMessage()}"
        except Exception:
            pass
    caused = [line for line in _text(exc).splitlines() if line.startswith("Caused by: ")]
    if caused:
        return caused[-1][len("Caused by: "):].split(": ", 1)[-1] if ": " in caused[-1] else caused[-1]
    return first_line(exc)


def first_line(exc: BaseException) -> str:
    for line in _text(exc).splitlines():
        line = line.strip()
        if line and not line.startswith("An error occurred while calling"):
            return line.lstrip(": ")
    return type(exc).__name__


def unreadable_input(exc: BaseException, files: Sequence[InputFile]) -> InputRefused | None:
    """The input files a Spark read error names, as a refusal (None: not an input read error)."""
    text = _text(exc)
    if not any(marker in text for marker in _READ_FAILED):
        return None
    reported = {spark_path_key(u.rstrip(".,;")) for u in _URI.findall(text)}  # Spark's URI-encoded form
    named = [f for f in files if f.path in text or quote(f.path) in text or own_key(f.path) in reported]
    if not named:
        return None
    reason = f"cannot be read although its header or footer looked valid (corrupt data?): {root_cause(exc)}"
    return InputRefused([(f.path, reason) for f in named])


@contextmanager
def input_errors(files: Mapping[str, Sequence[InputFile]]) -> Iterator[dict]:
    """Refuse (``InputRefused``) when Spark fails reading one of a step's input files. Yields the
    mapping of input name -> files, for the caller to fill once it knows the files."""
    known = dict(files)
    try:
        yield known
    except InputRefused:
        raise
    except Exception as exc:
        refused = unreadable_input(exc, [f for fs in known.values() for f in fs])
        if refused is None:
            raise
        raise refused from None


def data_error(exc: BaseException, expressions: Mapping[str, Sequence[str]]) -> str | None:
    """One line for an error a value caused (an overflow, a bad cast), naming the circuit node
    whose expression Spark quotes if it does; None for any other error.

    ``expressions`` maps node names to the expression strings they hold."""
    text = _text(exc)
    condition = next((c for c in _CONDITION.findall(text) if c.split(".")[0] in DATA_CONDITIONS), None)
    if condition is None and not _is_java_arithmetic(exc):
        return None
    head = first_line(exc).split(" SQLSTATE", 1)[0].strip().rstrip(".")
    node = _node_of(_fragments(exc, text), expressions)
    where = f" in node {node!r}" if node else ""
    return (f"the step failed on a value of the data{where}: {head}. Nothing was committed; fix the "
            f"input (or the expression) and run the step again")


def analysis_error(exc: BaseException, expressions: Mapping[str, Sequence[str]]) -> str | None:
    """One line for an expression of the circuit that validation let through but Spark's analyser
    refuses (``s.x`` on a string column: validation does not know every column's type), naming
    the node when Spark quotes its expression; None for any other error."""
    if type(exc).__name__ != "AnalysisException":
        return None
    head = first_line(exc).split(" SQLSTATE", 1)[0].strip().rstrip(".;")
    node = _node_of(_fragments(exc, _text(exc)), expressions)
    where = f"node {node!r}: " if node else ""
    return (f"{where}Spark cannot evaluate an expression of the circuit: {head}. Nothing was committed; "
            f"fix the circuit (dbsp validate does not catch this one) and run the step again")


def _is_java_arithmetic(exc: BaseException) -> bool:
    name = type(exc).__name__
    return name in ("ArithmeticException", "NumberFormatException", "DateTimeException") or \
        "java.lang.ArithmeticException" in _text(exc)


def _fragments(exc: BaseException, text: str) -> list[str]:
    """The expression text Spark's query context quotes (e.g. ``x * 4`` of a ``select``)."""
    out = []
    try:
        out = [c.fragment() for c in exc.getQueryContext() if c.fragment()]  # type: ignore[attr-defined]
    except Exception:
        pass
    return out + [m.strip() for m in re.findall(r"== SQL[^\n]*==\n([^\n]+)", text)]


def _node_of(fragments: Sequence[str], expressions: Mapping[str, Sequence[str]]) -> str | None:
    """The node whose expression holds one of the fragments."""
    squash = lambda s: re.sub(r"\s+", "", s).lower()  # noqa: E731
    for frag in map(squash, fragments):
        for node, exprs in expressions.items():
            if any(frag and (frag in squash(e) or squash(e) in frag) for e in exprs if e):
                return node
    return None
