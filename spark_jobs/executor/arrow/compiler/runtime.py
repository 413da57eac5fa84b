"""How a compiled expression runs: batches of rows, nodes, and Spark's order of evaluation.

Spark evaluates an expression row by row and stops early: ``a AND b`` skips ``b`` where ``a`` is
false, a CASE branch runs only for its rows, ``x + y`` never evaluates ``y`` where ``x`` is NULL
(generated code nests the right operand under the left one's null check), ``x / y`` evaluates
``y`` first. Which parts run on which rows decides which rows can raise (``1 / z`` in an untaken
branch must not fail). Here every node evaluates a whole ``Batch`` of rows with Arrow and numpy,
and a part that may raise is evaluated only on the rows where Spark would reach it
(``on_rows``); the values of the other rows are scattered back as NULL.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.errors import DbspError

from .sql_types import SparkType, to_arrow


class ExpressionFailed(DbspError):
    """Spark would raise on a row of this batch (ANSI mode): ``condition`` is Spark's error class
    (``DIVIDE_BY_ZERO``, ``ARITHMETIC_OVERFLOW``, ``CAST_INVALID_INPUT``, ...)."""

    def __init__(self, condition: str, detail: str):
        super().__init__(f"[{condition}] {detail}")
        self.condition = condition
        self.detail = detail


@dataclass
class Batch:
    """The input rows a node evaluates: columns by their input name, all of one length."""

    columns: dict[str, pa.Array]
    num_rows: int
    _taken: dict[str, pa.Array] = field(default_factory=dict)

    @classmethod
    def of(cls, table: pa.Table | pa.RecordBatch, names: Sequence[str]) -> "Batch":
        cols = {}
        for name in names:
            col = table.column(name)
            cols[name] = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        return cls(cols, table.num_rows)

    def take(self, rows: np.ndarray) -> "Batch":
        index = pa.array(rows, pa.int64())
        return Batch({k: v.take(index) for k, v in self.columns.items()}, len(rows))


class Node(ABC):
    """A compiled expression part: its Spark type, whether it can be NULL and whether it can
    raise (only then does its evaluation need to follow Spark's row order).

    ``nullable`` follows Spark's own ``Expression.nullable`` (its optimizer drops ``x IS NULL``
    for an ``x`` that cannot be NULL, without evaluating ``x``); ``key`` is a canonical form for
    Spark's ``semanticEquals`` (``a <=> a`` is TRUE without evaluating ``a``)."""

    dtype: SparkType
    may_fail: bool = False
    nullable: bool = True

    @abstractmethod
    def evaluate(self, batch: Batch) -> pa.Array:
        """The part's values on ``batch``, one per row, Spark's type as ``arrow_type``."""

    @property
    def arrow_type(self) -> pa.DataType:
        return to_arrow(self.dtype)

    def children(self) -> Sequence["Node"]:
        return ()

    def key(self) -> tuple:
        """Equal for nodes Spark considers semantically equal (never equal by default)."""
        return ("node", id(self))


COMMUTATIVE = frozenset({"+", "*", "=", "<>", "<=>", "AND", "OR", "greatest", "least"})


def call_key(name: str, dtype: SparkType, args: Sequence[Node]) -> tuple:
    keys = [a.key() for a in args]
    if name in COMMUTATIVE:
        keys = sorted(keys, key=repr)
    return (name, str(dtype), *keys)


def valid(arr: pa.Array) -> np.ndarray:
    """A numpy mask of the non-NULL rows of ``arr``."""
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def truthy(arr: pa.Array) -> np.ndarray:
    """Rows where a boolean array is TRUE (NULL and FALSE are not)."""
    return np.asarray(pc.fill_null(arr, False).to_numpy(zero_copy_only=False), dtype=bool)


def numbers(arr: pa.Array, fill=0) -> np.ndarray:
    """``arr`` as a numpy array, NULL rows filled with ``fill``."""
    if arr.null_count:
        arr = pc.fill_null(arr, pa.scalar(fill, arr.type))
    return arr.to_numpy(zero_copy_only=False)


def nulls(n: int, t: pa.DataType) -> pa.Array:
    return pa.nulls(n, t)


def with_nulls(arr: pa.Array, null_rows: np.ndarray) -> pa.Array:
    """``arr`` with NULL wherever ``null_rows`` is set."""
    if not null_rows.any():
        return arr
    return pc.if_else(pa.array(null_rows, pa.bool_()), pa.scalar(None, arr.type), arr)


def from_numpy(values: np.ndarray, ok: np.ndarray, t: pa.DataType) -> pa.Array:
    """An Arrow array of ``values`` where ``ok`` and NULL elsewhere."""
    mask = None if ok.all() else ~ok
    return pa.array(values, type=t, mask=mask)


def scatter(n: int, t: pa.DataType, pieces: Sequence[tuple[np.ndarray, pa.Array]]) -> pa.Array:
    """An array of ``n`` rows: each piece's values at its row numbers, NULL at the others."""
    pieces = [(rows, vals) for rows, vals in pieces if len(rows)]
    if not pieces:
        return pa.nulls(n, t)
    if len(pieces) == 1 and len(pieces[0][0]) == n:
        return pieces[0][1]
    position = np.full(n, -1, dtype=np.int64)
    offset = 0
    for rows, vals in pieces:
        position[rows] = np.arange(offset, offset + len(rows))
        offset += len(rows)
    values = pa.concat_arrays([v.cast(t) if v.type != t else v for _, v in pieces])
    return values.take(pa.array(position, pa.int64(), mask=position < 0))


