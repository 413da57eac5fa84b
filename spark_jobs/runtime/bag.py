"""Deletes that exceed inserts: refuse the step, or quarantine the excess (executor/bag_check.py).

``settings.on_negative`` of a circuit chooses:

- ``refuse`` (the default): the step fails with ``InputRefused`` (exit code 2) naming each file
  that deletes such a row, with an example row; nothing is committed and the files stay.
- ``quarantine``: the excess deletions are left out of the step (each such tuple ends at weight
  zero, as if the delete had removed exactly what existed) and written, with the reason and the
  files they came from, to ``<data_root>/quarantine/<circuit>/t<timestep>/<input>/`` (Parquet);
  the step summary and the manifest (``meta.quarantined``) say how many and where.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.executor.spark import zset
from spark_jobs.executor.bag_check import BEFORE, CHANGE, MAX_COLLECTED, Negatives, find_negatives, negative_tuples
from spark_jobs.executor.engine import NotLocal
from spark_jobs.executor.sources import InputFile, InputRefused
from spark_jobs.executor.sources.checks import FILE_COL, own_path
from spark_jobs.executor.sources.reading import read_changes_located
from spark_jobs.ir.incrementalize import bag_integrals
from spark_jobs.spec.model import WEIGHT
from spark_jobs.runtime.reach import driver_reach
from spark_jobs.state.arrow_fs import normalize, uri_join
from spark_jobs.state import bag_index
from spark_jobs.state.fs import filesystem_for, sidecars_apply

ON_NEGATIVE = ("refuse", "quarantine")
QUARANTINE_DIR = "quarantine"
REASON = "deletes more copies of this row than the input holds (integrated weight would go below zero)"


@dataclass
class Quarantined:
    """What one input's quarantine of one step holds."""

    input: str
    tuples: int
    rows: int  # copies set aside (the sum of the excess deletions' magnitudes)
    path: str

    def to_dict(self) -> dict[str, Any]:
        return {"tuples": self.tuples, "rows": self.rows, "path": self.path}

    def note(self) -> str:
        return (f"input {self.input}: {self.rows} deleted row(s) of {self.tuples} tuple(s) had never been "
                f"inserted (or more copies were deleted than existed): quarantined to {self.path}")


def policy(rt) -> str:
    return str(rt.compiled.spec.settings.get("on_negative", "refuse"))


def quarantine_path(rt, timestep: int, input_name: str) -> str:
    return uri_join(normalize(rt.config.data_root), QUARANTINE_DIR, rt.name, f"t{timestep:012d}", input_name)


def checked_inputs(rt, deleted: Mapping[str, int]) -> list[str]:
    """The inputs whose step the bag check looks up: `changes` inputs that delete something."""
    return [name for name in bag_integrals(rt.compiled.incremental) if deleted.get(name)]


def read_by_circuit(rt, integral_id: str) -> bool:
    """Does an operator of the incremental circuit read ``integral_id`` (a join or distinct on the
    input as it is, through its delay)? Then the bag check keeps the row groups it decodes for
    that operator's lookups; else (an input filtered or projected first, as W1's) only the
    check reads them, once."""
    return any(integral_id in node.inputs for node in rt.compiled.incremental)


def announce(rt, timestep: int, deleted: Mapping[str, int], say) -> None:
    """Say that the bag check starts: a large change's check reads much of the input integrals."""
    names = checked_inputs(rt, deleted)
    if names:
        which = ", ".join(f"{int(deleted.get(n, 0)):,} of {n}" for n in names)
        say(f"timestep {timestep}: checking the deleted rows ({which}) against what the input holds")


def check_deltas(rt, timestep: int, deltas: dict[str, DataFrame], deleted: Mapping[str, int],
                 files: Mapping[str, Sequence[InputFile]], state) -> list[Quarantined]:
    """Check every `changes` input's delta that deletes something against its integral in
    ``state`` (a ``StateReader``); refuse, or correct ``deltas`` in place and quarantine.

    ``deleted`` is each input's count of deleted rows: an input without deletions is not looked
    at (no lookup, no job). Raises ``InputRefused`` for every offending file at once.
    """
    spark = rt.spark
    refused: list[InputRefused] = []
    quarantined: list[Quarantined] = []
    trace_files = getattr(state, "trace_files", None)
    # the driver may stream a large integral only where this process reaches the state itself
    driver_scan = driver_reach(rt) is None
    for name, integral_id in bag_integrals(rt.compiled.incremental).items():
        if name not in deltas or not deleted.get(name):
            continue
        found = find_negatives(spark, deltas[name], state.read(integral_id),
                               trace_files(integral_id) if trace_files is not None else None, rt.config.policy,
                               deleted=int(deleted[name]), driver_scan=driver_scan,
                               cache=read_by_circuit(rt, integral_id), secret=_digest_secret(state))
        if found is None:
            continue
        spec = rt.compiled.spec.inputs[name]
        located = _located(spark, spec, files.get(name, ()), found)
        if policy(rt) == "quarantine":
            quarantined.append(_quarantine(rt, timestep, name, found, located))
            deltas[name] = zset.local_plus(deltas[name], found.correction())
        else:
            refused.append(InputRefused(_problems(name, found, located, files.get(name, ())), name))
    if refused:
        raise InputRefused.combine(refused)
    return quarantined


