"""Keyed change records (`kind: cdc`, as Debezium or a CDC export writes them) as Z-set changes.

A record carries the key, an operation code (Debezium's c/r/u/d by default) and the new values;
what it replaces is looked up by key in the input's integral: ``old`` below, the rows of the
keyed trace the runtime keeps for the input (sorted by key, so a small batch reads only the
Parquet row groups of its keys: ``state.lookup.TraceFiles``). Per key, within a batch, the
records apply in order of the declared sequence column, then file, then position in the file:

- insert and upsert set the row (an insert of a key that exists replaces it: Debezium delivers
  at least once, so a replayed create is normal);
- update sets the row of a key that exists; delete removes it;
- an update or delete of a key that does not exist at that point follows ``unknown_key``:
  ``refuse`` (the files are refused, exit 2), ``ignore``, or ``count`` (ignored and counted).

The change of the relation is, per key that an effective record touched, ``-old + final``
(consolidated: an update to the same values is no change). Several records of one key in one
batch collapse to their net effect.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, LongType, StringType, StructField, StructType

from spark_jobs.executor.spark import zset
from spark_jobs.executor.spark.local_relations import collect_local
from spark_jobs.policy import ExecutionPolicy
from spark_jobs.spec.model import WEIGHT, InputSpec
from spark_jobs.state.lookup import TraceFiles

from .checks import FILE_COL, Check, Group, InputRefused, plain_path, spark_path_key
from .discovery import InputFile, read_files
from .formats import CORRUPT, PLANNERS, Declared, ReadPlan, shared_checks, value_checks
from .reading import checked_groups, declared
from .schema_check import name_list
from .spark_types import parse_type, spark_schema

OP = "__op"  # the operation code as written
KIND = "__kind"  # insert | update | delete | upsert
POS = "__pos"  # position of a record in its file (Spark reads a file's lines in order)
_EXISTS = "__exists"
_ENVELOPE_TOP = "__top"


@dataclass(frozen=True)
class KeyedState:
    """The input's integral as of the last commit: the whole trace for Spark (``read``) and its
    Parquet files for lookups on the driver (``files``); both None before the first commit."""

    read: Callable[[], DataFrame | None]
    files: Callable[[], TraceFiles | None]


@dataclass
class CdcChange:
    delta: DataFrame  # the relation's change: declared columns + _weight
    unknown_keys: int = 0  # records ignored under unknown_key: count (0 otherwise)


def _col(name: str) -> Column:
    return zset.col(name)


def _declared(spec: InputSpec) -> Declared:
    """The flat record layout: the relation's columns plus the operation column (a string), with
    key, operation and sequence required."""
    cdc = spec.source.cdc  # type: ignore[union-attr]
    base = declared(spec, allow_weight=False)
    required = {k: "is a key column" for k in spec.key}
    required[cdc.op] = "holds the operation"
    if cdc.sequence:
        required[cdc.sequence] = "is the sequence column"
    not_null = tuple(dict.fromkeys(base.not_null + tuple(required)))
    return Declared({**base.types, cdc.op: StringType()}, not_null, False, base.options,
                    null_reasons={**base.null_reasons, **required}, one_of={cdc.op: tuple(cdc.ops)})


# ---- the Debezium envelope: values in `after` (and `before`) ---------------------------------

def _envelope_checks(d: Declared, value_names: Sequence[str]) -> list[Check]:
    bad_line = Check("corrupt", lambda n, x: f"{n} line(s) are not JSON objects of the declared "
                                             f"types, e.g. {x!r:.200}")
    extra = Check("extra", lambda _n, xs: "unexpected column(s): "
                  + name_list(sorted({k for x in xs for k in x.split("\n")}))
                  + f" (declared: {', '.join(value_names)})", all_examples=True)
    return [bad_line, extra] + shared_checks(d)


def _plan_envelope(spec: InputSpec) -> Callable[[SparkSession, Sequence[InputFile], Declared], ReadPlan]:
    """JSON lines whose values sit in objects: ``after`` (new values; a delete has none, then
    ``before`` gives them) with the operation and sequence at the top level and other top-level
    fields ignored (Debezium's ``source``, ``transaction``); or, with ``before`` only, top-level
    values plus a ``before`` object that gives a delete its key. A line ``null`` (a Kafka
    tombstone) is skipped."""
    cdc = spec.source.cdc  # type: ignore[union-attr]
    halves = [h for h in (cdc.after, cdc.before) if h]
    keys = set(spec.key)

    def plan(spark: SparkSession, files: Sequence[InputFile], d: Declared) -> ReadPlan:
        values = [c for c in d.types if c != cdc.op]
        plan = ReadPlan(checks=_envelope_checks(d, values))
        files = [f for f in files if f.size > 0]
        if not files:
            return plan
        top = ([cdc.op] + ([cdc.sequence] if cdc.sequence else [])) if cdc.after else list(d.types)
        row_type = StructType([StructField(c, d.types[c]) for c in values])
        schema = StructType([StructField(c, d.types[c]) for c in top]
                            + [StructField(h, row_type) for h in halves] + [StructField(CORRUPT, StringType())])
        opts = d.reader_options(mode="PERMISSIVE", columnNameOfCorruptRecord=CORRUPT)
        frame = read_files(spark.read, "text", files, lambda text: text.where(~F.trim("value").isin("", "null")).select(
            F.from_json("value", schema, opts).alias(_ENVELOPE_TOP), "value",
            *[F.json_object_keys(F.get_json_object("value", f"$.{h}")).alias(f"__keys_{h}") for h in halves],
            F.json_object_keys("value").alias("__keys"), F.col("_metadata.file_path").alias(FILE_COL)))
        rec = F.col(_ENVELOPE_TOP)
        ok = rec[CORRUPT].isNull()

        def value(c: str) -> Column:
            if not cdc.after:  # top-level values; a delete may carry its key in `before` only
                return F.coalesce(rec[c], rec[cdc.before][c]) if c in keys else rec[c]
            row = rec[cdc.after][c]
            if cdc.before:  # a delete has no `after`: its (old) values are in `before`
                row = F.when(rec[cdc.after].isNull(), rec[cdc.before][c]).otherwise(row)
            return F.coalesce(rec[c], row) if c == cdc.sequence else row

        typed = {c: (rec[c] if c == cdc.op else value(c)) for c in d.types}
        allowed = F.array(*[F.lit(v) for v in values])
        extra = [F.array_except(F.coalesce(F.col(f"__keys_{h}"), F.array().cast("array<string>")), allowed)
                 for h in halves]
        if not cdc.after:  # top-level values: the top level is checked as a flat file is
            extra.append(F.array_except(F.col("__keys"), F.array(*[F.lit(v) for v in list(d.types) + halves])))
        extra_keys = F.array_distinct(F.flatten(F.array(*extra)))
        checks: dict[str, tuple[Column, Column | None]] = {
            "corrupt": (~ok, F.col("value")),
            "extra": (ok & (F.size(extra_keys) > 0), F.array_join(extra_keys, "\n")),
        }
        checks.update({f"null:{c}": (ok & typed[c].isNull(), None) for c in d.not_null})
        checks.update({k: (ok & bad, x) for k, (bad, x) in value_checks(d, typed).items()})
        plan.groups.append(Group(frame, typed, F.lit(1).cast(LongType()), checks))
        return plan

    return plan


# ---- reading records --------------------------------------------------------------------------

def read_records(spark: SparkSession, spec: InputSpec, files: Sequence[InputFile]) -> DataFrame | None:
    """The records of ``files``: the relation's columns, ``__op``, ``__kind``, the file and the
    position in it; ``InputRefused`` if any file fails a check; None when there is no record."""
    cdc = spec.source.cdc  # type: ignore[union-attr]
    planners = dict(PLANNERS)
    if cdc.after or cdc.before:
        planners["json"] = _plan_envelope(spec)
    groups = checked_groups(spark, spec, files, _declared(spec), planners)
    if not groups:
        return None
    names = spec.column_names
    frames = [g.frame.select(*[g.columns[n].cast(t).alias(n) for n, t in _types(spec).items()],
                             g.columns[cdc.op].cast(StringType()).alias(OP), F.col(FILE_COL))
              for g in groups]
    union = frames[0]
    for f in frames[1:]:
        union = union.unionByName(f)
    kind: Column | None = None
    for code, operation in cdc.ops.items():
        kind = (F.when(F.col(OP) == code, operation) if kind is None
                else kind.when(F.col(OP) == code, operation))
    # the id is taken right after the scan: within a file it follows the file's order
    return union.select(*[_col(n) for n in names], OP, kind.alias(KIND), FILE_COL,  # type: ignore[union-attr]
                        F.monotonically_increasing_id().alias(POS))


def _types(spec: InputSpec) -> dict[str, DataType]:
    return {c.name: parse_type(c.type) for c in spec.columns}


# ---- the old rows -------------------------------------------------------------------------------

def old_rows(spark: SparkSession, spec: InputSpec, records: DataFrame, state: KeyedState,
             policy: ExecutionPolicy | None = None) -> DataFrame:
    """The committed rows (weight 1, consolidated) of the keys in ``records``, or a superset.

    With records on the driver, their first key's values are looked up in the trace's Parquet
    files (only row groups whose statistics admit them are read, within ``policy.narrow``'s
    bounds); else Spark semi-joins the trace with the records' keys."""
    bounds = (policy or ExecutionPolicy()).narrow
    whole = state.read()
    columns = list(spec.column_names) + [WEIGHT]
    if whole is None:
        return zset.empty(spark, spark_schema(spec))
    whole = whole.select(*[_col(c) for c in columns])
    first = spec.key[0]
    values = zset.local_values(records, first, bounds.max_keys) if zset.is_local(records) else None
    files = state.files() if values is not None else None
    if values is not None and files is not None and files.admitted_rows(first, list(values)) <= bounds.max_decoded_rows:
        table = files.lookup(first, list(values)).select(columns)
        if table.num_rows <= bounds.max_found_rows:
            found = spark.createDataFrame(table, schema=whole.schema) if table.num_rows else zset.empty_like(whole)
            return zset.consolidate(found)
    return zset.consolidate(zset.restrict(whole, records, spec.key, spec.key, broadcast=False))


# ---- records -> change ----------------------------------------------------------------------------

def _order(spec: InputSpec) -> list[Column]:
    """Sequence, then the file's plain path string (not Spark's URI-encoded one, in which
    ``x%20b`` sorts after ``x!b``), then the position in the file."""
    seq = spec.source.cdc.sequence  # type: ignore[union-attr]
    return ([_col(seq)] if seq else []) + [plain_path(F.col(FILE_COL)), F.col(POS)]


def apply_records(spec: InputSpec, records: DataFrame, old: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(the relation's change, the records of unknown keys) for ``records`` over ``old``."""
    keys, names = list(spec.key), list(spec.column_names)
    present = old.select(*[_col(k) for k in keys]).distinct().withColumn(_EXISTS, F.lit(True))
    recs = records.join(present, on=keys, how="left")
    order = _order(spec)
    earlier = Window.partitionBy(*[_col(k) for k in keys]).orderBy(*order).rowsBetween(
        Window.unboundedPreceding, -1)
    kind = F.col(KIND)
    sets = F.when(kind.isin("insert", "upsert"), F.lit(True)).when(kind == "delete", F.lit(False))
    exists_before = F.coalesce(F.last(sets, ignorenulls=True).over(earlier), F.col(_EXISTS), F.lit(False))
    marked = recs.withColumn("__unknown", kind.isin("update", "delete") & ~exists_before)
    effective = marked.where(~F.col("__unknown"))
    latest = Window.partitionBy(*[_col(k) for k in keys]).orderBy(*[o.desc() for o in order])
    last = effective.withColumn("__rn", F.row_number().over(latest)).where(F.col("__rn") == 1)
    new = last.where(kind != "delete").select(*[_col(n) for n in names], F.lit(1).cast(LongType()).alias(WEIGHT))
    replaced = old.join(last.select(*[_col(k) for k in keys]), on=keys, how="left_semi")
    delta = zset.consolidate(zset.plus(new, zset.negate(replaced.select(*[_col(c) for c in names + [WEIGHT]]))))
    seq = spec.source.cdc.sequence  # type: ignore[union-attr]
    unknown = marked.where(F.col("__unknown")).select(
        FILE_COL, OP, KIND, F.to_json(F.struct(*[_col(k) for k in keys])).alias("__key"),
        (_col(seq).cast("string") if seq else F.lit(None).cast("string")).alias("__seq"))
    return delta, unknown


def _refusals(spec: InputSpec, unknown_by_file: list) -> list[tuple[str, str]]:
    seq = spec.source.cdc.sequence  # type: ignore[union-attr]
    out = []
    for row in unknown_by_file:
        ex = row["example"]
        at = f", {seq} {ex['__seq']}" if seq else ""
        out.append((row[FILE_COL], f"{row['n']} change(s) to keys the input does not hold "
                                   f"(unknown_key: refuse), e.g. op '{ex[OP]}' ({ex[KIND]}) of key "
                                   f"{ex['__key']}{at}"))
    return out


def cdc_change(spark: SparkSession, spec: InputSpec, files: Sequence[InputFile], state: KeyedState,
               policy: ExecutionPolicy | None = None) -> CdcChange | None:
    """Read ``files`` of a cdc input and turn them into the relation's change (None: no record).
    ``policy``: the step's thresholds (records held on the driver, lookups of old rows).

    Spark jobs: the file checks (one), the records to the driver when they fit (one), and, unless
    ``unknown_key: ignore``, the count of records of unknown keys (one)."""
    records = read_records(spark, spec, files)
    if records is None:
        return None
    policy = policy or ExecutionPolicy()
    local, _ = collect_local(spark, {"records": records}, policy.local_change_rows)
    if local is not None:
        records = local["records"]
    delta, unknown = apply_records(spec, records, old_rows(spark, spec, records, state, policy))
    unknown_key = spec.source.cdc.unknown_key  # type: ignore[union-attr]
    if unknown_key == "ignore":
        return CdcChange(delta)
    per_file = (unknown.groupBy(FILE_COL)
                .agg(F.count(F.lit(1)).alias("n"), F.min(F.struct(OP, KIND, "__key", "__seq")).alias("example"))
                .collect())
    if unknown_key == "refuse" and per_file:
        problems = _refusals(spec, per_file)
        by_key = {spark_path_key(f.path): f.path for f in files}
        raise InputRefused([(by_key.get(spark_path_key(p), p), why) for p, why in problems], spec.name)
    return CdcChange(delta, sum(int(r["n"]) for r in per_file))
