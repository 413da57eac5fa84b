"""Checks of the keyed parts of a circuit: `cdc` sources and their input keys, view keys, and
where a view is published.

Kept apart from ``validate.py`` (which checks nodes and expressions) so the two can change
independently; ``validate.semantic_problems`` calls ``key_problems`` once.
"""
from __future__ import annotations

import posixpath
import re
from typing import TYPE_CHECKING

from .errors import Problem, did_you_mean, listing
from .model import CircuitSpec, InputSpec

if TYPE_CHECKING:
    from .loader import Document

# `source` fields that only a `cdc` source reads
CDC_FIELDS = ("op", "ops", "sequence", "unknown_key", "after", "before")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def key_problems(spec: CircuitSpec, doc: "Document", columns: dict[str, tuple[str, ...] | None]) -> list[Problem]:
    """Problems of input keys, cdc fields, view keys and publish paths; ``columns``: the
    resolved columns of every input and node."""
    problems: list[Problem] = []
    for inp in spec.inputs.values():
        problems += _input_problems(spec, doc, inp)
    for name, out in spec.outputs.items():
        cols = columns.get(name)
        if out.key and cols is not None:
            line = doc.line(("outputs", name, "key"))
            problems += [Problem(spec.path, line, name,
                                 f"key column '{k}' is not a column of view '{name}' (columns: {listing(cols)})"
                                 f"{did_you_mean(k, cols)}") for k in out.key if k not in cols]
        if out.sink is not None and not out.key:  # the sink refuses it too; say so before a first step
            problems.append(Problem(spec.path, out.sink.line or out.line, name,
                                    f"a PostgreSQL sink needs outputs.{name}.key (the columns that identify a row of "
                                    f"the view): a keyless view's duplicate rows cannot be told apart in a SQL table"))
        if out.publish.path is not None and (why := _path_problem(out.publish.path)):
            problems.append(Problem(spec.path, doc.line(("outputs", name, "publish", "path")), name,
                                    f"publish.path: {why}"))
    return problems + _shared_places(spec, doc)


def publish_location(circuit: str, view: str, path: str | None) -> str:
    """Where a view is published below the views root, normalized (``victim//v/`` is
    ``victim/v``): ``outputs.<view>.publish.path``, else ``<circuit>/<view>``."""
    return posixpath.normpath((path or f"{circuit}/{view}").strip("/"))


def _shared_places(spec: CircuitSpec, doc: "Document") -> list[Problem]:
    """Two published views of the circuit in one place, or one inside the other (compared
    normalized and ignoring case: one folder on a case-insensitive file system)."""
    places = {name: publish_location(spec.name, name, out.publish.path)
              for name, out in spec.outputs.items() if out.publish.enabled
              and (out.publish.path is None or _path_problem(out.publish.path) is None)}
    problems = []
    seen: list[tuple[str, str]] = []
    for name, place in places.items():
        folded = place.casefold()
        for other, other_place in seen:
            o = other_place.casefold()
            if folded == o or folded.startswith(o + "/") or o.startswith(folded + "/"):
                how = "the same place as" if folded == o else "nested with"
                problems.append(Problem(spec.path, doc.line(("outputs", name, "publish", "path")),
                                        name, f"publish.path: view {name!r} would be published to {place}, {how} "
                                              f"view {other!r} ({other_place}): each view needs a place of its own"))
                break
        seen.append((name, place))
    return problems


def _input_problems(spec: CircuitSpec, doc: "Document", inp: InputSpec) -> list[Problem]:
    here = ("inputs", inp.name)
    raw_source = doc.get(here + ("source",))
    raw_source = raw_source if isinstance(raw_source, dict) else {}
    cols = inp.column_names
    problems = [Problem(spec.path, doc.line(here + ("key",)), inp.name,
                        f"key column '{k}' is not a column of input '{inp.name}' (columns: {listing(cols)})"
                        f"{did_you_mean(k, cols)}") for k in inp.key if k not in cols]
    if inp.source is None:
        return problems
    kind = inp.source.kind
    if inp.key and kind not in ("cdc", "postgres"):
        problems.append(Problem(spec.path, doc.line(here + ("key",)), inp.name,
                                f"'key' is read by inputs of kind cdc or postgres only (this one is {kind!r})"))
    if kind != "postgres":
        problems += [Problem(spec.path, doc.line(here + ("source", f)), inp.name,
                             f"source field '{f}' is for kind postgres only (this source is {kind!r})")
                     for f in ("table", "connection", "slot") if f in raw_source]
    if kind != "cdc":
        return problems + [Problem(spec.path, doc.line(here + ("source", f)), inp.name,
                                   f"source field '{f}' is for kind cdc only (this source is {kind!r})")
                           for f in CDC_FIELDS if f in raw_source]
    cdc = inp.source.cdc
    assert cdc is not None

    def at(field: str) -> int:
        return doc.line(here + ("source", field))

    if not inp.key:
        problems.append(Problem(spec.path, inp.line, inp.name,
                                "a cdc input needs 'key: [columns]': its changes find the old row by key"))
    if cdc.sequence is not None and cdc.sequence not in cols:
        problems.append(Problem(spec.path, at("sequence"), inp.name,
                                f"sequence column '{cdc.sequence}' is not a column of the schema "
                                f"({listing(cols)}){did_you_mean(cdc.sequence, cols)}"))
    envelope = [f for f in ("after", "before") if getattr(cdc, f) is not None]
    if envelope and inp.source.reader_format != "json":
        problems.append(Problem(spec.path, at(envelope[0]), inp.name,
                                f"source field '{envelope[0]}' names a JSON object: it needs format json or "
                                f"jsonl (this source is {inp.source.format})"))
    if cdc.op in (cdc.after, cdc.before) or (cdc.after is not None and cdc.after == cdc.before):
        problems.append(Problem(spec.path, at("op"), inp.name, "op, after and before must name different fields"))
    return problems


def _path_problem(path: str) -> str | None:
    """Why a publish path would leave the views root (None when it stays inside)."""
    if _SCHEME.match(path) or path.startswith(("/", "\\")) or "\\" in path:
        return (f"'{path}' must be a relative path with '/' separators: tables are published under "
                f"the profile's views root")
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return f"{path!r} has a control character (a NUL, a line break, ...): use plain folder names"
    parts = posixpath.normpath(path).split("/")
    if ".." in parts or parts == ["."] or any(p.startswith((".", "_")) for p in path.split("/")):
        return (f"'{path}' leaves the views root or names a hidden folder; use plain folder names "
                f"such as sales/by_region")
    return None
