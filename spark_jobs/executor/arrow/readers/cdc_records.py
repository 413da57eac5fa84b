"""Keyed change records (``kind: cdc``) read and applied in-process: ``sources/cdc.py`` on Arrow.

The files are read with the Spark path's declaration (``cdc._declared``: the relation's columns
plus the operation column, key, operation and sequence required, operation codes from ``ops``) by
the format's reader, or, for a Debezium envelope (``after``/``before``), by ``envelope_rows`` with
``_plan_envelope``'s checks. Records then apply per key in order of the sequence column, then the
file's path (the plain path string, on both engines), then the position in the file, against the
committed rows of their keys, looked up in the input's keyed trace (``TraceFiles.lookup``: only
the row groups whose statistics admit the records' keys): the rules of ``sources/cdc.py``'s
module docstring, the same refusal of unknown keys (``unknown_key: refuse``) naming each file.
"""
from __future__ import annotations

import datetime
import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.executor.arrow.compiler.calendar import format_date
from spark_jobs.executor.arrow.compiler.decimals import format_unscaled
from spark_jobs.executor.arrow.compiler.sql_types import SparkType
from spark_jobs.executor.engine import NotLocal
from spark_jobs.executor.sources import InputFile, InputRefused
from spark_jobs.executor.sources.cdc import KIND, OP, _declared, _envelope_checks, _refusals
from spark_jobs.executor.sources.checks import FILE_COL
from spark_jobs.executor.sources.formats import Declared
from spark_jobs.policy import ExecutionPolicy
from spark_jobs.spec.model import WEIGHT, InputSpec
from spark_jobs.state.lookup import TraceFiles

from . import json_lines as jl
from .file_checks import FileTally
from .records import FileRows, sql_type
from .text_files import lines_of, read_text
from spark_jobs.executor.arrow.zsets import consolidate, negate

POS = "__pos"


@dataclass
class CdcChange:
    """A cdc input's change in-process: the relation's change and the records of unknown keys
    ignored and counted (``unknown_key: count``)."""

    table: pa.Table
    unknown_keys: int = 0


def declaration(spec: InputSpec) -> Declared:
    return _declared(spec)


# ---- the Debezium envelope ------------------------------------------------------------------

def envelope_reader(spec: InputSpec):
    """A reader of JSON lines whose values sit in ``after`` (and ``before``) objects, with the
    checks of ``cdc._plan_envelope``; None when the source has no envelope."""
    cdc = spec.source.cdc  # type: ignore[union-attr]
    if not (cdc.after or cdc.before):
        return None
    halves = [h for h in (cdc.after, cdc.before) if h]
    keys = set(spec.key)

    def read(path: str, d: Declared) -> FileRows:
        values = [c for c in d.types if c != cdc.op]
        tally = FileTally(_envelope_checks(d, values))
        rows = FileRows(tally, {c: [] for c in d.types})
        top = ([cdc.op] + ([cdc.sequence] if cdc.sequence else [])) if cdc.after else list(d.types)
        types = {c: sql_type(t) for c, t in d.types.items()}
        converters = {c: jl.converter(types[c]) for c in top}
        converters.update({h: jl.struct_converter({c: types[c] for c in values}) for h in halves})
        allowed = set(values)
        for number, text in lines_of(read_text(path)):
            if text.strip(" ") in ("", "null"):
                continue
            where = f"{path}, line {number}"
            line = jl.parse_line(text, where)
            rec, corrupt = ({}, not line.empty) if line.value is None else jl.convert_object(line.value, converters)
            if corrupt:
                tally.fail("corrupt", text)
            ok = not corrupt
            typed = {c: rec.get(c) if c == cdc.op else _value(rec, c, cdc, keys) for c in d.types}
            if ok and line.value is not None:
                extra = _extra_keys(line, halves, allowed, None if cdc.after else set(d.types) | set(halves), where)
                if extra:
                    tally.fail("extra", "\n".join(extra))
            for c in d.not_null:
                if ok and typed[c] is None:
                    tally.fail(f"null:{c}")
            for c, codes in d.one_of.items():
                if ok and typed[c] is not None and typed[c] not in codes:
                    tally.fail(f"one_of:{c}", typed[c])
            for c in d.types:
                rows.values[c].append(typed[c])
            rows.weights.append(1)
        return rows

    return read


