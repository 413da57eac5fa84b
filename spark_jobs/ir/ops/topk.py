"""Top-k per group (``row_number()`` / ``rank()`` / ``dense_rank()`` ``<= k``) and its incremental form.

Why here: this is the whole operator's definition (IR facts, incremental rule, params, and the
names of its kernels); docs/contributing/adding-an-operator.md points at it. Its Spark and Arrow kernels
are in ``executor/kernels/topk.py``, named by string, so the IR imports no engine and no
executor module (tests/test_layering.py).

Params: ``partition_by`` (columns; empty = one global group); ``order_by``: ((column, desc,
nulls_first), ...); ``k`` (int >= 1); ``rank``: row_number | rank | dense_rank;
``rank_column``: the name of the emitted rank column (an ``int``, appended last), or None.

Semantics are Spark SQL's (and DuckDB's) on bags: a row of weight w is w rows. Per group, rows
are ranked by ``order_by`` and those with rank <= k are kept:

- ``rank``: 1 + the number of rows strictly before (peers, equal on ``order_by``, share a rank);
- ``dense_rank``: 1 + the number of distinct ``order_by`` values before;
- ``row_number``: positions 1, 2, ...; rows that ``order_by`` does not order (ties) are ordered by
  all the other columns, ascending, NULLS FIRST, so the kept rows are reproducible (Spark would
  pick any). Copies of one row are interchangeable, so the result is a function of the input.

NULLs sort as Spark's default: first in ascending order, last in descending order, unless the
order says otherwise; NaN is larger than every number and equal to itself.

Incremental rule: Δtopk = topk(z⁻¹(I x)|G + Δx) − topk(z⁻¹(I x)|G), where G are the groups Δx
touches (``topk_touched``). Its state: the integral of its input, kept sorted on the partition
columns, and its own output so far (each group's current top-k rows, format 2). A row outside a
group's top-k comes after every row in it, so the top-k of (old top-k + Δx) is the new top-k
unless Δx deletes so much of a group's top-k that fewer than k are left: only such groups are
read from the integral (the Arrow kernel; a step's cost follows the change, not the window).

Over an insert-only input (``operator.is_insert_only``: an append_only source, through linear
operators, e.g. a ``window``) no row ever leaves a group, so the new top-k is always the top-k of
(old top-k + Δx): ``topk_insert_only`` keeps only its output so far (each group's top-k, the
per-group extrema for k = 1) and no integral of its input: O(groups x k) state, and a step writes
and compacts the change's top rows only (Nexmark q7: not every bid of the open windows).
"""
from __future__ import annotations

from typing import Sequence

from spark_jobs.ir.bounds import Floor, Floors, Forget, group_forget
from spark_jobs.ir.builder import Builder
from spark_jobs.ir.graph import Circuit, Node, make_node
from spark_jobs.ir.operator import ALWAYS, NONLINEAR, Operator, State, is_insert_only, register
from spark_jobs.spec.model import NodeSpec

RANK_TYPE = "int"  # the type Spark gives row_number(), rank() and dense_rank()
KERNELS = "spark_jobs.executor.kernels.topk"  # where the Spark and Arrow kernels are


def rule_topk(b: Builder, node: Node, deltas: list[str]) -> str:
    """Δtopk from the change and the integral before it, for the touched groups only; over an
    insert-only input from the change and the top-k so far alone (no integral)."""
    (dx,) = deltas
    if is_insert_only(b.query, node.inputs[0]):
        return b.add(node.with_(op="topk_insert_only", inputs=(dx,)))
    return b.add(node.with_(op="topk_touched", inputs=(dx, b.delayed_integral(dx))))


def _partition(node: Node) -> tuple[str, ...]:
    return tuple(node.param("partition_by") or ())


def _lookup(node: Node, position: int) -> tuple[str, ...] | None:
    """``topk_touched`` looks its integral (input 1) up by the partition columns."""
    return _partition(node) if position == 1 else None


def _floor(circuit: Circuit, node: Node, column: str, floors: Floors) -> Floor | None:
    """Only the touched groups change: a partition column keeps its floor in the change."""
    return floors.of(node.inputs[0], column) if column in _partition(node) else None


def _forgets(circuit: Circuit, node: Node, position: int | None, floors: Floors) -> Forget | None:
    """The integral and the own state are looked up by partition: a partition below its floor
    is never read again."""
    return group_forget(circuit, node, _partition(node), floors) if position in (1, None) else None


