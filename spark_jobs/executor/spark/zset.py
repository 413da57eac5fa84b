"""Z-sets as Spark DataFrames: data columns plus a long ``_weight`` column.

A Z-set maps each tuple to an integer weight (paper section 4.1). Several rows may carry the same
tuple; their weights add up. *Consolidated* means one row per distinct tuple (nulls compare
equal, as in ``groupBy``) and no zero weight. Kernels consolidate only where the algebra needs
it; everything here is lazy except the test helpers at the bottom.
"""
from __future__ import annotations

import datetime
import decimal
import math
import weakref
from collections import Counter
from typing import Any, Callable, Iterable, Mapping, Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from spark_jobs.executor import weights
from spark_jobs.executor.spark import lazy
from spark_jobs.executor.refusal import MARKER
from spark_jobs.policy import NarrowPolicy
from spark_jobs.spec.model import WEIGHT

__all__ = [
    "WEIGHT", "col", "conformed", "data_columns", "consolidate", "negate", "plus", "local_values", "local_plus", "is_local",
    "empty", "empty_like", "zset_schema", "null_safe_match", "key_prefilter", "restrict", "from_tuples", "from_rows", "to_counter", "is_consolidated",
]


def col(name: str) -> Column:
    """A column by its exact name (dots and spaces in names are not struct paths).

    Kept per name (a column reference is an immutable, unresolved expression, valid in any plan
    of the same JVM): building one is three Py4J round trips and one more to garbage-collect it,
    and a W1 step asked for ~250 of them, most of the same few names."""
    key = (_gateway_key(), name)
    found = _COLUMNS.get(key)
    if found is None:
        if len(_COLUMNS) >= _MAX_COLUMNS:
            _COLUMNS.clear()
        found = _COLUMNS[key] = F.col("`" + name.replace("`", "``") + "`")
    return found


_COLUMNS: dict[tuple, Any] = {}
_MAX_COLUMNS = 4096


def kept(key: tuple, build: Callable[[], Any]) -> Any:
    """``build()`` kept per ``key`` and JVM, like ``col``: for column expressions a kernel builds
    the same way at every step (``key`` must name everything they depend on)."""
    full = (_gateway_key(), *key)
    found = _COLUMNS.get(full)
    if found is None:
        if len(_COLUMNS) >= _MAX_COLUMNS:
            _COLUMNS.clear()
        found = _COLUMNS[full] = build()
    return found


def select_kept(df: DataFrame, key: tuple, build: Callable[[], Sequence[Column]]) -> DataFrame:
    """``df.select(*build())`` with the column list kept per ``key`` (``kept``) as the JVM
    sequence ``select`` takes: one Py4J round trip instead of one per column (PySpark converts
    the list element by element) plus each column's own. Spark Connect: a plain ``select``."""
    from pyspark.sql.utils import is_remote

    if is_remote() or getattr(df, "_jdf", None) is None:
        return df.select(*kept(("select", *key), lambda: list(build())))

    def jseq() -> Any:
        from pyspark.sql.classic.column import _to_seq

        return _to_seq(df.sparkSession.sparkContext, [c._jc for c in build()])  # type: ignore[attr-defined]

    return DataFrame(df._jdf.select(kept(("jselect", *key), jseq)), df.sparkSession)  # type: ignore[attr-defined]


def _gateway_key() -> int:
    """Which JVM a column object belongs to: 0 for Spark Connect (plain Python objects), else
    the Py4J gateway's identity (a new gateway would not know the old one's objects)."""
    from pyspark import SparkContext
    from pyspark.sql.utils import is_remote

    return 0 if is_remote() else id(SparkContext._gateway)


def group_agg(df: DataFrame, group_by: Sequence[str], key: tuple, build: Callable[[], Sequence[Column]]) -> DataFrame:
    """``df.groupBy(*group_by).agg(*build())``, both lists kept (``key`` names what the
    aggregates depend on) as the JVM sequences Spark takes: two Py4J round trips instead of one
    per group column and aggregate and more (``select_kept``)."""
    from pyspark.sql.utils import is_remote

    group_by = tuple(group_by)
    aggs = kept(("agg", *key), lambda: list(build()))
    if is_remote() or getattr(df, "_jdf", None) is None or not aggs:
        return df.groupBy(*[col(g) for g in group_by]).agg(*aggs)
    from pyspark.sql.classic.column import _to_seq

    sc = df.sparkSession.sparkContext
    jgroups = kept(("jgroup", group_by), lambda: _to_seq(sc, [col(g)._jc for g in group_by]))  # type: ignore[attr-defined]
    jrest = kept(("jagg", *key), lambda: _to_seq(sc, [c._jc for c in aggs[1:]]))  # type: ignore[attr-defined]
    return DataFrame(df._jdf.groupBy(jgroups).agg(aggs[0]._jc, jrest), df.sparkSession)  # type: ignore[attr-defined]