def _value(rec: dict[str, Any], c: str, cdc, keys: set[str]) -> Any:
    """``_plan_envelope``'s value of a relation column: from ``after`` (``before`` for a delete),
    a top-level sequence first; without ``after``, top-level values, a key from ``before``."""
    def half(name: str | None) -> dict[str, Any] | None:
        return rec.get(name) if name else None

    if not cdc.after:
        before = half(cdc.before)
        top = rec.get(c)
        return top if top is not None or c not in keys or before is None else before.get(c)
    after = half(cdc.after)
    if cdc.before and after is None:
        before = half(cdc.before)
        row = before.get(c) if before is not None else None
    else:
        row = after.get(c) if after is not None else None
    if c == cdc.sequence and rec.get(c) is not None:
        return rec.get(c)
    return row


def _extra_keys(line: jl.Line, halves: Sequence[str], allowed: set[str], top_allowed: set[str] | None,
                where: str) -> list[str]:
    """The unexpected keys ``_plan_envelope`` reports: those of each half's object, and (values at
    the top level) the top level's."""
    obj = line.value
    assert obj is not None
    out: list[str] = []
    for h in halves:
        found = [v for k, v in obj if k == h]
        if len(found) > 1:
            raise NotLocal(f"{where} has {h!r} twice: Spark's path lookup reads it its own way")
        if found and isinstance(found[0], jl.Pairs):
            if jl._has_constant(found[0]):
                raise NotLocal(f"{where} holds NaN or Infinity in {h!r}: Spark lists its keys its own way")
            out += [k for k in found[0].keys() if k not in allowed]
    if top_allowed is not None and line.keys is not None:
        out += [k for k in line.keys if k not in top_allowed]
    return list(dict.fromkeys(out))


# ---- applying records ---------------------------------------------------------------------------

def _key_json(spec: InputSpec, types: dict[str, SparkType], key: tuple) -> str:
    """``to_json(struct(keys))`` as Spark writes it (Jackson), for a refusal's example."""
    parts = []
    for name, value in zip(spec.key, key):
        t = types[name]
        if t.is_integral:
            text = str(value)
        elif t.name == "boolean":
            text = "true" if value else "false"
        elif t.name == "string" and not any(ord(ch) < 0x20 and ch not in "\b\f\n\r\t" for ch in value):
            text = json.dumps(value, ensure_ascii=False)
        elif t.name == "date" and 1 <= value.year <= 9999:
            text = f'"{value.isoformat()}"'
        elif t.is_decimal and t.scale <= 6:  # BigDecimal.toString: plain notation down to 1E-6
            text = format_unscaled(int(value.scaleb(t.scale)), t.scale)
        else:
            raise NotLocal(f"input {spec.name}: a refused record's key ({t}) is written the way Spark's "
                           "to_json writes it")
        parts.append(f"{json.dumps(name, ensure_ascii=False)}:{text}")
    return "{" + ",".join(parts) + "}"


def _seq_text(spec: InputSpec, t: SparkType | None, value: Any) -> str | None:
    """``cast(sequence AS string)``, for a refusal's example."""
    if t is None:
        return None
    if t.is_integral or t.name == "string":
        return str(value)
    if t.name == "date":
        return format_date((value - datetime.date(1970, 1, 1)).days)
    raise NotLocal(f"input {spec.name}: a refused record's sequence ({t}) is written the way Spark casts it "
                   "to a string")


def old_rows(spec: InputSpec, records: pa.Table, files: TraceFiles | None, policy: ExecutionPolicy) -> pa.Table:
    """The committed rows (consolidated) of the records' keys, from the keyed trace's row groups
    that can hold them."""
    columns = list(spec.column_names) + [WEIGHT]
    if files is None or records.num_rows == 0:
        return pa.table({c: pa.array([], records.schema.field(c).type) if c != WEIGHT else pa.array([], pa.int64())
                         for c in columns})
    first = spec.key[0]
    values = pc.unique(records.column(first)).to_pylist()
    if files.admitted_rows(first, values) > policy.arrow.max_lookup_rows:
        raise NotLocal(f"input {spec.name}: the records' keys touch more of the keyed trace than a step "
                       f"looks up in-process (execution.arrow.max_lookup_rows)")
    found = files.lookup(first, values).select(columns)
    wanted = {tuple(r) for r in zip(*[records.column(k).to_pylist() for k in spec.key])}
    have = zip(*[found.column(k).to_pylist() for k in spec.key])
    found = found.filter(pa.array([k in wanted for k in have], pa.bool_()))
    return consolidate(found.cast(pa.schema([records.schema.field(c) if c != WEIGHT else pa.field(WEIGHT, pa.int64())
                                             for c in columns])))


