"""Which input file is which, wherever the data root is mounted.

A manifest records every consumed file by its **name relative to its input's folder**, its size,
its modification time and a **content fingerprint**, never by an absolute path: a data root that
is copied (``cp -a``), moved or mounted elsewhere then continues exactly where it was, and a
consumed file whose content changed under the same name is refused instead of being skipped (it
was consumed) or applied again (it looks new).

The fingerprint is chosen to be cheap on every file system the engine reads (local disks, and
HDFS/S3/... through ``pyarrow.fs``, see ``spark_jobs/state/arrow_fs.py``) and robust for the
files that land in an inbox:

- up to ``FULL_HASH_BYTES`` (8 MiB: nearly every change batch) it is a BLAKE2b hash of the whole
  file: any change is seen;
- above that it hashes the size, the first and last ``EDGE_BYTES`` (1 MiB each) and
  ``SAMPLES`` evenly spaced blocks of ``SAMPLE_BYTES`` (64 KiB) in between: at most 2.5 MiB read
  from any file, whatever its size. For Parquet the last MiB holds the footer, whose row counts,
  column-chunk offsets and min/max statistics change with almost any rewrite; for text files the
  size plus the sampled blocks catch appends, truncations and rewrites. A same-size edit that
  touches none of the sampled bytes of a file over 8 MiB is not seen: that is the price of not
  reading large files twice (Spark reads them once anyway).

A fingerprint is computed once per file, when a step first sees it, and again only for a
consumed file whose modification time changed (a copy that did not keep times, a touch, or a
rewrite): the listing a step does anyway gives sizes and times, so checking the consumed files
costs no reads while nothing changed.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol, Sequence

from spark_jobs.state.arrow_fs import locate, normalize

FULL_HASH_BYTES = 8 << 20
EDGE_BYTES = 1 << 20
SAMPLE_BYTES = 64 << 10
SAMPLES = 8
_SCHEME = "b2"  # a fingerprint is "<scheme>:<hex>", so the scheme can change without ambiguity


def _digest() -> "hashlib._Hash":
    return hashlib.blake2b(digest_size=16)


def _ranges(size: int) -> list[tuple[int, int]]:
    """(offset, length) of the bytes a fingerprint of a file of ``size`` bytes reads."""
    if size <= FULL_HASH_BYTES:
        return [(0, size)]
    inner_start, inner_end = EDGE_BYTES, size - EDGE_BYTES
    step = (inner_end - inner_start) // (SAMPLES + 1)
    middle = [(inner_start + step * (i + 1), SAMPLE_BYTES) for i in range(SAMPLES)]
    return [(0, EDGE_BYTES), *middle, (inner_end, EDGE_BYTES)]


def file_fingerprint(path: str, size: int) -> str:
    """The content fingerprint of one file (see the module docstring for what it reads)."""
    loc = locate(path)
    h = _digest()
    h.update(str(size).encode())
    with loc.fs.open_input_file(loc.inner) as fh:
        for offset, length in _ranges(size):
            fh.seek(offset)
            h.update(fh.read(length))
    return f"{_SCHEME}:{h.hexdigest()}"


def folder_fingerprint(files: Iterable[tuple[str, int, str]]) -> str:
    """A snapshot folder's fingerprint from its data files' (relative name, size, fingerprint)."""
    h = _digest()
    for name, size, fp in sorted(files):
        h.update(f"{name}\0{size}\0{fp}\n".encode())
    return f"{_SCHEME}:{h.hexdigest()}"


def relative_name(root: str, path: str) -> str:
    """``path``'s identity under the input folder ``root``: the '/'-separated path below it (the
    base name when ``path`` is the root itself, a source that names one file)."""
    root, path = normalize(root).rstrip("/"), normalize(path)
    if path == root:
        return path.rsplit("/", 1)[-1]
    if path.startswith(root + "/"):
        return path[len(root) + 1:]
    raise ValueError(f"{path} is not under the input folder {root}")


def _migrated_name(root: str, source_path: str, old: str) -> tuple[str, bool]:
    """The name of a record that a manifest of format 1 kept as an absolute path ``old``; and
    whether it had to be matched by name (the path is not under the current folder ``root``)."""
    try:
        return relative_name(root, old), False
    except ValueError:
        pass
    tail = "/" + source_path.strip("/") + "/"
    if source_path and "://" not in source_path and not os.path.isabs(source_path) and tail in old:
        return old.rsplit(tail, 1)[1], True  # the data root moved; the source's own path did not
    return old.rstrip("/").rsplit("/", 1)[-1], True


@dataclass
class ConsumedRecords:
    """The consumed-file records of one input, by name, as read from the last manifest.

    Records written before names existed (an absolute ``path``) are migrated on reading: a path
    under the current input folder maps to its relative name; any other path (the data root
    moved) is matched by its path below the source's folder, or by base name, and ``notes`` says
    so. ``changed`` says the records differ from the manifest's (migrated, or a fingerprint
    learnt), so the next commit writes them back.
    """

    by_name: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    changed: bool = False

    @classmethod
    def load(cls, input_name: str, root: str, source_path: str, records: Iterable[dict | str]) -> "ConsumedRecords":
        out = cls()
        moved: list[str] = []
        for raw in records:
            rec = {"path": raw} if isinstance(raw, str) else dict(raw)
            if "name" not in rec:
                name, by_name = _migrated_name(root, source_path, str(rec.pop("path")))
                rec["name"] = name
                out.changed = True
                if by_name:
                    moved.append(name)
            rec.pop("path", None)
            out.by_name[rec["name"]] = rec
        if moved:
            out.notes.append(
                f"input {input_name}: {len(moved)} consumed file(s) were recorded by absolute paths "
                f"outside the current folder {root} (the data root moved?); they were matched by "
                f"their names below the input folder (e.g. {moved[0]})")
        return out

    def records(self) -> list[dict[str, Any]]:
        return sorted(self.by_name.values(), key=lambda r: r["name"])


class Listed(Protocol):
    """A file (or snapshot folder) as the listing saw it now (``discovery.InputFile``)."""

    name: str
    path: str
    size: int
    mtime: float


def verify(consumed: ConsumedRecords, listed: Sequence[Listed],
           fingerprint: Callable[[Listed], str]) -> list[tuple[str, str]]:
    """Compare consumed files that are still listed with what was recorded; (path, reason) for
    every one whose content changed. ``fingerprint(listed)`` computes a fingerprint, and is only
    called where the size is equal but the modification time is not.

    A verified file whose time changed (a copy that did not keep times) gets its new time
    recorded, so it is not read again at the next step; a record without a fingerprint (format 1)
    learns one.
    """
    problems = []
    for item in listed:
        rec = consumed.by_name.get(item.name)
        if rec is None:
            continue
        size, fp = int(rec.get("size", -1)), rec.get("fingerprint")
        if size >= 0 and size != item.size:
            problems.append((item.path, _changed(rec, f"its size is now {item.size} bytes, "
                                                      f"it was {size} when it was consumed")))
            continue
        if fp and float(rec.get("mtime", 0.0)) == item.mtime:
            continue
        now = fingerprint(item)
        if fp and now != fp:
            problems.append((item.path, _changed(rec, "its content fingerprint differs from the one "
                                                      "recorded when it was consumed")))
            continue
        if not fp or float(rec.get("mtime", 0.0)) != item.mtime:
            rec.update(size=item.size, mtime=item.mtime, fingerprint=now)
            consumed.changed = True
    return problems


def _changed(rec: dict[str, Any], why: str) -> str:
    at = f" at timestep {rec['timestep']}" if "timestep" in rec else ""
    return (f"this file was consumed{at} and has changed since ({why}); a consumed file must "
            f"never change: restore it, and write further changes as a new file (to rebuild "
            f"from the files as they are now, run a full refresh)")
