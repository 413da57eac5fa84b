"""List a local input folder so that every real folder and every real file counts once.

pyarrow's recursive listing and Spark's reader follow symbolic links blindly: a link ``loop -> .``
lists the folder's files again under ``loop/``, ``loop/loop/``, ... up to the kernel's link limit
(41 copies of each file), and two such links make the listing exponential. This walker reads each
folder with one ``os.scandir`` and keeps the identity (device, inode) of every folder and file it
has listed, so:

- the folder's own entries come first, links last: a link whose target was listed already (a
  loop, ``up -> ../t``, a second name for a folder or file of the input) is not followed, and
  the target counts once, under its own name (``skipped`` says which links were left out);
- a link to a folder or file not listed yet is followed once, and every file reached through it
  is marked ``linked`` (retention never deletes such a file: it belongs to someone else);
- a link's target must stay inside ``roots`` (the data root and the profile's allowed roots),
  else ``LinkOutside`` names the link; a broken link lists as nothing;
- hard links to one file count once (same inode).

Work is one directory read per real folder and one ``stat`` per entry: linear in the number of
files, whatever the links. Hadoop URIs have no links and are listed by pyarrow (discovery.py).
"""
from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

from spark_jobs.errors import DbspError
from spark_jobs.spec.paths import within


@dataclass(frozen=True, slots=True)
class Entry:
    """One file or folder, as reached from the top folder."""

    path: str  # where it was reached (below the top folder; what a reader opens)
    parts: tuple[str, ...]  # its path below the top folder, segment by segment
    is_dir: bool
    size: int
    mtime_ns: int
    identity: tuple[int, int]  # (device, inode): the file itself, whatever name reached it
    linked: bool  # reached through a symbolic link (or is one)


class LinkOutside(DbspError):
    """A symbolic link whose target leaves the allowed roots: ``(link, real target)`` (a signal
    to ``discovery``, which refuses the input with ``InputRefused``)."""

    def __init__(self, link: str, target: str):
        super().__init__(f"{link} -> {target}")
        self.link, self.target = link, target


@dataclass
class Walk:
    """Everything below a folder, each real file and folder once (see the module docstring)."""

    entries: list[Entry] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (link, why it was not followed)

    def files(self) -> list[Entry]:
        return [e for e in self.entries if not e.is_dir]


def is_hidden(name: str) -> bool:
    """Spark's rule: a name starting with ``_`` or ``.`` is not data (``_SUCCESS``, ``.crc``)."""
    return name.startswith(("_", "."))


def _identity(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def walk(top: str, roots: Sequence[str] = (), *, hidden: bool = False) -> Walk:
    """Every entry below the local folder ``top`` (not ``top`` itself), folders before the links
    that lead to them; ``roots``: real paths a link target must stay inside (empty: no check).
    ``hidden``: list names starting with ``_`` or ``.`` too (else they are not even read, so a
    link to a hidden file still counts as that file's one name)."""
    out = Walk()
    try:
        top_stat = os.stat(top)
    except (FileNotFoundError, NotADirectoryError):
        return out
    seen: set[tuple[int, int]] = {_identity(top_stat)}
    links: deque[tuple[str, tuple[str, ...]]] = deque()
    _read_tree(top, (), False, hidden, seen, links, out)
    while links:  # in the order found: a folder's own entries before any link below it
        path, parts = links.popleft()
        target = os.path.realpath(path)
        if roots and not any(within(target, r) for r in roots):
            raise LinkOutside(path, target)
        try:
            st = os.stat(path)
        except OSError:  # a broken link, or a loop the kernel already refuses
            out.skipped.append((path, "a broken symbolic link"))
            continue
        if _identity(st) in seen:
            out.skipped.append((path, f"a symbolic link to {target}, which is listed already"))
            continue
        seen.add(_identity(st))
        is_dir = os.path.isdir(path)
        out.entries.append(Entry(path, parts, is_dir, 0 if is_dir else st.st_size, st.st_mtime_ns,
                                 _identity(st), True))
        if is_dir:
            _read_tree(path, parts, True, hidden, seen, links, out)
    return out


def _read_tree(folder: str, parts: tuple[str, ...], linked: bool, hidden: bool, seen: set[tuple[int, int]],
               links: deque[tuple[str, tuple[str, ...]]], out: Walk) -> None:
    """Entries below ``folder`` that are not links (depth first, by name); links are queued."""
    stack = [(folder, parts)]
    while stack:
        here, here_parts = stack.pop()
        try:
            with os.scandir(here) as it:
                entries = sorted(it, key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        below = []
        for entry in entries:
            if not hidden and entry.name[0] in "_.":  # is_hidden, inlined: this loop runs per file
                continue
            sub = (*here_parts, entry.name)
            if entry.is_symlink():
                links.append((entry.path, sub))
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # removed while listing
                continue
            ident = _identity(st)
            if ident in seen:  # a hard link to a file listed already, or a bind mount
                out.skipped.append((entry.path, "a second name (hard link) of a file listed already"))
                continue
            seen.add(ident)
            is_dir = entry.is_dir(follow_symlinks=False)
            out.entries.append(Entry(entry.path, sub, is_dir, 0 if is_dir else st.st_size, st.st_mtime_ns,
                                     ident, linked))
            if is_dir:
                below.append((entry.path, sub))
        stack.extend(reversed(below))


__all__ = ["Entry", "LinkOutside", "Walk", "is_hidden", "walk"]
