"""Which input files brought the rows a failed quality check complained about.

A check names a column and gives examples of its unexpected values (GE's
``partial_unexpected_list``). The files of this timestep that hold one of those values in a
column of that name are the culprits: exact for checks on an input's rows, and for a view whose
column passes an input column through (filter, select by name, join, union, distinct). When no
file holds the values (a computed column, an aggregate) or the check judges the whole table,
every file the timestep read is named: the change came from them. Files are read with pyarrow
on the driver, only when a check failed; a file pyarrow cannot read is skipped.
"""
from __future__ import annotations

import os
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.runtime.circuit import CircuitRuntime
from spark_jobs.state.arrow_fs import locate

MAX_VALUES = 20


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

                table = pcsv.read_csv(fh, convert_options=pcsv.ConvertOptions(include_columns=[column],
                                                                              include_missing_columns=True))
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


def _files(item: dict, fmt: str) -> Iterable[str]:
    """A planned input item: a file, or (snapshots) a folder of data files."""
    from spark_jobs.executor.sources.discovery import data_files, file_format

    path = item["path"]
    if file_format(path) is not None:
        yield path
    else:
        yield from (f.path for f in data_files(path))


def culprit_files(rt: CircuitRuntime, plan: dict, target: str, details: dict) -> tuple[list[str], bool]:
    """(files, exact): the files holding the check's unexpected values, or every file of the
    timestep (of the checked input, for an input check) with ``exact`` False."""
    spec = rt.compiled.spec
    kind, _, name = target.partition(":")
    names = [name] if kind == "input" else list(spec.inputs)
    planned = {n: plan["inputs"].get(n, []) for n in names}
    everything = [i["path"] for n in names for i in planned[n]]
    column = (details.get("kwargs") or {}).get("column")
    examples = details.get("partial_unexpected_list")
    if not column or not isinstance(examples, list) or not examples:
        return everything, False
    wanted = examples[:MAX_VALUES]
    found = []
    for n in names:
        source = spec.inputs[n].source
        if source is None:
            continue
        for item in planned[n]:
            for path in _files(item, source.format):
                values = _column(path, source.format, column)
                if values is not None and _holds(values, wanted):
                    found.append(path)
    return (found, True) if found else (everything, False)


def explain_failure(rt: CircuitRuntime, plan: dict, report) -> str:
    """Lines naming, for each failed check, the input files behind its rows."""
    lines = []
    for r in report.failed:
        files, exact = culprit_files(rt, plan, r.target, r.details)
        if not files:
            continue
        shown = ", ".join(os.path.basename(f.rstrip("/")) for f in files[:10])
        more = f" (+{len(files) - 10} more)" if len(files) > 10 else ""
        how = "rows from" if exact else "this timestep's changes came from"
        lines.append(f"  {r.target} {r.name}: {how} {shown}{more}")
        lines += [f"      {f}" for f in files[:10]]
    return "\n".join(["input files behind the failing checks:", *lines]) if lines else ""
