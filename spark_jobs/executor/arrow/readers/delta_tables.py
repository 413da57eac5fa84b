"""A Delta table input's change between two versions, read in-process with ``deltalake`` (no JVM).

Why two ways: the change data feed, when the table writes one, holds only the changed rows (a
MERGE that touches one row of a large file gives two rows); without it, the change between
versions ``b`` and ``n`` is what their file lists say: every row of a file that version ``n``
lists and ``b`` does not comes in (+1), every row of a file ``b`` lists and ``n`` does not goes
out (-1). That is exact for every operation, because Delta never changes a file in place:
``OVERWRITE``, ``DELETE``, ``UPDATE`` and ``MERGE`` remove the files they rewrite and add new
ones, and ``OPTIMIZE`` (which rewrites files without changing rows) removes and adds the same
rows, which cancel when the change is consolidated. The feed is tried first when both versions
have it on; a range it cannot serve (the feed switched on later, a reader error) falls back to
the file lists, which need every file of both versions still on disk (``VACUUM`` keeps them for
7 days by default).

The result is a consolidated Z-set of the declared columns (a table's other columns are not
read; two rows differing only there are one tuple with weight 2), typed as declared with the
same lossless widenings as Parquet files, and checked as files are (declared non-null columns,
UTF-8 strings, dates in range). Deletion vectors (rows of a file marked deleted without
rewriting it) are applied: a file with one is read row by row, each row weighing whether the new
version keeps it minus whether the old one did, so a DELETE that only adds a vector to a file
deletes exactly those rows. Tables with column mapping are refused with a message: their files
do not hold the columns by their names.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Sequence
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.executor.sources.checks import InputRefused
from spark_jobs.executor.sources.delta_log import table_folder, version_of
from spark_jobs.executor.sources.discovery import InputFile
from spark_jobs.executor.sources.formats import Declared
from spark_jobs.executor.sources.schema_check import _spark_type, column_problems
from spark_jobs.spec.model import WEIGHT, InputSpec

from ..zsets import consolidate
from .parquet_files import _row_problems, _typed

if TYPE_CHECKING:  # imported where a Delta table is read: pyarrow.dataset imports pandas (0.3-0.7 s per process)
    import pyarrow.dataset as ds

CDF_KEY = "delta.enableChangeDataFeed"
_PLUS = ("insert", "update_postimage")
_MINUS = ("delete", "update_preimage")


@dataclass
class DeltaChange:
    """An input's change read from its table, the bytes of data files read, and how (for notes)."""

    table: pa.Table
    bytes_read: int
    how: str  # "snapshot" | "change data feed" | "file lists"
    versions: tuple[int | None, int]  # (base, new)


def _dl():
    import deltalake  # its Rust core is loaded only by steps that read a Delta table

    return deltalake


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def open_version(spec: InputSpec, item: InputFile, version: int) -> Any:
    """The table at ``version``, checked readable; ``InputRefused`` naming the commit file."""
    uri = table_folder(item.path)
    try:
        table = _dl().DeltaTable(uri, version=version)
    except Exception as exc:  # deltalake raises its own TableNotFoundError/DeltaError/OSError
        raise InputRefused([(item.path, f"version {version} of the Delta table {uri} cannot be read "
                                        f"({_first_line(exc)}); if its log was cleaned up past it, rebuild the "
                                        f"views from the table as it is now (`dbsp step --full-refresh`)")],
                           spec.name) from None
    why = unsupported_features(table)
    if why:
        raise InputRefused([(item.path, why)], spec.name)
    return table


def unsupported_features(table: Any) -> str | None:
    """Why the table's files cannot be read as its rows (None: they can). Deletion vectors are
    applied (``_keep_masks``)."""
    protocol = table.protocol()
    features = set(protocol.reader_features or ())
    config = table.metadata().configuration or {}
    mode = str(config.get("delta.columnMapping.mode", "none")).lower()
    if "columnMapping" in features or mode not in ("", "none"):
        return (f"the Delta table uses column mapping (mode {mode}): its files do not hold the columns by "
                f"their names, which this reader needs")
    return None


def _dv_feature(table: Any) -> bool:
    features = set(table.protocol().reader_features or ())
    config = table.metadata().configuration or {}
    return "deletionVectors" in features or str(config.get("delta.enableDeletionVectors", "")).lower() == "true"


