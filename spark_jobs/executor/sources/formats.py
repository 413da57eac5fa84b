"""One reader per file format: static checks first, then the Spark read of the files that pass.

Every reader returns a ``ReadPlan``: problems found without Spark (footer, header), the groups
of files to read (one Spark read per distinct layout), and the row checks the groups answer.
CSV is read as strings and cast here, so a bad value is reported, never silently nulled.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (DataType, DateType, DecimalType, LongType, StringType, StructField,
                               StructType, TimestampType)

from spark_jobs.spec.model import WEIGHT

from . import time_range
from spark_jobs.executor.refusal import MARKER

from .checks import FILE_COL, Check, Group, plain_path
from .discovery import InputFile, read_files
from .schema_check import (UnreadableFile, column_problems, csv_header, diagnose_json_line, name_list,
                           header_problems, read_parquet_footer)
from .spark_types import type_label

CORRUPT = "__corrupt"
EXAMPLE_CHARS = 200
# Reader options we set ourselves; a user's value for them would break the checks.
_CONTROLLED = {"header", "mode", "columnnameofcorruptrecord", "enforceschema", "inferschema",
               "multiline", "mergeschema"}


@dataclass(frozen=True)
class Declared:
    """What the files must hold."""

    types: dict[str, DataType]  # declared order
    not_null: tuple[str, ...]
    allow_weight: bool  # changes may carry _weight; snapshots may not
    options: Mapping[str, Any]
    inserts_only: bool = False  # append_only: a negative _weight (a delete) is refused
    null_reasons: Mapping[str, str] = field(default_factory=dict)  # not_null column -> why (default: declared)
    one_of: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # column -> the values it may hold

    def reader_options(self, **ours: str) -> dict[str, str]:
        opts = {k: str(v) for k, v in self.options.items() if k.lower() not in _CONTROLLED}
        return {**opts, **ours}


@dataclass
class ReadPlan:
    groups: list[Group] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)


def _col(name: str) -> Column:
    return F.col("`" + name.replace("`", "``") + "`")


def _file_path() -> Column:
    return F.col("_metadata.file_path").alias(FILE_COL)


def _short(value: Any) -> str:
    text = str(value)
    return repr(text if len(text) <= EXAMPLE_CHARS else text[:EXAMPLE_CHARS] + "...")


# ---- checks every format shares ------------------------------------------------------------

def null_check(name: str, why: str = "is declared not nullable") -> Check:
    return Check(f"null:{name}", lambda n, _x: f"column {name} {why} but has {n} null value(s)")


WEIGHT_NULL = Check("weight:null", lambda n, _x: f"column _weight has {n} null value(s); "
                                                  "leave the column out for +1")
WEIGHT_INT = Check("weight:int", lambda n, x: f"column _weight must hold integers: {n} value(s) "
                                               f"are not, e.g. {_short(x)}")
# |_weight| <= 2^31 - 1: a join multiplies two weights and a trace sums many, and both must stay
# far inside a long (2^63) for any realistic history; change batches use small weights anyway.
MAX_WEIGHT = 2**31 - 1
WEIGHT_RANGE = Check("weight:range", lambda n, x: f"column _weight must lie between -{MAX_WEIGHT} and "
                                                   f"{MAX_WEIGHT}: {n} value(s) do not, e.g. {_short(x)}")


def weight_range_problems(weights: tuple[int, int] | None) -> list[str]:
    """The refusal of a Parquet file whose ``_weight`` statistics (min, max; None: unknown, the
    rows are checked instead) leave the allowed range."""
    if weights is None or -MAX_WEIGHT <= weights[0] <= weights[1] <= MAX_WEIGHT:
        return []
    bad = weights[1] if weights[1] > MAX_WEIGHT else weights[0]
    return [f"column _weight must lie between -{MAX_WEIGHT} and {MAX_WEIGHT}: its values reach {bad}"]


def _out_of_range(weight: Column) -> Column:
    return (weight > F.lit(MAX_WEIGHT)) | (weight < F.lit(-MAX_WEIGHT))


WEIGHT_DELETE = Check("weight:delete", lambda n, x: f"{n} row(s) delete (negative _weight, e.g. {x}) "
                                                    "but the source is append_only: it only inserts")


def utf8_problem(name: str, row: Any) -> str:
    """The refusal of a Parquet string column holding bytes that are not UTF-8 (``row``: the first
    such row of the file, from 0). Why refuse: Spark carries such bytes on unchecked and pyarrow
    cannot decode them, so the engines would disagree and a published table would hold text no
    reader decodes; both engines refuse the file instead (Spark lazily, in the step's own job)."""
    return (f"column {name}: row {row} holds bytes that are not UTF-8 text "
            "(a Parquet string column must hold UTF-8)")


def one_of_check(name: str, values: tuple[str, ...]) -> Check:
    return Check(f"one_of:{name}", lambda n, x: f"column {name}: {n} value(s) are not one of "
                                                f"{', '.join(values)}, e.g. {_short(x)}")


def time_check(name: str) -> Check:
    return Check(f"time:{name}", lambda n, x: time_range.problem(name, f"{n} value(s) like {x}"))


def _times(d: Declared) -> list[str]:
    return [c for c, t in d.types.items() if isinstance(t, (DateType, TimestampType))]


def shared_checks(d: Declared) -> list[Check]:
    checks = [null_check(c, *([d.null_reasons[c]] if c in d.null_reasons else [])) for c in d.not_null]
    checks += [time_check(c) for c in _times(d)]
    checks += [one_of_check(c, values) for c, values in d.one_of.items()]
    checks += [WEIGHT_NULL, WEIGHT_INT, WEIGHT_RANGE] if d.allow_weight else []
    return checks + ([WEIGHT_DELETE] if d.inserts_only else [])


def value_checks(d: Declared, typed: Mapping[str, Column]) -> dict[str, tuple[Column, Column | None]]:
    """The ``one_of`` checks on a group's typed columns (a NULL is left to the null checks)."""
    checks = {f"one_of:{c}": (typed[c].isNotNull() & ~typed[c].cast(StringType()).isin(list(values)), typed[c])
              for c, values in d.one_of.items()}
    for c in _times(d):  # dates and timestamps within 0001-01-01 .. 9999-12-31 (``time_range``)
        if isinstance(d.types[c], DateType):
            days = F.unix_date(typed[c])
            bad = (days < F.lit(time_range.MIN_DAY)) | (days > F.lit(time_range.MAX_DAY))
        else:
            micros = F.unix_micros(typed[c])
            bad = (micros < F.lit(time_range.MIN_MICROS)) | (micros > F.lit(time_range.MAX_MICROS))
        checks[f"time:{c}"] = (F.coalesce(bad, F.lit(False)), typed[c].cast(StringType()))
    return checks


def _delete_check(d: Declared, weight: Column) -> dict[str, tuple[Column, Column | None]]:
    """The append_only check on a group's weight column (nothing for other sources)."""
    return {WEIGHT_DELETE.key: (weight < 0, weight)} if d.inserts_only else {}


# ---- Parquet -----------------------------------------------------------------------------------

def plan_parquet(spark: SparkSession, files: Sequence[InputFile], d: Declared) -> ReadPlan:
    """Footer checks per file (no Spark job); row checks only where footer statistics cannot
    prove there are no nulls."""
    plan = ReadPlan(checks=shared_checks(d))
    layouts: dict[str, list[InputFile]] = defaultdict(list)
    schemas: dict[str, StructType] = {}
    unproven: set[str] = set()
    for f in files:
        try:
            footer = read_parquet_footer(f.path)
        except UnreadableFile as exc:
            plan.problems.append((f.path, str(exc)))
            continue
        found: dict[str, DataType | None] = {fld.name: fld.dataType for fld in footer.schema}
        found.update({name: None for name in footer.null_counts if name not in found})
        reasons = list(footer.problems) + column_problems(found, d.types, d.allow_weight)
        must_hold = list(d.not_null) + ([WEIGHT] if d.allow_weight and WEIGHT in found else [])
        counts = {c: footer.null_counts.get(c) for c in must_hold}
        reasons += [null_check(c, *([d.null_reasons[c]] if c in d.null_reasons else [])).describe(n, None)
                    if c != WEIGHT else WEIGHT_NULL.describe(n, None) for c, n in counts.items() if n]
        weights = footer.weight_range if d.allow_weight and WEIGHT in found else (0, 0)
        reasons += weight_range_problems(weights)
        if reasons:
            plan.problems.extend((f.path, r) for r in reasons)
            continue
        key = footer.schema.json()
        layouts[key].append(f)
        schemas[key] = footer.schema
        if (any(n is None for n in counts.values()) or weights is None
                or (d.inserts_only and WEIGHT in found) or d.one_of or not footer.times_known):
            unproven.add(key)
    for key, group_files in layouts.items():
        plan.groups.append(_parquet_group(spark, group_files, schemas[key], d, key in unproven))
    return plan


def _parquet_group(spark: SparkSession, files: Sequence[InputFile], schema: StructType,
                   d: Declared, needs_checks: bool) -> Group:
    # Reading with the file's own schema skips Spark's schema-inference job.
    strings = [c for c, t in d.types.items() if isinstance(t, StringType)]
    extra = [F.col("_metadata.row_index").alias(_ROW)] if strings else []
    frame = read_files(spark.read.schema(schema).options(**d.reader_options()), "parquet", files,
                       lambda df: df.select("*", _file_path(), *extra))
    has_weight = WEIGHT in schema.fieldNames()
    checks = {f"null:{c}": (_col(c).isNull(), None) for c in d.not_null}
    weight = _col(WEIGHT).cast(LongType()) if has_weight else F.lit(1).cast(LongType())
    if has_weight:
        checks[WEIGHT_NULL.key] = (_col(WEIGHT).isNull(), None)
        checks[WEIGHT_RANGE.key] = (_out_of_range(weight), _col(WEIGHT))
        checks.update(_delete_check(d, weight))
    typed = {c: _col(c).cast(t) for c, t in d.types.items()}
    typed.update({c: _utf8_or_refusal(c, typed[c]) for c in strings})
    checks.update(value_checks(d, typed))
    return Group(frame, typed, weight, checks, needs_checks)


_ROW = "__row_index"


def _utf8_or_refusal(name: str, value: Column) -> Column:
    """``value``, or the step's refusal (``utf8_problem``) where its bytes are not UTF-8: checked
    as the step's own job reads the row, so a file of valid strings costs no extra job."""
    head, tail = utf8_problem(name, "\0").split("\0")
    message = F.concat(F.lit(f"{MARKER}input file "), F.regexp_replace(plain_path(F.col(FILE_COL)), "^file:", ""), F.lit(f": {head}"),
                       F.col(_ROW).cast(StringType()), F.lit(tail))
    return F.when(value.isNull() | F.is_valid_utf8(value), value).otherwise(F.raise_error(message).cast(StringType()))


# ---- CSV ---------------------------------------------------------------------------------------

def _parse_csv_value(raw: Column, t: DataType, options: Mapping[str, Any]) -> Column:
    """A CSV string as the declared type; null when it does not convert exactly."""
    if isinstance(t, StringType):
        return raw
    if isinstance(t, DateType) and options.get("dateFormat"):
        return F.try_to_date(raw, str(options["dateFormat"]))
    if isinstance(t, TimestampType) and options.get("timestampFormat"):
        return F.try_to_timestamp(raw, F.lit(str(options["timestampFormat"])))
    value = raw.try_cast(t)
    if isinstance(t, DecimalType):  # a cast rounds extra decimals; refuse them instead
        wide = DecimalType(38, 38 - (t.precision - t.scale))
        value = F.when(raw.try_cast(wide) == value, value)
    return value


def cast_check(name: str, t: DataType) -> Check:
    return Check(f"cast:{name}", lambda n, x: f"column {name}: {n} value(s) are not a valid "
                                              f"{type_label(t)}, e.g. {_short(x)}")


MALFORMED = Check("malformed", lambda n, x: f"{n} malformed row(s) (wrong number of fields), "
                                             f"e.g. {_short(x)}")


def plan_csv(spark: SparkSession, files: Sequence[InputFile], d: Declared) -> ReadPlan:
    """Header checked in the driver; values read as strings, then cast and checked in Spark."""
    plan = ReadPlan(checks=[MALFORMED] + [cast_check(c, t) for c, t in d.types.items()
                                           if not isinstance(t, StringType)] + shared_checks(d))
    layouts: dict[tuple[str, ...], list[InputFile]] = defaultdict(list)
    for f in files:
        try:
            header = csv_header(f.path, d.options)
        except UnreadableFile as exc:
            plan.problems.append((f.path, str(exc)))
            continue
        if header is None:
            continue  # an empty file holds no rows
        reasons = header_problems(header) or column_problems(dict.fromkeys(header), d.types, d.allow_weight)
        if reasons:
            plan.problems.extend((f.path, r) for r in reasons)
        else:
            layouts[tuple(header)].append(f)
    for header, group_files in layouts.items():
        plan.groups.append(_csv_group(spark, group_files, header, d))
    return plan


def _csv_group(spark: SparkSession, files: Sequence[InputFile], header: tuple[str, ...],
               d: Declared) -> Group:
    schema = StructType([StructField(h, StringType()) for h in header] + [StructField(CORRUPT, StringType())])
    opts = d.reader_options(header="true", enforceSchema="true", mode="PERMISSIVE",
                            columnNameOfCorruptRecord=CORRUPT)
    frame = read_files(spark.read.schema(schema).options(**opts), "csv", files, lambda df: df.select("*", _file_path()))
    typed = {c: _parse_csv_value(_col(c), t, d.options) for c, t in d.types.items()}
    # The example names every column: with CSV column pruning, Spark flags a row with a wrong
    # number of fields only when all the columns are read.
    every = F.concat_ws(",", *[_col(h) for h in header])
    checks: dict[str, tuple[Column, Column | None]] = {
        MALFORMED.key: (_col(CORRUPT).isNotNull(), F.coalesce(_col(CORRUPT), every))}
    for c, t in d.types.items():
        if not isinstance(t, StringType):
            checks[f"cast:{c}"] = (_col(c).isNotNull() & typed[c].isNull(), _col(c))
    checks.update({f"null:{c}": (_col(c).isNull(), None) for c in d.not_null})
    checks.update(value_checks(d, typed))
    weight = F.lit(1).cast(LongType())
    if WEIGHT in header:
        weight = _col(WEIGHT).try_cast(LongType())
        checks[WEIGHT_NULL.key] = (_col(WEIGHT).isNull(), None)
        checks[WEIGHT_INT.key] = (_col(WEIGHT).isNotNull() & weight.isNull(), _col(WEIGHT))
        checks[WEIGHT_RANGE.key] = (_out_of_range(weight), _col(WEIGHT))
        checks.update(_delete_check(d, weight))
    return Group(frame, typed, weight, checks)


# ---- JSON lines --------------------------------------------------------------------------------

def corrupt_check(d: Declared) -> Check:
    return Check("corrupt", lambda n, x: f"{diagnose_json_line(x, d.types)}: {n} bad line(s), "
                                         f"e.g. {_short(x)}")


EXTRA_KEYS = Check("extra", lambda _n, xs: "unexpected column(s) "
                   + name_list(sorted({k for x in xs for k in x.split("\n")})), all_examples=True)


def plan_json(spark: SparkSession, files: Sequence[InputFile], d: Declared) -> ReadPlan:
    """Lines read as text and parsed with the declared schema, so corrupt lines and unexpected
    keys are both visible to the one check aggregate."""
    plan = ReadPlan(checks=[corrupt_check(d), EXTRA_KEYS] + shared_checks(d))
    files = [f for f in files if f.size > 0]
    if files:
        plan.groups.append(_json_group(spark, files, d))
    return plan


def _json_group(spark: SparkSession, files: Sequence[InputFile], d: Declared) -> Group:
    fields = [StructField(c, t) for c, t in d.types.items()]
    allowed = list(d.types) + ([WEIGHT] if d.allow_weight else [])
    if d.allow_weight:
        fields.append(StructField(WEIGHT, StringType()))  # raw text: "1.5" is reported, not dropped
    schema = StructType(fields + [StructField(CORRUPT, StringType())])
    opts = d.reader_options(mode="PERMISSIVE", columnNameOfCorruptRecord=CORRUPT)
    frame = read_files(spark.read, "text", files, lambda text: text.where(F.trim("value") != "").select(
        F.from_json("value", schema, opts).alias("__row"), F.json_object_keys("value").alias("__keys"), "value",
        _file_path()))
    row = F.col("__row")
    ok = row[CORRUPT].isNull()
    extra = F.array_except(F.col("__keys"), F.array(*[F.lit(a) for a in allowed]))
    checks: dict[str, tuple[Column, Column | None]] = {
        "corrupt": (~ok, F.col("value")),
        "extra": (F.size(extra) > 0, F.array_join(extra, "\n")),
    }
    checks.update({f"null:{c}": (ok & row[c].isNull(), None) for c in d.not_null})
    checks.update(value_checks(d, {c: row[c] for c in d.types}))
    weight = F.lit(1).cast(LongType())
    if d.allow_weight:
        parsed = row[WEIGHT].try_cast(LongType())
        weight = F.coalesce(parsed, F.lit(1).cast(LongType()))
        checks[WEIGHT_NULL.key] = (ok & F.array_contains("__keys", WEIGHT) & row[WEIGHT].isNull(), None)
        checks[WEIGHT_INT.key] = (ok & row[WEIGHT].isNotNull() & parsed.isNull(), row[WEIGHT])
        checks[WEIGHT_RANGE.key] = (ok & _out_of_range(parsed), row[WEIGHT])
        checks.update(_delete_check(d, weight))
    return Group(frame, {c: row[c] for c in d.types}, weight, checks)


Planner = Callable[[SparkSession, Sequence[InputFile], Declared], ReadPlan]
PLANNERS: dict[str, Planner] = {
    "parquet": plan_parquet, "csv": plan_csv, "json": plan_json,
}
