"""Every op has every hook: the test iterates the registries, so an op added without one of its
hooks fails here, naming the op and the hook (not a table somewhere that lacks an entry).

- a YAML op (``spec/node_ops.py``, one module per op in ``spec/ops/``): help, fields with its
  required ones, output columns, types, an IR translation that resolves (its schema definition
  is made from its fields: tests/test_spec_schema.py keeps the file equal);
- an IR operator (``ir/operator.py``, ``ir/ops/``): every kernel it names resolves; a row-wise
  operator of a recursive body (``loop`` kernel ``linear``) has its kernel on each engine.

And the dispatch itself: the spec layer, the IR's translation, the loop kernels and narrowing
name no op in code of their own (the op names appear only in the ops' modules).
"""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from spark_jobs.ir.operator import ENGINES, LOOP_KERNELS, NARROW, Operator, operators
from spark_jobs.spec.node_ops import NodeOp, node_ops, register, unregister

PACKAGE = Path(__file__).resolve().parent.parent / "spark_jobs"


def missing_hooks(op: NodeOp) -> list[str]:
    """What a YAML op lacks: the hooks every op must have."""
    lacks = []
    if not op.help:
        lacks.append("help")
    if not set(op.required) <= set(op.fields):
        lacks.append(f"fields {sorted(set(op.required) - set(op.fields))} (required)")
    for hook in ("columns", "types"):
        if not callable(getattr(op, hook)):
            lacks.append(hook)
    try:
        translate = op.translation()
    except (ImportError, AttributeError, ValueError) as exc:
        lacks.append(f"translate ({op.translate!r}: {exc})")
    else:
        if len(inspect.signature(translate).parameters) != 4:
            lacks.append(f"translate ({op.translate!r} takes (circuit, node, columns, ctx))")
    return lacks  # its schema definition is made from ``fields`` (tests/test_spec_schema.py keeps the file)


def missing_kernels(op: Operator) -> list[str]:
    """Kernels an IR operator names that do not resolve, or that a body operator needs."""
    lacks = []
    for key in op.kernels:
        try:
            assert callable(op.kernel(key))
        except (ImportError, AttributeError, AssertionError) as exc:
            lacks.append(f"{key} ({op.kernels[key]!r}: {exc})")
    if str(op.kernels.get("loop", "")).endswith(":linear"):  # row-wise in a recursive body
        lacks += [f"loop.{engine}" for engine in ENGINES if f"loop.{engine}" not in op.kernels]
    unknown = set(op.kernels) - set(ENGINES) - set(LOOP_KERNELS) - {NARROW}
    lacks += [f"{key} (not a kernel the executor reads)" for key in sorted(unknown)]
    return lacks


@pytest.mark.parametrize("op", node_ops(), ids=lambda op: op.name)
def test_every_yaml_op_has_its_hooks(op):
    assert not missing_hooks(op), f"YAML op {op.name!r} lacks: {missing_hooks(op)}"


@pytest.mark.parametrize("op", list(operators()), ids=lambda op: op.name)
def test_every_ir_operator_s_kernels_resolve(op):
    assert not missing_kernels(op), f"IR operator {op.name!r}: {missing_kernels(op)}"


def test_a_yaml_op_without_a_hook_is_named():
    """The check itself: an op registered without a translation or types is reported by name."""
    half = register(NodeOp("half_done", 999, "", {"input": {}}, lambda n, lookup, known: (None, []),
                           "spark_jobs.ir.ops.nowhere:from_half", required=("input", "k")))
    try:
        lacks = missing_hooks(half)
        assert [x.split(" ")[0] for x in lacks] == ["help", "fields", "types", "translate"], lacks
    finally:
        unregister("half_done")


def test_a_body_operator_without_its_engine_kernels_is_named():
    op = Operator("half_linear", 1, "linear", "h", "a row-wise operator", kernels={
        "loop": "spark_jobs.executor.loop:linear", "loop.spark": "spark_jobs.executor.spark.loop_kernels:body_map"})
    assert missing_kernels(op) == ["loop.arrow"]


_NAMES = "|".join(sorted({op.name for op in node_ops()} | {op.name for op in operators()}, key=len, reverse=True))
_DISPATCH = re.compile(rf"\bop\s*(==|!=|in|not in)\s*\(?[^\n]*\"({_NAMES})\"")
# the loop's own scope operators (δ0, feedback, the 2-D integral) are its structure, not ops to add
_SCOPE = ("delta0", "feedback", "integrate_nested", "plus")


@pytest.mark.parametrize("path", ["spec", "ir/from_spec.py", "executor/loop.py", "executor/spark/loop_kernels.py",
                                  "executor/arrow/loop_kernels.py", "executor/spark/narrow.py"])
def test_no_op_is_dispatched_by_name_outside_its_module(path):
    """``node.op == "join"`` outside an op's module is a table in disguise: each of these places
    asks the registry instead."""
    root = PACKAGE / path
    found = []
    for file in ([root] if root.is_file() else sorted(root.rglob("*.py"))):
        if "ops" in file.relative_to(PACKAGE).parts:
            continue
        for number, line in enumerate(file.read_text().splitlines(), 1):
            m = _DISPATCH.search(line)
            if m and m.group(2) not in _SCOPE:
                found.append(f"{file.relative_to(PACKAGE.parent)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