Masks = dict[str, list[bool]]  # a data file's path (as its fragment names it) -> which rows it still holds


def _keep_masks(spec: InputSpec, item: InputFile, table: Any, version: int) -> Masks:
    """The deletion vectors of the version's files, as keep masks by the files' paths relative to
    the table's folder (what the fragments are named); {} when the table has none."""
    if not _dv_feature(table):
        return {}
    try:
        batches = list(table.deletion_vectors())
    except Exception as exc:  # noqa: BLE001 - a vector file gone or unreadable: the rows are unknown
        raise InputRefused([(item.path, f"version {version} of the Delta table: its deletion vectors cannot be "
                                        f"read ({_first_line(exc)})")], spec.name) from None
    root = os.path.abspath(table_folder(item.path)).rstrip("/") + "/"
    out: Masks = {}
    for batch in batches:
        for uri, keep in zip(batch.column("filepath").to_pylist(), batch.column("selection_vector").to_pylist()):
            path = unquote(urlparse(uri).path) if "://" in uri else uri
            out[path[len(root):] if path.startswith(root) else path] = keep
    return out


def _files_with_deletion_vectors(table: Any) -> int:
    return sum(batch.num_rows for batch in table.deletion_vectors())


def _pyarrow_dataset(table: Any) -> ds.Dataset:
    """``table.to_pyarrow_dataset()``, also for a table with the deletion vector feature on:
    deltalake refuses any such table, since a file's rows are not all the table's; this reader
    applies the vectors itself (``_keep_masks``) to the files this dataset lists."""
    protocol = table.protocol()
    features = list(protocol.reader_features or ())
    if "deletionVectors" not in features:
        return table.to_pyarrow_dataset()
    shown = SimpleNamespace(min_reader_version=protocol.min_reader_version,
                            min_writer_version=protocol.min_writer_version,
                            reader_features=[f for f in features if f != "deletionVectors"],
                            writer_features=protocol.writer_features)
    table.protocol = lambda: shown  # this one call only: the object is the step's own
    try:
        return table.to_pyarrow_dataset()
    finally:
        del table.protocol


def _cdf_on(table: Any) -> bool:
    return str((table.metadata().configuration or {}).get(CDF_KEY, "")).lower() == "true"


def _declared_columns(spec: InputSpec, item: InputFile, schema: pa.Schema, d: Declared, version: int) -> list[str]:
    """The declared columns after checking the table has them with types that widen to the
    declared ones (the table's other columns are not read)."""
    found: dict[str, Any] = {}
    reasons = []
    for f in schema:
        if f.name in d.types:
            try:
                found[f.name] = _spark_type(f.type, None)
            except ValueError as exc:
                reasons.append(f"column {f.name}: {exc}")
    missing_case = {f.name.lower(): f.name for f in schema if f.name not in d.types}
    for problem in column_problems(found, d.types, allow_weight=False):
        if problem.startswith("missing column "):
            name = problem[len("missing column "):]
            if name.lower() in missing_case:
                problem += f" (the table has {missing_case[name.lower()]}: names are case-sensitive)"
        reasons.append(problem)
    if reasons:
        raise InputRefused([(item.path, f"version {version} of the Delta table: {r}") for r in reasons], spec.name)
    return list(d.types)


def _plain(table: pa.Table) -> pa.Table:
    """View types (deltalake's reader gives ``string_view``) as the plain ones the kernels take."""
    plain = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
    if not any(f.type in plain for f in table.schema):
        return table
    return table.cast(pa.schema([pa.field(f.name, plain.get(f.type, f.type), f.nullable) for f in table.schema]))


def _checked(spec: InputSpec, item: InputFile, raw: pa.Table, d: Declared, target: pa.Schema) -> pa.Table:
    reasons = _row_problems(raw, d)
    if reasons:
        raise InputRefused([(item.path, f"the Delta table: {r}") for r in reasons], spec.name)
    return _typed(raw, target)


def _fragments(spec: InputSpec, item: InputFile, table: Any) -> tuple[ds.Dataset, dict[str, ds.Fragment]]:
    try:
        dataset = _pyarrow_dataset(table)
    except Exception as exc:
        raise InputRefused([(item.path, f"the Delta table cannot be read as Parquet files: {_first_line(exc)}")],
                           spec.name) from None
    return dataset, {f.path: f for f in dataset.get_fragments()}