def apply_records(spec: InputSpec, records: pa.Table, old: pa.Table) -> tuple[pa.Table, list[dict[str, Any]]]:
    """(the relation's change, the records of unknown keys) of ``records`` over ``old``: per key,
    in order of (sequence, file, position); see the module docstring of ``sources/cdc.py``."""
    cdc = spec.source.cdc  # type: ignore[union-attr]
    names = list(spec.column_names)
    key_of = list(zip(*[records.column(k).to_pylist() for k in spec.key]))
    seq = records.column(cdc.sequence).to_pylist() if cdc.sequence else [None] * records.num_rows
    files, pos, kinds = records.column(FILE_COL).to_pylist(), records.column(POS).to_pylist(), records.column(KIND).to_pylist()
    present = set(zip(*[old.column(k).to_pylist() for k in spec.key]))
    by_key: dict[tuple, list[int]] = defaultdict(list)
    for i, k in enumerate(key_of):
        by_key[k].append(i)
    keep, replaced, unknown = [], set(), []
    for key, rows in by_key.items():
        rows.sort(key=lambda i: (seq[i], files[i], pos[i]) if cdc.sequence else (files[i], pos[i]))
        exists, last = key in present, None
        for i in rows:
            kind = kinds[i]
            if kind in ("update", "delete") and not exists:
                unknown.append({"row": i})
                continue
            last = i
            exists = True if kind in ("insert", "upsert") else False if kind == "delete" else exists
        if last is not None:
            replaced.add(key)
            if kinds[last] != "delete":
                keep.append(last)
    new = records.take(pa.array(sorted(keep), pa.int64())).select(names)
    new = new.append_column(WEIGHT, pa.array([1] * new.num_rows, pa.int64()))
    gone = old.filter(pa.array([k in replaced for k in zip(*[old.column(c).to_pylist() for c in spec.key])],
                               pa.bool_())).select(names + [WEIGHT])
    delta = consolidate(pa.concat_tables([new, negate(gone.cast(new.schema))]))
    for u in unknown:
        i = u.pop("row")
        u.update({FILE_COL: files[i], OP: records.column(OP)[i].as_py(), KIND: kinds[i], "key": key_of[i],
                  "seq": seq[i]})
    return delta, unknown


def unknown_refusal(spec: InputSpec, declared: dict[str, Any], unknown: list[dict[str, Any]]) -> InputRefused:
    """The refusal of ``unknown_key: refuse``: per file, how many and the least example (Spark's
    ``min`` of (op, kind, key as JSON, sequence as a string))."""
    cdc = spec.source.cdc  # type: ignore[union-attr]
    types = {c: sql_type(t) for c, t in declared.items()}
    seq_type = types.get(cdc.sequence) if cdc.sequence else None
    per_file: dict[str, list[tuple]] = defaultdict(list)
    for u in unknown:
        per_file[u[FILE_COL]].append((u[OP], u[KIND], _key_json(spec, types, u["key"]), _seq_text(spec, seq_type, u["seq"])))
    rows = [{FILE_COL: path, "n": len(ex), "example": dict(zip((OP, KIND, "__key", "__seq"), min(ex)))}
            for path, ex in per_file.items()]
    return InputRefused(_refusals(spec, rows), spec.name)


def with_order(parts: Sequence[tuple[InputFile, pa.Table]], spec: InputSpec) -> pa.Table | None:
    """The records of the files: relation columns, ``__op``, ``__kind``, the file's path and the
    position in it; None when there is no record."""
    cdc = spec.source.cdc  # type: ignore[union-attr]
    tables = []
    for f, table in parts:
        if not table.num_rows:
            continue
        t = table.select(list(spec.column_names)).append_column(OP, table.column(cdc.op).cast(pa.string()))
        t = t.append_column(FILE_COL, pa.array([f.path] * t.num_rows, pa.string()))
        tables.append(t.append_column(POS, pa.array(range(t.num_rows), pa.int64())))
    if not tables:
        return None
    records = pa.concat_tables(tables)
    kinds = [cdc.ops.get(op) for op in records.column(OP).to_pylist()]
    return records.append_column(KIND, pa.array(kinds, pa.string()))
