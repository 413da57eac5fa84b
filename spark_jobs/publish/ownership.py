"""Who owns a place under the views root: a published table belongs to one circuit.

A table is owned by the view that created it (its Delta transaction of the app id
``dbsp:<circuit>/<view>``, and each commit's ``dbsp.circuit``/``dbsp.view`` metadata). Folders
are owned too: ``<views root>/<circuit>/`` is circuit ``<circuit>``'s (its views' default
place), whether or not it has published yet. Before a view creates its table, ``claim_problem``
refuses a place that is not free for it:

- inside another circuit's folder (a known circuit: one with a circuit file in the profile's
  circuits folder, a state folder, or a table there);
- inside another table, or a folder that already holds anything that is not this view's table
  (another table nested below, or plain files);
- a name that differs only in case from an existing folder (``VICTIM/v`` next to ``victim/``:
  one folder on a case-insensitive file system).

``removal_problem`` keeps ``dbsp reset`` to the view's own table: a folder holding another
table, or files the table does not account for, is not deleted. Paths are compared normalized
(``victim//v`` and ``same/x/`` are ``victim/v`` and ``same/x``).
"""
from __future__ import annotations

import os
import posixpath
from typing import Iterable

import pyarrow.fs as pafs

DELTA_LOG = "_delta_log"


def _fs(uri: str) -> tuple[pafs.FileSystem, str]:
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    return pafs.FileSystem.from_uri(uri)


def _children(fs: pafs.FileSystem, path: str) -> list[pafs.FileInfo]:
    try:
        return fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except (NotADirectoryError, FileNotFoundError, OSError):
        return []


def _is_table(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(posixpath.join(path, DELTA_LOG)).type == pafs.FileType.Directory


def owner_of(uri: str, storage_options: dict[str, str] | None = None) -> str:
    """What the table at ``uri`` is, as a noun phrase: "the table of view 'v' of circuit 'c'" for
    one this engine published (its latest commit says), else "a Delta table this engine did not
    publish"."""
    from deltalake import DeltaTable

    try:
        last = DeltaTable(uri, storage_options=storage_options or None).history(limit=1)
    except Exception:
        return "an unreadable Delta table"
    meta = last[0] if last else {}
    if "dbsp.circuit" in meta:
        return f"the table of view {meta.get('dbsp.view')!r} of circuit {meta['dbsp.circuit']!r}"
    return "a Delta table this engine did not publish"


def relative(root: str, uri: str) -> list[str]:
    """The segments of ``uri`` below ``root`` (both normalized)."""
    root_n, uri_n = posixpath.normpath(root.rstrip("/")), posixpath.normpath(uri.rstrip("/"))
    if "://" not in root and "://" not in uri:
        root_n, uri_n = os.path.abspath(root_n), os.path.abspath(uri_n)
    if uri_n == root_n or not uri_n.startswith(root_n + "/"):
        return []
    return uri_n[len(root_n) + 1:].split("/")


def claim_problem(root: str, uri: str, circuit: str, view: str, circuits: Iterable[str],
                  storage_options: dict[str, str] | None = None) -> str | None:
    """Why view ``view`` of ``circuit`` may not create its table at ``uri`` under the views
    ``root`` (None: the place is free for it). ``circuits``: the names of circuits known here."""
    parts = relative(root, uri)
    if not parts:
        return f"{uri} is not a folder below the views root {root}"
    known = set(circuits)
    first = parts[0]
    if first != circuit and first in known:
        return (f"{root.rstrip('/')}/{first} is the folder of circuit {first!r} (its views are published there): "
                f"circuit {circuit!r} may not publish view {view!r} inside it; choose another "
                f"outputs.{view}.publish.path")
    fs, base = _fs(root)
    here = base
    for depth, part in enumerate(parts):
        names = {i.base_name for i in _children(fs, here)}
        twin = next((n for n in names if n != part and n.casefold() == part.casefold()), None)
        if twin is not None:
            return (f"{posixpath.join(here, part)} differs only in case from {posixpath.join(here, twin)}, which exists: "
                    f"one folder on a case-insensitive file system; choose another outputs.{view}.publish.path")
        here = posixpath.join(here, part)
        if depth < len(parts) - 1 and _is_table(fs, here):
            return (f"{here} holds {owner_of(_outer(root, base, here), storage_options)}: view {view!r} of "
                    f"circuit {circuit!r} may not publish a table inside it")
    # a _delta_log alone is what a create that was interrupted leaves (a readable table there was
    # opened before this check): the view may create its table over it
    found = [i for i in _children(fs, here) if i.base_name != DELTA_LOG]
    if found:
        nested = _nested_table(fs, here)
        what = (f"{owner_of(_outer(root, base, nested), storage_options)} (at {nested})" if nested
                else f"{len(found)} entr{'y' if len(found) == 1 else 'ies'} that are not a table")
        return (f"{here} already holds {what}: view {view!r} of circuit {circuit!r} creates its table only in "
                f"a new or empty folder; choose another outputs.{view}.publish.path")
    return None


def removal_problem(uri: str) -> str | None:
    """Why the table folder ``uri`` may not be deleted whole (None: it holds only the table)."""
    fs, path = _fs(uri)
    nested = _nested_table(fs, path, skip_top=True)
    if nested:
        return (f"{uri} holds {owner_of(nested)} at {nested} besides its own: only the table's own files may be "
                f"removed; move that table first")
    return None


def _nested_table(fs: pafs.FileSystem, path: str, skip_top: bool = False) -> str | None:
    """A Delta table at or below ``path`` (not ``path`` itself with ``skip_top``), if any."""
    if not skip_top and _is_table(fs, path):
        return path
    stack = [i.path for i in _children(fs, path) if i.type == pafs.FileType.Directory and i.base_name != DELTA_LOG]
    while stack:
        folder = stack.pop()
        if _is_table(fs, folder):
            return folder
        stack.extend(i.path for i in _children(fs, folder)
                     if i.type == pafs.FileType.Directory and i.base_name != DELTA_LOG)
    return None


def _outer(root: str, base: str, inner: str) -> str:
    """An inner path of ``root``'s file system as a URI deltalake opens (local paths as they are)."""
    if "://" not in root:
        return inner
    scheme = root.split("://", 1)[0]
    return f"{scheme}://{inner}"


__all__ = ["claim_problem", "owner_of", "relative", "removal_problem"]
