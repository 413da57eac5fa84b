"""Running totals of linear aggregates (count, sum, avg), named and finished the same way on
both engines.

Why one module: the totals a step appends to an ``aggregate_linear`` trace are read back by the
next step, which may run on the other engine; the column names, their meaning and the SQL that
turns a group's totals into its output row must be one definition. Engine-free (strings only):
the Spark kernel hands the SQL to Spark, the Arrow kernel to the expression compiler.

Per group: ``__rows`` = sum of weights; per aggregate i with an argument, ``__c{i}`` = sum of
weights of rows whose argument is not NULL, and for sum/avg ``__s{i}`` = sum of argument x weight
(in Spark's SUM type of the argument).
"""
from __future__ import annotations

ROWS = "__rows"


def q(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def count_name(i: int) -> str:
    return f"__c{i}"


def sum_name(i: int) -> str:
    return f"__s{i}"


def finish_sql(i: int, func: str, arg: str | None, prefix: str = "") -> str:
    """SQL of a linear aggregate's value from its group's totals (columns ``prefix + name``)."""
    if arg is None:
        return q(prefix + ROWS)
    count = q(prefix + count_name(i))
    if func == "count":
        return count
    total = q(prefix + sum_name(i))
    if func == "sum":
        return f"CASE WHEN {count} > 0 THEN {total} END"  # SUM of no non-null value is NULL
    return f"CASE WHEN {count} > 0 THEN {total} / {count} END"  # AVG; also no ANSI division by 0
