"""Circuits that read one input folder in different ways.

Every circuit of a deployment reads its inputs relative to one data root, so two circuits that
name the same folder read the same files. That is right when they mean the same input (same
kind, format and schema: each circuit consumes the files by itself) and a trap when they do not:
one circuit's files are refused by, or silently misread as, the other's. ``dbsp validate`` warns
about the second case, naming both inputs with their file and line.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Iterable

from .model import CircuitSpec, InputSpec


# Spark SQL's other names of one type (`long` and `bigint` read a file alike)
ALIASES = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint", "real": "float",
           "dec": "decimal", "numeric": "decimal"}


def type_name(text: str) -> str:
    t = "".join(text.lower().split())
    head, paren, rest = t.partition("(")
    return ALIASES.get(head, head) + paren + rest


@dataclass(frozen=True)
class Reader:
    """One input of one circuit, as it reads its folder."""

    file: str
    circuit: str
    input: InputSpec

    @property
    def folder(self) -> str:
        path = self.input.source.path
        return path if "://" in path else posixpath.normpath(path.replace("\\", "/"))

    @property
    def schema(self) -> dict[str, str]:
        return {c.name.lower(): type_name(str(c.type)) for c in self.input.columns}

    def where(self) -> str:
        line = self.input.source.line or self.input.line
        return f"{self.file}:{line}: circuit '{self.circuit}' input '{self.input.name}'"


def readers(circuits: Iterable[tuple[str, CircuitSpec]]) -> list[Reader]:
    return [Reader(file, spec.name, inp) for file, spec in circuits
            for inp in spec.inputs.values() if inp.source is not None and inp.source.path]  # a table has no folder


def differences(a: Reader, b: Reader) -> list[str]:
    """How two readers of one folder read it differently (empty: the same way)."""
    out = []
    sa, sb = a.input.source, b.input.source
    if sa.kind != sb.kind:
        out.append(f"kind {sa.kind} vs {sb.kind}")
    if sa.reader_format != sb.reader_format:
        out.append(f"format {sa.format} vs {sb.format}")
    if a.schema != b.schema:
        only_a = sorted(set(a.schema) - set(b.schema))
        only_b = sorted(set(b.schema) - set(a.schema))
        typed = sorted(c for c in set(a.schema) & set(b.schema) if a.schema[c] != b.schema[c])
        parts = []
        if only_a:
            parts.append(f"columns only in '{a.circuit}': {_few(only_a)}")
        if only_b:
            parts.append(f"columns only in '{b.circuit}': {_few(only_b)}")
        parts += [f"{c} is {a.schema[c]} vs {b.schema[c]}" for c in typed]
        out.append("schema: " + "; ".join(parts))
    return out


def _few(names: list[str], n: int = 4) -> str:
    return ", ".join(names[:n]) + (f" (+{len(names) - n} more)" if len(names) > n else "")


def shared_folder_warnings(circuits: Iterable[tuple[str, CircuitSpec]], checked: Iterable[str] | None = None
                           ) -> list[str]:
    """One warning per pair of inputs that read one folder differently. ``circuits``: (file, spec)
    of every circuit that shares the data root; ``checked``: the files being validated (a pair
    is reported when one of its inputs is in one of them; None: every pair)."""
    checked = None if checked is None else set(checked)
    by_folder: dict[str, list[Reader]] = {}
    for r in readers(circuits):
        by_folder.setdefault(r.folder, []).append(r)
    warnings = []
    for folder, group in sorted(by_folder.items()):
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                if checked is not None and a.file not in checked and b.file not in checked:
                    continue
                if a.file == b.file and a.input.name == b.input.name:
                    continue
                diff = differences(a, b)
                if diff:
                    warnings.append(
                        f"warning: {a.where()} and {b.where()} read the same folder '{folder}' differently "
                        f"({'; '.join(diff)}): circuits share the data root, so each reads the other's files; "
                        f"give each its own folder (docs/airflow.md, 'Circuits share a data root')")
    return warnings
