"""Where an input's ``source.path`` may point: inside the data root, or an allowed outside root.

A circuit names its inputs' folders relative to the data root (``inbox/orders``), so a circuit
file cannot make the engine read anything else: a path with a ``..`` segment is refused always,
and an absolute path or URI (``/etc``, ``s3a://bucket/x``) only passes when the profile lists a
root containing it in ``inputs.allowed_roots`` (config/README.md). These are checks on the text,
done at validation; symbolic links are resolved when a step opens the folder
(``spark_jobs/executor/sources/confine.py``).
"""
from __future__ import annotations

import posixpath
import re
from typing import Sequence

ALLOWED_ROOTS_KEY = "inputs.allowed_roots"
STATE_DIR = "_dbsp"  # default state root under the data root: <data_root>/_dbsp/<circuit>/...
VIEWS_DIR = "views"  # default root of published tables: <data_root>/views/<circuit>/<view>
ENGINE_DIRS = (STATE_DIR, VIEWS_DIR)  # what the engine writes under the data root: never an input
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")  # hdfs:/x, s3a:bucket, jar:file:... (a URI without //)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def is_absolute(path: str) -> bool:
    """A URI (``scheme://...``, ``file:...``) or an absolute local path."""
    return "://" in path or path.startswith("/") or _SCHEME.match(path) is not None


def normalize(path: str) -> str:
    """Comparable form: local paths without ``file:`` and with ``.``/``//`` folded; URIs as is."""
    if path.startswith("file://"):
        path = path[len("file://"):]
    elif path.startswith("file:"):
        path = path[len("file:"):]
    if "://" in path:
        return path.rstrip("/")
    return posixpath.normpath(path) if path else path


def within(path: str, root: str) -> bool:
    """Is ``path`` the root itself or below it (compared by whole segments)?"""
    path, root = normalize(path), normalize(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def has_parent_segment(path: str) -> bool:
    return ".." in re.split(r"[/\\]", path)


def source_path_problem(path: str, allowed_roots: Sequence[str] = (), kind: str = "") -> str | None:
    """Why ``path`` may not be an input's folder (None when it may). A ``delta`` input may read a
    published view's table under ``views/`` (that is how circuits chain through Delta tables)."""
    if has_parent_segment(path):
        return (f"source path '{path}' has a '..' segment: input paths stay inside the data root "
                f"(write a path relative to it, without '..')")
    if _CONTROL.search(path):
        return (f"source path {path!r} has a control character (a NUL, a line break, ...): expected a "
                f"folder name relative to the data root")
    if is_absolute(path):
        if any(within(path, root) for root in allowed_roots):
            return None
        allowed = f" (allowed roots: {', '.join(allowed_roots)})" if allowed_roots else ""
        return (f"source path '{path}' is outside the data root: input paths are relative to the "
                f"data root; a profile may allow other roots with {ALLOWED_ROOTS_KEY}{allowed}")
    folder = normalize(path.replace("\\", "/"))
    if folder in ("", "."):
        return (f"source path '{path}' is the data root itself, which holds every input and the engine's "
                f"state: name an input's own folder (e.g. inbox/<input>)")
    if kind == "delta" and folder.split("/", 1)[0] == VIEWS_DIR and folder != VIEWS_DIR:
        return None
    if folder.split("/", 1)[0] in ENGINE_DIRS:
        return (f"source path '{path}' is inside '{folder.split('/', 1)[0]}/', where the engine keeps its state "
                f"and published views: an input's files live in a folder of their own (e.g. inbox/<input>)")
    return None
