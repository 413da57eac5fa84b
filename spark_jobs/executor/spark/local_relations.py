"""Small DataFrames made driver-local (LocalRelation) with ONE Spark job for all of them.

Why: Spark broadcasts a local relation without running a job, and folds filters and
projections over it at planning time. A step whose input changes are local looks state up
with no broadcast job per lookup (each ~0.1 s). On a classic session the rows stay in the JVM:
they are collected with ``collectAsList`` and turned back into a relation there (no Python round
trip per row). A Spark Connect client has no JVM: ``collect_arrow`` brings the rows to the
client as Arrow, in one job too, and ``spark.createDataFrame(table)`` sends them back inside the
next plan as a local relation.
"""
from __future__ import annotations

import weakref
from typing import Mapping

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.types import StructType
from pyspark.sql import functions as F

from spark_jobs.executor.spark.session import temporary_conf
from spark_jobs.policy import ExecutionPolicy
from spark_jobs.executor.spark.zset import col, select_kept

_SLOT = "__local_slot"
# The one top-level limit is a CollectLimit, which takes rows partition by partition without
# generated code. (A limit inside the plan is compiled with a counter named from a global
# sequence, so its code never repeats and is recompiled with Janino at every step.) By default
# it scans one partition first and more in later jobs; this makes the first job scan them all.
# The optimizer would also push a copy of the limit into each side of the union (compiled, and
# needless: each side's partitions are cut by the CollectLimit anyway).
_ONE_JOB_LIMIT = {"spark.sql.limit.initialNumPartitions": "100000"}
_EXCLUDED_RULES = "spark.sql.optimizer.excludedRules"
_LIMIT_PUSH_DOWN = "org.apache.spark.sql.catalyst.optimizer.LimitPushDown"


def _collect_conf(spark: SparkSession) -> dict[str, str]:
    """``_ONE_JOB_LIMIT`` plus LimitPushDown added to the session's excluded optimizer rules."""
    excluded = [r for r in (spark.conf.get(_EXCLUDED_RULES, "") or "").split(",") if r.strip()]
    return {**_ONE_JOB_LIMIT, _EXCLUDED_RULES: ",".join([*excluded, _LIMIT_PUSH_DOWN])}


def _part(i: int) -> str:
    return f"__local_p{i}"


def to_local(spark: SparkSession, rows, schema) -> DataFrame:
    """A DataFrame over JVM rows (``java.util.List<Row>``) with a JVM ``StructType``."""
    return DataFrame(spark._jsparkSession.createDataFrame(rows, schema), spark)  # type: ignore[attr-defined]


def collect_local(spark: SparkSession, frames: Mapping[str, DataFrame], max_rows: int,
                  extras: Mapping[str, DataFrame] | None = None,
                  max_extra_rows: int = ExecutionPolicy().collect_extra_rows
                  ) -> tuple[dict[str, DataFrame] | None, dict[str, list[Row]]]:
    """Collect ``frames`` as local relations, and the (small) ``extras`` as Python rows, in one job.

    If the frames have more than ``max_rows`` rows together, they are not made local (None: the
    caller keeps its distributed frames) but the extras are still returned. Extras are meant for
    a few summary rows (e.g. counts) computed in the same job, at most ``max_extra_rows``
    (``ExecutionPolicy.collect_extra_rows``): they come first in the union and the limit keeps
    rows in partition order, so that many are never cut off by the limit.
    Every part goes into a struct column of its own, so parts with clashing column names or
    types share one union; Spark fills in the other parts' columns (a few Py4J calls per part).
    """
    extras = dict(extras or {})
    if is_connect(spark):
        tables, small = collect_arrow(spark, frames, max_rows, extras, max_extra_rows)
        rows = {name: [Row(**r) for r in t.to_pylist()] for name, t in small.items()}
        if tables is None:
            return None, rows
        return {name: spark.createDataFrame(t, schema=frames[name].schema) for name, t in tables.items()}, rows
    parts = list(extras.values()) + list(frames.values())  # extras first: the limit keeps them
    if not parts:
        return {}, {}
    union = None
    for i, df in enumerate(parts):  # the other parts' struct columns are Spark's NULLs (allowMissingColumns)
        tagged = df.select(F.lit(i).alias(_SLOT), F.struct(*[col(c) for c in df.columns]).alias(_part(i)))
        union = tagged if union is None else union.unionByName(tagged, allowMissingColumns=True)
    assert union is not None
    limit = max_rows + 1 + (max_extra_rows if extras else 0)
    with temporary_conf(spark, _collect_conf(spark)):
        jrows = union.limit(limit)._jdf.collectAsList()
    local = to_local(spark, jrows, union._jdf.schema())

    def part(i: int) -> DataFrame:  # a filter + projection of a local relation: still local
        return local.where(F.col(_SLOT) == i).select(f"{_part(i)}.*")

    rows = {name: part(k).collect() for k, name in enumerate(extras)}  # local: no job
    extra_rows = sum(len(r) for r in rows.values())
    if extra_rows > max_extra_rows:
        raise ValueError(f"collect_local: the extras have {extra_rows} rows; at most {max_extra_rows} are kept whole")
    if jrows.size() - extra_rows > max_rows:
        return None, rows
    n = len(extras)
    return {name: part(n + i) for i, name in enumerate(frames)}, rows


