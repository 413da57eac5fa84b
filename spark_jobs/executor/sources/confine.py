"""Keep an input's folder inside the data root (or an allowed root) once symbolic links count.

Validation refuses ``..`` and outside absolute paths in the circuit's text
(``spark_jobs/spec/paths.py``). What only the file system knows is checked here, each time a
step resolves the folder: on a local disk, the folder's real path (``os.path.realpath``) must be
inside the real path of the data root or of a root the profile allows, and so must every
symbolic link below it (pyarrow's listing and Spark's reader both follow links, to files and to
folders). On Hadoop URIs (hdfs://, s3a://) there is no realpath: a relative path is joined to the
root and must not have a ``..`` segment, and an absolute one must lie under an allowed root.
"""
from __future__ import annotations

import os
from typing import Sequence

from spark_jobs.spec.paths import ALLOWED_ROOTS_KEY, source_path_problem, within
from spark_jobs.state.arrow_fs import is_local, strip_file_scheme

from . import checks  # checks imports discovery, which imports this: use checks.InputRefused late


def confine(folder: str, source_path: str, data_root: str, allowed_roots: Sequence[str] = ()) -> str:
    """``folder`` (``source_path`` resolved against ``data_root``) if it stays inside the data
    root or an allowed root; raises ``InputRefused`` naming the path otherwise."""
    if why := source_path_problem(source_path, allowed_roots):
        raise checks.InputRefused([(folder, why)])
    if not is_local(folder):
        return folder
    roots = [os.path.realpath(strip_file_scheme(r)) for r in (data_root, *allowed_roots) if is_local(r)]
    real = os.path.realpath(folder)
    if not any(within(real, root) for root in roots):
        raise checks.InputRefused([(folder, _outside(real))])
    for link, target in _links_below(folder):
        if not any(within(target, root) for root in roots):
            raise checks.InputRefused([(link, _outside(target))])
    return folder


def _outside(real: str) -> str:
    return (f"resolves to {real} (through a symbolic link), outside the data root: inputs are read "
            f"only inside the data root or a root listed in the profile's {ALLOWED_ROOTS_KEY}")


def _links_below(folder: str) -> list[tuple[str, str]]:
    """Every symbolic link under ``folder`` (not followed) with its real target. One directory
    read per folder (``scandir`` knows links without a stat), like the listing itself."""
    links, stack = [], [folder]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except (NotADirectoryError, FileNotFoundError):
            continue
        for entry in entries:
            if entry.is_symlink():
                links.append((entry.path, os.path.realpath(entry.path)))
            elif entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return links
