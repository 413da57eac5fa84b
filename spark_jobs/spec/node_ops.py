"""The YAML form of every op a user may write in ``nodes.<name>.op``, registered by its own module.

Why: an op's YAML surface (its JSON Schema fragment, how its fields are loaded, its output
columns and types, the SQL texts it holds, its either/or field checks, whether it may run in a
recursion, and which IR translation compiles it) used to be spread over parallel tables in
``model.py``, ``loader.py``, ``columns.py``, ``typecheck.py``, ``sites.py``, ``validate.py``,
``time_checks.py``, ``circuit.schema.json`` and ``ir/from_spec.py``. Now each op is a ``NodeOp``
that its module under ``spark_jobs/spec/ops/`` registers (found automatically, like the IR's
operators in ``ir/ops/``), and every one of those places asks ``node_op(name)``.

Layering: the spec is layer 1 and may not import the IR, so an op names its IR translation by
``"module:function"`` (as an IR operator names its kernels); ``ir/from_spec.py`` resolves it.
``tests/test_node_ops.py`` checks that every registered op has every hook, and that its
translation exists. docs/contributing/adding-an-operator.md walks through adding one.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Mapping

from spark_jobs.registry import Registry

if TYPE_CHECKING:
    from .columns import Issue, Resolution
    from .errors import Problem
    from .loader import Document, YamlPath
    from .model import CircuitSpec, NodeSpec
    from .sites import ExpressionSite
    from .sql_limits import QueryBudget

Cols = tuple[str, ...]
Lookup = Callable[[str], "Cols | None"]
# how an op may take part in a recursion (``validate._stratification``): "monotone" ops may read
# the recursive relations; a "negation" op only on its ``positive`` side (its other side must be
# of a lower stratum); "aggregation" and "outer" (a stream op on the outer clock) not at all
Recursion = Literal["monotone", "negation", "aggregation", "outer"]


@dataclass
class Loading:
    """What an op's ``load`` hook may use while it reads its node's YAML mapping."""

    doc: "Document"
    path: "YamlPath"  # of the node's mapping
    label: str  # the node's label (body nodes: ``rec.inner``)
    lines: dict[str, int]  # field -> line (``NodeSpec.field_lines``); a hook may add entries
    problems: list["Problem"]
    broken: frozenset[str]  # labels the schema found broken: report nothing more of them
    budget: "QueryBudget | None"
    build: Callable[[str, Any, "YamlPath"], "NodeSpec"]  # a nested node (a recursive body's)

    def problem(self, key: str, message: str) -> None:
        """A problem at field ``key`` of the node (unless the schema already found it broken)."""
        from .errors import Problem

        if self.label not in self.broken:
            self.problems.append(Problem(self.doc.file, self.lines.get(key, self.doc.line(self.path)), self.label,
                                         message))


@dataclass(frozen=True)
class NodeOp:
    """Everything the spec layer (and the IR's translation) needs to know of one YAML op.

    ``position`` orders the ops in the schema's enum and in messages ("one of: select, map, ...").
    ``help`` is the op's one-line description (the schema's, so editors show it). ``fields``: the
    JSON Schema of its fields (``op`` aside) and ``required`` those it needs; the schema file is
    assembled from these (``spec/schema.py``). ``load(raw, loading)``: the ``NodeSpec`` fields
    only this op reads (a mapping of field -> value; shapes are the schema's to report), beyond
    the common ones every node has (``input``, ``inputs``, ``left``, ``right``, ``on``,
    ``left_on``, ``right_on``, ``where``, ``group_by``); an op with fields of its own keeps them
    in ``extra``. ``columns(node, lookup, known)``: its output columns (None when unknown) and
    its column issues. ``types(typer, label, node, scope)``: its output column types (None:
    unknown). ``sites(label, node, lookup, known)``: the Spark SQL texts it holds (``lookup``: the
    columns of the circuit's relations, None inside a recursive body). ``checks(node)``: problems of
    fields the schema leaves open, as (field, message). ``time_checks(spec, name, node, res)``:
    problems of its event-time fields. ``origin(node, column)``: the (reference, column) a column
    of its output is, unchanged (``time_checks.origin_column``), if its rows pass through;
    ``inserts(node)``: the references its rows come from such that it only inserts when they
    do (None: it may delete). ``recursion`` and ``negated``: see ``Recursion``. ``in_body``:
    whether it may be a node of a recursive body (else ``body_refusal`` says why).
    ``translate``: ``"module:function"`` of its IR translation, ``(circuit, node, columns, ctx)
    -> Node`` (``ir/from_spec.py``).
    """

    name: str
    position: int
    help: str
    fields: Mapping[str, Any]
    columns: Callable[["NodeSpec", Lookup, Cols], "tuple[Cols | None, list[Issue]]"]
    translate: str
    required: tuple[str, ...] = ()
    load: Callable[[dict, Loading], Mapping[str, Any]] | None = None
    types: Callable[..., Any] | None = None
    sites: Callable[..., Iterator["ExpressionSite"]] | None = None
    checks: Callable[["NodeSpec"], list[tuple[str, str]]] | None = None
    time_checks: Callable[["CircuitSpec", str, "NodeSpec", "Resolution"], list["Problem"]] | None = None
    origin: Callable[["NodeSpec", str], "tuple[str | None, str] | None"] | None = None
    inserts: Callable[["NodeSpec"], "tuple[str, ...] | None"] | None = None
    recursion: Recursion = "outer"
    negated: str = ""  # a "negation" op: the field naming the side that is negated
    in_body: bool = True
    body_refusal: str = ""
    scope: bool = False  # owns a nested scope of nodes (``recursive``): its columns are its body's
    while_loop: bool = False  # a scope iterated while it changes (``iterate``): any op in its body
    outer_clock: bool = False  # a stream operator (z⁻¹, I, D): its meaning is the outer clock's
    schema_extra: Mapping[str, Any] = field(default_factory=dict)  # other JSON Schema keywords of its def

    def translation(self) -> Callable[..., Any]:
        """The IR translation, resolved (the IR imports it; the spec never does)."""
        module, _, attr = self.translate.partition(":")
        return getattr(importlib.import_module(module), attr)


_REGISTRY: Registry[NodeOp] = Registry("spark_jobs.spec.ops", "YAML op")


def register(op: NodeOp) -> NodeOp:
    """Add ``op`` (its module does this at import); returns it."""
    return _REGISTRY.register(op)


def unregister(name: str) -> None:
    """Remove an op (tests that register a throwaway one clean up with this)."""
    _REGISTRY.unregister(name)


def node_op(name: str) -> NodeOp | None:
    """The YAML op ``name``; None for an unknown name (the schema reports it)."""
    return _REGISTRY.get(name)


def node_ops() -> list[NodeOp]:
    """Every registered op, in ``position`` order."""
    return sorted(_REGISTRY.values(), key=lambda op: (op.position, op.name))


def op_names() -> tuple[str, ...]:
    """The op names a user may write, in ``position`` order."""
    return tuple(op.name for op in node_ops())


# ---- JSON Schema pieces the ops' ``fields`` share --------------------------------------------

IDENTIFIER = "^[A-Za-z_][A-Za-z0-9_]*$"
REF: Mapping[str, Any] = {"type": "string", "pattern": IDENTIFIER, "title": "the name of an input or node",
                          "maxLength": 128}
COLUMN_KEY: Mapping[str, Any] = {
    "pattern": IDENTIFIER, "maxLength": 128,
    "title": "a column name (an identifier: letters, digits and _, not starting with a digit; at most 128 characters)"}
DURATION: Mapping[str, Any] = {"$ref": "#/$defs/duration"}


def column_list(title: str, min_items: int = 1) -> dict[str, Any]:
    """A list of column names (``on``, ``group_by``, ...)."""
    return {"type": "array", "title": title, "minItems": min_items,
            "items": {"type": "string", "minLength": 1, "title": "a column name"}}