def is_connect(spark: SparkSession) -> bool:
    """Is ``spark`` a Spark Connect client session (no JVM in this process)?"""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def from_arrow(spark: SparkSession, table: pa.Table, schema: StructType) -> DataFrame:
    """``spark.createDataFrame(table, schema=schema)`` (a local relation) in ~4 Py4J round trips
    instead of ~38. Why: PySpark's version reads half a dozen settings from the JVM and looks
    ``PythonSQLUtils`` up by reflection at each call, and a small step on Spark hands every input
    change and every narrowed state lookup over this way (~270 round trips of a W1 step). The
    same conversion as PySpark's (its own functions: timestamps localized to the session's time
    zone, the Arrow types of ``schema``), the same JVM calls; Spark Connect and encrypted
    sessions take PySpark's path."""
    import os
    from tempfile import NamedTemporaryFile

    from pyspark.sql.pandas.serializers import ArrowStreamSerializer
    from pyspark.sql.pandas.types import _check_arrow_table_timestamps_localize, to_arrow_schema

    sc = getattr(spark, "_sc", None)
    if is_connect(spark) or sc is None or sc._encryption_enabled:
        return spark.createDataFrame(table, schema=schema)
    utils, settings = _arrow_utils(spark)
    timezone = spark.conf.get("spark.sql.session.timeZone")  # may change between steps: read each time
    if len(schema.fields) > 0:  # (PySpark skips the cast for a table without columns)
        table = _check_arrow_table_timestamps_localize(table, schema, True, timezone).cast(
            to_arrow_schema(schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC",
                            prefers_large_types=settings["large"]))
    batches = table.to_batches(max_chunksize=settings["batch"])
    temp = NamedTemporaryFile(delete=False, dir=sc._temp_dir)
    try:
        try:
            ArrowStreamSerializer().dump_stream(batches, temp)
        finally:
            temp.close()
        jiter = utils.readArrowStreamFromFile(temp.name)
    finally:
        os.unlink(temp.name)
    df = DataFrame(utils.toDataFrame(jiter, schema.json(), spark._jsparkSession), spark)  # type: ignore[attr-defined]
    df.__dict__["schema"] = schema  # DataFrame.schema is a cached_property: the JVM's is this one
    _ARROW_OF[df] = table
    return df


# The Arrow table each DataFrame made by ``from_arrow`` (and each plain column selection of one,
# ``select_of``) holds, cast to its Spark schema's Arrow types: what Spark gives back for it
# without asking Spark (no plan folded, no rows converted back to Python).
_ARROW_OF: "weakref.WeakKeyDictionary[DataFrame, pa.Table]" = weakref.WeakKeyDictionary()


