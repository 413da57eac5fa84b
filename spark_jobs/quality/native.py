"""The two most common expectations evaluated without Great Expectations, with GE's own result.

Why: importing ``great_expectations`` costs 2.5 s of CPU on a quiet machine (4-5 s under load,
11 s of wall time at load 10), and every new process pays it: `dbsp step` on the README's
example spent 11.5 s of its 11.8 s in the quality gate, nearly all of it that import, to check
6 rows. ``expect_column_values_to_not_be_null``, ``expect_column_values_to_be_between`` and
``expect_column_values_to_be_in_set`` are what most circuits declare; on a pandas frame (the frame GE gets for an in-process step) this
module computes exactly what GE's SUMMARY result holds (``tests/test_quality_native.py``
compares both on random frames), so the gate needs GE only for other expectations.

Only plain cases are served: integer or string/object columns for the null check, integer
and float columns (NaN is missing, as in GE) and int/float bounds for the range check, a set of
strings on a column of strings or of integers on an integer column for the set check, no ``row_condition`` and no argument GE would
read differently. Anything else (float columns, whose NaN GE reports as text; dates; unknown
arguments) goes to GE as before, and so do the declarations: ``accepts`` admits only argument
sets GE builds without error.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from spark_jobs.quality.report import CheckResult, jsonable
from spark_jobs.spec.model import Expectation

NOT_NULL = "expect_column_values_to_not_be_null"
BETWEEN = "expect_column_values_to_be_between"
IN_SET = "expect_column_values_to_be_in_set"
_ARGS = {NOT_NULL: frozenset({"column", "mostly"}), IN_SET: frozenset({"column", "value_set", "mostly"}),
         BETWEEN: frozenset({"column", "min_value", "max_value", "strict_min", "strict_max", "mostly"})}
PARTIAL = 5  # ``expectations.RESULT_FORMAT``'s partial_unexpected_count


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def accepts(exp: Expectation) -> bool:
    """Is this declaration one this module evaluates (and one GE would build without error)?"""
    kwargs = exp.kwargs or {}
    allowed = _ARGS.get(exp.name)
    if allowed is None or not set(kwargs) <= allowed or not isinstance(kwargs.get("column"), str):
        return False
    if "mostly" in kwargs and not (_number(kwargs["mostly"]) and 0 <= kwargs["mostly"] <= 1):
        return False
    if exp.name == IN_SET:
        values = kwargs.get("value_set")
        return (isinstance(values, list) and bool(values)
                and (all(isinstance(v, str) for v in values)
                     or all(isinstance(v, int) and not isinstance(v, bool) for v in values)))
    if exp.name == BETWEEN:
        low, high = kwargs.get("min_value"), kwargs.get("max_value")
        if (low is None and high is None) or any(v is not None and not _number(v) for v in (low, high)):
            return False
        if low is not None and high is not None and low > high:
            return False
        if any(not isinstance(kwargs.get(k, False), bool) for k in ("strict_min", "strict_max")):
            return False
    return True


def _integer(dtype: Any) -> bool:
    return getattr(dtype, "kind", None) in ("i", "u") or str(dtype) in (
        "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64")


def serves(exp: Expectation, frame: Any) -> bool:
    """Does this module give GE's result for ``exp`` on this pandas ``frame``?"""
    if not accepts(exp) or len(frame) == 0:
        return False
    column = exp.kwargs["column"]
    if column not in frame.columns or list(frame.columns).count(column) != 1:
        return False
    dtype = frame[column].dtype
    if exp.name == NOT_NULL:  # a float column's NaN GE reports as text: left to GE
        return _integer(dtype) or str(dtype) == "object"
    if exp.name == IN_SET:  # strings against strings, integers against integers: nothing else
        if isinstance(exp.kwargs["value_set"][0], str):
            return str(dtype) == "object" and all(isinstance(v, str) for v in frame[column].dropna())
        return _integer(dtype)
    return _integer(dtype) or getattr(dtype, "kind", None) == "f"


def is_pandas(frame: Any) -> bool:
    """A pandas frame (the frame an in-process step's checks get), not a Spark DataFrame."""
    return type(frame).__module__.startswith("pandas")


def _py(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


def _success(considered: int, unexpected: int, mostly: float) -> bool:
    """GE's ``_mostly_success`` (a map expectation with nothing to consider holds)."""
    if considered == 0:
        return True
    return (float(considered) - float(unexpected)) / float(considered) >= mostly


def check(exp: Expectation, target: str, frame: Any) -> CheckResult:
    """``exp`` on ``frame`` (``serves`` must hold): GE's SUMMARY result, by the same arithmetic."""
    kwargs = exp.kwargs
    col = frame[kwargs["column"]]
    missing = col.isna().to_numpy()
    n = len(col)
    if exp.name == NOT_NULL:
        bad = missing
        considered = n
    elif exp.name == IN_SET:
        allowed = set(kwargs["value_set"])
        values = [_py(v) for v in col.to_numpy(dtype=object, na_value=None)]
        bad = [not missing[i] and values[i] not in allowed for i in range(n)]
        considered = n - int(missing.sum())
    else:
        values = [_py(v) for v in col.to_numpy(dtype=object, na_value=None)]
        low, high = kwargs.get("min_value"), kwargs.get("max_value")
        bad = [False] * n
        for i, v in enumerate(values):
            if missing[i]:
                continue
            below = low is not None and (v <= low if kwargs.get("strict_min") else v < low)
            above = high is not None and (v >= high if kwargs.get("strict_max") else v > high)
            bad[i] = below or above
        considered = n - int(missing.sum())
    index = [i for i in range(n) if bad[i]]
    unexpected = len(index)
    partial_idx = index[:PARTIAL]
    labels = list(frame.index)
    partial = [None if exp.name == NOT_NULL else _py(col.iloc[i]) for i in partial_idx]
    result: dict[str, Any] = {"element_count": n, "unexpected_count": unexpected}
    if exp.name == NOT_NULL:
        result["unexpected_percent"] = unexpected / n * 100 if n else None
        result["partial_unexpected_list"] = partial
    else:
        missing_count = n - considered
        nonmissing = unexpected / considered * 100 if considered else None
        result.update({"unexpected_percent": nonmissing, "partial_unexpected_list": partial,
                       "missing_count": missing_count, "missing_percent": missing_count / n * 100,
                       "unexpected_percent_total": unexpected / n * 100,
                       "unexpected_percent_nonmissing": nonmissing})
    counts = sorted(Counter(partial).most_common(PARTIAL), key=lambda x: (-x[1], x[0] if x[0] is not None else 0))
    result["partial_unexpected_counts"] = [{"value": v, "count": c} for v, c in counts]
    result["partial_unexpected_index_list"] = [jsonable(labels[i]) for i in partial_idx]
    details: dict[str, Any] = {"kwargs": jsonable(kwargs), "line": exp.line}
    details.update(jsonable(result))
    return CheckResult(exp.name, target, exp.policy, _success(considered, unexpected, float(kwargs.get("mostly", 1))),
                       details)
