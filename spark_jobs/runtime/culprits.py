"""Which input files brought the rows a failed quality check complained about.

A check names a column and gives examples of its unexpected values (GE's
``partial_unexpected_list``). The files that hold one of those values in a column of that name
are the culprits: exact for checks on an input's rows, and for a view whose column passes an
input column through (filter, select by name, join, union, distinct), whichever input it comes
from. The files of this timestep are searched first; then the files earlier timesteps consumed
(a view's row joins this step's change with the state: a NULL `country` of a customer may come
from a snapshot read three steps ago, not from this step's orders), newest first: for a
`snapshots` input the snapshot the state holds, for the others their consumed files still in the
folder (at most ``MAX_EARLIER`` per input). When no file holds the values (a computed column, an
aggregate) or the check judges the whole table, every file the timestep read is named: the change
came from them. Files are read with pyarrow on the driver, only when a check failed; a file
pyarrow cannot read is skipped. CSV is read as Spark reads it: an empty field is a NULL.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.runtime.circuit import CircuitRuntime
from spark_jobs.state.arrow_fs import locate

MAX_VALUES = 20
MAX_EARLIER = 200  # consumed files searched per input, newest first


def _column(path: str, fmt: str, column: str) -> pa.ChunkedArray | None:
    """One column of one input file (parquet, csv with a header, JSON lines; .gz/.bz2 text)."""
    loc = locate(path)
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            with loc.fs.open_input_file(loc.inner) as fh:
                schema = pq.read_schema(fh)
                return pq.read_table(fh, columns=[column]).column(column) if column in schema.names else None
        with loc.fs.open_input_stream(loc.inner, compression="detect") as fh:
            if fmt == "csv":
                import pyarrow.csv as pcsv

                table = pcsv.read_csv(fh, convert_options=pcsv.ConvertOptions(
                    include_columns=[column], include_missing_columns=True, strings_can_be_null=True))
            else:
                import pyarrow.json as pjson

                table = pjson.read_json(fh)
        return table.column(column) if column in table.column_names else None
    except (OSError, pa.ArrowException, ValueError):
        return None


def _holds(values: pa.ChunkedArray, wanted: list[Any]) -> bool:
    """Does the column hold one of ``wanted`` (None = a null)? Compared as text across types."""
    if any(w is None for w in wanted) and values.null_count:
        return True
    texts = {t for w in wanted if w is not None for t in _texts(w)}
    if not texts:
        return False
    found = pc.is_in(pc.cast(values, pa.string(), safe=False), value_set=pa.array(sorted(texts)))
    return bool(pc.any(found).as_py())


def _texts(value: Any) -> set[str]:
    """Spellings of a value as a column cast to text may hold it (a double 3.0 reads "3")."""
    if isinstance(value, float) and value.is_integer():
        return {str(value), str(int(value))}
    return {str(value)}


def _files(item: dict) -> Iterable[str]:
    """A planned input item: a file, or (snapshots) a folder of data files."""
    from spark_jobs.executor.sources.discovery import data_files, file_format

    path = item["path"]
    if file_format(path) is not None:
        yield path
    else:
        yield from (f.path for f in data_files(path))


@dataclass(frozen=True)
class Culprit:
    """An input file behind failing rows: its input, and the timestep that consumed it (None:
    this timestep)."""

    path: str
    input: str
    consumed_at: int | None = None

    def describe(self) -> str:
        when = f", consumed at timestep {self.consumed_at}" if self.consumed_at is not None else ""
        return f"{os.path.basename(self.path.rstrip('/'))} (input {self.input}{when})"


def earlier_files(rt: CircuitRuntime, name: str) -> list[tuple[str, int | None]]:
    """(path, timestep) of the files earlier timesteps consumed for input ``name`` that are still
    in its folder, newest first: for a `snapshots` input only the snapshot the state holds."""
    from spark_jobs.executor.sources.discovery import resolve_path
    from spark_jobs.runtime.inputs import consumed_records

    spec = rt.compiled.spec.inputs[name]
    records = consumed_records(rt.store.manifest(), name)
    if spec.source is None or not records:
        return []
    try:
        folder = resolve_path(spec.source, rt.config.data_root, rt.config.allowed_input_roots)
    except (OSError, ValueError):
        return []
    records = sorted(records, key=lambda r: (int(r.get("timestep") or 0), str(r.get("name"))), reverse=True)
    if spec.source.kind == "snapshots":
        records = records[:1]
    out = []
    for rec in records[:MAX_EARLIER]:
        path = folder.rstrip("/") + "/" + str(rec.get("name", "")).lstrip("/")
        if exists(path):
            out.append((path, rec.get("timestep")))
    return out


def exists(path: str) -> bool:
    from spark_jobs.executor.sources.discovery import exists as _exists

    try:
        return _exists(path)
    except OSError:
        return False


def find_culprits(rt: CircuitRuntime, plan: dict, target: str, details: dict) -> tuple[list[Culprit], bool]:
    """(culprits, exact): the files holding the check's unexpected values, this timestep's first,
    then earlier ones; or every file of the timestep (of the checked input, for an input check)
    with ``exact`` False."""
    spec = rt.compiled.spec
    kind, _, name = target.partition(":")
    names = [name] if kind == "input" else list(spec.inputs)
    planned = {n: plan["inputs"].get(n, []) for n in names}
    everything = [Culprit(i["path"], n) for n in names for i in planned[n]]
    column = (details.get("kwargs") or {}).get("column")
    examples = details.get("partial_unexpected_list")
    if not column or not isinstance(examples, list) or not examples:
        return everything, False
    wanted = examples[:MAX_VALUES]

    def holding(paths: Iterable[tuple[str, int | None]], n: str) -> list[Culprit]:
        fmt = spec.inputs[n].source.format
        return [Culprit(path, n, t) for path, t in paths
                if (values := _column(path, fmt, column)) is not None and _holds(values, wanted)]

    sources = [n for n in names if spec.inputs[n].source is not None]
    found = [c for n in sources for c in holding(((p, None) for i in planned[n] for p in _files(i)), n)]
    if not found and kind != "input":  # the offending value may sit in the state: earlier files
        found = [c for n in sources
                 for c in holding(((p, t) for path, t in earlier_files(rt, n) for p in _files({"path": path})), n)]
    return (found, True) if found else (everything, False)


def culprit_files(rt: CircuitRuntime, plan: dict, target: str, details: dict) -> tuple[list[str], bool]:
    """(paths, exact): ``find_culprits`` as paths."""
    found, exact = find_culprits(rt, plan, target, details)
    return [c.path for c in found], exact


def explain_failure(rt: CircuitRuntime, plan: dict, report) -> str:
    """Lines naming, for each failed check, the input files behind its rows."""
    lines = []
    for r in report.failed:
        found, exact = find_culprits(rt, plan, r.target, r.details)
        if not found:
            continue
        shown = ", ".join(c.describe() for c in found[:10])
        more = f" (+{len(found) - 10} more)" if len(found) > 10 else ""
        how = "rows from" if exact else "this timestep's changes came from"
        lines.append(f"  {r.target} {r.name}: {how} {shown}{more}")
        lines += [f"      {c.path}" for c in found[:10]]
    return "\n".join(["input files behind the failing checks:", *lines]) if lines else ""


def pending_plan(rt: CircuitRuntime) -> dict:
    """What ``explain_failure`` needs of a plan, for a `dbsp step` whose gate failed: the files it
    read are the pending ones (nothing was committed)."""
    from spark_jobs.runtime.inputs import pending_inputs

    pending = pending_inputs(rt.compiled.spec.inputs, rt.config.data_root, rt.store.manifest(),
                             rt.config.allowed_input_roots)
    return {"inputs": {n: [f.as_dict() for f in files] for n, files in pending.items()}}
