"""JSON lines files read in-process with the Spark path's checks (``formats.plan_json``): a
corrupt line, unexpected keys, NULLs in non-nullable columns, the ``_weight`` rules; the values
as ``json_lines`` converts them."""
from __future__ import annotations

from spark_jobs.executor.arrow.compiler.sql_types import LONG, STRING
from spark_jobs.executor.sources.formats import (EXTRA_KEYS, MAX_WEIGHT, WEIGHT_DELETE, WEIGHT_INT, WEIGHT_NULL,
                                                 WEIGHT_RANGE, Declared, corrupt_check, shared_checks)
from spark_jobs.spec.model import WEIGHT

from . import json_lines as jl
from . import text_values as tv
from .file_checks import FileTally
from .records import FileRows, sql_type
from .text_files import lines_of, read_text


def checks(d: Declared) -> list:
    """The checks a JSON lines file answers (the Spark path's ``plan_json`` list)."""
    return [corrupt_check(d), EXTRA_KEYS] + shared_checks(d)


def read_file(path: str, d: Declared) -> FileRows:
    """The rows of one JSON lines file: one per line that is not blank (spaces only)."""
    tally = FileTally(checks(d))
    rows = FileRows(tally, {c: [] for c in d.types})
    converters = {c: jl.converter(sql_type(t)) for c, t in d.types.items()}
    if d.allow_weight:
        converters[WEIGHT] = jl.converter(STRING)  # raw text: "1.5" is reported, not dropped
    allowed = set(d.types) | ({WEIGHT} if d.allow_weight else set())
    for number, text in lines_of(read_text(path)):
        if not text.strip(" "):
            continue
        line = jl.parse_line(text, f"{path}, line {number}")
        values, corrupt = ({}, not line.empty) if line.value is None else jl.convert_object(line.value, converters)
        if corrupt:
            tally.fail("corrupt", text)
        if line.keys is not None:
            extra = list(dict.fromkeys(k for k in line.keys if k not in allowed))
            if extra:
                tally.fail(EXTRA_KEYS.key, "\n".join(extra))
        ok = not corrupt
        for c in d.types:
            rows.values[c].append(values.get(c))
        for c in d.not_null:
            if ok and values.get(c) is None:
                tally.fail(f"null:{c}")
        for c, allowed_values in d.one_of.items():
            value = values.get(c)
            if value is not None and value not in allowed_values:
                tally.fail(f"one_of:{c}", value)
        weight = 1
        if d.allow_weight:
            raw = values.get(WEIGHT)
            parsed = tv.integral_text(raw, LONG) if raw is not None else None
            weight = 1 if parsed is None else parsed
            if ok and raw is None and line.keys is not None and WEIGHT in line.keys:
                tally.fail(WEIGHT_NULL.key)
            if ok and raw is not None and parsed is None:
                tally.fail(WEIGHT_INT.key, raw)
            if ok and parsed is not None and not -MAX_WEIGHT <= parsed <= MAX_WEIGHT:
                tally.fail(WEIGHT_RANGE.key, raw)
            if d.inserts_only and weight < 0:
                tally.fail(WEIGHT_DELETE.key, str(weight))
        rows.weights.append(weight)
    return rows
