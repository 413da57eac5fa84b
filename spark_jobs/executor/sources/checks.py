"""Row-level checks of input files, fused into one Spark aggregate, and the refusal they raise.

Each reader turns the files of one layout into a ``Group``: a raw DataFrame with the file path,
typed values for the declared columns, and one boolean per check saying "this row is bad".
``failed_checks`` unions the groups and computes every check's count and an example value
per file in a single ``groupBy(file).agg(...)``: one action for a whole step's files.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Callable, Iterable, Sequence
from urllib.parse import unquote, urlsplit

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_jobs.errors import DbspError, EXIT_REFUSED

from .discovery import is_local, normalize

FILE_COL = "__file"


class InputRefused(DbspError):
    """Input files that do not match their declared schema; nothing of the step was applied.

    ``problems`` lists every refused file of the step as ``(path, reason)``.
    """
    exit_code = EXIT_REFUSED
    retryable = False

    def __init__(self, problems: Sequence[tuple[str, str]], input_name: str | None = None):
        self.problems: list[tuple[str, str]] = sorted(problems)
        self.input_name = input_name
        files = len({p for p, _ in self.problems})
        head = f"input {input_name}: " if input_name else ""
        lines = [f"{head}{files} file(s) refused; nothing was read or committed:"]
        lines += [f"  {path}: {reason}" for path, reason in self.problems]
        super().__init__("\n".join(lines))

    def __reduce__(self):  # picklable across processes (Airflow, Spark Connect clients)
        return (type(self), (self.problems, self.input_name))

    def user_message(self, reset_command: str | None = None) -> str:
        lines = ["input refused; nothing was committed and the files were left in place:"]
        return "\n".join(lines + [f"  {path}: {reason}" for path, reason in self.problems])

    @classmethod
    def combine(cls, errors: Iterable["InputRefused"]) -> "InputRefused":
        """One refusal listing the problems of several inputs (the step runner reads each input)."""
        errors = list(errors)
        names = sorted({e.input_name for e in errors if e.input_name})
        return cls([p for e in errors for p in e.problems], ", ".join(names) or None)


@dataclass(frozen=True)
class Check:
    """A row-level rule: ``describe(bad_rows, example)`` is the reason a file is refused."""

    key: str
    describe: Callable[[int, Any], str]
    all_examples: bool = False  # collect every distinct example (few, e.g. unexpected keys)


@dataclass
class Group:
    """One Spark read of files sharing a layout (a Parquet schema, a CSV header, JSON lines)."""

    frame: DataFrame  # raw rows, with FILE_COL
    columns: dict[str, Column]  # declared name -> value cast to the declared type
    weight: Column  # long
    checks: dict[str, tuple[Column, Column | None]] = field(default_factory=dict)  # key -> (bad, example)
    needs_checks: bool = True  # False when footers already proved every check passes


def zset_of(groups: Sequence[Group], names: Sequence[str], weight: str, *, with_file: bool = False) -> DataFrame:
    """The union of the groups as a Z-set: declared columns in order, then the weight (and, with
    ``with_file``, the file each row came from in ``FILE_COL``)."""
    extra = [F.col(FILE_COL)] if with_file else []
    frames = [g.frame.select(*[g.columns[n].alias(n) for n in names], g.weight.alias(weight), *extra)
              for g in groups]
    union = reduce(DataFrame.unionByName, frames)
    return union.where(F.col(weight) != 0)


def own_path(spark_path: str, paths: Iterable[str]) -> str:
    """The path among ``paths`` (ours) that Spark reports as ``spark_path``."""
    key = spark_path_key(spark_path)
    return next((p for p in paths if own_key(p) == key), key)


def spark_path_key(spark_path: str) -> str:
    """Spark reports ``file:/a%20b``; our paths are plain (``/a b``) or URIs."""
    parts = urlsplit(spark_path)
    if parts.scheme in ("", "file"):
        return normalize(unquote(parts.path))
    return f"{parts.scheme}://{parts.netloc}{unquote(parts.path)}"


def plain_path(spark_path: Column) -> Column:
    """``spark_path_key`` in Spark: the file Spark reports (``file:/a%20b``, its path URI-encoded)
    as its plain path string (``file:/a b``), so files compare as their names do. A ``+`` is a
    literal plus in a URI path (``url_decode`` would read it as a space)."""
    return F.coalesce(F.try_url_decode(F.replace(spark_path, F.lit("+"), F.lit("%2B"))), spark_path)


def own_key(path: str) -> str:
    """Our path (plain, or a URI) in the form ``spark_path_key`` gives Spark's."""
    return normalize(path) if is_local(path) else path


def failed_checks(groups: Sequence[Group], checks: Sequence[Check],
                  paths: Iterable[str]) -> list[tuple[str, str]]:
    """(path, reason) for every check any row of a file fails; one Spark action, none if no checks."""
    groups = [g for g in groups if g.needs_checks]
    if not groups or not checks:
        return []
    parts = []
    for g in groups:
        cols = [F.col(FILE_COL)]
        for i, chk in enumerate(checks):
            bad, example = g.checks.get(chk.key, (F.lit(False), None))
            cols.append(F.coalesce(bad, F.lit(False)).alias(f"__c{i}"))
            cols.append((example if example is not None else F.lit(None)).cast("string").alias(f"__e{i}"))
        parts.append(g.frame.select(*cols))
    rows = reduce(DataFrame.unionByName, parts)
    aggs, any_bad = [], F.lit(False)
    for i, chk in enumerate(checks):
        bad, example = F.col(f"__c{i}"), F.when(F.col(f"__c{i}"), F.col(f"__e{i}"))
        aggs.append(F.count_if(bad).alias(f"__n{i}"))
        aggs.append((F.array_sort(F.collect_set(example)) if chk.all_examples else F.min(example)).alias(f"__x{i}"))
        any_bad = any_bad | (F.col(f"__n{i}") > 0)
    found = rows.groupBy(FILE_COL).agg(*aggs).where(any_bad).collect()
    by_key = {own_key(p): p for p in paths}
    problems = []
    for row in found:
        path = by_key.get(spark_path_key(row[FILE_COL]), spark_path_key(row[FILE_COL]))
        for i, chk in enumerate(checks):
            if row[f"__n{i}"]:
                problems.append((path, chk.describe(int(row[f"__n{i}"]), row[f"__x{i}"])))
    return problems
