"""Spark SQL row expressions compiled to Arrow: the same values, types and errors as Spark.

One job: compile. The in-process engine (small steps on pyarrow tables) evaluates ``select``
columns, ``filter`` predicates, join conditions and aggregate arguments with this module; what it
does not cover is refused at compile time with ``NotCovered(reason)``, and the engine runs that
step on Spark and reports the reason.

Interface (agreed with the operator registry / in-process engine)::

    from spark_jobs.executor.arrow.compiler import compile_expression, NotCovered, ExpressionFailed

    expr = compile_expression("l_extendedprice * (1 - l_discount)", table.schema)  # cached
    expr.spark_type      # 'decimal(32,4)' (decimal(15,2) columns): Spark's ``simpleString``
    expr.arrow_type      # pa.decimal128(32, 4): the type Spark's Parquet files have in pyarrow
    expr.columns         # ('l_extendedprice', 'l_discount'): input columns read, as named in the schema
    expr.evaluate(table)     # pa.Array, one value per row (NULLs included)
    expr.predicate(table)    # pa.BooleanArray for filter/join conditions: TRUE rows only (NULL -> False)

- ``compile_expression(text, schema, timezone="UTC")`` takes the expression text exactly as the
  circuit has it (an aggregate's argument is ``AggregateSpec.arg``) and the Arrow schema of the
  rows it will see (for a join condition, the joined row's schema). The text is judged by the
  expression check first (``spark_jobs/spec/sql_check.py``); compiled results (and refusals) are
  cached by (text, schema, time zone), so compiling per step costs a dictionary lookup.
- ``NotCovered`` (compile time only): ``.reason`` says what and why, for the step summary.
- ``ExpressionFailed`` (evaluation): a row on which Spark raises (ANSI mode); ``.condition`` is
  Spark's error class (``DIVIDE_BY_ZERO``, ``ARITHMETIC_OVERFLOW``, ``CAST_INVALID_INPUT``,
  ``CAST_OVERFLOW``, ``NUMERIC_VALUE_OUT_OF_RANGE``, ...). Never return a value for such a step:
  run it on Spark, which fails it with its own message. (Rarely, Spark's optimizer removes the
  raising part first: ``x IS NULL`` for an ``x`` it proves non-NULL, a comparison with a literal
  outside a column's range; the step on Spark then succeeds. The emulated rewrites are listed in
  ``runtime``, ``logic``, ``arithmetic`` and ``casts``: ConstantFolding, NullPropagation,
  BooleanSimplification, SimplifyConditionals, SimplifyBinaryComparison, SimplifyCasts,
  ReorderAssociativeOperator, OptimizeIn, SimplifyCaseConversionExpressions.)

Coverage (everything else is NotCovered and runs on Spark):

=====================  ==================================================================
construct              covered
=====================  ==================================================================
columns                case-insensitive names; bool, byte..bigint, float, double,
                       decimal(p<=38), string, date, timestamp[us] (UTC), timestamp_ntz
literals               ``1`` int (bigint, then decimal, as it grows), ``1L`` ``1S`` ``1Y``,
                       ``1.5`` decimal(2,1), ``1.5BD``, ``1e3``/``1.5D`` double, ``1.5F``,
                       strings (without backslash escapes), TRUE/FALSE, NULL,
                       ``DATE '...'``, ``TIMESTAMP 'yyyy-mm-dd[ hh:mm[:ss[.f]]]'``
arithmetic             ``+ - * / div % pmod mod``, unary ``-``, ``abs``, ``positive``,
                       ``negative``: Spark's type promotion, decimal precision/scale with
                       HALF_UP, ANSI overflow and division by zero
comparison             ``= == <> != < <= > >= <=>``, ``IS [NOT] DISTINCT FROM``, ``IS [NOT] NULL``,
                       ``IS [NOT] TRUE/FALSE``,
                       ``[NOT] IN (list)``, ``[NOT] BETWEEN``; NaN and -0.0 as Spark orders them
logic                  ``AND OR NOT`` (Kleene, short-circuit as Spark evaluates)
conditional            ``CASE`` (both forms), ``if``, ``coalesce``, ``nvl``, ``ifnull``,
                       ``nullif``, ``nvl2``, ``isnull``, ``isnotnull``, ``greatest``,
                       ``least``, ``nanvl``, ``isnan``
cast                   between boolean, integral, float/double, decimal; integral, decimal,
                       boolean, date to string; string to integral, decimal, boolean, date;
                       date <-> timestamp; NOT: float/double -> string/decimal, string ->
                       float/double/timestamp, timestamp -> string, computed decimal with a
                       fraction -> int/smallint/tinyint (Spark's result depends on its
                       internal representation), ``try_cast``
strings                ``upper lower ucase lcase length char_length len substring substr
                       left right concat || trim ltrim rtrim TRIM(BOTH|LEADING|TRAILING x
                       FROM s) startswith endswith contains replace LIKE ILIKE [ESCAPE]``
math                   ``round bround`` (integral, decimal; not float/double: Spark rounds
                       Java's ``Double.toString`` digits), ``floor ceil ceiling`` (one
                       argument), ``sign signum sqrt``
dates                  ``year quarter month day dayofmonth dayofweek weekday dayofyear
                       weekofyear hour minute second extract date_part date_add dateadd
                       date_sub datediff date_diff date_trunc trunc last_day add_months
                       to_date(s)``, ``date ± n``, ``date ± INTERVAL 'n' DAY|MONTH|YEAR``
                       (UTC session time zone for timestamps; dates beyond +-5.8 million
                       years raise ExpressionFailed: Spark's int arithmetic there is left
                       to Spark)
other                  ``typeof``; constant parts folded at compile time (a constant that
                       raises is NotCovered: Spark decides when it is evaluated)
=====================  ==================================================================

Known, documented differences that cannot be seen at compile time: ``upper``/``lower`` use
Python's Unicode tables (Spark uses ICU's: characters added in later Unicode versions may map
differently); a string-to-decimal cast accepts the Unicode digits Python's ``int`` accepts.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from threading import Lock

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.spec import sql_check

from .compiler import Compiler
from .parse import check_tokens, parse_faithful
from .runtime import Batch, ExpressionFailed, Node
from .sql_types import BOOLEAN, NULL, NotCovered

__all__ = ["CompiledExpression", "ExpressionFailed", "NotCovered", "compile_expression", "compile_uncached"]

CACHE_SIZE = 4096


@dataclass(frozen=True)
class CompiledExpression:
    """One expression compiled against one input schema."""

    text: str
    node: Node
    columns: tuple[str, ...]

    @property
    def spark_type(self) -> str:
        return str(self.node.dtype)

    @property
    def arrow_type(self) -> pa.DataType:
        return self.node.arrow_type

    @property
    def nullable(self) -> bool:
        return self.node.nullable

    def evaluate(self, table: pa.Table | pa.RecordBatch) -> pa.Array:
        """The expression's value on every row of ``table``; ExpressionFailed where Spark raises."""
        return self.node.evaluate(Batch.of(table, self.columns))

    def predicate(self, table: pa.Table | pa.RecordBatch) -> pa.Array:
        """The rows a filter keeps (TRUE; FALSE and NULL are dropped), as a non-null mask."""
        if self.node.dtype not in (BOOLEAN, NULL):
            raise NotCovered(f"a {self.node.dtype} expression is not a condition")
        return pc.fill_null(self.evaluate(table).cast(pa.bool_()), False)


