"""Which versions of a Delta table (``source: {kind: delta, path: ...}``) a timestep reads.

A Delta table's versions are its commit files, ``_delta_log/<20-digit version>.json``: immutable,
one per version, named in order. They are this input's "files": the scan lists them, and a step
that reads the table up to version ``n`` records the commit file of ``n`` as consumed (its name
below the table's folder, size and content fingerprint, as every consumed file is recorded), so
the version goes into the manifest with the timestep, atomically. The next scan starts from the
newest consumed version:

- nothing consumed yet: the step reads the whole table at its newest version;
- else, when a newer commit exists: one pending item, the newest commit file, whose ``base`` is
  the consumed version; the step reads the change between the two versions
  (``executor/arrow/readers/delta_tables.py``). Versions in between are not recorded one by one:
  the change between two versions is the sum of theirs.

The consumed commit file must still be there and unchanged: a table deleted and written again
starts its versions at 0 again (its commit file of the same number differs), and a log cleaned
up past the consumed version cannot give the change from it. Both are refused (exit code 2) with
what to do, never read as "no change" or as a whole new table on top of the old one.
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Callable, Iterable

import pyarrow.fs as pafs

from spark_jobs.state.arrow_fs import locate

from .identity import ConsumedRecords, verify

LOG_DIR = "_delta_log"
_COMMIT = re.compile(r"^_delta_log/(\d{20})\.json$")


def version_of(name: str) -> int | None:
    """The version a commit file's name (below the table's folder) holds, None for another name."""
    found = _COMMIT.match(name)
    return int(found.group(1)) if found else None


def commit_name(version: int) -> str:
    return f"{LOG_DIR}/{version:020d}.json"


def table_folder(commit_path: str) -> str:
    """The table's folder, from the path of one of its commit files."""
    return commit_path.rsplit("/" + LOG_DIR + "/", 1)[0]


def commit_files(root: str, make: Callable[..., object]) -> list:
    """The table's commit files in version order, as ``make(path, size, mtime, name)`` items
    (``discovery.InputFile``); none when the folder holds no Delta log (yet)."""
    loc = locate(root.rstrip("/") + "/" + LOG_DIR)
    try:
        infos = loc.fs.get_file_info(pafs.FileSelector(loc.inner, recursive=False, allow_not_found=True))
    except (NotADirectoryError, FileNotFoundError):
        return []
    found = []
    for info in infos:
        name = f"{LOG_DIR}/{info.base_name}"
        if info.type == pafs.FileType.File and version_of(name) is not None:
            found.append(make(loc.outer(info.path), info.size, info.mtime_ns / 1e9, name))
    return sorted(found, key=lambda f: f.name)


def newest_consumed(records: ConsumedRecords) -> tuple[int, str] | None:
    """(version, name) of the newest consumed commit file, None before the first read."""
    versions = [(v, n) for n in records.by_name if (v := version_of(n)) is not None]
    return max(versions) if versions else None


def scan(input_name: str, root: str, records: ConsumedRecords, listed: list,
         fingerprint: Callable[[object], str]) -> tuple[list, list[tuple[str, str]]]:
    """(pending, changed) of a Delta input: at most one pending item (the newest commit file,
    ``base`` = the consumed version, None for a first read), and the refusals of a consumed
    version that is gone or changed."""
    newest = listed[-1] if listed else None
    last = newest_consumed(records)
    if last is None:
        return ([replace(newest, base=None)] if newest is not None else []), []
    version, name = last
    held = [f for f in listed if f.name == name]
    if not held:
        where = root.rstrip("/") + "/" + name
        return [], [(where, _gone(version, newest))]
    changed = verify(records, held, fingerprint)
    if changed:
        return [], [(path, f"{why.split(';')[0]}: the table at {root} was replaced (deleted and written "
                           f"again from version 0?), so the change from version {version} cannot be known; "
                           f"rebuild the views from the table as it is now (`dbsp step --full-refresh`)")
                    for path, why in changed]
    if newest is None or (version_of(newest.name) or 0) <= version:
        return [], []
    return [replace(newest, base=version)], []


def _gone(version: int, newest: object | None) -> str:
    now = f" (its log now starts after it; newest version {version_of(newest.name)})" if newest is not None else ""
    return (f"version {version} of this Delta table was consumed at the last commit, but its commit file is "
            f"gone{now}: the table was deleted or replaced, or its log was cleaned up past that version, so "
            f"the change since cannot be read; rebuild the views from the table as it is now "
            f"(`dbsp step --full-refresh`)")


def consumed_versions(records: Iterable[dict]) -> list[int]:
    """Every version the records say was consumed (for ``dbsp status`` and run notes)."""
    return sorted(v for r in records if (v := version_of(str(r.get("name", "")))) is not None)
