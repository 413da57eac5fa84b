"""Comparisons, three-valued logic and the conditional forms, with Spark's order of evaluation.

- comparisons coerce both sides to one type (a string literal next to a date becomes a date);
  on float and double, NaN equals NaN and is larger than any other value, and -0.0 equals 0.0;
  strings compare as UTF-8 bytes; the right side is not evaluated where the left is NULL;
- ``AND`` skips its right side where the left is FALSE, ``OR`` where it is TRUE (Kleene logic);
- ``CASE``/``IF``/``COALESCE`` evaluate a branch only on the rows that reach it; ``IN`` stops at
  the first match; ``<=>``, ``greatest`` and ``least`` evaluate every argument.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .casts import cast
from .runtime import (Batch, Literal, Node, Strict, call_key, from_numpy, numbers, on_rows, scatter, truthy,
                      valid, with_nulls)
from .sql_types import BOOLEAN, NULL, NotCovered, SparkType, common_type

COMPARISONS = ("=", "<>", "<", "<=", ">", ">=")


def coerce(node: Node, t: SparkType) -> Node:
    return node if node.dtype == t else cast(node, t)


def in_list(value: Node, items: list[Node]) -> Node:
    """``value IN (items)``; Spark's OptimizeIn turns a list of literals with one distinct item
    into ``value = item`` (so ``x IN (NULL)`` is NULL without evaluating ``x``)."""
    if items and all(isinstance(i, Literal) for i in items):
        distinct = {i.key(): i for i in items}
        if len(distinct) == 1:
            return comparison("=", value, items[0])
    return In(value, items)


def compare_kernel(op: str, t: SparkType):
    """A kernel comparing two arrays of type ``t`` with Spark's ordering."""
    if t.is_fractional:
        def floats(arrays, ok):
            a, b = numbers(arrays[0], 0.0), numbers(arrays[1], 0.0)
            na, nb = np.isnan(a), np.isnan(b)
            eq = (a == b) | (na & nb)
            lt = (a < b) | (~na & nb)
            out = {"=": eq, "<>": ~eq, "<": lt, "<=": lt | eq, ">": ~(lt | eq), ">=": ~lt}[op]
            return from_numpy(out, ok, pa.bool_())
        return floats
    fn = {"=": pc.equal, "<>": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater,
          ">=": pc.greater_equal}[op]
    return lambda arrays, ok: fn(arrays[0], arrays[1])


def comparison(op: str, left: Node, right: Node) -> Node:
    t = comparison_type(left, right)
    if t == NULL:
        return Literal(BOOLEAN, None)
    if not (t.is_numeric or t in _ORDERED):
        raise NotCovered(f"comparing {left.dtype} values is not covered")
    left, right = coerce(left, t), coerce(right, t)
    if left.key() == right.key() and not left.nullable:  # SimplifyBinaryComparison
        return Literal(BOOLEAN, op in ("=", "<=", ">="))
    return Comparison(BOOLEAN, [left, right], compare_kernel(op, t), name=op)


_FLIPPED = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "=", "<>": "<>"}


class Comparison(Strict):
    """A binary comparison; its key is the same for ``a < b`` and ``b > a``, as Spark's."""

    def key(self) -> tuple:
        left, right = self.args
        op = self.name
        if repr(right.key()) < repr(left.key()):
            op, left, right = _FLIPPED[op], right, left
        return ("compare", op, left.key(), right.key())


_ORDERED = {SparkType(n) for n in ("string", "boolean", "date", "timestamp", "timestamp_ntz")}


def comparison_type(left: Node, right: Node) -> SparkType:
    """The type both sides of a comparison are cast to (string literals next to dates and
    timestamps become dates and timestamps; other string mixes are Spark's ANSI rules, not
    covered)."""
    lt, rt = left.dtype, right.dtype
    for a, b in ((lt, rt), (rt, lt)):
        if a.name == "string" and b.is_datetime:
            return b
    return common_type([lt, rt], "a comparison")


