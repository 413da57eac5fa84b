"""Whether every input's folder exists under the data root (no Spark, no pyspark import).

A misspelt ``path`` used to read as "no new files": the step committed an empty timestep and
nothing warned. A folder that does not exist is now an error, both for a step (which refuses,
exit code 2, before reading anything) and for ``dbsp validate --data-root``; an existing but empty
folder still means "no changes". The message names the input, the folder as written and as
resolved, and a close folder that does exist.
"""
from __future__ import annotations

import difflib
import os
import posixpath
from dataclasses import dataclass

import pyarrow.fs as pafs

from spark_jobs.spec.errors import Problem
from spark_jobs.spec.model import CircuitSpec, InputSpec
from spark_jobs.state.arrow_fs import is_local, locate, normalize, strip_file_scheme


@dataclass(frozen=True)
class MissingFolder:
    """An input whose folder does not exist."""

    input: InputSpec
    folder: str  # as resolved under the data root
    suggestion: str = ""  # a close existing folder, as the circuit would write it

    def reason(self) -> str:
        hint = f" (did you mean '{self.suggestion}'?)" if self.suggestion else ""
        return (f"input '{self.input.name}' reads folder '{self.input.source.path}', which does not exist"
                f"{hint}; create it (an empty folder means no changes) or correct the input's path")


def folder_of(path: str, data_root: str) -> str:
    """An input's ``source.path`` under ``data_root`` (absolute paths and URIs as they are)."""
    if "://" in path or path.startswith("file:") or os.path.isabs(path):
        return normalize(path)
    if is_local(data_root):
        return normalize(os.path.join(strip_file_scheme(data_root), path))
    return data_root.rstrip("/") + "/" + path.strip("/")


def _kind(path: str) -> pafs.FileType:
    loc = locate(path)
    try:
        return loc.fs.get_file_info(loc.inner).type
    except OSError:
        return pafs.FileType.NotFound


def _suggestion(written: str, folder: str) -> str:
    """The sibling folder closest to the missing one's last part, written as the circuit would."""
    parent, name = posixpath.split(folder.rstrip("/"))
    written_parent = posixpath.dirname(written.rstrip("/"))
    for _ in range(8):  # the nearest ancestor that exists
        if _kind(parent) == pafs.FileType.Directory:
            break
        if parent in ("", "/") or posixpath.dirname(parent) == parent:
            return ""
        parent, name = posixpath.split(parent)
        written_parent = posixpath.dirname(written_parent)
    else:
        return ""
    loc = locate(parent)
    try:
        entries = loc.fs.get_file_info(pafs.FileSelector(loc.inner, recursive=False))
    except OSError:
        return ""
    folders = [e.base_name for e in entries if e.type == pafs.FileType.Directory and not e.base_name.startswith((".", "_"))]
    close = difflib.get_close_matches(name, folders, n=1, cutoff=0.6)
    return posixpath.join(written_parent, close[0]) if close else ""


def missing_folders(inputs: dict[str, InputSpec], data_root: str) -> list[MissingFolder]:
    """The inputs whose folder does not exist (a file where a folder should be counts as one: a
    snapshot source may be a folder of files only)."""
    missing = []
    for spec in inputs.values():
        if spec.source is None or spec.source.kind == "postgres":  # a table, no folder
            continue
        folder = folder_of(spec.source.path, data_root)
        if _kind(folder) != pafs.FileType.Directory:
            missing.append(MissingFolder(spec, folder, _suggestion(spec.source.path, folder)))
    return missing


def folder_problems(file: str, spec: CircuitSpec, data_root: str) -> list[Problem]:
    """``dbsp validate --data-root``: one problem per input whose folder does not exist."""
    return [Problem(file, m.input.source.line or m.input.line, m.input.name, f"{m.reason()} (under {data_root})")
            for m in missing_folders(spec.inputs, data_root)]