def select_sql(df: DataFrame, *exprs: str) -> DataFrame:
    """``df.selectExpr(*exprs)`` in one Py4J round trip (``select_kept``: the parsed expressions
    are kept per text, which is all they depend on)."""
    return select_kept(df, ("sql", exprs), lambda: [F.expr(e) for e in exprs])


def select_names(df: DataFrame, names: Sequence[str]) -> DataFrame:
    """``df``'s columns ``names``, in that order (one Py4J round trip: ``select_kept``); of a
    state read not made yet (``lazy.LazyFrame``), lazily: no read for a plan that never uses it."""
    names = tuple(names)
    if lazy.selectable(df, names):
        return df.select_later(names)  # type: ignore[attr-defined]
    return select_kept(df, ("names", names), lambda: [col(c) for c in names])


def data_columns(df: DataFrame) -> list[str]:
    """Every column except the weight, in order."""
    return [c for c in df.columns if c != WEIGHT]


def conformed(df: DataFrame, fields: Sequence[StructField], *, cast: bool = False) -> DataFrame:
    """``df`` with exactly ``fields``' columns, in their order: a column added to an input since
    ``df``'s rows were written is NULL of its type (an integral written before the column
    existed). ``cast``: the columns ``df`` has are cast to their field's type too (a change
    appended to a trace takes the trace's types)."""
    def column(f: StructField) -> Column:
        if f.name not in df.columns:
            return F.lit(None).cast(f.dataType).alias(f.name)
        return F.col(f.name).cast(f.dataType).alias(f.name) if cast else F.col(f.name)

    return df.select(*[column(f) for f in fields])


def consolidate(df: DataFrame) -> DataFrame:
    """One row per distinct tuple with the summed weight; tuples whose weights cancel are dropped."""
    cols = data_columns(df)
    summed = group_agg(df, cols, ("consolidate", tuple(cols), weights.where()),
                       lambda: [checked_sum(WEIGHT, cols).alias(WEIGHT)])
    return summed.where(kept(("nonzero",), lambda: col(WEIGHT) != 0))


def weight_refusal(what: Sequence[Column | str], row: Sequence[Column | str]) -> Column:
    """A long column that fails the job with ``weights.message`` (the node being built, what left
    the range, the row's columns ``row`` as JSON); only evaluated where a check failed."""
    head, tail = weights.message("\0", "\1").split("\0")
    middle, end = tail.split("\1")
    parts = [F.lit(p) if isinstance(p, str) else p.cast("string") for p in what]
    example = F.to_json(F.struct(*[col(c) if isinstance(c, str) else c for c in row])) if row else F.lit("{}")
    return F.raise_error(F.concat(F.lit(MARKER + head), *parts, F.lit(middle), example, F.lit(end))).cast("long")


def checked_add(a: Column, b: Column, row: Sequence[Column | str]) -> Column:
    """a + b of long weights, or the step's refusal when the sum leaves the weight range."""
    return F.coalesce(in_range(F.try_add(a, b)), weight_refusal(["the sum of weights ", a, " + ", b], row))


def in_range(weight: Column) -> Column:
    """``weight`` when inside the weight range, else NULL (``try_*`` gives NULL on an overflow;
    -2^63 is a bigint but outside the range, whose negation would overflow)."""
    return F.when(weight != F.lit(-weights.MAX_WEIGHT - 1), weight)


