"""Which input files a timestep has to read: listing, naming rules, and what was consumed.

Listing runs in the driver through ``pyarrow.fs`` (local paths, and s3/hdfs/gcs URIs when
pyarrow can reach them), so it costs no Spark job. Naming rules, as Spark's own file index:
a file or folder whose name starts with ``_`` or ``.`` is not data (``_SUCCESS``, ``.crc``,
``_temporary/``), which also gives writers an atomic drop: write ``.name`` and rename it.
Data files are recognised by extension; files of another data format are still returned, so
the reader can refuse them instead of silently skipping data.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

import pyarrow.fs as pafs

from spark_jobs.spec.model import InputSpec, Source
from spark_jobs.state.arrow_fs import Location, is_local, locate, normalize, strip_file_scheme

from .confine import confine

FORMAT_EXTENSIONS: dict[str, tuple[str, ...]] = {
    "parquet": (".parquet", ".parq"),
    "csv": (".csv",),
    "json": (".json", ".jsonl", ".ndjson"),
}
TEXT_COMPRESSIONS = (".gz", ".bz2")  # Spark and the driver-side header reader both decode these
SUCCESS_MARKER = "_SUCCESS"
IN_PROGRESS_DIR = "_temporary"


@dataclass(frozen=True)
class InputFile:
    """One pending item: a data file, or (snapshots) a folder; ``path`` is its identity in manifests."""

    path: str
    size: int
    mtime: float

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    def as_dict(self) -> dict:
        return {"path": self.path, "size": self.size, "mtime": self.mtime}

    @classmethod
    def from_dict(cls, d: dict) -> "InputFile":
        return cls(str(d["path"]), int(d.get("size", 0)), float(d.get("mtime", 0.0)))


def is_hidden(name: str) -> bool:
    return name.startswith(("_", "."))


def file_format(path: str) -> str | None:
    """The data format a file name says (``x.csv.gz`` -> csv), None if it names no data format."""
    name = path.rsplit("/", 1)[-1].lower()
    compressed = name.endswith(TEXT_COMPRESSIONS)
    if compressed:
        name = name.rsplit(".", 1)[0]
    for fmt, extensions in FORMAT_EXTENSIONS.items():
        if name.endswith(extensions):
            return None if compressed and fmt == "parquet" else fmt
    return None


# ---- locations (shared with the state store: spark_jobs/state/arrow_fs.py) --------------------

def resolve_path(source: Source, data_root: str, allowed_roots: Sequence[str] = ()) -> str:
    """``source.path`` made absolute: under ``data_root``, or as is if absolute or a URI; it must
    stay inside the data root or one of ``allowed_roots``, symbolic links followed (``confine``)."""
    path = source.path
    if "://" in path or path.startswith("file:") or os.path.isabs(path):
        folder = normalize(path)
    elif is_local(data_root):
        folder = normalize(os.path.join(strip_file_scheme(data_root), path))
    else:
        folder = data_root.rstrip("/") + "/" + path.strip("/")
    return confine(folder, path, data_root, allowed_roots)


_GLOB_CHARS = re.compile(r"([\\{}\[\]*?])")


def spark_uri(path: str) -> str:
    """What to hand Spark for one file: an explicit file: URI locally (a cluster's default FS is
    not ours), glob characters escaped (Spark would read ``x[1].csv`` as ``x1.csv``)."""
    uri = "file://" + normalize(path) if is_local(path) else path
    return _GLOB_CHARS.sub(r"\\\1", uri)


# ---- listing ---------------------------------------------------------------------------------

def _walk(loc: Location, recursive: bool) -> list[pafs.FileInfo]:
    selector = pafs.FileSelector(loc.inner, recursive=recursive, allow_not_found=True)
    try:
        return loc.fs.get_file_info(selector)
    except (NotADirectoryError, FileNotFoundError):
        return []


def _rel_parts(loc: Location, info: pafs.FileInfo) -> list[str]:
    return info.path[len(loc.inner):].strip("/").split("/")


def data_files(path: str) -> list[InputFile]:
    """Data files under ``path`` (recursive, hidden names skipped), sorted by path.

    A single data file as ``path`` lists as itself; a missing path lists as nothing.
    """
    loc = locate(path)
    top = loc.fs.get_file_info(loc.inner)
    if top.type == pafs.FileType.File:
        return [InputFile(loc.uri, top.size, top.mtime_ns / 1e9)] if file_format(top.path) else []
    out = []
    for info in _walk(loc, recursive=True):
        if info.type != pafs.FileType.File or file_format(info.base_name) is None:
            continue
        if any(is_hidden(part) for part in _rel_parts(loc, info)):
            continue
        out.append(InputFile(loc.outer(info.path), info.size, info.mtime_ns / 1e9))
    return sorted(out, key=lambda f: f.path)


def _ready_snapshot_folder(loc: Location, info: pafs.FileInfo) -> InputFile | None:
    """A snapshot folder, once complete: no ``_temporary`` inside, and data files or ``_SUCCESS``."""
    folder = Location(loc.fs, info.path, loc.outer(info.path))
    size, mtime, has_data, has_success = 0, info.mtime_ns / 1e9, False, False
    for entry in _walk(folder, recursive=True):
        parts = _rel_parts(folder, entry)
        if IN_PROGRESS_DIR in parts:
            return None
        if entry.type != pafs.FileType.File:
            continue
        mtime = max(mtime, entry.mtime_ns / 1e9)
        has_success |= parts == [SUCCESS_MARKER]
        if file_format(entry.base_name) and not any(is_hidden(p) for p in parts):
            has_data = True
            size += entry.size
    return InputFile(folder.uri, size, mtime) if has_data or has_success else None


def _snapshot_items(loc: Location, consumed: set[str]) -> list[InputFile]:
    """New snapshots: entries directly under the folder named after the newest consumed one."""
    mine = [p.rsplit("/", 1)[1] for p in consumed if p.rsplit("/", 1)[0] == loc.uri]
    newest = max(mine, default=None)
    items = []
    for info in sorted(_walk(loc, recursive=False), key=lambda i: i.base_name):
        name = info.base_name
        if is_hidden(name) or (newest is not None and name <= newest):
            continue
        if info.type == pafs.FileType.File and file_format(name):
            items.append(InputFile(loc.outer(info.path), info.size, info.mtime_ns / 1e9))
        elif info.type == pafs.FileType.Directory:
            folder = _ready_snapshot_folder(loc, info)
            if folder is not None:
                items.append(folder)
    return items


def pending_files(spec: InputSpec, data_root: str, consumed: Iterable[str],
                  allowed_roots: Sequence[str] = ()) -> list[InputFile]:
    """Items of ``spec``'s source not consumed yet, sorted (path for changes, name for snapshots).

    For snapshots only items named after the newest consumed snapshot count: an older snapshot
    that arrives late is superseded already. The caller reads the last one and records all.
    """
    if spec.source is None:
        return []
    root = resolve_path(spec.source, data_root, allowed_roots)
    done = {normalize(p) for p in consumed}
    if spec.source.kind == "snapshots":
        return _snapshot_items(locate(root), done)
    return [f for f in data_files(root) if f.path not in done]


def exists(path: str) -> bool:
    loc = locate(path)
    return loc.fs.get_file_info(loc.inner).type != pafs.FileType.NotFound


def open_text_head(path: str, limit: int = 1 << 20) -> bytes:
    """The first bytes of a file (decompressed for .gz/.bz2), for header checks in the driver."""
    loc = locate(path)
    lower = path.lower()
    compression = "gzip" if lower.endswith(".gz") else "bz2" if lower.endswith(".bz2") else None
    with loc.fs.open_input_stream(loc.inner, compression=compression) as stream:
        return stream.read(limit)
