"""The manifest: the one JSON document that makes a timestep committed.

A manifest lists every file of every trace (so a reader needs no directory listing), the
output deltas of the timestep, the input files consumed so far (cumulative, so a retried run
can tell what it already read) and free metadata. It is immutable once published.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

# 2: consumed input files are recorded by name below their input's folder, with a fingerprint
# (format 1 recorded absolute paths; such records are migrated when read: executor/sources/identity.py)
FORMAT_VERSION = 2
KINDS = ("zset", "sum")


@dataclass
class FileStat:
    """Size of one immutable Parquet directory, recorded when it was written."""

    rows: int
    bytes: int

    def to_dict(self) -> dict[str, int]:
        return {"rows": self.rows, "bytes": self.bytes}


@dataclass
class TraceEntry:
    """The files whose union is a trace's value.

    kind "zset": data columns + _weight; the value is the sum of weights per tuple.
    kind "sum": key columns + numeric columns; the value is the per-key column sums.
    """

    kind: str
    keys: tuple[str, ...] = ()
    base: list[str] = field(default_factory=list)
    deltas: list[tuple[int, str]] = field(default_factory=list)
    files: dict[str, FileStat] = field(default_factory=dict)
    schema: str | None = None  # Spark schema JSON of the latest write: reads skip inference
    sort_by: tuple[str, ...] = ()
    # a bounded trace (``Transaction.bound``): (column, below_us) pairs its last compaction
    # applied: rows below all of them were dropped
    dropped_below: tuple[tuple[str, int], ...] = ()
    # the row-group size of this trace's sorted files (0: ``StatePolicy.sorted_row_group_bytes``)
    row_group_bytes: int = 0

    @property
    def dirs(self) -> list[str]:
        """Every directory of the trace, base first, then deltas in time order."""
        return list(self.base) + [d for _, d in self.deltas]

    @property
    def rows(self) -> int:
        return sum(self.files[d].rows for d in self.dirs if d in self.files)

    @property
    def bytes(self) -> int:
        return sum(self.files[d].bytes for d in self.dirs if d in self.files)

    @property
    def base_bytes(self) -> int:
        return sum(self.files[d].bytes for d in self.base if d in self.files)

    @property
    def delta_bytes(self) -> int:
        return sum(self.files[d].bytes for _, d in self.deltas if d in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "keys": list(self.keys),
            "sort_by": list(self.sort_by),
            "base": list(self.base),
            "deltas": [[t, d] for t, d in self.deltas],
            "rows": self.rows,
            "bytes": self.bytes,
            "files": {d: self.files[d].to_dict() for d in self.dirs if d in self.files},
            "schema": self.schema,
            **({"dropped_below": [[c, us] for c, us in self.dropped_below]} if self.dropped_below else {}),
            **({"row_group_bytes": self.row_group_bytes} if self.row_group_bytes else {}),
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "TraceEntry":
        return cls(
            kind=raw["kind"],
            keys=tuple(raw.get("keys") or ()),
            base=list(raw.get("base") or []),
            deltas=[(int(t), str(d)) for t, d in raw.get("deltas") or []],
            files={d: FileStat(int(s["rows"]), int(s["bytes"]))
                   for d, s in (raw.get("files") or {}).items()},
            schema=raw.get("schema"),
            sort_by=tuple(raw.get("sort_by") or ()),
            dropped_below=tuple((str(c), int(us)) for c, us in raw.get("dropped_below") or ()),
            row_group_bytes=int(raw.get("row_group_bytes") or 0),
        )


@dataclass
class OutputEntry:
    """A view's consolidated delta at this timestep (``delta`` None when it was empty)."""

    delta: str | None
    rows_inserted: int = 0  # sum of the positive weights
    rows_deleted: int = 0  # sum of the magnitudes of the negative weights
    rows: int = 0  # physical rows in the delta file
    bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"delta": self.delta, "rows_inserted": self.rows_inserted,
                "rows_deleted": self.rows_deleted, "rows": self.rows, "bytes": self.bytes}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "OutputEntry":
        return cls(raw.get("delta"), int(raw.get("rows_inserted", 0)),
                   int(raw.get("rows_deleted", 0)), int(raw.get("rows", 0)),
                   int(raw.get("bytes", 0)))


@dataclass
class Manifest:
    """Everything committed at ``timestep``; see the module docstring."""

    circuit: str
    fingerprint: str
    timestep: int
    committed_at: str = ""
    traces: dict[str, TraceEntry] = field(default_factory=dict)
    outputs: dict[str, OutputEntry] = field(default_factory=dict)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION
    # commit times of earlier timesteps, kept while an age-based retention needs them
    # (``state/retention.py``); carried from manifest to manifest
    timeline: list[tuple[int, str]] = field(default_factory=list)

    def referenced_dirs(self) -> set[str]:
        """Every data directory this manifest needs (traces and outputs)."""
        out: set[str] = set()
        for entry in self.traces.values():
            out.update(entry.dirs)
        out.update(o.delta for o in self.outputs.values() if o.delta)
        return out

    def consumed(self, input_name: str) -> list[dict[str, Any]]:
        """Input files consumed up to and including this timestep (records with a ``name``, or
        a ``path`` in manifests of format 1)."""
        return list(self.inputs.get(input_name, {}).get("consumed", []))

    def to_dict(self, *, shared: bool = False) -> dict[str, Any]:
        """``shared``: the result may share the input and meta values with this manifest (it
        is serialized at once, never kept)."""
        own = (lambda v: v) if shared else copy.deepcopy
        return {
            "format_version": self.format_version,
            "circuit": self.circuit,
            "fingerprint": self.fingerprint,
            "timestep": self.timestep,
            "committed_at": self.committed_at,
            "traces": {k: v.to_dict() for k, v in sorted(self.traces.items())},
            "outputs": {k: v.to_dict() for k, v in sorted(self.outputs.items())},
            "inputs": own(self.inputs),
            "meta": own(self.meta),
            **({"timeline": [[t, at] for t, at in self.timeline]} if self.timeline else {}),
        }

    def to_json(self) -> str:
        """Compact JSON: without ``indent`` the json module encodes in C, which matters because a
        manifest carries every consumed input file and is written (and parsed) at every step."""
        return json.dumps(self.to_dict(shared=True), separators=(",", ":"), default=str) + "\n"

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, owned: bool = False) -> "Manifest":
        """``owned``: ``raw`` is this manifest's alone (just parsed), so its values are taken
        as they are instead of deep-copied."""
        own = (lambda v: v) if owned else copy.deepcopy
        version = int(raw.get("format_version", 0))
        if version > FORMAT_VERSION:
            raise ValueError(f"manifest format_version {version} is newer than this code "
                             f"understands ({FORMAT_VERSION}); upgrade dbsp")
        return cls(
            circuit=raw["circuit"],
            fingerprint=raw["fingerprint"],
            timestep=int(raw["timestep"]),
            committed_at=raw.get("committed_at", ""),
            traces={k: TraceEntry.from_dict(v) for k, v in (raw.get("traces") or {}).items()},
            outputs={k: OutputEntry.from_dict(v) for k, v in (raw.get("outputs") or {}).items()},
            inputs=own(raw.get("inputs") or {}),
            meta=own(raw.get("meta") or {}),
            format_version=version,
            timeline=[(int(t), str(at)) for t, at in raw.get("timeline") or []],
        )

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        return cls.from_dict(json.loads(text), owned=True)

    def copy(self) -> "Manifest":
        """A deep copy (through JSON: the C encoder and decoder beat ``copy.deepcopy`` by far)."""
        return Manifest.from_json(self.to_json())
