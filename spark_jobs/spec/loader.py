"""Read a circuit file: YAML text -> plain data with line numbers -> typed ``CircuitSpec``.

``yaml.safe_load`` forgets where things were, but every problem we report must name its line;
so we compose the YAML node tree once (safe loader), record the line of every key and list item
by its path, and construct the data from that same tree with the safe constructor. Two YAML 1.1
habits are corrected on the way: only ``true``/``false`` are booleans (PyYAML would read the key
``on:`` of a join as ``True``), and duplicate keys, which PyYAML silently overwrites, are reported.

Building the typed objects is forgiving: wrongly shaped values are skipped (the JSON Schema check
in ``validate.py`` reports them), so one run reports every problem in the file.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import yaml

from . import yaml_limits
from .errors import CircuitError, Problem
from .model import (DEFAULT_CDC_OPS, DEFAULT_ORCHESTRATION_TASKS, ON_INPUTS, CdcOptions, CircuitSpec, Column,
                    Expectation, InputSpec, NodeSpec, Orchestration, OutputSpec, PublishSpec, SinkSpec, Source)
from .node_ops import Loading, node_op
from .sql import ParsedQuery, Position, SqlError, parse_query
from .sql_limits import QueryBudget, line_col, query_problem
from .time import event_time_of
from .validate import schema_problems, semantic_problems

YamlPath = tuple[Any, ...]  # keys (str) and list indexes (int) from the document root


class _CircuitYamlLoader(yaml_limits.DepthLimit, yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans (`on`, `off`, `yes`, `no` stay strings) and a bound on
    nesting (``yaml_limits``)."""


_CircuitYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_CircuitYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


@dataclass
class Document:
    """A parsed circuit file: its data, where each part of it was, and YAML-level problems."""

    file: str
    text: str
    data: Any = None
    lines: dict[YamlPath, int] = field(default_factory=dict)  # 1-based line of each key / item
    scalars: dict[YamlPath, tuple[int, str | None]] = field(default_factory=dict)  # string value: (line, style)
    problems: list[Problem] = field(default_factory=list)
    ok: bool = True  # False when the YAML could not be read at all

    def line(self, path: YamlPath) -> int:
        """Line of ``path``, or of its closest ancestor that has one."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return 1

    def get(self, path: YamlPath) -> Any:
        """The value at ``path`` (None when absent)."""
        value = self.data
        for key in path:
            if isinstance(value, dict) and key in value:
                value = value[key]
            elif isinstance(value, list) and isinstance(key, int) and 0 <= key < len(value):
                value = value[key]
            else:
                return None
        return value

    def node_of(self, path: YamlPath) -> str | None:
        """The input, node or output a path belongs to; body nodes are labelled ``rec.body_node``."""
        path = tuple(path)
        if len(path) < 2:
            return None
        if path[0] == "inputs":
            return str(path[1])
        if path[0] == "outputs":
            view = self.get(path[:2]) if isinstance(path[1], int) else path[1]
            return view if isinstance(view, str) else None
        if path[0] == "nodes":
            label, rest = str(path[1]), path[2:]
            while len(rest) >= 2 and rest[0] == "body":
                label, rest = f"{label}.{rest[1]}", rest[2:]
            return label
        return None


def _plain_key(key: Any) -> str:
    """Mapping keys as strings, spelled the way YAML writes them."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    return "null" if key is None else str(key)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {_plain_key(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def read_yaml(text: str, file: str) -> Document:
    """Parse YAML safely, recording lines and duplicate keys; syntax errors become problems."""
    doc = Document(file=file, text=text)
    if len(text) > yaml_limits.MAX_BYTES and len(text.encode("utf-8")) > yaml_limits.MAX_BYTES:
        doc.problems.append(Problem(file, 1, None, yaml_limits.size_problem(len(text.encode("utf-8")))))
        doc.ok = False
        return doc
    try:
        loader = _CircuitYamlLoader(text)  # the reader checks the characters here: it may raise too
    except yaml.reader.ReaderError as exc:
        doc.problems.append(_character_problem(text, file, exc))
        doc.ok = False
        return doc
    try:
        root = loader.get_single_node()
        if root is not None and (why := yaml_limits.expansion_problem(root)):
            doc.problems.append(Problem(file, 1, None, why))
            doc.ok = False
        elif root is not None:
            _walk(root, (), doc, set())
            doc.data = _plain(loader.construct_document(root))
    except RecursionError:
        doc.problems.append(Problem(file, 1, None, f"the YAML is nested too deeply (at most "
                                                   f"{yaml_limits.MAX_DEPTH} levels)"))
        doc.ok = False
    except yaml_limits.TooDeep as exc:
        doc.problems.append(Problem(file, exc.problem_mark.line + 1, None, str(exc.problem)))
        doc.ok = False
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = " ".join(str(s) for s in (exc.context, exc.problem) if s)
        doc.problems.append(Problem(file, mark.line + 1 if mark else 1, None,
                                    f"YAML syntax error: {what}"))
        doc.ok = False
    except yaml.reader.ReaderError as exc:
        doc.problems.append(_character_problem(text, file, exc))
        doc.ok = False
    except yaml.YAMLError as exc:
        doc.problems.append(Problem(file, 1, None, f"YAML error: {exc}"))
        doc.ok = False
    finally:
        loader.dispose()
    return doc