@dataclass
class NullSafeEqual(Node):
    """``a <=> b``: both sides always evaluated; NULL equals NULL; never NULL."""

    left: Node
    right: Node

    def __post_init__(self) -> None:
        self.dtype = BOOLEAN
        self.nullable = False
        t = comparison_type(self.left, self.right)
        self.left, self.right = coerce(self.left, t), coerce(self.right, t)
        self.equal = compare_kernel("=", t)
        self.same = self.left.key() == self.right.key()  # SimplifyBinaryComparison: TRUE, unevaluated
        self.may_fail = (self.left.may_fail or self.right.may_fail) and not self.same

    def children(self) -> Sequence[Node]:
        return (self.left, self.right)

    def key(self) -> tuple:
        return call_key("<=>", BOOLEAN, [self.left, self.right])

    def evaluate(self, batch: Batch) -> pa.Array:
        if self.same:
            return pa.repeat(pa.scalar(True), batch.num_rows)
        a, b = self.left.evaluate(batch), self.right.evaluate(batch)
        va, vb = valid(a), valid(b)
        both = va & vb
        eq = truthy(self.equal([a, b], both)) if both.any() else np.zeros(batch.num_rows, bool)
        return pa.array(np.where(both, eq, ~va & ~vb), pa.bool_())


@dataclass
class Connective(Node):
    """``AND`` / ``OR`` (Kleene): the right side is evaluated only where the left one does not
    decide (FALSE for AND, TRUE for OR)."""

    op: str  # "AND" | "OR"
    left: Node
    right: Node

    def __post_init__(self) -> None:
        self.dtype = BOOLEAN
        self.may_fail = self.left.may_fail or self.right.may_fail
        self.nullable = self.left.nullable or self.right.nullable

    def children(self) -> Sequence[Node]:
        return (self.left, self.right)

    def key(self) -> tuple:
        return call_key(self.op, BOOLEAN, [self.left, self.right])

    def evaluate(self, batch: Batch) -> pa.Array:
        a = self.left.evaluate(batch)
        if self.op == "AND":
            return pc.and_kleene(a, on_rows(self.right, batch, ~(valid(a) & ~truthy(a))))
        return pc.or_kleene(a, on_rows(self.right, batch, ~truthy(a)))


def logical(op: str, left: Node, right: Node) -> Node:
    for side in (left, right):
        if side.dtype not in (BOOLEAN, NULL):
            raise NotCovered(f"{op} of a {side.dtype} value is not covered")
    left, right = coerce(left, BOOLEAN), coerce(right, BOOLEAN)
    # BooleanSimplification: a literal TRUE/FALSE decides without evaluating the other side
    # (``x AND FALSE`` is FALSE even where ``x`` would raise), and ``a AND a`` is ``a``.
    unit, absorbing = (True, False) if op == "AND" else (False, True)
    for this, other in ((left, right), (right, left)):
        if isinstance(this, Literal) and this.value is absorbing:
            return Literal(BOOLEAN, absorbing)
    for this, other in ((left, right), (right, left)):
        if isinstance(this, Literal) and this.value is unit:
            return other
    if left.key() == right.key():
        return left
    return Connective(op, left, right)


def negation(child: Node) -> Node:
    if child.dtype not in (BOOLEAN, NULL):
        raise NotCovered(f"NOT of a {child.dtype} value is not covered")
    if isinstance(child, IsNull):
        return IsNull(child.child, negated=not child.negated)
    return Strict(BOOLEAN, [coerce(child, BOOLEAN)], lambda arrays, ok: pc.invert(arrays[0]), name="NOT")


