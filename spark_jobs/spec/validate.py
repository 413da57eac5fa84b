"""Checks on a circuit file, in two layers that never report the same thing twice.

1. Shape, by the JSON Schema (``schema.py``: ``circuit.schema.json`` with each op's fields from its
   module; editors read the file to autocomplete):
   required keys, unknown keys and fields, value types, enums (op, source kind/format, policy),
   name patterns, expectation entry form. jsonschema's errors are rewritten into our messages.
2. Meaning, in Python: duplicate names, references (with "did you mean"), either/or fields
   (``on`` vs ``left_on``/``right_on``, ``inputs`` vs ``left``/``right``), cycles, schedules,
   column types, columns of keys, groups and expressions, expectation columns, what expressions
   may call (``sql_check.py``), input paths (``paths.py``) and reader options.

A node the schema found broken is skipped by layer 2 (and its columns count as unknown), so a
wrong field does not also surface as a string of follow-on errors.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from jsonschema import Draft202012Validator, ValidationError

from .columns import Resolution, resolve
from .errors import Problem, did_you_mean, listing
from . import expectation_rules, sql_check, sql_functions
from .keys import key_problems
from .paths import source_path_problem
from .reader_options import option_problems
from .sites import condition_problem, expression_sites
from .sql_check import ExpressionError
from .time_checks import time_problems
from .typecheck import type_problems
from .model import CircuitSpec, Expectation, NodeSpec
from .node_ops import node_op, node_ops, op_names
from .schema import circuit_schema

if TYPE_CHECKING:
    from .loader import Document, YamlPath


_TYPE_WORDS = {"string": "a string", "array": "a list", "object": "a mapping", "boolean": "true or false",
               "integer": "an integer", "number": "a number", "null": "nothing (null)"}


def _validator() -> Draft202012Validator:
    return _validator_of(circuit_schema())


_VALIDATORS: dict[int, Draft202012Validator] = {}


def _validator_of(schema: dict[str, Any]) -> Draft202012Validator:
    """One validator per assembled schema (``schema.circuit_schema`` keeps the schema itself)."""
    if id(schema) not in _VALIDATORS:
        _VALIDATORS.clear()
        _VALIDATORS[id(schema)] = Draft202012Validator(schema)
    return _VALIDATORS[id(schema)]


# ---- layer 1: the JSON Schema --------------------------------------------------------------

def schema_problems(doc: "Document") -> tuple[list[Problem], frozenset[str]]:
    """Shape problems, and the labels of the nodes they make unusable (with their ancestors)."""
    problems: list[Problem] = []
    broken: set[str] = set()
    for err in _validator().iter_errors(doc.data):
        for path, message in _translate(err, doc):
            label = doc.node_of(path)
            problems.append(Problem(doc.file, doc.line(path), label, message))
            if label and path[0] == "nodes":
                parts = label.split(".")
                broken.update(".".join(parts[:i + 1]) for i in range(len(parts)))
    return problems, frozenset(broken)


def _entity_depth(path: "YamlPath") -> int:
    """How many leading path elements name the entity (input/node/output) the path is inside."""
    if len(path) < 2 or path[0] not in ("inputs", "nodes", "outputs"):
        return 0
    depth = 2
    while path[0] == "nodes" and len(path) >= depth + 2 and path[depth] == "body":
        depth += 2
    return depth


def _relative(path: "YamlPath") -> str:
    """A path inside its input/node/output as written in messages, e.g. "source.kind", "on[0]"."""
    text = ""
    for part in path[_entity_depth(path):]:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _label(path: "YamlPath") -> str:
    rel = _relative(path)
    return f"field '{rel}'" if rel else ""


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "nothing (null)"
    kind = "a mapping " if isinstance(value, dict) else "a list " if isinstance(value, list) else ""
    text = repr(value)
    return kind + (text if len(text) <= 60 else text[:57] + "...")


def _expected(schema: dict[str, Any]) -> str:
    if "title" in schema:
        return schema["title"]
    types = schema.get("type", [])
    return " or ".join(_TYPE_WORDS.get(t, t) for t in ([types] if isinstance(types, str) else types)) or "a value"


def _prefix(label: str) -> str:
    return f"{label}: " if label else ""


def _translate(err: ValidationError, doc: "Document") -> Iterator[tuple["YamlPath", str]]:
    """jsonschema error -> (path of the offending part, message saying what was expected)."""
    path, kind, inst, schema = tuple(err.absolute_path), err.validator, err.instance, err.schema
    label = _label(path)
    op = inst.get("op") if isinstance(inst, dict) and path[:1] == ("nodes",) and not label else None
    schema_path = list(err.absolute_schema_path)
    if len(schema_path) >= 2 and schema_path[-2] == "propertyNames":
        yield path + (inst,), f"invalid name '{inst}': expected {_expected(schema)}"
    elif kind == "required":
        for missing in (r for r in err.validator_value if r not in inst):
            if not path:
                yield path, f"missing required key '{missing}' (a circuit needs name, inputs, nodes and outputs)"
            elif op:
                yield path, (f"missing required field '{missing}' for op '{op}' "
                             f"(it needs: {listing(err.validator_value)})")
            elif missing == "op":
                yield path, f"missing required field 'op' (one of: {listing(op_names())})"
            else:
                rel = _relative(path)
                yield path, f"missing required field '{rel + '.' if rel else ''}{missing}'"
    elif kind == "additionalProperties":
        allowed = list(schema.get("properties", {}))
        for extra in (k for k in inst if k not in allowed):
            if not path:
                what = f"unknown top-level key '{extra}'"
            elif op:
                what = f"unknown field '{extra}' for op '{op}'"
            elif label:
                what = f"unknown field '{extra}' in {label}"
            else:
                what = f"unknown field '{extra}'" + (" for an input" if path[0] == "inputs" else "")
            yield path + (extra,), f"{what}; expected one of: {listing(allowed)}{did_you_mean(extra, allowed)}"
    elif kind == "enum":
        choices = [str(c) for c in err.validator_value]
        hint = did_you_mean(inst, choices) if isinstance(inst, str) else ""
        yield path, f"{_prefix(label)}{_describe(inst)} is not allowed; expected one of: {listing(choices)}{hint}"
    elif kind in ("minItems", "minProperties"):
        yield path, (f"{_prefix(label)}expected {_expected(schema)} with at least {err.validator_value} "
                     f"entr{'y' if err.validator_value == 1 else 'ies'}, got {len(inst)}")
    elif kind == "maxProperties":
        yield path, (f"{_prefix(label)}expected {_expected(schema)}; got {len(inst)} keys "
                     f"({listing(map(str, inst))})")
    elif kind == "uniqueItems":
        yield path, f"{_prefix(label)}each name may be listed once"
    elif kind == "minLength":
        yield path, f"{_prefix(label)}must not be empty; expected {_expected(schema)}"
    else:  # type, pattern, minimum, ...: "expected X, got Y"
        bound = f" (at least {err.validator_value})" if kind == "minimum" else ""
        yield path, f"{_prefix(label)}expected {_expected(schema)}{bound}, got {_describe(inst)}"


# ---- layer 2: meaning ----------------------------------------------------------------------

SCHEDULE_PRESETS = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly",
                    "@yearly", "@annually", "@midnight")
_CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,?#LW-]+$")
_SIMPLE_TYPES = ("boolean", "tinyint", "byte", "smallint", "short", "int", "integer", "bigint", "long",
                 "float", "real", "double", "string", "date", "timestamp", "timestamp_ntz", "timestamp_ltz",
                 "binary", "decimal", "dec", "numeric")
_DECIMAL = re.compile(r"^(?:decimal|dec|numeric)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)$", re.IGNORECASE)
_CHAR = re.compile(r"^(?:var)?char\s*\(\s*\d+\s*\)$", re.IGNORECASE)
TYPE_HELP = "boolean, tinyint, smallint, int, bigint/long, float, double, string, date, timestamp, decimal(p,s), binary"


def semantic_problems(spec: CircuitSpec, doc: "Document", broken: frozenset[str],
                      allowed_roots: Sequence[str] = ()) -> list[Problem]:
    """Problems of meaning; nodes in ``broken`` (schema errors) are not checked again.
    ``allowed_roots``: roots outside the data root that input paths may name (the profile's)."""
    if not isinstance(doc.get(("inputs",)), dict) or not isinstance(doc.get(("nodes",)), dict):
        return []  # without both namespaces every reference would look wrong
    problems = _schedule(spec, doc) + _column_types(spec) + _names(spec) + _sources(spec, doc, allowed_roots)
    scopes = list(_scopes(spec.nodes, "", frozenset(spec.inputs) | frozenset(spec.nodes), broken))
    for label, node, visible in scopes:
        problems += _node_fields(spec, label, node)
        problems += _references(spec, label, node, visible)
        op = node_op(node.op)
        if op is not None and not op.in_body and "." in label:
            problems.append(Problem(spec.path, node.line, label, op.body_refusal))
    cycle_problems, in_cycles = _cycles(spec, broken)
    problems += cycle_problems
    resolution, column_problems = resolve(spec, broken | in_cycles)
    problems += column_problems
    problems += _expressions(spec, resolution, broken) + _expectation_forms(spec)
    problems += type_problems(spec, resolution, broken | in_cycles)
    problems += _outputs(spec, resolution)
    problems += key_problems(spec, doc, resolution.columns)
    problems += time_problems(spec, doc, broken, resolution)
    for label, node, _ in scopes:
        if node.body:
            problems += _stratification(spec, label, node)
    return problems




def _recursive_part(node: NodeSpec) -> set[str]:
    """Body nodes that depend on the recursion: read the recursive node, lie on a cycle of the
    body, or read such a node (the same stratum). The others are a lower stratum."""
    refs = {name: set(b.references) for name, b in node.body.items()}

    def reaches(start: str, goal: str) -> bool:
        seen, stack = set(), list(refs[start])
        while stack:
            r = stack.pop()
            if r == goal:
                return True
            if r in refs and r not in seen:
                seen.add(r)
                stack.extend(refs[r])
        return False

    part = {name for name in node.body if reaches(name, name) or reaches(name, node.name)}
    changed = True
    while changed:
        changed = False
        for name, rs in refs.items():
            if name not in part and rs & part:
                part.add(name)
                changed = True
    return part


def _stratification(spec: CircuitSpec, label: str, node: NodeSpec) -> list[Problem]:
    """Negation and aggregation only of a lower stratum; only monotone ops in the recursion."""
    hooks = node_op(node.op)
    if hooks is not None and hooks.while_loop:
        return _loop_body(spec, label, node)
    part = _recursive_part(node)
    same = part | {node.name}
    problems = []
    allowed = [op.name for op in node_ops() if op.recursion in ("monotone", "negation")]
    for name, body_node in node.body.items():
        where = f"{label}.{name}"
        op = node_op(body_node.op)
        if op is not None and op.scope:
            problems.append(Problem(spec.path, body_node.line, where,
                                    "a recursive node inside a recursive body is not supported: write the "
                                    "inner relations into the same body (mutual recursion is allowed)"))
            continue
        if name not in part:
            continue  # lower stratum: computed once per timestep, outside the loop
        recursion = op.recursion if op is not None else "outer"
        side = op.negated if op is not None and recursion == "negation" else ""
        if side and getattr(body_node, side) in same:
            problems.append(Problem(spec.path, body_node.line_of(side), where,
                                    f"negation through recursion: the {side} side of this {body_node.op} "
                                    f"('{getattr(body_node, side)}') depends on the recursive relations of "
                                    f"'{node.name}'; only a relation of a lower stratum (one that does not "
                                    f"read '{node.name}' or its body cycle) may be negated"))
        elif recursion == "aggregation":
            problems.append(Problem(spec.path, body_node.line, where,
                                    f"aggregate inside the recursion of '{node.name}': its input depends on "
                                    f"the recursive relations, and aggregation through recursion is not "
                                    f"monotone; aggregate the recursive node's result outside its body, or write the "
                                    f"loop as an 'op: iterate' node (a while loop, which may aggregate)"))
        elif recursion not in ("monotone", "negation"):
            problems.append(Problem(spec.path, body_node.line, where,
                                    f"op '{body_node.op}' cannot depend on the recursion of '{node.name}' "
                                    f"(allowed: {listing(allowed)}); stream operators run on the "
                                    f"outer clock"))
    return problems


def _loop_body(spec: CircuitSpec, label: str, node: NodeSpec) -> list[Problem]:
    """An ``iterate`` body may hold any operator of a query (aggregates and negation of the loop
    included: its value is defined by iterating, not by monotonicity), but no nested scope and
    no stream operator (those run on the outer clock)."""
    problems = []
    for name, body_node in node.body.items():
        op = node_op(body_node.op)
        if op is None:
            continue
        if op.scope:
            problems.append(Problem(spec.path, body_node.line, f"{label}.{name}",
                                    f"a {body_node.op} node inside the body of iterate '{node.name}' is not "
                                    f"supported: compute it outside the loop and read it from the body"))
        elif op.outer_clock:
            problems.append(Problem(spec.path, body_node.line, f"{label}.{name}",
                                    f"op '{body_node.op}' cannot run inside the body of iterate '{node.name}': "
                                    f"stream operators run on the outer clock"))
    return problems


def _scopes(nodes: dict[str, NodeSpec], prefix: str, visible: frozenset[str],
            broken: frozenset[str]) -> Iterator[tuple[str, NodeSpec, frozenset[str]]]:
    """(label, node, names it may read) for every unbroken node, body nodes included."""
    for name, node in nodes.items():
        label = prefix + name
        if label in broken:
            continue
        yield label, node, visible
        if node.body:
            inner = visible | frozenset(node.body) | {name}
            yield from _scopes(node.body, label + ".", inner, broken)


def _schedule(spec: CircuitSpec, doc: "Document") -> list[Problem]:
    return _cron(spec, doc) + _schedule_assets(spec, doc)


def _cron(spec: CircuitSpec, doc: "Document") -> list[Problem]:
    s = spec.schedule
    if s is None or s in SCHEDULE_PRESETS:
        return []
    fields = s.split()
    if not s.startswith("@") and len(fields) == 5 and all(_CRON_FIELD.match(f) for f in fields):
        return []
    where = ("schedule", "cron") if isinstance(doc.get(("schedule",)), dict) else ("schedule",)
    return [Problem(spec.path, doc.line(where), None,
                    f"schedule '{s}' is neither a cron string (5 fields: minute hour day-of-month month "
                    f"day-of-week) nor a preset ({listing(SCHEDULE_PRESETS)}) nor on_inputs nor none"
                    f"{did_you_mean(s, SCHEDULE_PRESETS + ('on_inputs',))}")]


def _schedule_assets(spec: CircuitSpec, doc: "Document") -> list[Problem]:
    """Asset references: an input of this circuit, or ``<circuit>.<view>`` of another circuit
    (whether that view exists is checked when the DAGs are built: it needs the other file)."""
    problems = []
    for i, ref in enumerate(spec.schedule_assets):
        line = doc.line(("schedule", "assets", i)) if isinstance(doc.get(("schedule",)), dict) else doc.line(("schedule",))
        circuit, dot, _view = ref.partition(".")
        if dot and circuit == spec.name:
            problems.append(Problem(spec.path, line, None, f"schedule asset '{ref}' is a view of this circuit: "
                                    f"a circuit cannot be scheduled on its own views (each run would start the next)"))
        elif not dot and ref not in spec.inputs:
            problems.append(Problem(spec.path, line, None, f"schedule asset '{ref}' is not an input of this circuit "
                                    f"({listing(spec.inputs)}) nor '<circuit>.<view>'{did_you_mean(ref, spec.inputs)}"))
    return problems


def _sources(spec: CircuitSpec, doc: "Document", allowed_roots: Sequence[str]) -> list[Problem]:
    """Input paths stay inside the data root (``paths.py``); reader options are allow-listed."""
    problems = []
    for inp in spec.inputs.values():
        src = inp.source
        if src is None:
            continue
        where = ("inputs", inp.name, "source")
        if src.path and (why := source_path_problem(src.path, allowed_roots, src.kind)):
            problems.append(Problem(spec.path, doc.line(where + ("path",)), inp.name, why))
        if src.kind == "delta":  # a table says its own format; its files are not read with options
            problems += [Problem(spec.path, doc.line(where + (field,)), inp.name,
                                 f"source.{field} does not apply to kind delta (a Delta table's files are "
                                 f"Parquet, read as the table's log lists them): remove it")
                         for field in ("format", "options") if field in (doc.get(where) or {})]
            continue
        problems += [Problem(spec.path, doc.line(where + ("options", key)), inp.name, why)
                     for key, why in option_problems(src.reader_format, src.options)]
    return problems


def _type_problem(typ: str) -> str | None:
    """Why ``typ`` is not a Spark SQL type name we accept (None when it is)."""
    t = typ.strip()
    if t.lower() in _SIMPLE_TYPES or _CHAR.match(t):
        return None
    if re.match(r"^(?:decimal|dec|numeric)\s*\(\s*\d+\s*$", t, re.IGNORECASE):
        return (f"type '{typ}' was cut at its comma by YAML's {{...}} syntax: quote it "
                f"(\"decimal(10, 2)\") or drop the space (decimal(10,2))")
    if m := _DECIMAL.match(t):
        precision, scale = int(m.group(1)), int(m.group(2) or 0)
        if 1 <= precision <= 38 and scale <= precision:
            return None
        return f"bad decimal type '{typ}': expected decimal(p,s) with 1 <= p <= 38 and s <= p"
    return f"unknown type '{typ}'; expected a Spark SQL type: {TYPE_HELP}{did_you_mean(t.lower(), _SIMPLE_TYPES)}"


def _column_types(spec: CircuitSpec) -> list[Problem]:
    problems = []
    for inp in spec.inputs.values():
        for col in inp.columns:
            if col.type and (why := _type_problem(col.type)):
                problems.append(Problem(spec.path, col.line, inp.name, f"column '{col.name}': {why}"))
    return problems


def _names(spec: CircuitSpec) -> list[Problem]:
    """Input, node and body node names must all differ (YAML duplicates are found by the loader)."""
    problems = []
    owner: dict[str, str] = {name: f"an input (line {inp.line})" for name, inp in spec.inputs.items()}

    def visit(nodes: dict[str, NodeSpec], prefix: str) -> None:
        for name, node in nodes.items():
            if name in owner:
                problems.append(Problem(spec.path, node.line, prefix + name,
                                        f"name '{name}' is already used by {owner[name]}: input and node "
                                        f"names must be unique"))
            else:
                owner[name] = f"node '{prefix + name}' (line {node.line})"
            visit(node.body, prefix + name + ".")

    visit(spec.nodes, "")
    return problems


def _node_fields(spec: CircuitSpec, label: str, node: NodeSpec) -> list[Problem]:
    """Fields the schema leaves open (join keys, union inputs, recursive outputs): the op's
    ``checks`` hook (``spec/ops/<op>.py``)."""
    op = node_op(node.op)
    found = op.checks(node) if op is not None and op.checks is not None else []
    return [Problem(spec.path, node.line_of(key), label, message) for key, message in found]


def _ref_fields(node: NodeSpec) -> Iterator[tuple[str, str]]:
    if node.input is not None:
        yield "input", node.input
    for i, ref in enumerate(node.inputs):
        yield f"inputs.{i}", ref
    if node.left is not None:
        yield "left", node.left
    if node.right is not None:
        yield "right", node.right


def _references(spec: CircuitSpec, label: str, node: NodeSpec, visible: frozenset[str]) -> list[Problem]:
    problems = []
    for field_name, ref in _ref_fields(node):
        if ref not in visible:
            field_text = re.sub(r"\.(\d+)$", r"[\1]", field_name)
            problems.append(Problem(spec.path, node.line_of(field_name), label,
                                    f"field '{field_text}' names '{ref}', which is not an input or node "
                                    f"(known: {listing(sorted(visible - {node.name}))})"
                                    f"{did_you_mean(ref, visible)}"))
    return problems


def _cycles(spec: CircuitSpec, broken: frozenset[str]) -> tuple[list[Problem], frozenset[str]]:
    """One problem per cycle among top-level nodes (feedback belongs in a recursive body), and
    the nodes on cycles. Names that are also inputs are left out: ``_names`` reports those."""
    nodes = {n: node for n, node in spec.nodes.items() if n not in broken and n not in spec.inputs}
    edges = {n: [d for d in node.dependencies if d in nodes] for n, node in nodes.items()}
    problems, done = [], set()
    for start in nodes:
        if start in done:
            continue
        cycle = _cycle_through(start, edges)
        if cycle:
            done.update(cycle)
            problems.append(Problem(spec.path, nodes[start].line, start,
                                    f"cycle {' -> '.join(cycle + [start])}: a node may not read its own "
                                    f"output, except inside the body of a recursive node"))
    return problems, frozenset(done)


def _cycle_through(start: str, edges: dict[str, list[str]]) -> list[str]:
    """The shortest path start -> ... -> start (without the final start), or [] if none."""
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for n in frontier:
            for d in edges[n]:
                if d == start:
                    path = [n]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return path[::-1]
                if d not in parent:
                    parent[d] = n
                    nxt.append(d)
        frontier = nxt
    return []


def _expressions(spec: CircuitSpec, res: Resolution, broken: frozenset[str]) -> list[Problem]:
    """Every SQL text of the circuit (``sites.py``), judged on its parse tree (``sql_check.py``):
    what it calls, whether it can be read, and the columns it names."""
    problems = []
    for site in expression_sites(spec, broken):
        try:
            found = sql_check.check(site.text)
        except ExpressionError as exc:
            problems.append(Problem(spec.path, site.line, site.label,
                                    f"{site.what}: cannot read '{_clip(site.text)}': {exc}"))
            continue
        problems += [Problem(spec.path, site.line, site.label, f"{site.what}: '{_clip(site.text)}' is refused: {reason}")
                     for reason in found.refusals]
        if site.kind == "node":
            available = res.reads.get(site.label, {}).get(site.reads)
        else:
            available = res.columns.get(site.reads)
        if available is None:
            continue
        known = {c.lower() for c in available}
        for col in found.columns:
            if col.lower() not in known:
                problems.append(Problem(spec.path, site.line, site.label,
                                        f"{site.what}: unknown column '{col}' in '{site.text}'; expected a column "
                                        f"of '{site.reads}' ({listing(available)}){did_you_mean(col, available)}"
                                        f"{_bare_function(col)}"))
    return problems


def _clip(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


def _bare_function(name: str) -> str:
    """A note when an unknown column is a name Spark would read as a function (current_date)."""
    if name.lower() not in sql_functions.BARE_FUNCTIONS:
        return ""
    return f"; Spark would read it as the function {name.lower()}(), which {sql_functions.verdict(name).reason}"


def _expectation_forms(spec: CircuitSpec) -> list[Problem]:
    """Each expectation's name, arguments and argument types (``expectation_rules.py``: no SQL
    but a row condition, which must carry it in the one form that is checked)."""
    types = {inp.name: {c.name: c.type for c in inp.columns} for inp in spec.inputs.values()}
    owners = [(inp.name, inp.expectations) for inp in spec.inputs.values()]
    owners += [(out.name, out.expectations) for out in spec.outputs.values()]
    found = []
    for owner, exps in owners:
        for exp in exps:
            whys = expectation_rules.problems(exp, types.get(owner))
            if not whys and (why := condition_problem(exp)):
                whys = [why]
            found += [Problem(spec.path, exp.line, owner, why) for why in whys]
    return found


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_COLUMN_KWARGS = ("column", "column_A", "column_B")
_COLUMN_LIST_KWARGS = ("column_list", "column_set")


def _expectation_columns(spec: CircuitSpec, owner: str, exps: tuple[Expectation, ...],
                         columns: tuple[str, ...] | None) -> list[Problem]:
    if columns is None:
        return []
    problems = []
    for exp in exps:
        named = [exp.kwargs[k] for k in _COLUMN_KWARGS if isinstance(exp.kwargs.get(k), str)]
        named += [c for k in _COLUMN_LIST_KWARGS if isinstance(exp.kwargs.get(k), list)
                  for c in exp.kwargs[k] if isinstance(c, str)]
        problems += [Problem(spec.path, exp.line, owner,
                             f"{exp.name}: column '{c}' is not a column of '{owner}' "
                             f"(columns: {listing(columns)}){did_you_mean(c, columns)}")
                     for c in named if c not in columns]
    return problems


def _outputs(spec: CircuitSpec, res: Resolution) -> list[Problem]:
    problems = []
    names = set(spec.inputs) | set(spec.nodes)
    for name, out in spec.outputs.items():
        if not _IDENTIFIER.match(name):
            continue  # the schema reports the name itself
        if name not in names:
            problems.append(Problem(spec.path, out.line, name,
                                    f"output '{name}' names no input or node (known: {listing(sorted(names))})"
                                    f"{did_you_mean(name, names)}"))
            continue
        problems += _expectation_columns(spec, name, out.expectations, res.columns.get(name))
    for inp in spec.inputs.values():
        problems += _expectation_columns(spec, inp.name, inp.expectations, res.columns.get(inp.name))
    return problems