def arrow_rows(df: DataFrame) -> pa.Table | None:
    """The Arrow table ``df`` was made from (``from_arrow``, ``select_of``); None otherwise."""
    try:
        return _ARROW_OF.get(df)
    except TypeError:  # (not weak-referenceable)
        return None


def select_of(selected: DataFrame, source: DataFrame, names: list[str]) -> DataFrame:
    """Record ``selected`` (``source``'s plain columns ``names``, same types) as holding those
    columns of ``source``'s Arrow table, when it has one. Returns ``selected``."""
    table = arrow_rows(source)
    if table is not None and all(n in table.column_names for n in names):
        _ARROW_OF[selected] = table.select(names)
    return selected


_ARROW_UTILS: dict[int, tuple] = {}


def _arrow_utils(spark: SparkSession) -> tuple:
    """``PythonSQLUtils`` (a JVM class looked up once, not by reflection at every call) and the
    session's Arrow batch settings, per session (static for a session's life)."""
    key = id(spark._jsparkSession)  # type: ignore[attr-defined]
    found = _ARROW_UTILS.get(key)
    if found is None or found[2] is not spark._jsparkSession:  # type: ignore[attr-defined]
        utils = spark._jvm.org.apache.spark.sql.api.python.PythonSQLUtils  # type: ignore[attr-defined]
        conf = spark.conf
        settings = {"large": conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false") == "true",
                    "batch": int(conf.get("spark.sql.execution.arrow.maxRecordsPerBatch", "10000") or 10000)}
        found = _ARROW_UTILS[key] = (utils, settings, spark._jsparkSession)  # type: ignore[attr-defined]
    return found[0], found[1]


_SLOT_COL = "__slot"


def known_empty(df: DataFrame) -> bool:
    """Does Spark's optimizer already know ``df`` has no row (an empty local relation: a step
    whose inputs did not change), so that collecting it would be a job for nothing? False when it
    cannot tell without a job (and on Spark Connect, which has no plan in this process)."""
    if is_connect(df.sparkSession):
        return False
    plan = df._jdf.queryExecution().optimizedPlan()
    return plan.getClass().getSimpleName() == "LocalRelation" and plan.data().isEmpty()



def collect_arrow(spark: SparkSession, frames: Mapping[str, DataFrame], max_rows: int,
                  extras: Mapping[str, DataFrame] | None = None,
                  max_extra_rows: int = ExecutionPolicy().collect_extra_rows, *, gather: bool = False
                  ) -> tuple[dict[str, pa.Table] | None, dict[str, pa.Table]]:
    """``frames`` and the (small) ``extras`` as Arrow tables in this process, with ONE Spark job.

    Works on classic sessions and Spark Connect (public API only). Returns ``(None, extras)``
    when the frames hold more than ``max_rows`` rows together. The parts share one union whose
    columns are every part's columns side by side (``p<i>_<k>``, NULL in the other parts' rows),
    so parts with clashing names or types fit; a slot column says whose a row is. (Top-level
    columns: a union makes them nullable, and Arrow refuses NULL structs with non-nullable
    fields.) Extras come first, so the limit never cuts them (at most ``max_extra_rows``).

    Each part is renamed in one call (``toDF``) and the other parts' columns are filled in by
    Spark (``unionByName(allowMissingColumns=True)``): a few Py4J calls per part. (Spelling out
    every other part's column as a typed NULL took parts x columns expressions, each several
    calls and a JVM object to garbage-collect: ~8,000 Py4J round trips in a W1 step.)

    ``gather``: every leaf of the frames' plans is a local relation (the caller knows: the step's
    changes are held on the driver and no trace was scanned), so the union is computed by one
    task (``coalesce(1)``, a narrow dependency: the stages below keep theirs) and the limit
    takes that one partition as it is. Without it, the limit over a union of several
    partitions shuffles every row into one more stage of the job (``CollectLimitExec``) and the
    union's last stage runs a task per partition. (Not for a scan of files: one task would read
    all of them.)
    """
    extras = dict(extras or {})
    parts = list(extras.values()) + list(frames.values())
    if not parts:
        return {}, {}
    layout = [[(f"p{i}_{k}", f) for k, f in enumerate(df.schema.fields)] for i, df in enumerate(parts)]
    union = None
    for i, df in enumerate(parts):
        names = tuple(f.name for f in df.schema.fields)
        if len(set(names)) == len(names):  # renamed by name in one round trip (``select_kept``)
            renames = tuple((name, alias) for name, (alias, _) in zip(names, layout[i]))
            tagged = select_kept(df, ("collect_arrow", renames, i),
                                 lambda: [*[col(n).alias(a) for n, a in renames], F.lit(i).alias(_SLOT_COL)])
        else:
            tagged = df.toDF(*[alias for alias, _ in layout[i]]).withColumn(_SLOT_COL, F.lit(i))
        union = tagged if union is None else union.unionByName(tagged, allowMissingColumns=True)
    assert union is not None
    if gather:
        union = union.coalesce(1)
    with temporary_conf(spark, _collect_conf(spark)):
        table = union.limit(max_rows + 1 + (max_extra_rows if extras else 0)).toArrow()
    slots = table.column(_SLOT_COL)

    def part(i: int) -> pa.Table:
        picked = table.select([alias for alias, _ in layout[i]]).filter(pc.equal(slots, i))
        return picked.rename_columns([f.name for _, f in layout[i]])

    small = {name: part(i) for i, name in enumerate(extras)}
    if sum(t.num_rows for t in small.values()) > max_extra_rows:
        raise ValueError(f"collect_arrow: the extras have more than {max_extra_rows} rows")
    if table.num_rows - sum(t.num_rows for t in small.values()) > max_rows:
        return None, small
    return {name: part(len(extras) + i) for i, name in enumerate(frames)}, small