def _character_problem(text: str, file: str, exc: yaml.reader.ReaderError) -> Problem:
    """A character YAML does not allow in a file (NUL, a control character): its line and code."""
    line = text.count("\n", 0, max(exc.position, 0)) + 1
    code = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "\0")
    return Problem(file, line, None, f"the file contains the control character U+{code:04X}, which YAML does not "
                                     f"allow: expected printable text (tabs and line breaks are fine)")


def _walk(node: yaml.Node, path: YamlPath, doc: Document, seen: set[int]) -> None:
    """Record the line of every mapping key and list item under ``node``; report duplicate keys."""
    if id(node) in seen:  # an alias: its lines were recorded where the anchor is
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue
            key, line = key_node.value, key_node.start_mark.line + 1
            if key in first:
                doc.problems.append(Problem(doc.file, line, doc.node_of(path + (key,)) if path else None,
                                            f"duplicate key '{key}' (first defined on line {first[key]}): "
                                            f"each key may appear once in a mapping"))
            else:
                first[key] = line
                doc.lines[path + (key,)] = line
                if isinstance(value_node, yaml.ScalarNode):
                    doc.scalars[path + (key,)] = (value_node.start_mark.line + 1, value_node.style)
            _walk(value_node, path + (key,), doc, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            doc.lines[path + (i,)] = item.start_mark.line + 1
            _walk(item, path + (i,), doc, seen)


# ---- typed objects -------------------------------------------------------------------------

def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _strs(value: Any) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _field_lines(raw: dict[str, Any], path: YamlPath, doc: Document) -> dict[str, int]:
    """Line of each field of a node and of each item/entry of its list and mapping fields."""
    lines: dict[str, int] = {}
    for key, value in raw.items():
        lines[key] = doc.line(path + (key,))
        if isinstance(value, list):
            lines.update({f"{key}.{i}": doc.line(path + (key, i)) for i in range(len(value))})
        elif isinstance(value, dict) and key != "body":
            lines.update({f"{key}.{k}": doc.line(path + (key, k)) for k in value})
    return lines


def build_node(name: str, raw: Any, path: YamlPath, doc: Document, broken: frozenset[str],
               problems: list[Problem], budget: QueryBudget | None = None) -> NodeSpec:
    """A ``NodeSpec`` from its YAML mapping: the fields every node may have, then those its op
    reads itself (its ``NodeOp.load``, ``spec/ops/<op>.py``)."""
    label = doc.node_of(path) or name
    if not isinstance(raw, dict):
        return NodeSpec(name=name, op="", line=doc.line(path))
    lines = _field_lines(raw, path, doc)
    op = _str(raw.get("op")) or ""
    fields: dict[str, Any] = dict(
        input=_str(raw.get("input")), inputs=_strs(raw.get("inputs")), left=_str(raw.get("left")),
        right=_str(raw.get("right")), on=_strs(raw.get("on")), left_on=_strs(raw.get("left_on")),
        right_on=_strs(raw.get("right_on")), where=_str(raw.get("where")), group_by=_strs(raw.get("group_by")),
        query=_str(raw.get("query")))
    hooks = node_op(op)
    if hooks is not None and hooks.load is not None:
        loading = Loading(doc, path, label, lines, problems, broken, budget,
                          lambda k, v, p: build_node(k, v, p, doc, broken, problems, budget))
        fields.update(hooks.load(raw, loading))
    return NodeSpec(name=name, op=op, line=doc.line(path), field_lines=lines, **fields)


def limited_parse(query: str, budget: QueryBudget | None = None) -> ParsedQuery:
    """``parse_query``, unless the text is past a bound of ``sql_limits`` (checked first: the
    parser would overflow Python's stack or take too long), which becomes the query's error."""
    found = query_problem(query)
    if found is None and budget is not None and (over := budget.spend(query)):
        found = (over, 0)
    if found is None:
        return parse_query(query)
    why, offset = found
    return ParsedQuery(query, None, error=SqlError(why, Position(*line_col(query, offset))))


def build_expectations(raw: Any, path: YamlPath, doc: Document) -> tuple[Expectation, ...]:
    """Well-formed ``{expect_name: {kwargs}}`` entries (malformed ones are the schema's to report)."""
    found = []
    for i, entry in enumerate(raw if isinstance(raw, list) else ()):
        if not (isinstance(entry, dict) and len(entry) == 1):
            continue
        (name, kwargs), = entry.items()
        if not isinstance(kwargs, (dict, type(None))):
            continue
        kwargs = dict(kwargs or {})
        policy = kwargs.pop("policy", "fail")
        found.append(Expectation(name=name, kwargs=kwargs, policy=policy if isinstance(policy, str) else "fail",
                                 line=doc.line(path + (i,))))
    return tuple(found)


def build_input(name: str, raw: Any, doc: Document) -> InputSpec:
    path = ("inputs", name)
    raw = raw if isinstance(raw, dict) else {}
    columns = []
    schema = raw.get("schema")
    for col, typ in schema.items() if isinstance(schema, dict) else ():
        nullable = typ.get("nullable", True) if isinstance(typ, dict) else True
        typ = typ.get("type") if isinstance(typ, dict) else typ
        columns.append(Column(col, typ if isinstance(typ, str) else "",  # "" = reported by the schema
                              nullable if isinstance(nullable, bool) else True, doc.line(path + ("schema", col))))
    src = raw.get("source")
    source = None
    if isinstance(src, dict):
        options = src.get("options")
        kind = str(src.get("kind", ""))
        cdc = build_cdc(src) if kind == "cdc" else None
        if cdc is not None:  # the operation column says what happened; it is not a column of the relation
            columns = [c for c in columns if c.name != cdc.op]
        source = Source(kind=kind, path=str(src.get("path", "")),
                        format=str(src.get("format", "parquet")),
                        options=dict(options) if isinstance(options, dict) else {},
                        line=doc.line(path + ("source",)), cdc=cdc, table=_str(src.get("table")) or "",
                        connection=_str(src.get("connection")) or "", slot=_str(src.get("slot")) or "")
    return InputSpec(name=name, columns=tuple(columns), source=source,
                     expectations=build_expectations(raw.get("expectations"), path + ("expectations",), doc),
                     line=doc.line(path), key=_strs(raw.get("key")),
                     time=event_time_of(raw.get("time"), doc.line(path + ("time",))))


def _slot_named(spec: InputSpec, circuit: str) -> InputSpec:
    """A postgres source's slot: as written, else one per circuit and input (two circuits reading
    one table each consume the table's changes once)."""
    src = spec.source
    if src is None or src.kind != "postgres" or src.slot:
        return spec
    slot = re.sub(r"[^a-z0-9_]", "_", f"dbsp_{circuit}_{spec.name}".lower())[:63]
    return replace(spec, source=replace(src, slot=slot))


def build_cdc(src: dict[str, Any]) -> CdcOptions:
    """The cdc fields of a source mapping (wrong shapes are the schema's to report)."""
    ops = src.get("ops")
    return CdcOptions(op=_str(src.get("op")) or "op",
                      ops={str(k): str(v) for k, v in ops.items()} if isinstance(ops, dict) else dict(DEFAULT_CDC_OPS),
                      sequence=_str(src.get("sequence")), unknown_key=_str(src.get("unknown_key")) or "refuse",
                      after=_str(src.get("after")), before=_str(src.get("before")))


def build_publish(raw: Any, line: int) -> PublishSpec:
    """`publish: false`, `publish: true` or `publish: {path: ..., enabled: ...}`."""
    if isinstance(raw, bool):
        return PublishSpec(enabled=raw, line=line)
    if isinstance(raw, dict):
        enabled = raw.get("enabled", True)
        return PublishSpec(enabled=enabled if isinstance(enabled, bool) else True, path=_str(raw.get("path")), line=line)
    return PublishSpec(line=line)


def build_sink(raw: Any, line: int) -> SinkSpec | None:
    """`sink: {kind: postgres, table: schema.name, connection: NAME}` (wrong shapes: the schema's)."""
    if not isinstance(raw, dict):
        return None
    return SinkSpec(kind=_str(raw.get("kind")) or "", table=_str(raw.get("table")) or "",
                    connection=_str(raw.get("connection")) or "", line=line)


def build_outputs(raw: Any, doc: Document) -> dict[str, OutputSpec]:
    if isinstance(raw, list):
        return {v: OutputSpec(v, (), doc.line(("outputs", i))) for i, v in enumerate(raw) if isinstance(v, str)}
    if not isinstance(raw, dict):
        return {}
    out = {}
    for v, body in raw.items():
        body = body if isinstance(body, dict) else {}
        out[v] = OutputSpec(v, build_expectations(body.get("expectations"), ("outputs", v, "expectations"), doc),
                            doc.line(("outputs", v)), key=_strs(body.get("key")),
                            publish=build_publish(body.get("publish"), doc.line(("outputs", v, "publish"))),
                            feed=body.get("feed") is True, sink=build_sink(body.get("sink"), doc.line(("outputs", v, "sink"))))
    return out


def build_schedule(raw: Any, inputs: dict[str, Any]) -> tuple[str | None, tuple[str, ...]]:
    """``schedule`` as (cron or preset, asset references): a string, ``none``, ``on_inputs``
    (every input's folder), or ``{cron: ..., assets: [...]}``. Wrong types are left to the schema."""
    if isinstance(raw, str):
        text = raw.strip()
        if text.lower() == "none":
            return None, ()
        if text == ON_INPUTS:
            return None, tuple(inputs)
        return raw, ()
    if isinstance(raw, dict):
        cron = raw.get("cron")
        assets = raw.get("assets")
        refs = tuple(a for a in assets if isinstance(a, str)) if isinstance(assets, list) else ()
        return (cron if isinstance(cron, str) and cron.strip().lower() != "none" else None), refs
    return None, ()


def build_orchestration(raw: Any, doc: Document) -> Orchestration:
    if not isinstance(raw, dict):
        return Orchestration()
    tasks = raw.get("tasks", DEFAULT_ORCHESTRATION_TASKS)
    return Orchestration(tasks=tasks if isinstance(tasks, str) else DEFAULT_ORCHESTRATION_TASKS,
                         commit_empty=raw.get("commit_empty") is True, line=doc.line(("orchestration",)))


def build_spec(doc: Document, broken: frozenset[str] = frozenset()) -> tuple[CircuitSpec, list[Problem]]:
    """The typed circuit of a document whose top level is a mapping, plus aggregate-parse problems."""
    data: dict[str, Any] = doc.data
    problems: list[Problem] = []
    inputs = data.get("inputs") if isinstance(data.get("inputs"), dict) else {}
    nodes = data.get("nodes") if isinstance(data.get("nodes"), dict) else {}
    schedule, schedule_assets = build_schedule(data.get("schedule"), inputs)
    settings = data.get("settings")
    budget = QueryBudget()
    built = {k: build_node(k, v, ("nodes", k), doc, broken, problems, budget) for k, v in nodes.items()}
    known = {n.lower(): n for n in list(inputs) + list(nodes)}
    built = {k: replace(n, tables=tuple(known.get(t.lower(), t) for t in n.tables)) if n.tables else n
             for k, n in built.items()}  # SQL names are case-insensitive: the circuit's spelling
    built = {k: _one_row_source(n, inputs) for k, n in built.items()}
    name = str(data.get("name", ""))
    spec = CircuitSpec(
        name=name, path=doc.file,
        inputs={k: _slot_named(build_input(k, v, doc), name) for k, v in inputs.items()},
        nodes=built,
        outputs=build_outputs(data.get("outputs"), doc),
        schedule=schedule,
        description=data.get("description") if isinstance(data.get("description"), str) else "",
        text=doc.text, settings=dict(settings) if isinstance(settings, dict) else {},
        schedule_assets=schedule_assets, orchestration=build_orchestration(data.get("orchestration"), doc))
    return spec, problems


# ---- public entry points -------------------------------------------------------------------

def check_text(text: str, path: str = "<string>", allowed_roots: Sequence[str] = ()
               ) -> tuple[CircuitSpec | None, list[Problem]]:
    """Parse and validate; returns the spec (None if the YAML is unusable) and all problems,
    ordered by line. ``allowed_roots``: roots outside the data root that input paths may name
    (the profile's ``inputs.allowed_roots``)."""
    doc = read_yaml(text, path)
    if not doc.ok:
        return None, doc.problems
    if not isinstance(doc.data, dict):
        got = "an empty file" if doc.data is None else f"a {type(doc.data).__name__}"
        return None, doc.problems + [Problem(path, 1, None, f"the top level must be a mapping with keys "
                                                             f"name, inputs, nodes and outputs; got {got}")]
    structural, broken = schema_problems(doc)
    try:
        spec, parse_problems = build_spec(doc, broken)
        problems = doc.problems + structural + parse_problems + semantic_problems(spec, doc, broken, allowed_roots)
    except RecursionError:  # past what sql_limits.py and yaml_limits.py measure: one message, not a traceback
        return None, doc.problems + structural + [Problem(path, 1, None, (
            "the circuit nests too deeply to be checked (a query or an expression with very long chains or deep "
            "nesting): split it into more nodes"))]
    unique = list(dict.fromkeys(problems))
    return spec, sorted(unique, key=lambda p: p.line)


def _one_row_source(node: NodeSpec, inputs: dict) -> NodeSpec:
    """A SELECT without FROM reads one constant row, built as a global ``count(*)`` over the
    circuit's first input (one row at every step whatever that input holds): the node depends on
    that input, so the input is one of the relations it reads (``tables``)."""
    from .sql.parse import needs_one_row

    parsed = node.sql
    if parsed is None or not inputs or not needs_one_row(parsed.tree):
        return node
    source = next(iter(inputs))
    tables = node.tables if source in node.tables else (*node.tables, source)
    return replace(node, tables=tables, sql=replace(parsed, one_row=source, plans={}))


def load_circuit_text(text: str, path: str = "<string>", allowed_roots: Sequence[str] = ()) -> CircuitSpec:
    """A validated ``CircuitSpec`` from YAML text; raises ``CircuitError`` listing every problem."""
    spec, problems = check_text(text, path, allowed_roots)
    if problems or spec is None:
        raise CircuitError(problems)
    return spec


def _read(path: str | Path) -> tuple[str | None, list[Problem]]:
    try:
        return yaml_limits.read_text(path), []
    except yaml_limits.FileTooLarge as exc:
        return None, [Problem(str(path), 1, None, str(exc))]
    except UnicodeDecodeError as exc:
        line = exc.object[:exc.start].count(b"\n") + 1
        return None, [Problem(str(path), line, None, f"the file is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} is "
                                                     f"not valid UTF-8 there): save it as UTF-8")]
    except OSError as exc:
        what = "a directory, not a file" if isinstance(exc, IsADirectoryError) else exc.strerror or str(exc)
        return None, [Problem(str(path), 1, None, f"cannot read circuit file: {what} (expected a YAML file)")]


def load_circuit(path: str | Path, allowed_roots: Sequence[str] = ()) -> CircuitSpec:
    """A validated ``CircuitSpec`` from a file; raises ``CircuitError`` listing every problem."""
    text, problems = _read(path)
    if text is None:
        raise CircuitError(problems)
    return load_circuit_text(text, str(path), allowed_roots)


def validate_file(path: str | Path, allowed_roots: Sequence[str] = ()) -> list[Problem]:
    """Every problem in a circuit file (empty = valid), for ``dbsp validate``."""
    text, problems = _read(path)
    return problems if text is None else check_text(text, str(path), allowed_roots)[1]
