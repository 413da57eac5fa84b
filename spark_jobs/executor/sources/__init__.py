"""Input sources of a timestep: find the files that arrived, read them as validated Z-sets.

- ``changes``: every data file under the source folder (recursive) is a batch of changes,
  with an optional integer ``_weight`` column (absent = +1).
- ``snapshots``: every file or folder directly under the source folder is a full snapshot;
  ``snapshot_delta`` turns the newest one into a change against the previous value (``D``).

A file that does not match the declared schema is refused (``InputRefused`` names every such
file and why) before anything of the step is used.
"""
from __future__ import annotations

from .checks import InputRefused
from .delta import snapshot_delta
from .discovery import InputFile, data_files, file_format, pending_files, resolve_path
from .reading import read_changes, read_snapshot
from .spark_types import parse_type, spark_schema, widens

__all__ = [
    "InputFile", "InputRefused", "data_files", "file_format", "parse_type", "pending_files",
    "read_changes", "read_snapshot", "resolve_path", "snapshot_delta", "spark_schema", "widens",
]
