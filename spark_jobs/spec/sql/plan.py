"""The relational plan of a SQL query: what the binder produces and the IR lowers.

Engine-free relational algebra over bags. Every expression is a Spark SQL string over the
relation's own column names (backquoted), regenerated from the parsed tree, so the IR and the
executor see the same kind of expression as a YAML ``select``/``filter`` holds. Every node keeps
the SQL fragment it implements (``sql``), which ``dbsp explain`` and ``dbsp draw`` show.

Nodes are compared by identity: a CTE read twice is one plan object, lowered once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from .errors import Position

Cols = tuple[str, ...]
Pairs = tuple[tuple[str, str], ...]


@dataclass(eq=False)
class Rel:
    columns: Cols  # output column names, unique within the relation
    sql: str  # the SQL fragment this node implements


@dataclass(eq=False)
class Table(Rel):
    """An input or node of the circuit (its columns as declared)."""

    name: str


@dataclass(eq=False)
class Map(Rel):
    """Computed columns ``(name, expr)``: a bag projection (SELECT without DISTINCT)."""

    input: Rel
    exprs: Pairs


@dataclass(eq=False)
class Filter(Rel):
    """Rows whose predicate is TRUE (NULL drops the row, as WHERE does)."""

    input: Rel
    where: str


@dataclass(eq=False)
class Join(Rel):
    """``left <kind> JOIN right``: equi keys plus the rest of the ON condition.

    Output: ``left_out`` then ``right_out`` columns, ``(source column, output name)``. The ON
    condition's conjuncts that are not key equalities are split by what they read: ``left_only``
    (only left columns), ``right_only`` (only right columns, by their names in ``right``, since it
    filters ``right`` before the join: a self-join renames them in the output), ``mixed`` (output
    names). For an inner join the binder
    pushes the one-sided ones into the inputs, so only ``mixed`` is left. ``mixed_refs`` are the
    output columns ``mixed`` reads. Null keys never match (SQL ``=``).
    """

    kind: str  # inner | left | right | full
    left: Rel
    right: Rel
    left_keys: Cols
    right_keys: Cols
    left_out: Pairs
    right_out: Pairs
    left_only: str | None = None
    right_only: str | None = None
    mixed: str | None = None
    mixed_refs: Cols = ()
    null_safe: bool = False  # keys match NULL = NULL (inner joins only: a decorrelated subquery's join back)


@dataclass(eq=False)
class Semi(Rel):
    """Rows of ``left`` with (``anti=False``) or without (``anti=True``) a match in ``right``:
    EXISTS / IN / LEFT SEMI JOIN and NOT EXISTS / LEFT ANTI JOIN.

    A match: ``left_keys`` = ``right_keys`` (null never matches) and ``residual`` TRUE, where
    ``residual`` reads left columns (``residual_left``) and the right columns ``right_out``
    renamed apart from the left's. Without keys the match is a product (an uncorrelated EXISTS).
    The output is ``left``'s columns, with ``left``'s multiplicities.
    """

    left: Rel
    right: Rel
    left_keys: Cols
    right_keys: Cols
    anti: bool
    residual: str | None = None
    residual_left: Cols = ()
    right_out: Pairs = ()
    null_safe: bool = False  # keys match NULL = NULL (a decorrelated subquery's flag; no residual)


@dataclass(eq=False)
class NotIn(Rel):
    """``left_key NOT IN (SELECT right_key FROM right)`` in a WHERE, with SQL's NULL rules: TRUE when
    ``right`` is empty; otherwise only for a non-null key that matches no value while ``right``
    holds no NULL."""

    left: Rel
    right: Rel
    left_key: str
    right_key: str


@dataclass(eq=False)
class WindowAssign(Rel):
    """Spark's ``window(column, size[, slide])`` in GROUP BY: each row once per time window
    holding its ``column``; output ``window_start``, ``window_end``, then ``input``'s columns
    (the IR's ``window_assign``, the operator a YAML ``aggregate.window`` becomes)."""

    input: Rel
    column: str
    size_us: int
    slide_us: int
    at: Position | None = None  # where the call is in the query (messages)


@dataclass(eq=False)
class Aggregate(Rel):
    """GROUP BY ``group_by`` (columns of ``input``) computing ``aggs``: (out, func, arg column or
    None for count(*), distinct). Without ``group_by`` exactly one row, as SQL."""

    input: Rel
    group_by: Cols
    aggs: tuple[tuple[str, str, "str | None", bool], ...]


@dataclass(eq=False)
class Distinct(Rel):
    input: Rel


@dataclass(eq=False)
class SetOp(Rel):
    """UNION / EXCEPT / INTERSECT (``all`` for the bag forms); ``right`` has ``left``'s column
    names (the binder renames by position). NULLs compare equal, as SQL set operators do."""

    kind: str  # union | except | intersect
    all: bool
    left: Rel
    right: Rel


@dataclass(eq=False)
class Recursive(Rel):
    """WITH RECURSIVE ``name`` AS (``base`` UNION ``step``): the least fixed point, where ``step``
    reads ``loop`` (the relation as of the previous iteration). ``while_loop``: the step is not
    monotone in ``loop`` (it aggregates it, negates it, ranks it): the value is then the paper's
    while loop ``x := base; x := distinct(base + step(x)) until x stops changing`` (for a
    monotone step the same relation as the least fixed point), lowered to ``iterate``."""

    name: str
    base: Rel
    step: Rel
    loop: "Loop"
    while_loop: bool = False


@dataclass(eq=False)
class Loop(Rel):
    """Inside a recursive CTE's step: the relation being defined."""

    name: str


@dataclass(eq=False)
class TopK(Rel):
    """Per group of ``partition_by``, the rows whose ``rank`` (row_number | rank | dense_rank) by
    ``order_by`` ((column, desc, nulls_first), ...) is at most ``k``; ``rank_column``: the rank as
    a column (appended). ``k`` is None while the binder has a ranking whose filter it has not
    seen yet (a plan with such a node is refused)."""

    input: Rel
    partition_by: Cols
    order_by: tuple[tuple[str, bool, bool], ...]
    k: int | None
    rank: str
    rank_column: str | None


def inputs_of(rel: Rel) -> tuple[Rel, ...]:
    """The relations a plan node reads, in order."""
    if isinstance(rel, (Map, Filter, WindowAssign, Aggregate, Distinct, TopK)):
        return (rel.input,)
    if isinstance(rel, (Join, Semi, NotIn, SetOp)):
        return (rel.left, rel.right)
    if isinstance(rel, Recursive):
        return (rel.base, rel.step)
    return ()


def walk(rel: Rel) -> Iterator[Rel]:
    """Every plan node under ``rel`` (``rel`` included), each once even where the plan shares a
    node (a CTE read twice): the one traversal the plan's checks share."""
    seen: set[int] = set()
    stack = [rel]
    while stack:
        r = stack.pop()
        if id(r) in seen:
            continue
        seen.add(id(r))
        stack.extend(inputs_of(r))
        yield r