def _read(spec: InputSpec, item: InputFile, dataset: ds.Dataset, fragments: Sequence[ds.Fragment],
          columns: list[str], d: Declared, target: pa.Schema, weight: int) -> tuple[pa.Table, int]:
    """The rows of ``fragments`` (with their partition values), checked and typed, each of
    ``weight``; and the bytes of their files."""
    if not fragments:
        return target.empty_table(), 0
    import pyarrow.dataset as ds

    part = ds.FileSystemDataset(list(fragments), dataset.schema, dataset.format, dataset.filesystem)
    try:
        raw = _plain(part.to_table(columns=columns))
        nbytes = sum(dataset.filesystem.get_file_info(f.path).size or 0 for f in fragments)
    except (OSError, pa.ArrowException) as exc:
        raise InputRefused([(item.path, f"a data file of the Delta table cannot be read ({_first_line(exc)}); "
                                        f"a file that is gone was removed by VACUUM: rebuild the views from the "
                                        f"table as it is now (`dbsp step --full-refresh`)")], spec.name) from None
    table = _checked(spec, item, raw, d, target)
    if weight != 1:
        table = table.set_column(table.schema.get_field_index(WEIGHT), WEIGHT,
                                 pa.array([weight] * table.num_rows, pa.int64()))
    return table, nbytes


def _read_masked(spec: InputSpec, item: InputFile, dataset: ds.Dataset, fragment: ds.Fragment, columns: list[str],
                 d: Declared, target: pa.Schema, old: list[bool] | None, new: list[bool] | None) -> tuple[pa.Table, int]:
    """One data file whose kept rows differ between the versions (a deletion vector on either
    side): each row weighs (kept in the new version) - (kept in the old one); ``None`` for a side
    that does not list the file, ``[]`` (all kept) for one that lists it without a vector."""
    try:
        raw = _plain(fragment.to_table(schema=dataset.schema, columns=columns, use_threads=False))
        nbytes = dataset.filesystem.get_file_info(fragment.path).size or 0
    except (OSError, pa.ArrowException) as exc:
        raise InputRefused([(item.path, f"a data file of the Delta table cannot be read ({_first_line(exc)}); "
                                        f"a file that is gone was removed by VACUUM: rebuild the views from the "
                                        f"table as it is now (`dbsp step --full-refresh`)")], spec.name) from None

    def kept(mask: list[bool] | None, i: int) -> int:
        return 0 if mask is None else int(i >= len(mask) or mask[i])  # a vector may stop at its last deleted row

    weights = [kept(new, i) - kept(old, i) for i in range(raw.num_rows)]
    take = pa.array([i for i, w in enumerate(weights) if w], pa.int64())
    table = _checked(spec, item, raw.take(take), d, target)
    return table.set_column(table.schema.get_field_index(WEIGHT), WEIGHT,
                            pa.array([w for w in weights if w], pa.int64())), nbytes


def _file_diff(spec: InputSpec, item: InputFile, old: Any, new: Any, d: Declared, target: pa.Schema,
               base: int, version: int) -> tuple[pa.Table, int]:
    old_ds, old_files = _fragments(spec, item, old)
    new_ds, new_files = _fragments(spec, item, new)
    old_masks, new_masks = _keep_masks(spec, item, old, base), _keep_masks(spec, item, new, version)
    columns = _declared_columns(spec, item, new_ds.schema, d, version)
    vectored = set(old_masks) | set(new_masks)  # files read row by row, with their vectors
    added = [f for p, f in new_files.items() if p not in old_files and p not in vectored]
    removed = [f for p, f in old_files.items() if p not in new_files and p not in vectored]
    if removed or any(p in old_files for p in vectored):
        _declared_columns(spec, item, old_ds.schema, d, base)
    plus, a = _read(spec, item, new_ds, added, columns, d, target, 1)
    minus, b = _read(spec, item, old_ds, removed, columns, d, target, -1)
    parts, nbytes = [plus, minus], a + b
    for path in sorted(vectored):
        was = old_masks.get(path, []) if path in old_files else None
        now = new_masks.get(path, []) if path in new_files else None
        if was == now or (was is None and now is None):
            continue
        dataset, fragment = (new_ds, new_files[path]) if path in new_files else (old_ds, old_files[path])
        part, n = _read_masked(spec, item, dataset, fragment, columns, d, target, was, now)
        parts.append(part)
        nbytes += n
    return consolidate(pa.concat_tables(parts)), nbytes