def describe(node: Node) -> str:
    """``rank() <= 3 per (g) by v DESC``: the operator's params in the user's terms."""
    order = ", ".join(f"{c}{' DESC' if d else ''}{'' if nf == (not d) else (' NULLS FIRST' if nf else ' NULLS LAST')}"
                      for c, d, nf in node.param("order_by"))
    groups = ", ".join(_partition(node)) or "all rows"
    return f"{node.param('rank')}() <= {node.param('k')} per ({groups}) by {order}"


def _delta_form(circuit: Circuit, node: Node) -> str:
    groups = ", ".join(_partition(node))
    return (f"{describe(node)}: top-k of the touched groups from its previous top-k (or, where the change "
            f"deletes too much of it, from {circuit[node.inputs[1]].inputs[0]}) before and after the change, emits "
            f"new − old" + (f" (looked up by {groups})" if groups else " (one group: the "
                                                    "whole integral)"))


def tie_break(columns: Sequence[str], node: Node) -> list[str]:
    """The columns that order ``row_number`` ties: every column ``order_by`` does not name."""
    ordered = {c for c, _, _ in node.param("order_by")}
    return [c for c in columns if c not in ordered and c not in _partition(node)]


def output_columns(columns: Sequence[str], rank_column: str | None) -> tuple[str, ...]:
    return tuple(columns) + ((rank_column,) if rank_column else ())


TOPK = register(Operator(
    "topk", arity=1, linearity=NONLINEAR, symbol="top-k", positive=ALWAYS, consolidated=True,
    summary="per group, the rows ranked <= k by row_number / rank / dense_rank (Spark SQL semantics)",
    incremental=rule_topk, kernels={"spark": f"{KERNELS}:spark_topk", "arrow": f"{KERNELS}:arrow_topk"}))

TOPK_TOUCHED = register(Operator(
    "topk_touched", arity=2, linearity=NONLINEAR, symbol="top-k(touched)", consolidated=True, form_of="topk",
    summary="top-k of the groups the delta touches, before and after it, from z⁻¹(I x): new − old",
    # format 2: the output so far kept as its own state (each group's top-k, looked up first)
    state=State("previous top-k rows per group", keys=lambda c, n: _partition(n), update_reads="output", format=2),
    lookup=_lookup, uses=lambda c, n, p: f"top-k {n.origin!r}: rows of the touched groups", delta_form=_delta_form,
    floor=_floor, forgets=_forgets,
    kernels={"spark": f"{KERNELS}:spark_topk_touched", "arrow": f"{KERNELS}:arrow_topk_touched"}))

TOPK_INSERT_ONLY = register(Operator(
    "topk_insert_only", arity=1, linearity=NONLINEAR, symbol="top-k(insert-only)", consolidated=True, form_of="topk",
    summary="top-k of an insert-only input from the top-k so far and the change: new − old, no integral",
    state=State("previous top-k rows per group (inserts only: no integral of the input)",
                keys=lambda c, n: _partition(n), update_reads="output", format=2),
    delta_form=lambda c, n: (f"{describe(n)}: top-k of (the touched groups' top-k so far + the change) − top-k so "
                             f"far (inserts only: no integral)"),
    floor=_floor, forgets=_forgets,
    kernels={"spark": f"{KERNELS}:spark_topk_insert_only", "arrow": f"{KERNELS}:arrow_topk_insert_only"}))


# ---- the YAML op compiled to it (spec/ops/topk.py names this function) -----------------------

def from_topk(c: Circuit, n: NodeSpec, cols: dict, ctx: object) -> Node:
    """With a ``window``, a window assignment first (``ir/ops/window.py``), then the top-k per
    (window_start, window_end, partition_by...): each window's rows are ranked on their own."""
    from spark_jobs.ir.ops.window import add_window_assign
    from spark_jobs.spec.time import WINDOW_COLUMNS

    spec = n.extra["topk"]
    source, partition = n.input, tuple(spec.partition_by)
    if n.window is not None:
        source = add_window_assign(c, f"{n.name}.window", n.input, n.window, origin=n.name)
        partition = WINDOW_COLUMNS + tuple(p for p in partition if p not in WINDOW_COLUMNS)
    return c.add(make_node(n.name, "topk", [source], cols[n.name], partition_by=partition,
                           order_by=spec.order_by, k=spec.k, rank=spec.rank, rank_column=spec.rank_column))