def on_rows(node: Node, batch: Batch, rows: np.ndarray) -> pa.Array:
    """``node`` evaluated where ``rows`` is set (NULL elsewhere), as Spark would reach it: a
    node that may raise sees only those rows."""
    if rows.all():
        return node.evaluate(batch)
    if not rows.any():
        return pa.nulls(batch.num_rows, node.arrow_type)
    if not node.may_fail:
        return with_nulls(node.evaluate(batch), ~rows)
    picked = np.flatnonzero(rows)
    return scatter(batch.num_rows, node.arrow_type, [(picked, node.evaluate(batch.take(picked)))])


def strict_arguments(args: Sequence[Node], batch: Batch, order: Sequence[int] | None = None
                     ) -> tuple[list[pa.Array], np.ndarray]:
    """Arguments of a null-intolerant call, evaluated in ``order`` (left to right by default),
    each only on the rows where all the earlier ones were non-NULL; and the rows where all are."""
    ok = np.ones(batch.num_rows, dtype=bool)
    out: list[pa.Array | None] = [None] * len(args)
    for i in (order if order is not None else range(len(args))):
        arr = on_rows(args[i], batch, ok)
        ok &= valid(arr)
        out[i] = arr
    return out, ok  # type: ignore[return-value]


@dataclass
class Strict(Node):
    """A null-intolerant function of its arguments: NULL if any argument is; ``kernel`` gets the
    argument arrays and the rows where all are non-NULL, and returns the result (any value where
    not ``ok``: those rows are set to NULL after).

    ``name`` identifies the function (for ``key``); ``null_intolerant`` marks Spark's
    ``NullIntolerant`` expressions, which its optimizer replaces by NULL when an argument is a
    NULL literal, without evaluating the others; ``always_nullable`` is for results that can be
    NULL on non-NULL arguments (Spark's division is always nullable)."""

    dtype: SparkType
    args: Sequence[Node]
    kernel: Callable[[list[pa.Array], np.ndarray], pa.Array]
    name: str
    kernel_fails: bool = False
    order: Sequence[int] | None = None
    null_intolerant: bool = True
    always_nullable: bool = False

    def __post_init__(self) -> None:
        self.may_fail = self.kernel_fails or any(a.may_fail for a in self.args)
        self.nullable = self.always_nullable or any(a.nullable for a in self.args)
        self.null_literal = self.null_intolerant and any(is_null_constant(a) for a in self.args)
        if self.null_literal:
            self.may_fail = False

    def children(self) -> Sequence[Node]:
        return self.args

    def key(self) -> tuple:
        return call_key(self.name, self.dtype, self.args)

    def evaluate(self, batch: Batch) -> pa.Array:
        if self.null_literal:
            return pa.nulls(batch.num_rows, self.arrow_type)
        arrays, ok = strict_arguments(self.args, batch, self.order)
        if not ok.any():
            return pa.nulls(batch.num_rows, self.arrow_type)
        out = self.kernel(arrays, ok)
        if out.type != self.arrow_type:
            out = out.cast(self.arrow_type)
        return with_nulls(out, ~ok & valid(out))


@dataclass
class Literal(Node):
    """A constant of a Spark type: ``value`` a Python value (int days for a date, int
    microseconds for a timestamp, ``Decimal`` for a decimal) or an Arrow scalar, or None."""

    dtype: SparkType
    value: object

    def __post_init__(self) -> None:
        t = self.arrow_type
        if isinstance(self.value, pa.Scalar):
            self.scalar = self.value if self.value.type == t else self.value.cast(t)
            self.value = _python(self.scalar)
        else:
            self.scalar = pa.scalar(self.value, t)
        self.nullable = self.value is None

    def key(self) -> tuple:
        return ("literal", str(self.dtype), repr(self.value))

    def evaluate(self, batch: Batch) -> pa.Array:
        return pa.repeat(self.scalar, batch.num_rows)


def _python(scalar: pa.Scalar) -> object:
    """A scalar as the Python value ``Literal`` keeps (dates and timestamps as integers: Python's
    ``datetime`` stops at year 9999)."""
    if pa.types.is_date32(scalar.type):
        return scalar.cast(pa.int32()).as_py()
    if pa.types.is_timestamp(scalar.type):
        return scalar.cast(pa.int64()).as_py()
    return scalar.as_py()


@dataclass
class ColumnRef(Node):
    """An input column, resolved to its name in the input."""

    dtype: SparkType
    name: str

    def key(self) -> tuple:
        return ("column", self.name)

    def evaluate(self, batch: Batch) -> pa.Array:
        arr = batch.columns[self.name]
        want = self.arrow_type
        return arr if arr.type == want else arr.cast(want)


def is_null_constant(node: Node) -> bool:
    """A NULL literal, or a null-intolerant call Spark's NullPropagation has made one."""
    return (isinstance(node, Literal) and node.value is None) or (isinstance(node, Strict) and node.null_literal)


def reads_columns(node: Node) -> bool:
    """Whether ``node`` depends on the input row (else Spark folds it to a constant)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ColumnRef):
            return True
        stack.extend(n.children())
    return False


def fold(node: Node) -> Node:
    """A node that reads no column, as the literal Spark's ConstantFolding makes of it. A
    constant part that raises stays with Spark: when (and whether) Spark evaluates it depends on
    its optimizer and code generator, not on the rows."""
    if isinstance(node, (Literal, ColumnRef)) or reads_columns(node):
        return node
    from .sql_types import NotCovered

    try:
        value = node.evaluate(Batch({}, 1))
    except ExpressionFailed as exc:
        raise NotCovered(f"a constant part raises {exc.condition} in Spark ({exc.detail}); Spark decides "
                         "when that is evaluated") from None
    return Literal(node.dtype, value[0])