def checked_sum(column: str, row: Sequence[str]) -> Column:
    """sum(column) of long weights in a group whose columns are ``row``: ``try_sum`` (NULL on an
    overflow, which ANSI mode would raise as a bare Java error) or the step's refusal.

    Kept per (column, row, node) like ``col``: the expression is a few dozen Py4J round trips
    (one per row column and per piece of the refusal), and every consolidation asks for one."""
    key = (_gateway_key(), "checked_sum", column, tuple(row), weights.where())
    found = _COLUMNS.get(key)
    if found is None:
        total = in_range(F.try_sum(col(column)))
        refusal = weight_refusal(["a sum of weights"], row)
        found = F.when(F.count(F.lit(1)) == 0, F.lit(None).cast("long")).otherwise(
            F.coalesce(total, refusal)).cast("long")
        if len(_COLUMNS) >= _MAX_COLUMNS:
            _COLUMNS.clear()
        _COLUMNS[key] = found
    return found



def negate(df: DataFrame) -> DataFrame:
    """-x: every weight negated (linear)."""
    cols = tuple(data_columns(df))
    return select_kept(df, ("negate", cols), lambda: [*[col(c) for c in cols], (-col(WEIGHT)).alias(WEIGHT)])


def plus(*dfs: DataFrame, schema: StructType | None = None, spark: SparkSession | None = None) -> DataFrame:
    """Z-set addition (UNION ALL by column name). With no inputs, the empty Z-set of ``schema``."""
    if not dfs:
        if schema is None or spark is None:
            raise ValueError("plus() of zero Z-sets needs schema= and spark= to build the empty Z-set")
        return empty(spark, schema)
    result = dfs[0]
    for other in dfs[1:]:
        result = result.unionByName(other)
    return result


def is_local(df: DataFrame) -> bool:
    """Is ``df`` a relation held on the driver (its optimized plan is a LocalRelation)? Kept per
    DataFrame (an immutable plan; asked several times a step: each answer optimizes the plan)."""
    found = _LOCAL.get(df)
    if found is None and _arrow_table(df) is not None:  # a change handed over, or a selection of one
        found = _LOCAL[df] = True
    if found is None:
        jdf = getattr(df, "_jdf", None)
        found = jdf is not None and jdf.queryExecution().optimizedPlan().getClass().getSimpleName() == "LocalRelation"
        _LOCAL[df] = found
    return found


_LOCAL: "weakref.WeakKeyDictionary[DataFrame, bool]" = weakref.WeakKeyDictionary()


def cut_lineage(df: DataFrame) -> DataFrame:
    """``df`` computed now, as a relation with no lineage (a local checkpoint: executors' memory
    and disk, dropped with the session). Later plans that read it analyze a leaf, not its tree."""
    return df.localCheckpoint(eager=True)


def local_values(df: DataFrame, column: str, limit: int) -> frozenset | None:
    """The values of ``column`` in a driver-local DataFrame (a projection of a local relation is
    folded at planning: no Spark job); None if there are more than ``limit``."""
    seen = _VALUES.setdefault(df, {})
    values = seen.get(column)
    if values is None:
        values = seen[column] = _arrow_values(df, column)
    if values is None:
        values = seen[column] = frozenset(r[0] for r in select_names(df, [column]).collect())
    return values if len(values) <= limit else None


def _arrow_table(df: DataFrame) -> Any:
    """The Arrow table ``df`` holds (``local_relations.arrow_rows``: a local relation made from
    it, or a plain selection of one), else None; known without asking the JVM."""
    from spark_jobs.executor.spark.local_relations import arrow_rows

    return arrow_rows(df)


