"""The quality gate of one timestep: what the step runner calls between computing and committing.

``run_gate`` checks everything and returns a report; it never raises for bad data (only for a
bad declaration). ``enforce`` turns failed ``fail`` checks into ``QualityGateFailed``, so the
runner can write the report first and then refuse to commit.
"""
from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from spark_jobs.quality import expectations as ge
from spark_jobs.executor.zset import is_local
from spark_jobs.quality.builtin import check_view_delta
from spark_jobs.quality.report import CheckResult, GateReport, QualityGateFailed
from spark_jobs.spec.model import WEIGHT, Expectation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

NO_ROWS_NOTE = "no inserted rows: holds trivially"


def inserted_rows(delta: "DataFrame") -> "DataFrame":
    """The rows a change inserts (weight > 0), without the weight; a change without a weight
    column is all insertions. Multiplicities are not expanded."""
    if WEIGHT not in delta.columns:
        return delta
    return delta.where(delta[WEIGHT] > 0).drop(WEIGHT)


@contextmanager
def _job_description(spark: "SparkSession", text: str) -> Iterator[None]:
    """Name the Spark jobs of a check in the Spark UI (no-op on Spark Connect)."""
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect has no SparkContext
        yield
        return
    sc.setJobDescription(text)
    try:
        yield
    finally:
        sc.setJobDescription(None)  # type: ignore[arg-type]


def local_inserted_rows(table: Any) -> Any:
    """The inserted rows of a change held on the driver (an Arrow table), as pandas, for GE."""
    import pyarrow.compute as pc

    if WEIGHT in table.column_names:
        table = table.filter(pc.greater(table.column(WEIGHT), 0)).drop_columns([WEIGHT])
    return table.to_pandas()


def _user_checks(target: str, rows: Any, n_rows: int | None,
                 declared: Sequence[Expectation]) -> list[CheckResult]:
    """Declared expectations on the inserted rows (a Spark or a pandas DataFrame). With zero
    rows, row expectations hold trivially and GE runs only for table-level ones (row count,
    columns) on the empty frame."""
    if not declared:
        return []
    if rows is not None and n_rows is None:
        if ge._is_pandas(rows):
            n_rows = len(rows)
        else:
            n_rows = 0 if rows.isEmpty() else None  # one cheap action; None = "some"
    if rows is not None and n_rows != 0:
        return ge.validate(rows, target, declared)
    table_level = [i for i, e in enumerate(declared) if not ge.judges_rows(e, target)]
    ran: dict[int, CheckResult] = {}
    if rows is not None and table_level:
        checked = ge.validate(rows, target, [declared[i] for i in table_level])
        ran = dict(zip(table_level, checked))
    note = NO_ROWS_NOTE if rows is not None else "no change this timestep: holds trivially"
    return [ran.get(i) or ge.trivially_passed(target, exp, note) for i, exp in enumerate(declared)]


def run_gate(spark: "SparkSession", timestep: int, *,
             view_deltas: Mapping[str, "DataFrame"],
             view_previous: Mapping[str, "DataFrame | None"],
             set_views: set[str] | frozenset[str],
             view_expectations: Mapping[str, Sequence[Expectation]],
             input_deltas: Mapping[str, "DataFrame"],
             input_expectations: Mapping[str, Sequence[Expectation]],
             local: Mapping[str, Any] | None = None) -> GateReport:
    """Check one timestep: declared expectations on the inputs' and views' inserted rows, and the
    built-in Z-set checks on every view delta. Raises ``ExpectationConfigError`` (before touching
    data) if a declaration cannot be built; otherwise returns the report and never raises.

    A view or input with expectations but no entry in the deltas had no change: its expectations
    hold trivially. Deltas that are not cached are cached for the duration of their checks.
    ``local`` maps targets (``view:<v>``, ``input:<i>``) to the same changes held on the driver
    as Arrow tables: their expectations run on pandas (no Spark job).
    """
    local = local or {}
    started = time.perf_counter()
    declared = {**{f"input:{n}": list(e) for n, e in input_expectations.items() if e},
                **{f"view:{n}": list(e) for n, e in view_expectations.items() if e}}
    for target, exps in declared.items():
        ge.check_declarations(target, exps)

    results: list[CheckResult] = []
    for name, exps in input_expectations.items():
        if not exps:
            continue
        target = f"input:{name}"
        delta = input_deltas.get(name)
        with _job_description(spark, f"quality t={timestep} {target}"):
            if target in local:
                rows = local_inserted_rows(local[target])
            else:
                rows = inserted_rows(delta) if delta is not None else None
            results.extend(_user_checks(target, rows, None, list(exps)))

    for name in dict.fromkeys([*view_deltas, *(n for n, e in view_expectations.items() if e)]):
        target = f"view:{name}"
        delta = view_deltas.get(name)
        exps = list(view_expectations.get(name) or ())
        if delta is None:
            results.extend(_user_checks(target, None, 0, exps))
            continue
        own_cache = not ge.is_cached(delta) and not is_local(delta)  # a local one is computed
        if own_cache:
            delta = delta.persist()
        try:
            with _job_description(spark, f"quality t={timestep} {target}"):
                builtin = check_view_delta(name, delta, view_previous.get(name),
                                           is_set=name in set_views, target=target)
                results.extend(builtin.results)
                rows = local_inserted_rows(local[target]) if target in local else inserted_rows(delta)
                results.extend(_user_checks(target, rows, builtin.inserted_rows, exps))
        finally:
            if own_cache:
                delta.unpersist()

    report = GateReport(timestep=timestep, results=results,
                        elapsed_s=time.perf_counter() - started)
    log.info("quality gate t=%d: %d checks, %d failed, %d warnings in %.2fs", timestep,
             len(results), len(report.failed), len(report.warnings), report.elapsed_s)
    return report


def enforce(report: GateReport) -> None:
    """Raise ``QualityGateFailed`` if any ``fail`` check did not hold; warnings pass."""
    if report.failed:
        raise QualityGateFailed(report)
