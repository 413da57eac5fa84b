"""The JSON Schema of a circuit file, assembled: the file's own parts plus one definition per op.

Why: an op's fields used to be written in ``circuit.schema.json`` by hand, apart from the op. Now
each op declares its fields with its ``NodeOp`` (``spec/ops/<op>.py``) and ``build_schema`` makes
the node definitions from the registry: the ``op`` enum, one ``op_<name>`` definition per op,
and the ``if op == name then op_<name>`` rules. Validation uses the assembled schema; the file
``circuit.schema.json`` (which editors read to autocomplete) is its copy on disk, written by
``write_schema`` (the command is ``WRITE``) and kept equal to it by tests/test_spec_schema.py.
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

from .node_ops import NodeOp, node_ops

SCHEMA_PATH = Path(__file__).with_name("circuit.schema.json")
OP_DEF = "op_"  # the prefix of the generated definitions


def _op_def(op: NodeOp) -> dict[str, Any]:
    """An op's definition: its fields, nothing else (``additionalProperties: false``)."""
    found: dict[str, Any] = {"title": f"'{op.name}' node", "description": f"{op.name}: {op.help}", "type": "object",
                             "properties": {"op": {"enum": [op.name]}, **copy.deepcopy(dict(op.fields))},
                             "additionalProperties": False}
    if op.required:
        found["required"] = list(op.required)
    found.update(copy.deepcopy(dict(op.schema_extra)))
    return found


def build_schema(base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The circuit schema: ``base`` (default: the file on disk) with its op definitions replaced
    by the registry's."""
    schema = copy.deepcopy(base if base is not None else json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))
    defs = {k: v for k, v in schema["$defs"].items() if not k.startswith(OP_DEF)}
    ops = node_ops()
    node = defs["node"]
    node["properties"]["op"] = {"enum": [op.name for op in ops], "title": "an operator name",
                                "description": " ".join(f"{op.name}: {op.help}" for op in ops)}
    node["allOf"] = [{"if": {"type": "object", "required": ["op"], "properties": {"op": {"const": op.name}}},
                      "then": {"$ref": f"#/$defs/{OP_DEF}{op.name}"}} for op in ops]
    defs.update({f"{OP_DEF}{op.name}": _op_def(op) for op in ops})
    schema["$defs"] = defs
    return schema


_BUILT: dict[tuple[int, ...], dict[str, Any]] = {}


def circuit_schema() -> dict[str, Any]:
    """The assembled schema, built once per set of registered ops (an op registered later, as a
    test's example op is, is validated at once)."""
    key = tuple(id(op) for op in node_ops())
    if key not in _BUILT:
        _BUILT.clear()
        _BUILT[key] = build_schema()
    return _BUILT[key]


def schema_text(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


WRITE = "python -c 'from spark_jobs.spec.schema import write_schema; write_schema()'"


def write_schema() -> None:
    """Write ``circuit.schema.json`` from the registry (after adding or changing an op: ``WRITE``)."""
    SCHEMA_PATH.write_text(schema_text(build_schema()), encoding="utf-8")
    sys.stdout.write(f"wrote {SCHEMA_PATH}\n")