def _arrow_values(df: DataFrame, column: str) -> frozenset | None:
    """``local_values`` from the Arrow table ``df`` holds (a change handed to Spark, or a
    selection of one: ``local_relations.arrow_rows``) when the column's Python values are
    Spark's (integers, strings, dates); None otherwise."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = _arrow_table(df)
    if table is None or column not in table.column_names:
        return None
    kind = table.schema.field(column).type
    if not (pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)
            or pa.types.is_date32(kind)):
        return None
    return frozenset(pc.unique(table.column(column)).to_pylist())


# the values ``local_values`` collected, per DataFrame and column: a step asks for the same few
# several times (narrowing, key prefilters)
_VALUES: "weakref.WeakKeyDictionary[DataFrame, dict[str, frozenset]]" = weakref.WeakKeyDictionary()


def local_plus(*dfs: DataFrame) -> DataFrame:
    """``plus``, but rows of Z-sets held on the driver are concatenated into one local relation.

    Spark broadcasts a local relation without running a job, but not a union of them; in a loop
    that looks state up by small deltas every iteration, that is a job saved per lookup.
    """
    if len(dfs) > 1 and all(is_local(df) for df in dfs):
        first = dfs[0]
        spark = first.sparkSession
        rows = spark._jvm.java.util.ArrayList()  # type: ignore[attr-defined]
        for df in dfs:
            rows.addAll(df.select(*[col(c) for c in first.columns])._jdf.collectAsList())
        return DataFrame(spark._jsparkSession.createDataFrame(rows, first._jdf.schema()), spark)  # type: ignore[attr-defined]
    return plus(*dfs)


def zset_schema(schema: StructType | str) -> StructType:
    """``schema`` (data columns, a StructType or DDL string) with the long weight column added."""
    if isinstance(schema, str):
        schema = StructType.fromDDL(schema)
    if WEIGHT in schema.fieldNames():
        return schema
    return StructType(list(schema.fields) + [StructField(WEIGHT, LongType(), False)])


def empty(spark: SparkSession, schema: StructType | str) -> DataFrame:
    """The zero Z-set with the given data columns (the weight column is added if missing).

    ``limit(0)`` makes it an empty local relation to the optimizer, which then prunes joins and
    unions with it before running anything (e.g. lookups into a state that does not exist yet).
    """
    return spark.createDataFrame([], zset_schema(schema)).limit(0)


def empty_like(df: DataFrame) -> DataFrame:
    """The zero Z-set with ``df``'s columns; ``df`` is never read (see ``empty``)."""
    return df.limit(0)


def null_safe_match(left: Sequence[str], right: Sequence[str]) -> Column:
    """``l1 <=> r1 AND ...`` on (unambiguous) column names; TRUE when there are no columns."""
    cond: Column = F.lit(True)
    for a, b in zip(left, right, strict=True):
        cond = cond & col(a).eqNullSafe(col(b))
    return cond


IN_LIST_MAX = NarrowPolicy().in_list_max  # the policy's default (``NarrowPolicy.in_list_max``)


def key_prefilter(df_col: str, keys_df: DataFrame, key_col: str, null_safe: bool,
                  in_list_max: int = IN_LIST_MAX) -> Column | None:
    """``df_col IN (values of keys_df[key_col])`` when ``keys_df`` is driver-local and has at
    most ``in_list_max`` distinct values (read without a Spark job), else None: a lookup by a
    small local change then filters the state by a literal list instead of broadcasting the
    change (a broadcast is a Spark job of its own, even of a local relation), and joins the few
    rows left with a shuffle inside the job. ``null_safe`` also keeps NULLs of ``df_col`` when a
    key is NULL. A superset filter: the caller still joins on every key."""
    values = local_values(keys_df, key_col, in_list_max) if is_local(keys_df) else None
    if values is None or any(isinstance(v, float) and v != v for v in values):
        return None  # NaN: Parquet statistics leave NaN out, so a pushed-down IN (NaN) skips its rows
    literals = [_sql_literal(v) for v in values if v is not None]
    if any(lit is None for lit in literals):
        return None
    name = "`" + df_col.replace("`", "``") + "`"
    terms = [f"{name} IN ({', '.join(literals)})"] if literals else []  # type: ignore[arg-type]
    if null_safe and None in values:
        terms.append(f"{name} IS NULL")
    return F.expr(" OR ".join(terms)) if terms else F.lit(False)


def restrict(df: DataFrame, keys_df: DataFrame, df_keys: Sequence[str], key_cols: Sequence[str],
             broadcast: bool = True, in_list_max: int = IN_LIST_MAX) -> DataFrame:
    """Rows of ``df`` whose ``df_keys`` match (null-safe) some row of ``keys_df[key_cols]``.

    This is how state is looked up by a change: a semi join (``df``'s rows are never duplicated)
    with the change's keys broadcast, so the state is scanned but never shuffled. Pass
    ``broadcast=False`` when the keys may not fit in memory. ``keys_df`` is renamed privately
    first so shared names (and self-joins) stay unambiguous. A small driver-local ``keys_df``
    is not broadcast: the state is filtered by its first key's values (``key_prefilter``) and
    the rest joined with a shuffle, so the lookup costs no job of its own; so is a driver-local
    ``df`` (state narrowed to the change already, ``executor.spark.narrow``).
    """
    private = [f"__k{i}" for i in range(len(key_cols))]
    keys = keys_df.select(*[col(k).alias(p) for k, p in zip(key_cols, private)])
    pre = key_prefilter(df_keys[0], keys, private[0], True, in_list_max) if broadcast and key_cols else None
    if broadcast and pre is None and is_local(df):  # ``df`` was narrowed on the driver already
        keys = keys.hint("shuffle_hash")  # a shuffle inside the job, no broadcast job
    elif pre is not None:
        df, keys = df.where(pre), keys.hint("shuffle_hash")
    elif broadcast:
        keys = F.broadcast(keys)
    return df.join(keys, on=null_safe_match(df_keys, private), how="left_semi")