@dataclass
class IsNull(Node):
    """``x IS [NOT] NULL``; for an ``x`` Spark knows is never NULL, a constant (``x`` is not
    evaluated: Spark's NullPropagation)."""

    child: Node
    negated: bool = False

    def __post_init__(self) -> None:
        self.dtype = BOOLEAN
        self.nullable = False
        self.may_fail = self.child.may_fail and self.child.nullable

    def children(self) -> Sequence[Node]:
        return (self.child,)

    def key(self) -> tuple:
        return call_key("isnotnull" if self.negated else "isnull", BOOLEAN, [self.child])

    def evaluate(self, batch: Batch) -> pa.Array:
        if not self.child.nullable:
            return pa.repeat(pa.scalar(self.negated), batch.num_rows)
        arr = self.child.evaluate(batch)
        return pc.is_valid(arr) if self.negated else pc.is_null(arr)


@dataclass
class Case(Node):
    """``CASE WHEN c1 THEN v1 ... ELSE e END``: each condition on the rows no earlier one took,
    each value on the rows its condition took (TRUE; FALSE and NULL fall through)."""

    branches: list[tuple[Node, Node]]
    otherwise: Node
    has_else: bool = True

    def __post_init__(self) -> None:
        values = [v for _, v in self.branches] + [self.otherwise]
        self.dtype = common_type([v.dtype for v in values], "CASE")
        self.branches = [(coerce(c, BOOLEAN), coerce(v, self.dtype)) for c, v in self.branches]
        self.otherwise = coerce(self.otherwise, self.dtype)
        for c, _ in self.branches:
            if c.dtype != BOOLEAN:
                raise NotCovered(f"a CASE condition of type {c.dtype} is not covered")
        # SimplifyConditionals: branches with a FALSE or NULL condition go; every value equal to
        # the ELSE value leaves the ELSE value alone (conditions unevaluated).
        self.branches = [(c, v) for c, v in self.branches
                         if not (isinstance(c, Literal) and c.value is not True)]
        if self.has_else and all(v.key() == self.otherwise.key() for _, v in self.branches):
            self.branches = []
        self.may_fail = any(c.may_fail or v.may_fail for c, v in self.branches) or self.otherwise.may_fail
        self.nullable = any(v.nullable for _, v in self.branches) or self.otherwise.nullable

    def children(self) -> Sequence[Node]:
        return [n for pair in self.branches for n in pair] + [self.otherwise]

    def key(self) -> tuple:
        return ("case", str(self.dtype), tuple((c.key(), v.key()) for c, v in self.branches),
                self.otherwise.key(), self.has_else)

    def evaluate(self, batch: Batch) -> pa.Array:
        remaining = np.ones(batch.num_rows, dtype=bool)
        pieces = []
        for cond, value in self.branches:
            if not remaining.any():
                break
            taken = remaining & truthy(on_rows(cond, batch, remaining))
            if taken.any():
                rows = np.flatnonzero(taken)
                pieces.append((rows, _values_at(value, batch, taken, rows)))
            remaining &= ~taken
        if remaining.any():
            rows = np.flatnonzero(remaining)
            pieces.append((rows, _values_at(self.otherwise, batch, remaining, rows)))
        return scatter(batch.num_rows, self.arrow_type, pieces)


def _values_at(node: Node, batch: Batch, mask: np.ndarray, rows: np.ndarray) -> pa.Array:
    """``node``'s values at ``rows`` (= the set rows of ``mask``), computed on those rows only
    if it may raise."""
    if isinstance(node, Literal):
        return Literal(node.dtype, node.value).evaluate(Batch({}, len(rows)))
    if node.may_fail:
        return node.evaluate(batch.take(rows))
    return node.evaluate(batch).take(pa.array(rows, pa.int64()))


