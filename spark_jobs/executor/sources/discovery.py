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
from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

import pyarrow.fs as pafs

from spark_jobs.spec.model import InputSpec, Source
from spark_jobs.state.arrow_fs import Location, is_local, locate, normalize, strip_file_scheme

from .confine import confine
from .identity import ConsumedRecords, file_fingerprint, folder_fingerprint, verify

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
    """One pending item: a data file, or (snapshots) a folder.

    ``path`` is where it is now (what Spark reads); ``name``, its path below the input's folder,
    is its identity in manifests, with ``size`` and the content ``fingerprint`` (identity.py), so
    a moved data root still knows which files it consumed.
    """

    path: str
    size: int
    mtime: float
    name: str = ""
    fingerprint: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.path.rstrip("/").rsplit("/", 1)[-1])

    def as_dict(self) -> dict:
        """Everything, for a DAG run's plan (the path is read by later tasks of the same run)."""
        return {"path": self.path, **self.record()}

    def record(self) -> dict:
        """What a manifest keeps of a consumed file: nothing that depends on the mount point."""
        return {"name": self.name, "size": self.size, "mtime": self.mtime, "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, d: dict) -> "InputFile":
        return cls(str(d["path"]), int(d.get("size", 0)), float(d.get("mtime", 0.0)),
                   str(d.get("name") or ""), str(d.get("fingerprint") or ""))


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
    """Data files under ``path`` (recursive, hidden names skipped), sorted by path; each named
    by its path below ``path``. A single data file as ``path`` lists as itself (named by its base
    name); a missing path lists as nothing.
    """
    loc = locate(path)
    top = loc.fs.get_file_info(loc.inner)
    if top.type == pafs.FileType.File:
        return [InputFile(loc.uri, top.size, top.mtime_ns / 1e9)] if file_format(top.path) else []
    out = []
    for info in _walk(loc, recursive=True):
        if info.type != pafs.FileType.File or file_format(info.base_name) is None:
            continue
        parts = _rel_parts(loc, info)
        if any(is_hidden(part) for part in parts):
            continue
        out.append(InputFile(loc.outer(info.path), info.size, info.mtime_ns / 1e9, "/".join(parts)))
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


def _snapshot_items(loc: Location) -> list[InputFile]:
    """Every snapshot directly under the folder (a data file, or a folder once complete), by name."""
    items = []
    for info in sorted(_walk(loc, recursive=False), key=lambda i: i.base_name):
        name = info.base_name
        if is_hidden(name):
            continue
        if info.type == pafs.FileType.File and file_format(name):
            items.append(InputFile(loc.outer(info.path), info.size, info.mtime_ns / 1e9))
        elif info.type == pafs.FileType.Directory:
            folder = _ready_snapshot_folder(loc, info)
            if folder is not None:
                items.append(folder)
    return items


def fingerprint_of(item: InputFile) -> str:
    """The content fingerprint of a data file, or of a snapshot folder's data files."""
    loc = locate(item.path)
    if loc.fs.get_file_info(loc.inner).type == pafs.FileType.Directory:
        return folder_fingerprint((f.name, f.size, file_fingerprint(f.path, f.size)) for f in data_files(item.path))
    return file_fingerprint(item.path, item.size)


@dataclass
class InputScan:
    """What one input's folder holds now, against what earlier timesteps consumed."""

    pending: list[InputFile]  # not consumed yet, fingerprinted, in reading order
    consumed: ConsumedRecords  # the consumed records (migrated, times refreshed)
    changed: list[tuple[str, str]] = field(default_factory=list)  # consumed files whose content changed
    listed: list[InputFile] = field(default_factory=list)  # everything the folder holds now

    @property
    def notes(self) -> list[str]:
        return self.consumed.notes


def scan_input(spec: InputSpec, data_root: str, consumed: Iterable[dict | str] = (), *,
               allowed_roots: Sequence[str] = (), fingerprints: bool = True) -> InputScan:
    """Items of ``spec``'s source not consumed yet, and consumed ones whose content changed.

    ``consumed`` are the manifest's records of this input (names relative to the input folder;
    absolute paths of older manifests are migrated, see ``identity.ConsumedRecords``). Changes
    files are pending in path order. For snapshots only items named after the newest consumed
    snapshot count (an older one that arrives late is superseded already), and only the newest
    consumed snapshot is checked for changes (it is the one the state holds); the caller reads
    the last pending one and records all. ``allowed_roots``: roots outside the data root the
    source may name (``resolve_path``). ``fingerprints=False`` skips reading the pending files
    (for a mere "is anything pending?").
    """
    if spec.source is None:
        return InputScan([], ConsumedRecords())
    root = resolve_path(spec.source, data_root, allowed_roots)
    records = ConsumedRecords.load(spec.name, root, spec.source.path, consumed)
    if spec.source.kind == "snapshots":
        listed = _snapshot_items(locate(root))
        newest = max(records.by_name, default=None)
        pending = [i for i in listed if newest is None or i.name > newest]
        checked = [i for i in listed if i.name == newest]
    else:
        listed = data_files(root)
        pending = [f for f in listed if f.name not in records.by_name]
        checked = [f for f in listed if f.name in records.by_name]
    changed = verify(records, checked, fingerprint_of)
    if fingerprints:
        pending = [replace(f, fingerprint=fingerprint_of(f)) for f in pending]
    return InputScan(pending, records, changed, listed)


def pending_files(spec: InputSpec, data_root: str, consumed: Iterable[dict | str] = (),
                  allowed_roots: Sequence[str] = ()) -> list[InputFile]:
    """``scan_input(...).pending``: the items of ``spec``'s source not consumed yet."""
    return scan_input(spec, data_root, consumed, allowed_roots=allowed_roots).pending


def remove_file(path: str) -> None:
    """Delete one input file (input retention; the caller chose it from ``data_files``)."""
    loc = locate(path)
    loc.fs.delete_file(loc.inner)


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
