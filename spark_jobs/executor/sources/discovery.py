"""Which input files a timestep has to read: listing, naming rules, and what was consumed.

Listing runs in the driver through ``pyarrow.fs`` (local paths, and s3/hdfs/gcs URIs when
pyarrow can reach them), so it costs no Spark job. Naming rules, as Spark's own file index:
a file or folder whose name starts with ``_`` or ``.`` is not data (``_SUCCESS``, ``.crc``,
``_temporary/``), which also gives writers an atomic drop: write ``.name`` and rename it.
Data files are recognised by extension; files of another data format are still returned, so
the reader can refuse them instead of silently skipping data.

Symbolic links on a local disk: the folder itself may be a link; below it, each real folder and
each real file is listed once (``walk.py``: a loop or a second name of something listed is not
followed), and a file reached through a link is marked ``linked`` (input retention never deletes
it). A file that two inputs of one circuit would both read is refused (``refuse_shared``).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

import pyarrow.fs as pafs

from spark_jobs.spec.model import InputSpec, Source
from spark_jobs.state.arrow_fs import Location, is_local, locate, normalize, strip_file_scheme

from . import delta_log
from .confine import confine, outside_reason, real_roots
from .identity import ConsumedRecords, file_fingerprint, folder_fingerprint, verify
from .walk import LinkOutside, is_hidden, walk

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
    linked: bool = field(default=False, compare=False)  # reached through a symbolic link (never removed)
    identity: tuple[int, int] | None = field(default=None, compare=False)  # (device, inode) on a local disk
    # a Delta input's commit file (``delta_log.py``): the version the state already holds, whose
    # change up to this one the step reads (None: the whole table at this version)
    base: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.path.rstrip("/").rsplit("/", 1)[-1])

    def as_dict(self) -> dict:
        """Everything, for a DAG run's plan (the path is read by later tasks of the same run)."""
        return {"path": self.path, **self.record(), **({"base": self.base} if self.base is not None else {})}

    def record(self) -> dict:
        """What a manifest keeps of a consumed file: nothing that depends on the mount point."""
        return {"name": self.name, "size": self.size, "mtime": self.mtime, "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, d: dict) -> "InputFile":
        base = d.get("base")
        return cls(str(d["path"]), int(d.get("size", 0)), float(d.get("mtime", 0.0)),
                   str(d.get("name") or ""), str(d.get("fingerprint") or ""),
                   base=None if base is None else int(base))


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
    return confine(folder, path, data_root, allowed_roots, source.kind)


_GLOB_CHARS = re.compile(r"([\\{}\[\]*?])")


def spark_uri(path: str) -> str:
    """What to hand Spark for one file: an explicit file: URI locally (a cluster's default FS is
    not ours), glob characters escaped (Spark would read ``x[1].csv`` as ``x1.csv``)."""
    uri = "file://" + normalize(path) if is_local(path) else path
    return _GLOB_CHARS.sub(r"\\\1", uri)


def _needs_own_read(path: str) -> bool:
    """A name Hadoop's globber cannot take: a glob character (so the path is globbed, escaped)
    and a ':' (the globber parses a component as a path, and ``x[1]:y`` as a URI scheme)."""
    return ":" in normalize(path) and bool(_GLOB_CHARS.search(path)) if is_local(path) else False


def read_files(reader, fmt: str, files: Sequence[InputFile], finish: Callable[[Any], Any]):  # noqa: ANN001, ANN201
    """``finish(reader.format(fmt).load(paths))`` for the files, as one DataFrame. Names Hadoop can
    glob are read in one scan; a name it cannot (``_needs_own_read``: ``x[1]:y.parquet``) is read
    alone with globbing off (Spark reads a file twice when several unglobbed paths are given),
    and the scans are unioned. ``finish`` runs on each scan (it may select its ``_metadata``)."""
    from functools import reduce

    plain = [f for f in files if not _needs_own_read(f.path)]
    own = [f for f in files if _needs_own_read(f.path)]
    scans = [finish(reader.format(fmt).load([spark_uri(f.path) for f in plain]))] if plain else []
    if own:
        reader = reader.option("__globPaths__", "false")  # Spark's own switch (DataSource.GLOB_PATHS_KEY)
        scans += [finish(reader.format(fmt).load("file://" + normalize(f.path))) for f in own]
    return reduce(lambda a, b: a.unionByName(b), scans)


# ---- listing ---------------------------------------------------------------------------------

def _walk(loc: Location, recursive: bool) -> list[pafs.FileInfo]:
    selector = pafs.FileSelector(loc.inner, recursive=recursive, allow_not_found=True)
    try:
        return loc.fs.get_file_info(selector)
    except (NotADirectoryError, FileNotFoundError):
        return []


def _rel_parts(loc: Location, info: pafs.FileInfo) -> list[str]:
    return info.path[len(loc.inner):].strip("/").split("/")


def data_files(path: str, roots: Sequence[str] = ()) -> list[InputFile]:
    """Data files under ``path`` (recursive, hidden names skipped), sorted by path; each named
    by its path below ``path``. A single data file as ``path`` lists as itself (named by its base
    name); a missing path lists as nothing. On a local disk ``roots`` (real paths) bound where a
    symbolic link below ``path`` may lead (``InputRefused`` otherwise) and each real file is
    listed once (``walk.py``).
    """
    loc = locate(path)
    top = loc.fs.get_file_info(loc.inner)
    if top.type == pafs.FileType.File:
        return [InputFile(loc.uri, top.size, top.mtime_ns / 1e9)] if file_format(top.path) else []
    return _listing(path, roots)[0]


def _listing(path: str, roots: Sequence[str] = ()) -> tuple[list[InputFile], list[tuple[str, str]]]:
    """``data_files``, and the symbolic links the local walk did not follow (link, why)."""
    loc = locate(path)
    top = loc.fs.get_file_info(loc.inner)
    if top.type == pafs.FileType.File:
        return ([InputFile(loc.uri, top.size, top.mtime_ns / 1e9)] if file_format(top.path) else []), []
    if is_local(path):
        found = _local_walk(loc.inner, roots)
        files = [_local_file(e) for e in found.files() if file_format(e.parts[-1])]
        return sorted(files, key=lambda f: f.path), found.skipped
    out = []
    for info in _walk(loc, recursive=True):
        if info.type != pafs.FileType.File or file_format(info.base_name) is None:
            continue
        parts = _rel_parts(loc, info)
        if any(is_hidden(part) for part in parts):
            continue
        out.append(InputFile(loc.outer(info.path), info.size, info.mtime_ns / 1e9, "/".join(parts)))
    return sorted(out, key=lambda f: f.path), []


def _local_walk(folder: str, roots: Sequence[str], hidden: bool = False):  # noqa: ANN202
    try:
        return walk(folder, roots, hidden=hidden)
    except LinkOutside as exc:
        from .checks import InputRefused  # checks imports this module

        raise InputRefused([(exc.link, outside_reason(exc.target))]) from None


def _local_file(e) -> InputFile:  # noqa: ANN001
    return InputFile(e.path, e.size, e.mtime_ns / 1e9, "/".join(e.parts), linked=e.linked, identity=e.identity)


def _ready_snapshot_folder(loc: Location, info: pafs.FileInfo, roots: Sequence[str] = ()) -> InputFile | None:
    """A snapshot folder, once complete: no ``_temporary`` inside, and data files or ``_SUCCESS``."""
    folder = Location(loc.fs, info.path, loc.outer(info.path))
    if is_local(folder.uri):
        entries = [(list(e.parts), e.is_dir, e.size, e.mtime_ns) for e in _local_walk(folder.inner, roots, True).entries]
    else:
        entries = [(_rel_parts(folder, e), e.type != pafs.FileType.File, e.size, e.mtime_ns)
                   for e in _walk(folder, recursive=True)]
    size, mtime, has_data, has_success = 0, info.mtime_ns / 1e9, False, False
    for parts, is_dir, entry_size, mtime_ns in entries:
        if IN_PROGRESS_DIR in parts:
            return None
        if is_dir:
            continue
        mtime = max(mtime, mtime_ns / 1e9)
        has_success |= parts == [SUCCESS_MARKER]
        if file_format(parts[-1]) and not any(is_hidden(p) for p in parts):
            has_data = True
            size += entry_size
    return InputFile(folder.uri, size, mtime) if has_data or has_success else None


def _snapshot_items(loc: Location, roots: Sequence[str] = ()) -> list[InputFile]:
    """Every snapshot directly under the folder (a data file, or a folder once complete), by name."""
    items = []
    for info in sorted(_walk(loc, recursive=False), key=lambda i: i.base_name):
        name = info.base_name
        if is_hidden(name):
            continue
        if info.type == pafs.FileType.File and file_format(name):
            items.append(InputFile(loc.outer(info.path), info.size, info.mtime_ns / 1e9))
        elif info.type == pafs.FileType.Directory:
            folder = _ready_snapshot_folder(loc, info, roots)
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
    unfollowed: list[tuple[str, str]] = field(default_factory=list)  # symbolic links not followed, and why
    input_name: str = ""

    @property
    def notes(self) -> list[str]:
        if not self.unfollowed:
            return self.consumed.notes
        link, why = self.unfollowed[0]
        return [*self.consumed.notes,
                f"input {self.input_name}: {len(self.unfollowed)} symbolic link(s) not followed, as each real "
                f"file is read once (e.g. {link}: {why})"]


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
    if spec.source.kind == "postgres":  # a table, not a folder: its log positions (pg_log.py)
        from .pg_scan import scan_postgres

        return scan_postgres(spec, ConsumedRecords.load(spec.name, "", "", consumed), fingerprints)
    root = resolve_path(spec.source, data_root, allowed_roots)
    roots = real_roots(data_root, allowed_roots)
    records = ConsumedRecords.load(spec.name, root, spec.source.path, consumed)
    if spec.source.kind == "delta":  # its commit files are its versions (delta_log.py)
        listed = delta_log.commit_files(root, InputFile)
        pending, changed = delta_log.scan(spec.name, root, records, listed, fingerprint_of)
        if fingerprints:
            pending = [replace(f, fingerprint=fingerprint_of(f)) for f in pending]
        return InputScan(pending, records, changed, listed, [], spec.name)
    if spec.source.kind == "snapshots":
        listed = _snapshot_items(locate(root), roots)
        newest = max(records.by_name, default=None)
        pending = [i for i in listed if newest is None or i.name > newest]
        checked = [i for i in listed if i.name == newest]
        unfollowed: list[tuple[str, str]] = []
    else:
        listed, unfollowed = _listing(root, roots)
        pending = [f for f in listed if f.name not in records.by_name]
        checked = [f for f in listed if f.name in records.by_name]
    changed = verify(records, checked, fingerprint_of)
    if fingerprints:
        pending = [replace(f, fingerprint=fingerprint_of(f)) for f in pending]
    return InputScan(pending, records, changed, listed, unfollowed, spec.name)


def refuse_shared(scans: "dict[str, InputScan]") -> None:
    """``InputRefused`` if one file (the same device and inode, whatever its names) is listed by
    two inputs of a circuit: through a link into another input's folder, or folders that nest.
    Each would apply it, and one input's retention could delete the other's pending file."""
    from .checks import InputRefused  # checks imports this module

    claims: dict[tuple[int, int], list[tuple[bool, str, InputFile]]] = {}
    for name, scan in scans.items():
        for f in scan.listed:
            if f.identity is not None:
                claims.setdefault(f.identity, []).append((f.linked, name, f))
    problems: dict[str, list[tuple[str, str]]] = {}
    for found in claims.values():
        if len({name for _, name, _ in found}) < 2:
            continue
        _, owner, first = min(found, key=lambda c: (c[0], c[1]))  # who reaches it without a link
        for _, name, f in found:
            if name != owner:
                problems.setdefault(name, []).append((f.path, (
                    f"is the file {first.path} of input {owner} too (a symbolic link into another input's "
                    f"folder, or folders that nest): a file belongs to one input; remove the link or "
                    f"separate the folders")))
    if problems:
        raise InputRefused.combine([InputRefused(p, n) for n, p in problems.items()])


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