# operators a plan may hold and still be folded into one local relation by the optimizer
# (ConvertToLocalRelation: projections and filters over a LocalRelation); a union of local
# relations is not folded
_FOLDED = frozenset({"Project", "Filter", "SubqueryAlias"})
_FOLD_DEPTH = 64  # deeper chains are not looked at (a step's projections are a handful)


def _folds_to_local(jplan) -> bool:
    """Is the (JVM) logical plan a chain of ``_FOLDED`` operators over a LocalRelation? Walked
    node by node from the top, two Py4J round trips per node, stopping at the first other
    operator: rendering the plan as a string to read its operators (as before) cost a W1 step on
    Spark ~0.09 s of the JVM's time, most of it printing the big plans that are not folded."""
    for _ in range(_FOLD_DEPTH):
        name = jplan.nodeName()
        if name == "LocalRelation":
            return True
        if name not in _FOLDED:
            return False
        jplan = jplan.child()
    return False


# column types whose Python values convert to Arrow exactly (a timestamp comes back from
# ``collect`` as a naive local time: those frames go through ``collect_arrow``)
_PLAIN_TYPES = frozenset({"bigint", "int", "smallint", "tinyint", "double", "float", "string", "date", "boolean"})


def held_table(df: DataFrame, max_rows: int) -> pa.Table | None:
    """``df`` as an Arrow table WITHOUT a Spark job when its plan is only projections and
    filters over a local relation (the optimizer folds it into rows on the driver) and its
    columns are plain; None otherwise (or past ``max_rows``, or on Spark Connect). The types are
    the store's (``arrow_trace.arrow_of``)."""
    from spark_jobs.state.arrow_trace import arrow_of

    if is_connect(df.sparkSession):
        return None
    if any(t not in _PLAIN_TYPES and not t.startswith("decimal(") for _, t in df.dtypes):
        return None
    made = arrow_rows(df)  # a change or a selection of one: the table it holds
    if made is not None:
        return made.cast(arrow_of(df.schema)) if made.num_rows <= max_rows else None
    if not _folds_to_local(df._jdf.logicalPlan()):
        return None
    rows = df.collect()  # a local relation: folded at planning, no job
    if len(rows) > max_rows:
        return None
    schema = arrow_of(df.schema)
    return pa.table([pa.array([r[i] for r in rows], f.type) for i, f in enumerate(schema)], schema=schema)