# ---- test helpers (these run Spark actions) -------------------------------------------------

def _sql_literal(value: Any) -> str | None:
    """``value`` as a Spark SQL literal, or None when it has no simple literal form."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) + "D" if math.isfinite(value) else f"CAST('{value}' AS DOUBLE)"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, decimal.Decimal) and value.is_finite():
        return f"{value}BD"
    if isinstance(value, datetime.datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, datetime.date):
        return f"DATE '{value.isoformat()}'"
    return None


def from_tuples(spark: SparkSession, rows: Iterable[Sequence[Any]], schema: StructType | str) -> DataFrame:
    """A DataFrame of literal rows, built in the JVM as a local relation.

    ``createDataFrame`` on a Python list makes an RDD that a Python worker re-reads at every scan;
    test data is small, so one SQL ``VALUES`` keeps every later job JVM-only and costs one call.
    One partition: Spark then plans no shuffle for it (and each partition is a task in every job).
    """
    if isinstance(schema, str):
        schema = StructType.fromDDL(schema)
    rows = [tuple(r) for r in rows]
    if not rows:
        return spark.createDataFrame([], schema).limit(0)
    literals = [[_sql_literal(v) for v in row] for row in rows]
    if any(len(r) != len(schema.fields) for r in rows):
        raise ValueError(f"rows must have {len(schema.fields)} values: {schema.simpleString()}")
    if any(lit is None for r in literals for lit in r):  # unusual values: build literals via the API
        structs = [F.struct(*[F.lit(v).cast(f.dataType).alias(f.name) for v, f in zip(row, schema.fields)])
                   for row in rows]
        return spark.range(1, numPartitions=1).select(F.inline(F.array(*structs))).coalesce(1)
    names = [f"c{i}" for i in range(len(schema.fields))]
    values = ", ".join("(" + ", ".join(r) + ")" for r in literals)
    casts = ", ".join(f"CAST({n} AS {f.dataType.simpleString()}) AS `{f.name.replace('`', '``')}`"
                      for n, f in zip(names, schema.fields))
    return spark.sql(f"SELECT {casts} FROM VALUES {values} AS t({', '.join(names)})").coalesce(1)


def from_rows(spark: SparkSession, rows: Mapping[tuple, int] | Iterable[tuple[tuple, int]],
              schema: StructType | str) -> DataFrame:
    """A Z-set from ``{tuple: weight}`` or ``[(tuple, weight), ...]`` (not consolidated)."""
    pairs = rows.items() if isinstance(rows, Mapping) else rows
    return from_tuples(spark, [tuple(values) + (int(weight),) for values, weight in pairs], zset_schema(schema))


def to_counter(df: DataFrame) -> Counter[tuple[Any, ...]]:
    """Collect a Z-set as ``Counter{tuple: weight}``, weights summed, zeros dropped."""
    cols = data_columns(df)
    result: Counter[tuple[Any, ...]] = Counter()
    for row in df.collect():
        key = tuple(row[c] for c in cols)
        result[key] += row[WEIGHT]
    return Counter({k: w for k, w in result.items() if w != 0})


def is_consolidated(df: DataFrame) -> bool:
    """True when no tuple repeats and no weight is 0 or null (one Spark action)."""
    cols = data_columns(df)
    bad = (df.groupBy(*[col(c) for c in cols])
           .agg(F.count(F.lit(1)).alias("__n"),
                F.min(F.coalesce(F.abs(col(WEIGHT)), F.lit(0))).alias("__m"))
           .where((F.col("__n") > 1) | (F.col("__m") == 0)))
    return not bad.take(1)