def _feed(spec: InputSpec, item: InputFile, new: Any, d: Declared, target: pa.Schema, base: int,
          version: int) -> pa.Table:
    """The change data feed of versions ``base + 1 .. version`` as a Z-set (raises what deltalake
    raises when it cannot serve the range: the caller falls back to the file lists)."""
    columns = _declared_columns(spec, item, pa.schema(new.schema().to_arrow()), d, version)
    reader = new.load_cdf(starting_version=base + 1, ending_version=version, columns=[*columns, "_change_type"])
    raw = _plain(pa.table(reader))
    kinds = raw.column("_change_type")
    keep = pc.is_in(kinds, pa.array(_PLUS + _MINUS))
    raw = raw.filter(keep)
    signs = pc.if_else(pc.is_in(raw.column("_change_type"), pa.array(_PLUS)), 1, -1).cast(pa.int64())
    table = _checked(spec, item, raw.select(columns), d, target)
    table = table.set_column(table.schema.get_field_index(WEIGHT), WEIGHT, signs)
    return consolidate(table)


def read_change(spec: InputSpec, item: InputFile, d: Declared, target: pa.Schema, *, feed: bool = True) -> DeltaChange:
    """The change of the table from ``item.base`` (None: nothing) to the version of ``item`` (a
    commit file), consolidated, as a table of ``target`` (the declared columns and ``_weight``);
    ``feed=False`` reads the file lists even when the change data feed is on (tests compare)."""
    version = version_of(item.name)
    if version is None:
        raise InputRefused([(item.path, "is not a Delta commit file (_delta_log/<version>.json)")], spec.name)
    new = open_version(spec, item, version)
    if item.base is None:
        dataset, files = _fragments(spec, item, new)
        columns = _declared_columns(spec, item, dataset.schema, d, version)
        masks = _keep_masks(spec, item, new, version)
        rows, nbytes = _read(spec, item, dataset, [f for p, f in files.items() if p not in masks], columns, d,
                             target, 1)
        parts = [rows] + [_read_masked(spec, item, dataset, files[p], columns, d, target, None, m)[0]
                          for p, m in sorted(masks.items()) if p in files]
        return DeltaChange(consolidate(pa.concat_tables(parts)), nbytes, "snapshot", (None, version))
    base = item.base
    if base >= version:
        return DeltaChange(target.empty_table(), 0, "no change", (base, version))
    old = open_version(spec, item, base)
    # with deletion vectors the file lists (and the vectors) are read: a writer's feed for them is
    # not something this reader can check
    if feed and _cdf_on(old) and _cdf_on(new) and not _keep_masks(spec, item, old, base) \
            and not _keep_masks(spec, item, new, version):
        try:
            return DeltaChange(_feed(spec, item, new, d, target, base, version), 0, "change data feed",
                               (base, version))
        except InputRefused:
            raise
        except Exception:  # noqa: BLE001 - a range the feed cannot serve: the file lists can
            pass
    table, nbytes = _file_diff(spec, item, old, new, d, target, base, version)
    return DeltaChange(table, nbytes, "file lists", (base, version))


def estimate_rows(item: InputFile) -> int | None:
    """Rows the change reads at most (rows of the files added and removed between the versions,
    from the log's statistics); None when unknown."""
    version = version_of(item.name)
    if version is None:
        return None
    try:
        uri = table_folder(item.path)
        new = pa.table(_dl().DeltaTable(uri, version=version).get_add_actions(flatten=True))
        if item.base is None:
            return _records(new)
        old = pa.table(_dl().DeltaTable(uri, version=item.base).get_add_actions(flatten=True))
    except Exception:  # noqa: BLE001 - an estimate only: the read says what is wrong
        return None
    old_paths, new_paths = set(old.column("path").to_pylist()), set(new.column("path").to_pylist())
    added = new.filter(pc.invert(pc.is_in(new.column("path"), pa.array(list(old_paths), pa.string()))))
    removed = old.filter(pc.invert(pc.is_in(old.column("path"), pa.array(list(new_paths), pa.string()))))
    a, r = _records(added), _records(removed)
    return None if a is None or r is None else a + r


def _records(actions: pa.Table) -> int | None:
    if "num_records" not in actions.column_names:
        return None
    col = actions.column("num_records")
    if col.null_count:
        return None
    return int(pc.sum(col).as_py() or 0)
