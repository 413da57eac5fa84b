"""Keep an input's folder inside the data root (or an allowed root) once symbolic links count.

Validation refuses ``..`` and outside absolute paths in the circuit's text
(``spark_jobs/spec/paths.py``). What only the file system knows is checked here, each time a
step resolves the folder: on a local disk, the folder's real path (``os.path.realpath``) must be
inside the real path of the data root or of a root the profile allows, and so must every
symbolic link below it that the listing follows (``walk.py`` checks each against ``real_roots``;
Spark reads only the files listed). On Hadoop URIs (hdfs://, s3a://) there is no realpath: a relative path is joined to the
root and must not have a ``..`` segment, and an absolute one must lie under an allowed root.
"""
from __future__ import annotations

import os
from typing import Sequence

from spark_jobs.spec.paths import ALLOWED_ROOTS_KEY, source_path_problem, within
from spark_jobs.state.arrow_fs import is_local, strip_file_scheme

from . import checks  # checks imports discovery, which imports this: use checks.InputRefused late


def confine(folder: str, source_path: str, data_root: str, allowed_roots: Sequence[str] = (), kind: str = "") -> str:
    """``folder`` (``source_path`` resolved against ``data_root``) if it stays inside the data
    root or an allowed root; raises ``InputRefused`` naming the path otherwise (``kind``: the
    source's, see ``source_path_problem``)."""
    if why := source_path_problem(source_path, allowed_roots, kind):
        raise checks.InputRefused([(folder, why)])
    if not is_local(folder):
        return folder
    roots = real_roots(data_root, allowed_roots)
    real = os.path.realpath(folder)
    if not any(within(real, root) for root in roots):
        raise checks.InputRefused([(folder, outside_reason(real))])
    return folder


def real_roots(data_root: str, allowed_roots: Sequence[str] = ()) -> list[str]:
    """The real paths of the local roots an input (and any link below it) may lead into."""
    return [os.path.realpath(strip_file_scheme(r)) for r in (data_root, *allowed_roots) if is_local(r)]


def outside_reason(real: str) -> str:
    return (f"resolves to {real} (through a symbolic link), outside the data root: inputs are read "
            f"only inside the data root or a root listed in the profile's {ALLOWED_ROOTS_KEY}")