def check_tables(rt, tables: Mapping[str, Any], deleted: Mapping[str, int], state) -> None:
    """The bag check of an in-process step, on its pyarrow change tables, with no Spark job.

    A step that passes goes on in-process. One that would take a tuple below zero raises
    ``NotLocal`` before anything is written: the step runs on Spark, which refuses it naming the
    files and rows or quarantines the excess (``check_deltas``), as for any step; so does one
    whose lookup is too big for the driver.
    """
    for name, integral_id in bag_integrals(rt.compiled.incremental).items():
        if name not in tables or not deleted.get(name):
            continue
        policy = rt.config.policy
        if negative_tuples(tables[name], state.trace_files(integral_id), policy.narrow, policy.bag_check,
                           cache=read_by_circuit(rt, integral_id), secret=_digest_secret(state)) is not None:
            raise NotLocal(f"input {name} deletes rows it does not hold (the bag check refuses or quarantines "
                           f"them on Spark, naming the files)")


def _digest_secret(state) -> bytes | None:
    """The store's bag-digest secret (``state/bag_index.py``), if it has one and is local."""
    store = getattr(state, "store", None)
    if store is None or not sidecars_apply(store.fs):
        return None
    return bag_index.secret(store.layout.root)


def _located(spark, spec, files: Sequence[InputFile], found: Negatives) -> DataFrame:
    """The deleting rows of ``files`` whose tuple goes below zero: the input's columns, the row's
    weight, ``FILE_COL``, ``__before`` and ``__change`` (one Spark job when collected)."""
    cols = found.columns
    rows = read_changes_located(spark, spec, files).where(zset.col(WEIGHT) < 0)
    private = [f"__b{i}" for i in range(len(cols))]
    bad = found.bad.select(*[zset.col(c).alias(p) for c, p in zip(cols, private)], BEFORE, CHANGE)
    return rows.join(bad, on=zset.null_safe_match(cols, private), how="inner").drop(*private)


def _show(row: Mapping[str, Any], cols: Sequence[str]) -> str:
    return "{" + ", ".join(f"{c}: {row[c]!r}" for c in cols) + "}"


def _problems(name: str, found: Negatives, located: DataFrame, files: Sequence[InputFile]
              ) -> list[tuple[str, str]]:
    """(file, reason) for every file that deletes a row going below zero, with an example row."""
    cols = found.columns
    paths = [f.path for f in files]
    first: dict[str, Any] = {}
    for row in located.limit(MAX_COLLECTED).collect():
        first.setdefault(own_path(row[FILE_COL], paths), row)
    total = f"more than {MAX_COLLECTED}" if found.count > MAX_COLLECTED else str(found.count)
    out = []
    for path, row in sorted(first.items()):
        out.append((path, (
            f"deletes {_show(row, cols)} (weight {row[WEIGHT]}) but the input held {row[BEFORE]} "
            f"cop{'y' if row[BEFORE] == 1 else 'ies'} of that row before this step, and the step's changes "
            f"of it add up to {row[CHANGE]}: its weight would go below zero ({total} row(s) of input "
            f"{name} would). A delete must match an earlier insert of the same row, every column equal; "
            f"or set settings.on_negative: quarantine to set such deletes aside")))
    if not out:  # cannot happen: the deletions came from these files
        ex = found.examples[0]
        out.append((f"input {name}", f"deletes {_show(ex, cols)} below zero (before {ex['before']}, "
                                     f"change {ex['change']})"))
    return out


def _quarantine(rt, timestep: int, name: str, found: Negatives, located: DataFrame) -> Quarantined:
    """Write the excess deletions of one input, with the reason and their files (one write job)."""
    cols = found.columns
    private = [f"__f{i}" for i in range(len(cols))]
    path_of = F.regexp_replace(F.url_decode(FILE_COL), r"^file:(//)?", "")  # Spark's URI -> our path
    by_tuple = (located.groupBy(*[zset.col(c).alias(p) for c, p in zip(cols, private)])
                .agg(F.array_sort(F.collect_set(path_of)).alias("_files")))
    rows = (found.bad.join(by_tuple, on=zset.null_safe_match(cols, private), how="left")
            .select(*[zset.col(c) for c in cols],
                    (F.col(BEFORE) + F.col(CHANGE)).cast("long").alias(WEIGHT),
                    F.col(BEFORE).alias("_weight_before"), F.col(CHANGE).alias("_change"),
                    F.lit(REASON).alias("_reason"), "_files"))
    path = quarantine_path(rt, timestep, name)
    rows.coalesce(1).write.mode("overwrite").parquet(filesystem_for(path).spark_uri(path))
    totals = found.excess.agg(F.count(F.lit(1)).alias("n"), F.sum(WEIGHT).alias("w")).first()
    return Quarantined(name, int(totals["n"]), -int(totals["w"] or 0), path)
