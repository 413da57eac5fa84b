"""Refusals raised inside Spark jobs, and their translation into one clear message on the driver.

Some values can only be judged while a job runs (an aggregate argument out of the range its exact
total supports, a running total that overflows its type). The SQL of such a check calls
``raise_error`` with a marked message (``raise_sql``); the job fails, and ``refusals_from_spark``
turns the failure back into ``ValueRefused`` carrying just that message, instead of a few hundred
lines of Java. Nothing is committed: the step fails before its manifest.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator

from spark_jobs.errors import DbspError, EXIT_REFUSED

MARKER = "dbsp refused: "
# Spark 4 prints raise_error's message as "[USER_RAISED_EXCEPTION] <message> SQLSTATE: P0001".
# Matching the error class too means the marker inside our own SQL text (echoed by an analysis
# error about something else) is never mistaken for a refusal.
_RAISED = re.compile(r"\[USER_RAISED_EXCEPTION\]\s*" + re.escape(MARKER) + r"(.*?)(?:\s+SQLSTATE: \w+|\n|$)")


class ValueRefused(DbspError, ValueError):
    """A value the step refuses (found inside a Spark job); the step committed nothing."""
    exit_code = EXIT_REFUSED
    retryable = False

    def user_message(self, reset_command: str | None = None) -> str:
        return f"refused; nothing was committed: {self}"


def sql_string(text: str) -> str:
    """``text`` as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def raise_sql(message: str, sql_type: str, *details: str) -> str:
    """SQL that fails the job with ``message`` (followed by the SQL strings ``details``, e.g. a
    value cast to string), typed ``sql_type`` so it can stand in any branch of a CASE."""
    text = sql_string(MARKER + message)
    if details:
        text = f"concat({text}, {', '.join(details)})"
    return f"CAST(raise_error({text}) AS {sql_type})"


def refusal_in(exc: BaseException) -> str | None:
    """The refusal message carried by a failed job's exception, if it is one."""
    found = _RAISED.search(str(exc))
    return found.group(1).strip() if found else None


@contextmanager
def refusals_from_spark() -> Iterator[None]:
    """Re-raise a job that failed on ``raise_sql`` as ``ValueRefused`` with its message alone."""
    try:
        yield
    except ValueRefused:
        raise
    except Exception as exc:  # Py4J / pyspark's captured exceptions: no common base to name
        message = refusal_in(exc)
        if message is None:
            raise
        raise ValueRefused(message) from None
