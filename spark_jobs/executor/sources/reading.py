"""Read a step's input files as a validated Z-set, or refuse them all before anything is used.

Validation costs at most one Spark action per call (the fused check aggregate; none for Parquet
whose footers prove the checks). The returned DataFrame is lazy: it reads the same immutable
files again when used, so cache it if it is used more than once.
"""
from __future__ import annotations

from functools import reduce
from typing import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.spec.model import WEIGHT, InputSpec

from .checks import FILE_COL, Group, InputRefused, failed_checks, own_path, zset_of
from .discovery import InputFile, data_files, exists, file_format
from .formats import PLANNERS, Declared, Planner
from .lateness import late_by_file
from .spark_types import declared_types, spark_schema


def declared(spec: InputSpec, allow_weight: bool) -> Declared:
    """What ``spec``'s files must hold (an append_only source: no deletes); an event-time column
    may not be null (a row without a time cannot be judged late or placed in a window)."""
    options = spec.source.options if spec.source is not None else {}
    reasons = {c: spec.null_reason(c) for c in spec.not_null}
    return Declared(declared_types(spec), spec.not_null, allow_weight, dict(options or {}),
                    inserts_only=spec.kind == "append_only", null_reasons=reasons)


def checked_groups(spark: SparkSession, spec: InputSpec, files: Sequence[InputFile], d: Declared,
                   planners: Mapping[str, Planner] = PLANNERS) -> list[Group]:
    """The Spark reads of ``files``, after every check passed; else ``InputRefused`` naming every
    refused file of the input (a file of another format than the source's is refused too)."""
    if spec.source is None:
        raise ValueError(f"input {spec.name} has no source to read")
    fmt = spec.source.reader_format
    problems = [(f.path, f"a {file_format(f.path)} file in a {spec.source.format} source")
                for f in files if file_format(f.path) != fmt]
    wanted = [f for f in files if file_format(f.path) == fmt]
    plan = planners[fmt](spark, wanted, d)
    problems += plan.problems + failed_checks(plan.groups, plan.checks, [f.path for f in wanted])
    if problems:
        raise InputRefused(problems, spec.name)
    return plan.groups


def _read(spark: SparkSession, spec: InputSpec, files: Sequence[InputFile], allow_weight: bool,
          with_file: bool = False) -> DataFrame:
    groups = checked_groups(spark, spec, files, declared(spec, allow_weight))
    if not groups:
        empty = spark.createDataFrame([], spark_schema(spec))
        return empty.withColumn(FILE_COL, F.lit(None).cast("string")) if with_file else empty
    return zset_of(groups, spec.column_names, WEIGHT, with_file=with_file)


def refuse_late(spark: SparkSession, spec: InputSpec, files: Sequence[InputFile], watermark: int,
                describe) -> InputRefused:
    """The refusal of a step whose change holds late rows of an input with ``on_late: refuse``:
    every file with late rows, how many and the earliest (``describe(us)`` formats a time).
    One more Spark job, on the refusal path only."""
    assert spec.time is not None
    column = spec.time.column
    groups = checked_groups(spark, spec, files, declared(spec, allow_weight=True))
    frames = [g.frame.select(g.columns[column].alias(column), F.col(FILE_COL)) for g in groups]
    paths = [f.path for f in files]
    problems = []
    for spark_path, n, first in late_by_file(reduce(DataFrame.unionByName, frames), column, watermark) if frames else []:
        path = own_path(spark_path, paths)
        problems.append((path, f"{n} row(s) arrived late (on_late: refuse): {column} {describe(first)} is "
                               f"below the watermark {describe(watermark)} (the largest {column} seen minus "
                               f"the lateness, {spec.time.lateness})"))
    return InputRefused(problems or [(f.path, "late rows (on_late: refuse)") for f in files], spec.name)


def read_changes(spark: SparkSession, spec: InputSpec, files: Sequence[InputFile]) -> DataFrame:
    """The union of the files' changes: declared columns (declared types, declared order) plus
    ``_weight`` (+1 when the file has none); rows of weight 0 dropped, not consolidated."""
    return _read(spark, spec, files, allow_weight=True)


def read_changes_located(spark: SparkSession, spec: InputSpec, files: Sequence[InputFile]) -> DataFrame:
    """``read_changes`` with the file each row came from (``FILE_COL``, as Spark names it: see
    ``checks.own_path``), to tell a user which file holds a row."""
    return _read(spark, spec, files, allow_weight=True, with_file=True)


def read_snapshot(spark: SparkSession, spec: InputSpec, item: InputFile) -> DataFrame:
    """A full snapshot (a file, or a folder of data files) as a Z-set of +1 rows."""
    if not exists(item.path):
        raise InputRefused([(item.path, "the snapshot disappeared before it was read")], spec.name)
    return _read(spark, spec, data_files(item.path), allow_weight=False)
