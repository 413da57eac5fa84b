"""CSV files read in-process, value for value as the Spark path reads them (``formats.plan_csv``).

Spark reads a file's lines (split at ``\\n``, ``\\r\\n`` or ``\\r``), skips the ones that are
blank once trimmed, takes the first as the header (checked in the driver, ``csv_header``, the same
code on both engines), splits each other line into fields (univocity, with Spark's settings: an
unquoted empty field and a quoted empty one are both NULL, spaces kept), reads every field as a
string and casts it to the declared type (``text_values``, ``try_cast``'s rules); a line with
another number of fields than the header is malformed, its values padded with NULLs or cut.

This reader takes the fields any CSV writer produces: unquoted fields without a quote character,
and fields quoted whole (``"a, b"``) with no quote or backslash inside. Anything else (a doubled
quote, a backslash escape inside quotes, a quote in the middle of a field, text after a closing
quote, a quoted line break) is univocity's own reading and raises ``NotLocal``: the step runs on
Spark, which reads it. So does a file that is not UTF-8 (Java replaces bad bytes its own way).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from spark_jobs.executor.arrow.compiler.sql_types import LONG, SparkType
from spark_jobs.executor.engine import NotLocal
from spark_jobs.executor.sources.formats import (MALFORMED, MAX_WEIGHT, WEIGHT_DELETE, WEIGHT_INT, WEIGHT_NULL,
                                                 WEIGHT_RANGE, Declared, cast_check, shared_checks)
from spark_jobs.spec.model import WEIGHT

from . import text_values as tv
from .file_checks import FileTally
from .records import FileRows, sql_type
from .text_files import lines_of, read_text

MAX_COLUMNS = 20480  # univocity's limit as Spark sets it (maxColumns)
_SIMPLE: dict[str, Callable[[str], Any]] = {
    "string": lambda s: s, "double": tv.double_text, "float": tv.float_text, "boolean": tv.boolean_text,
    "date": tv.date_text, "timestamp": tv.timestamp_text,
    "timestamp_ntz": lambda s: tv.timestamp_text(s, zoned=False), "binary": lambda s: s.encode("utf-8"),
}


def caster(t: SparkType) -> Callable[[str], Any]:
    """The value ``try_cast(field AS t)`` gives a CSV field, as ``records`` stores it."""
    if t.is_integral:
        return lambda s: tv.integral_text(s, t)
    if t.is_decimal:
        return lambda s: tv.exact_decimal_value(s, t.precision, t.scale)
    if t.name in _SIMPLE:
        return _SIMPLE[t.name]
    raise NotLocal(f"a CSV column of type {t} is read by Spark")


def separator(options: dict[str, Any]) -> str:
    """The field separator the options name (``sep``/``delimiter``; ``\\t`` for a tab)."""
    sep = str(options.get("sep") or options.get("delimiter") or ",")
    return "\t" if sep == "\\t" else sep


def checks(d: Declared) -> list:
    """The checks a CSV file answers (the Spark path's ``plan_csv`` list)."""
    return [MALFORMED] + [cast_check(c, t) for c, t in d.types.items() if sql_type(t).name != "string"] \
        + shared_checks(d)


def _fields(line: str, sep: str, path: str, number: int) -> list[str | None]:
    """The fields of one line: an empty one is NULL; ``NotLocal`` for quoting only univocity reads."""
    if '"' not in line:
        return [f if f else None for f in line.split(sep)]
    out: list[str | None] = []
    at, end = 0, len(line)
    while True:
        if line.startswith('"', at):
            close = line.find('"', at + 1)
            inner = line[at + 1:close] if close >= 0 else ""
            after = close + 1
            if close < 0 or "\\" in inner or (after < end and not line.startswith(sep, after)):
                raise _odd(path, number)
            out.append(inner or None)
            at = after
        else:
            stop = line.find(sep, at)
            stop = end if stop < 0 else stop
            text = line[at:stop]
            if '"' in text:
                raise _odd(path, number)
            out.append(text or None)
            at = stop
        if at >= end:
            return out
        at += len(sep)
        if at == end:
            out.append(None)
            return out


def _odd(path: str, number: int) -> NotLocal:
    return NotLocal(f"{path}, line {number}: a quote inside a CSV field is read by Spark's own CSV parser")


def read_file(path: str, header: Sequence[str], d: Declared) -> FileRows:
    """The rows of one CSV file whose header passed the checks (``csv_header``/``column_problems``).
    Lines are split first, then each column is cast and checked as a whole."""
    sep = separator(d.options)
    if len(sep) != 1 or sep in '"\\' or sep.isspace() and sep != "\t":
        raise NotLocal(f"the CSV separator {sep!r} is read by Spark")
    tally = FileTally(checks(d))
    width = len(header)
    records = []
    lines = ((n, line) for n, line in lines_of(read_text(path)) if tv.java_trim(line))  # blank lines skipped
    next(lines, None)  # the header line
    for number, line in lines:
        fields = _fields(line, sep, path, number)
        if len(fields) != width:
            if len(fields) > MAX_COLUMNS:
                raise NotLocal(f"{path}, line {number}: more fields than univocity reads")
            tally.fail(MALFORMED.key, line)
            fields = (fields + [None] * width)[:width]
        records.append(fields)
    raw = dict(zip(header, zip(*records))) if records else {h: () for h in header}
    rows = FileRows(tally)
    for c, t in d.types.items():
        spark_type = sql_type(t)
        cast = caster(spark_type)
        values = [None if x is None else cast(x) for x in raw[c]]
        rows.values[c] = values
        if spark_type.name != "string":
            for x, v in zip(raw[c], values):
                if v is None and x is not None:
                    tally.fail(f"cast:{c}", x)
    for c in d.not_null:
        for _ in range(raw[c].count(None)):
            tally.fail(f"null:{c}")
    for c, allowed in d.one_of.items():
        for v in rows.values[c]:
            if v is not None and v not in allowed:
                tally.fail(f"one_of:{c}", v)
    if d.allow_weight and WEIGHT in raw:
        rows.weights = [_weight(x, d.inserts_only, tally) for x in raw[WEIGHT]]
    else:
        rows.weights = [1] * len(records)
    return rows


def _weight(raw: str | None, inserts_only: bool, tally: FileTally) -> int:
    """A row's weight from its ``_weight`` field, failing the weight checks as Spark's group does."""
    if raw is None:
        tally.fail(WEIGHT_NULL.key)
        return 1
    w = tv.integral_text(raw, LONG)
    if w is None:
        tally.fail(WEIGHT_INT.key, raw)
        return 1
    if not -MAX_WEIGHT <= w <= MAX_WEIGHT:
        tally.fail(WEIGHT_RANGE.key, raw)
    if inserts_only and w < 0:
        tally.fail(WEIGHT_DELETE.key, str(w))
    return w


__all__ = ["caster", "checks", "read_file", "separator"]
