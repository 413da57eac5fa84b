"""Where things live under a circuit's state root, and how names map to directories.

    <root>/manifests/<t:012d>.json            one per committed timestep (the commit record)
    <root>/traces/<trace>/t<t:012d>-<uuid8>/  immutable Parquet directories of a trace
    <root>/traces/~batches/t<t:012d>-<uuid8>/dbsp_slot=<i>/  deltas of several traces written
                                              by one Spark job (slot i belongs to one trace)
    <root>/outputs/<view>/t<t:012d>-<uuid8>/  the view's delta at t (the published change log)

Manifests refer to data directories by paths *relative to the root* ("traces/x/t...-..."), so
a store can be moved or mounted elsewhere. A directory's name carries the timestep that wrote
it, which is how leftovers of an unfinished timestep are told apart from committed files.
"""
from __future__ import annotations

import hashlib
import re
import uuid

from spark_jobs.state.fs import FileSystem

MANIFESTS = "manifests"
TRACES = "traces"
OUTPUTS = "outputs"
TMP_PREFIX = ".tmp-"
BATCHES = "~batches"  # traces/~batches/t<t>-<uuid>/dbsp_slot=<i>/: one write, several traces

_MANIFEST_RE = re.compile(r"^(\d{12})\.json$")
_DATA_DIR_RE = re.compile(r"^t(\d{12})-[0-9a-f]{8}$")
_SAFE_RE = re.compile(r"[^A-Za-z0-9._-]")
_MAX_NAME = 80


def safe_name(name: str) -> str:
    """A deterministic directory name for a trace id or view name.

    Plain names stay readable as they are; anything else (':' '#' '/', a leading '_' or '.'
    that Spark would treat as hidden, very long names) is replaced and gets a hash suffix of
    the original, so two different ids never share a directory.
    """
    cleaned = _SAFE_RE.sub("_", name)
    if cleaned == name and name[:1].isalnum() and len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha1(name.encode("utf-8")).hexdigest()[:10]
    stem = cleaned.strip("._-")[:_MAX_NAME] or "x"
    if not stem[:1].isalnum():
        stem = "x" + stem
    return f"{stem}-{digest}"


def manifest_name(t: int) -> str:
    return f"{t:012d}.json"


def parse_manifest_name(name: str) -> int | None:
    """Timestep of a manifest file name; None for temp files and anything else."""
    m = _MANIFEST_RE.match(name)
    return int(m.group(1)) if m else None


def new_dir_name(t: int) -> str:
    return f"t{t:012d}-{uuid.uuid4().hex[:8]}"


def parse_dir_timestep(name: str) -> int | None:
    """Timestep encoded in a data directory's name; None if it is not one of ours."""
    m = _DATA_DIR_RE.match(name)
    return int(m.group(1)) if m else None


def timestep_of(rel: str) -> int | None:
    """Timestep of a relative data-directory path such as 'traces/x/t000000000003-ab12cd34'
    (or a slot inside a batch: 'traces/~batches/t000000000003-ab12cd34/dbsp_slot=1')."""
    for part in reversed(rel.split("/")):
        t = parse_dir_timestep(part)
        if t is not None:
            return t
    return None


def with_parents(rels: set[str]) -> set[str]:
    """``rels`` and every folder above them (a batch folder is needed while one slot is)."""
    out = set(rels)
    for rel in rels:
        parts = rel.split("/")
        out.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return out


class Layout:
    """Path arithmetic for one state root on one file system."""

    def __init__(self, fs: FileSystem, root: str) -> None:
        self.fs = fs
        self.root = root

    def abs(self, rel: str) -> str:
        """The full path of a root-relative '/'-separated path."""
        return self.fs.join(self.root, *rel.split("/"))

    @property
    def manifests_dir(self) -> str:
        return self.fs.join(self.root, MANIFESTS)

    def manifest_path(self, t: int) -> str:
        return self.fs.join(self.root, MANIFESTS, manifest_name(t))

    def new_trace_dir(self, trace_id: str, t: int) -> str:
        """A fresh root-relative directory for one write to a trace."""
        return f"{TRACES}/{safe_name(trace_id)}/{new_dir_name(t)}"

    def new_batch_dir(self, t: int) -> str:
        """A fresh folder for one write that serves several traces (one slot sub-folder each).
        BATCHES cannot be a trace's folder: ``safe_name`` never yields a '~'."""
        return f"{TRACES}/{BATCHES}/{new_dir_name(t)}"

    def new_output_dir(self, view: str, t: int) -> str:
        return f"{OUTPUTS}/{safe_name(view)}/{new_dir_name(t)}"

    def output_view_dir(self, view: str) -> str:
        """Root-relative folder holding every output delta of a view."""
        return f"{OUTPUTS}/{safe_name(view)}"

    def data_dirs(self, top: str) -> list[str]:
        """Root-relative paths of all data directories under 'traces' or 'outputs'. A symbolic
        link is not the store's own (cleanup would delete its target's files): skipped."""
        out = []
        for group in self.fs.listdir(self.fs.join(self.root, top)):
            if self.through_link(f"{top}/{group}"):
                continue
            for name in self.fs.listdir(self.fs.join(self.root, top, group)):
                if not self.fs.is_link(self.fs.join(self.root, top, group, name)):
                    out.append(f"{top}/{group}/{name}")
        return out

    def through_link(self, rel: str) -> bool:
        """Does the root-relative path pass through (or end in) a symbolic link? Then it is not
        the store's own, and cleanup and retention leave it alone."""
        parts = rel.split("/")
        return any(self.fs.is_link(self.abs("/".join(parts[:i + 1]))) for i in range(len(parts)))
