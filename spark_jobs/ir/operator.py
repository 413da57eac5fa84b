"""One definition per IR operator, registered in one place: what every layer needs to know of it.

Why: the facts about an operator (how many inputs, whether it is linear, what state it keeps,
what its output preserves, how it is drawn, its incremental rule and where its kernels are) used
to sit in a dozen sets and dicts across the IR and the executor, so adding an operator meant
editing a dozen places. Now an operator is an ``Operator`` value that its own module registers
(``spark_jobs/ir/ops/``, found automatically), and every layer asks ``operator(name)``:

- the IR (``graph``, ``optimize``, ``incrementalize``, ``explain``) reads the facts and rules;
- the executor (``executor/evaluate.py``) runs ``kernels[engine]`` of each node, the nested
  loop (``executor/loop.py`` and each engine's ``loop_kernels.py``) the ``LOOP_KERNELS`` of each
  body node, and narrowing (``executor/spark/narrow.py``) its ``narrow`` kernel.

Layering: this module and the operator modules import only the IR and the spec (and the standard
library).
Kernels are named, not imported: a ``KernelRef`` is a callable or a ``"module:function"`` string
that the executor resolves when it runs, so importing the IR (``dbsp validate``, ``explain``,
the DAG factory) loads no engine, and the IR never imports the executor. The built-in operators
name functions of ``spark_jobs/executor/{spark,arrow}/kernels.py``; a new operator may keep its kernels in its
own module (they import pyspark / pyarrow inside their bodies), so that adding an operator is
its modules (its YAML form in ``spec/ops/``, if users write it), its tests and its docs: see
docs/contributing/adding-an-operator.md.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Mapping, Union

from spark_jobs.registry import Registry

if TYPE_CHECKING:
    from spark_jobs.ir.graph import Circuit, Node

LINEAR = "linear"  # applied to a delta as is (Theorem 3.3)
BILINEAR = "bilinear"  # a join: the three-term rule (Theorem 3.4)
STREAM = "linear (stream)"  # I, z⁻¹, D: linear and time-invariant, their own incremental version
NONLINEAR = "non-linear"
Linearity = Literal["linear", "bilinear", "linear (stream)", "non-linear"]

# how an operator's output relates to its inputs' properties
ALWAYS, INPUTS, NEVER = "always", "inputs", "never"
Property = Literal["always", "inputs", "never"]
# a fact that depends on the node itself (an input: its declared, enforced source kind)
NodeFact = Callable[["Circuit", "Node"], bool]

KernelRef = Union[str, Callable[..., Any]]
ENGINES = ("spark", "arrow")  # engines of a timestep; "loop" names a nested-loop kernel


@dataclass(frozen=True)
class State:
    """What a stateful operator keeps between timesteps.

    ``kind`` is how the store sums the trace ("zset": weights per tuple; "sum": per-key column
    sums). ``keys(circuit, node)`` are the columns the state is looked up by (traces are kept
    sorted on them); None: the node's columns. ``what`` says what the state is (``explain``).
    ``format`` is the version of the state's layout:
    bump it when the columns kept change, so state written by an older engine is refused (it
    enters the circuit's fingerprint) instead of misread.
    """

    what: str | Callable[["Circuit", "Node"], str]  # for explain: a text, or one per node
    kind: Literal["zset", "sum"] = "zset"
    keys: Callable[["Circuit", "Node"], tuple[str, ...]] | None = None
    format: int = 1
    update_reads: Literal["input", "output"] = "input"  # what the step's state update is made of
    role: Callable[["Circuit", "Node"], str] | None = None  # explain: what the state is for (default: what, of whom)


@dataclass(frozen=True)
class Operator:
    """Everything the compiler, the explainers and the executor need to know of one IR operator.

    ``arity``: number of inputs (None: one or more). ``incremental``: the rule that replaces the
    operator in Q^Δ (``Rule``: ``(builder, node, input_deltas) -> delta node id``); None for
    operators that only appear in incremental circuits (``form_of`` then names the query
    operator whose rule produces them). ``nested``: the rule inside a recursive
    body (``NestedRule``: ``(body_builder, node) -> None``); None: it cannot run in a scope.
    ``keeps_state(circuit, node)`` refines ``state`` per node (a delay of an integral keeps
    none of its own). ``positive``: whether the output is a positive Z-set (all weights >= 0)
    whenever the inputs are ("inputs") or always; ``distinct_moves``: the distinct rewrites of
    the consolidation pass that may cross it ("delay": Prop. 4.4, "once": Prop. 4.5).
    ``consolidated``: its output has one row per tuple and no zero weight, so a view reading it
    needs no consolidation. ``insert_only``: whether the node's value only grows over time (every
    change has weights >= 0) whenever its inputs' do ("inputs"), or per node (a ``NodeFact``: an
    input is insert-only when its source is ``append_only``, whose reader refuses a delete); see
    ``is_insert_only``. ``lookup(node, position)``: the columns by which the operator looks
    up its (state-sized) input at ``position``, if it does (the integral it reads is then kept
    sorted on them); ``uses(circuit, node, position)``: what it reads that input for, in the
    user's terms (``explain``). ``summary`` and ``note`` feed ``explain`` (the note for a node
    inside a recursive body); ``delta_form(circuit, node)`` says, for a node of Q^Δ, what it does
    with a change and what state it reads (``explain``'s account of a lowered SQL node);
    ``explain_state(circuit, node)``: for a node that keeps no state on purpose, what ``explain``
    says instead (a stream join's terms: the stream side is not kept).
    ``floor(circuit, node, column, floors)``: a lower bound of ``column`` in the node's future
    changes, from the inputs' watermarks (``ir/bounds.py``); ``forgets(circuit, node, position,
    floors)``: which rows of the integral it reads at ``position`` (None: of its own state) no
    future change can reach (a ``bounds.Forget``), so the store may drop them.
    """

    name: str
    arity: int | None
    linearity: Linearity
    symbol: str
    summary: str
    state: State | None = None
    keeps_state: Callable[["Circuit", "Node"], bool] | None = None
    positive: Property = NEVER
    insert_only: "Property | NodeFact" = NEVER
    distinct_moves: frozenset[str] = frozenset()
    consolidated: bool = False
    incremental: Callable[..., str] | None = None
    nested: Callable[..., None] | None = None
    note: str = ""
    lookup: Callable[["Node", int], "tuple[str, ...] | None"] | None = None
    uses: Callable[["Circuit", "Node", int], str] | None = None
    delta_form: Callable[["Circuit", "Node"], str] | None = None  # explain: what it does with a change
    explain_state: Callable[["Circuit", "Node"], str] | None = None
    kernels: Mapping[str, KernelRef] = field(default_factory=dict)
    in_body_only: bool = False  # delta0 / feedback / the 2-D forms: only inside a scope's body
    form_of: str = ""  # an operator of Q^Δ only: the query operator whose rule produces it (it has no rule)
    floor: Callable[..., Any] | None = None  # (circuit, node, column, floors) -> bounds.Floor | None
    forgets: Callable[..., Any] | None = None  # (circuit, node, position | None, floors) -> bounds.Forget | None
    trace_kinds: Callable[["Node", str], str] | None = None  # kind ("zset"/"sum") of its trace "<node>/<rest>"

    def stateful(self, circuit: "Circuit", node: "Node") -> bool:
        """Does ``node`` (of this operator) keep state of its own between timesteps?"""
        if self.state is None:
            return False
        return self.keeps_state(circuit, node) if self.keeps_state is not None else True

    def kernel(self, engine: str) -> Callable[..., Any] | None:
        """The kernel of this operator for ``engine`` ("spark", "arrow", "loop"), resolved; None
        when it has none (the executor then says so, or falls back to another engine)."""
        ref = self.kernels.get(engine)
        if ref is None or callable(ref):
            return ref
        module, _, attr = ref.partition(":")
        return getattr(importlib.import_module(module), attr)


_REGISTRY: Registry[Operator] = Registry("spark_jobs.ir.ops", "IR operator")


def register(op: Operator) -> Operator:
    """Add ``op`` to the registry (an operator module does this at import); returns it."""
    return _REGISTRY.register(op)


def unregister(name: str) -> None:
    """Remove an operator (tests that register a throwaway one clean up with this)."""
    _REGISTRY.unregister(name)


def operator(name: str) -> Operator:
    """The definition of IR operator ``name``; ValueError for an unknown name."""
    op = _REGISTRY.get(name)
    if op is None:
        raise ValueError(f"unknown IR op {name!r}")
    return op


def is_known(name: str) -> bool:
    return _REGISTRY.get(name) is not None


def operators() -> Iterator[Operator]:
    """Every registered operator, in registration order."""
    return iter(_REGISTRY.values())


def delayed_integral_source(circuit: "Circuit", node_id: str) -> str | None:
    """The integrator whose committed state *is* the value of ``node_id``, when ``node_id`` is
    z⁻¹(I x) (a delay reading an integrate); else None.

    This is the one place that knows the pattern: z⁻¹(I x) keeps no state of its own (it is the
    integrator's state before this step), is state-sized (readers look it up by their change),
    and a stage task can rebuild it from committed state.
    """
    node = circuit[node_id]
    if node.op == "delay" and circuit[node.inputs[0]].op == "integrate":
        return node.inputs[0]
    return None


def is_integral(circuit: "Circuit", node_id: str) -> bool:
    """Is this value state-sized: I(x), or z⁻¹(I(x))?"""
    return circuit[node_id].op == "integrate" or delayed_integral_source(circuit, node_id) is not None


def is_insert_only(circuit: "Circuit", node_id: str) -> bool:
    """Does the value of ``node_id`` (in a query circuit) only grow: is every change of it
    insert-only (weights >= 0)? Derived from the IR, operator by operator (``Operator.insert_only``):
    it holds only where it is proved from the inputs up, never from a flag on the node itself,
    so an aggregate may keep O(groups) state for it (``aggregate_insert_only``)."""
    node = circuit[node_id]
    fact = operator(node.op).insert_only
    if callable(fact):
        return fact(circuit, node)
    if fact == INPUTS:
        return bool(node.inputs) and all(is_insert_only(circuit, i) for i in node.inputs)
    return fact == ALWAYS


LOOP_KERNELS = ("loop", "loop_type", "loop_probe") + tuple(f"loop.{engine}" for engine in ENGINES)
"""The kernels of an operator inside a recursive body (``executor/loop.py``): ``loop``, its rule on
2-D deltas ``(loop, node, i) -> Delta``; ``loop_type``, its result on empty values ``(kernels,
node, args) -> value`` (default: ``loop.<engine>`` of the first argument); ``loop_probe``, the
trace rows beyond iteration i its lookups could still meet ``(loop, node, i) -> [value]`` (an
operator that reads a trace); ``loop.spark`` / ``loop.arrow``, a row-wise operator applied to one
value on that engine ``(node, value, kernels) -> value`` (``executor/{spark,arrow}/loop_kernels.py``)."""


NARROW = "narrow"
"""How the values of an output column of the operator follow from its inputs', known on the driver
(``executor/spark/narrow.py``): ``(narrowing, node, column) -> frozenset | None`` (None: unknown,
which is always safe: the state is then not narrowed). An operator without it is unknown."""


def builtin_kernels(fn: str | None, *, loop: str | None = None, body: str | None = None,
                    typed: str | None = None, probe: str | None = None, narrow: str | None = None) -> dict[str, str]:
    """Kernel refs of a built-in operator: ``fn`` of ``spark_jobs.executor.spark.kernels`` and
    ``spark_jobs.executor.arrow.kernels`` (None: it has no timestep kernel, e.g. a body-only operator), and for the
    nested loop (``LOOP_KERNELS``): ``loop``, ``typed`` (``loop_type``) and ``probe`` (``loop_probe``) of
    ``spark_jobs.executor.loop``, ``body`` of each engine's ``loop_kernels`` (``loop.<engine>``); ``narrow`` of
    ``spark_jobs.executor.spark.narrow`` (``NARROW``). Names only: nothing is imported here."""
    refs = {engine: f"spark_jobs.executor.{engine}.kernels:{fn}" for engine in ENGINES} if fn else {}
    if loop:
        refs["loop"] = f"spark_jobs.executor.loop:{loop}"
    if typed:
        refs["loop_type"] = f"spark_jobs.executor.loop:{typed}"
    if probe:
        refs["loop_probe"] = f"spark_jobs.executor.loop:{probe}"
    if narrow:
        refs[NARROW] = f"spark_jobs.executor.spark.narrow:{narrow}"
    if body:
        refs.update({f"loop.{engine}": f"spark_jobs.executor.{engine}.loop_kernels:{body}" for engine in ENGINES})
    return refs