_cache: OrderedDict[tuple, CompiledExpression | NotCovered] = OrderedDict()
_lock = Lock()


def compile_expression(text: str, schema: pa.Schema, timezone: str = "UTC") -> CompiledExpression:
    """``text`` compiled for rows of ``schema`` (cached); NotCovered if the Arrow kernels do not
    compute it exactly as Spark would."""
    key = (text, tuple((f.name, str(f.type)) for f in schema), timezone)
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
    if hit is None:
        try:
            hit = compile_uncached(text, schema, timezone)
        except NotCovered as exc:
            hit = exc
        with _lock:
            _cache[key] = hit
            while len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
    if isinstance(hit, NotCovered):
        raise NotCovered(hit.reason)
    return hit


def compile_uncached(text: str, schema: pa.Schema, timezone: str = "UTC") -> CompiledExpression:
    """``compile_expression`` without the cache: check, parse as written, compile."""
    try:
        checked = sql_check.check(text)
    except sql_check.ExpressionError as exc:
        raise NotCovered(f"cannot read the expression: {exc}") from None
    if checked.refusals:
        raise NotCovered(f"the expression is refused: {checked.refusals[0]}")
    check_tokens(text)
    compiler = Compiler(schema, timezone)
    node = compiler.compile(parse_faithful(text))
    return CompiledExpression(text, node, tuple(compiler.used))