@dataclass
class Coalesce(Node):
    """The first non-NULL argument; each argument evaluated only where the earlier ones are NULL."""

    args: list[Node]

    def __post_init__(self) -> None:
        self.dtype = common_type([a.dtype for a in self.args], "coalesce")
        self.args = [coerce(a, self.dtype) for a in self.args]
        self.may_fail = any(a.may_fail for a in self.args)
        self.nullable = all(a.nullable for a in self.args)

    def children(self) -> Sequence[Node]:
        return self.args

    def key(self) -> tuple:
        return call_key("coalesce", self.dtype, self.args)

    def evaluate(self, batch: Batch) -> pa.Array:
        remaining = np.ones(batch.num_rows, dtype=bool)
        out = pa.nulls(batch.num_rows, self.arrow_type)
        for arg in self.args:
            if not remaining.any():
                break
            arr = on_rows(arg, batch, remaining)
            out = pc.coalesce(out, arr)
            remaining &= ~valid(arr)
        return out


@dataclass
class In(Node):
    """``v IN (e1, e2, ...)``: NULL if ``v`` is; TRUE at the first equal item (later items are
    not evaluated); else NULL if an item was NULL, FALSE otherwise."""

    value: Node
    items: list[Node]

    def __post_init__(self) -> None:
        self.dtype = BOOLEAN
        t = common_type([self.value.dtype] + [i.dtype for i in self.items], "IN")
        if not (t.is_numeric or t in _ORDERED or t == NULL):
            raise NotCovered(f"IN on {t} values is not covered")
        self.value = coerce(self.value, t)
        self.items = [coerce(i, t) for i in self.items]
        if len(self.items) > 10 and t.is_fractional and all(isinstance(i, Literal) for i in self.items):
            raise NotCovered("IN with more than 10 float/double literals: Spark's hash set compares "
                             "-0.0 and 0.0 differently")
        self.equal = compare_kernel("=", t)
        self.may_fail = self.value.may_fail or any(i.may_fail for i in self.items)
        self.nullable = self.value.nullable or any(i.nullable for i in self.items)

    def children(self) -> Sequence[Node]:
        return [self.value, *self.items]

    def key(self) -> tuple:
        return ("in", self.value.key(), tuple(i.key() for i in self.items))

    def evaluate(self, batch: Batch) -> pa.Array:
        v = self.value.evaluate(batch)
        remaining = valid(v)
        present = remaining.copy()
        matched = np.zeros(batch.num_rows, dtype=bool)
        saw_null = np.zeros(batch.num_rows, dtype=bool)
        for item in self.items:
            if not remaining.any():
                break
            arr = on_rows(item, batch, remaining)
            both = remaining & valid(arr)
            saw_null |= remaining & ~valid(arr)
            if both.any():
                eq = truthy(self.equal([v, arr], both)) & both
                matched |= eq
                remaining &= ~eq
        result = pa.array(matched, pa.bool_())
        return with_nulls(result, ~present | (~matched & saw_null))


@dataclass
class Extreme(Node):
    """``greatest``/``least``: every argument evaluated; NULLs skipped; the first of equal values
    kept (Spark replaces the running result only by a strictly greater/smaller value)."""

    args: list[Node]
    greatest: bool

    def __post_init__(self) -> None:
        self.dtype = common_type([a.dtype for a in self.args], "greatest/least")
        if not (self.dtype.is_numeric or self.dtype in _ORDERED):
            raise NotCovered(f"greatest/least of {self.dtype} values is not covered")
        self.args = [coerce(a, self.dtype) for a in self.args]
        self.better = compare_kernel(">" if self.greatest else "<", self.dtype)
        self.may_fail = any(a.may_fail for a in self.args)
        self.nullable = all(a.nullable for a in self.args)

    def children(self) -> Sequence[Node]:
        return self.args

    def key(self) -> tuple:
        return call_key("greatest" if self.greatest else "least", self.dtype, self.args)

    def evaluate(self, batch: Batch) -> pa.Array:
        result = None
        for arg in self.args:
            arr = arg.evaluate(batch)
            if result is None:
                result = arr
                continue
            both = valid(arr) & valid(result)
            take = (~valid(result) & valid(arr))
            if both.any():
                take |= both & truthy(self.better([arr, result], both))
            result = pc.if_else(pa.array(take, pa.bool_()), arr, result)
        return result
