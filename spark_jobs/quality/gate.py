"""The quality gate of one timestep: what the step runner calls between computing and committing.

``run_gate`` checks everything and returns a report; it never raises for bad data (only for a
bad declaration). ``enforce`` turns failed ``fail`` checks into ``QualityGateFailed``, so the
runner can write the report first and then refuse to commit.
"""
from __future__ import annotations

import logging
import time
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from spark_jobs.quality import expectations as ge
from spark_jobs.quality import native
from spark_jobs.quality.builtin import BuiltinOutcome, check_view_delta
from spark_jobs.quality.report import CheckResult, GateReport, QualityGateFailed
from spark_jobs.spec.model import WEIGHT, Expectation

if TYPE_CHECKING:
    import pyarrow as pa
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


def _user_checks(target: str, rows: "DataFrame | None", n_rows: int | None,
                 declared: Sequence[Expectation]) -> list[CheckResult]:
    """Declared expectations on the inserted rows. With zero rows, row expectations hold
    trivially and GE runs only for table-level ones (row count, columns) on the empty frame."""
    if not declared:
        return []
    if rows is not None and n_rows is None:
        n_rows = 0 if rows.isEmpty() else None  # one cheap action; None = "some"
    if rows is not None and n_rows != 0:
        return _validate(rows, target, declared)
    table_level = [i for i, e in enumerate(declared)  # the natively served ones judge rows
                   if not native.accepts(e) and not ge.judges_rows(e, target)]
    ran: dict[int, CheckResult] = {}
    if rows is not None and table_level:
        checked = ge.validate(rows, target, [declared[i] for i in table_level])
        ran = dict(zip(table_level, checked))
    note = NO_ROWS_NOTE if rows is not None else "no change this timestep: holds trivially"
    return [ran.get(i) or ge.trivially_passed(target, exp, note) for i, exp in enumerate(declared)]


def _validate(rows: Any, target: str, declared: Sequence[Expectation]) -> list[CheckResult]:
    """GE's results for ``declared`` on ``rows``; on a pandas frame the expectations ``native``
    serves are computed there (GE is imported only for the others: seconds per new process)."""
    if not native.is_pandas(rows):
        return ge.validate(rows, target, declared)
    served = {i: native.check(e, target, rows) for i, e in enumerate(declared) if native.serves(e, rows)}
    rest = [i for i in range(len(declared)) if i not in served]
    served.update(zip(rest, ge.validate(rows, target, [declared[i] for i in rest])))
    return [served[i] for i in range(len(declared))]


def run_gate(spark: "SparkSession", timestep: int, *,
             view_deltas: Mapping[str, "DataFrame"],
             view_previous: Mapping[str, "DataFrame | None"],
             set_views: set[str] | frozenset[str],
             view_expectations: Mapping[str, Sequence[Expectation]],
             input_deltas: Mapping[str, "DataFrame"],
             input_expectations: Mapping[str, Sequence[Expectation]],
             local: Mapping[str, "pa.Table"] | None = None) -> GateReport:
    """Check one timestep: declared expectations on the inputs' and views' inserted rows, and the
    built-in Z-set checks on every view delta. Raises ``ExpectationConfigError`` (before touching
    data) if a declaration cannot be built; otherwise returns the report and never raises.

    A view or input with expectations but no entry in the deltas had no change: its expectations
    hold trivially. Deltas that are not cached are cached for the duration of their checks.
    ``local`` maps targets (``view:<v>``, ``input:<i>``) to the same changes held on the driver
    as Arrow tables (a DAG run's staged changes): their expectations run on pandas (no Spark job)
    where they mean the same as on Spark (``expectations.pandas_equivalent``).
    """
    declared = {**{f"input:{n}": list(e) for n, e in input_expectations.items()},
                **{f"view:{n}": list(e) for n, e in view_expectations.items()}}
    side = _SparkSide(spark, timestep, view_previous, local or {}, declared)
    return _gate(timestep, side, set_views=set_views,
                 view_deltas=view_deltas, view_expectations=view_expectations,
                 input_deltas=input_deltas, input_expectations=input_expectations)


def run_gate_tables(timestep: int, *, view_deltas: Mapping[str, "pa.Table"],
                    previous_rows: Callable[[str, "pa.Table"], "pa.Table | None"],
                    set_views: set[str] | frozenset[str],
                    view_expectations: Mapping[str, Sequence[Expectation]],
                    input_deltas: Mapping[str, "pa.Table"],
                    input_expectations: Mapping[str, Sequence[Expectation]],
                    frame: Callable[["pa.Table"], "DataFrame"]) -> GateReport:
    """``run_gate`` for a step that runs in-process: deltas are Arrow tables, the built-in checks
    run on them (``builtin_arrow``), ``previous_rows(view, delta)`` gives the previous view's rows
    of the delta's tuples. Declared expectations run with Great Expectations on the inserted rows:
    on pandas when every one of a target's expectations means there what it means on Spark
    (``expectations.pandas_equivalent``), else on the Spark DataFrame ``frame(rows)`` gives
    (Spark starts then)."""
    declared = {**{f"input:{n}": list(e) for n, e in input_expectations.items()},
                **{f"view:{n}": list(e) for n, e in view_expectations.items()}}
    return _gate(timestep, _TableSide(previous_rows, frame, declared), set_views=set_views,
                 view_deltas=view_deltas, view_expectations=view_expectations,
                 input_deltas=input_deltas, input_expectations=input_expectations)


def _inserted_table(delta: "pa.Table") -> "pa.Table":
    """The rows an Arrow change inserts (weight > 0), without the weight."""
    import pyarrow.compute as pc

    if WEIGHT not in delta.column_names:
        return delta
    return delta.filter(pc.greater(delta.column(WEIGHT), 0)).drop_columns([WEIGHT])


def _pandas_frame(rows: "pa.Table", declared: Sequence[Expectation]) -> Any:
    """``rows`` as pandas for GE when every declared expectation means there what it means on
    Spark; else None."""
    import pyarrow as pa

    numeric = {f.name for f in rows.schema if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)}
    strings = {f.name for f in rows.schema if pa.types.is_string(f.type)}
    return rows.to_pandas() if ge.pandas_equivalent(declared, numeric, strings) else None


class _SparkSide:
    """How the gate reads a step's DataFrames: jobs named in the Spark UI, deltas cached for
    their checks, the built-in checks by one Spark aggregate."""

    def __init__(self, spark: "SparkSession", timestep: int, previous: Mapping[str, "DataFrame | None"],
                 local: Mapping[str, "pa.Table"], declared: Mapping[str, Sequence[Expectation]]) -> None:
        self.spark, self.timestep, self.previous = spark, timestep, previous
        self.local, self.declared = local, declared

    def inserted(self, target: str, delta: Any, wanted: bool) -> tuple[Any, int | None]:
        """The inserted rows (for GE) and their count, if known without a job: pandas from the
        driver's copy of the change when there is one and GE means the same there."""
        table = self.local.get(target)
        if table is not None:
            rows = _inserted_table(table)
            frame = _pandas_frame(rows, self.declared.get(target, ()))
            if frame is not None:
                return frame, rows.num_rows
        return inserted_rows(delta), None

    @contextmanager
    def view(self, name: str, delta: Any, is_set: bool, target: str,
             wanted: bool) -> Iterator[tuple[BuiltinOutcome, Any]]:
        from spark_jobs.executor.spark.zset import is_local

        own_cache = not ge.is_cached(delta) and not is_local(delta)  # a local one is computed
        if own_cache:
            delta = delta.persist()
        try:
            with _job_description(self.spark, f"quality t={self.timestep} {target}"):
                yield (check_view_delta(name, delta, self.previous.get(name), is_set=is_set, target=target),
                       self.inserted(target, delta, wanted)[0])
        finally:
            if own_cache:
                delta.unpersist()

    def describe(self, target: str) -> Any:
        return _job_description(self.spark, f"quality t={self.timestep} {target}")


class _TableSide:
    """How the gate reads an in-process step's Arrow tables (GE gets a DataFrame only when a
    target declares expectations)."""

    def __init__(self, previous_rows: Callable[[str, "pa.Table"], "pa.Table | None"],
                 frame: Callable[["pa.Table"], "DataFrame"], declared: Mapping[str, Sequence[Expectation]]) -> None:
        self.previous_rows, self.frame, self.declared = previous_rows, frame, declared

    def inserted(self, target: str, delta: Any, wanted: bool) -> tuple[Any, int | None]:
        """The inserted rows as a frame for GE (pandas when it means the same as on Spark)."""
        rows = _inserted_table(delta)
        if not wanted:
            return None, rows.num_rows
        frame = _pandas_frame(rows, self.declared.get(target, ()))
        return (frame if frame is not None else self.frame(rows)), rows.num_rows

    @contextmanager
    def view(self, name: str, delta: Any, is_set: bool, target: str,
             wanted: bool) -> Iterator[tuple[BuiltinOutcome, Any]]:
        from spark_jobs.quality.builtin_arrow import check_view_delta_table

        outcome = check_view_delta_table(delta, self.previous_rows(name, delta), is_set=is_set, target=target)
        yield outcome, self.inserted(target, delta, True)[0] if wanted else None

    def describe(self, target: str) -> Any:
        return nullcontext()


def _gate(timestep: int, side: Any, *, view_deltas: Mapping[str, Any], set_views: set[str] | frozenset[str],
          view_expectations: Mapping[str, Sequence[Expectation]], input_deltas: Mapping[str, Any],
          input_expectations: Mapping[str, Sequence[Expectation]]) -> GateReport:
    """The gate on either engine's deltas (``side`` reads them): declared expectations first,
    then per view the built-in checks and its expectations."""
    started = time.perf_counter()
    declared = {**{f"input:{n}": list(e) for n, e in input_expectations.items() if e},
                **{f"view:{n}": list(e) for n, e in view_expectations.items() if e}}
    for target, exps in declared.items():
        ge.check_declarations(target, [e for e in exps if not native.accepts(e)])  # GE builds those

    results: list[CheckResult] = []
    for name, exps in input_expectations.items():
        if not exps:
            continue
        target = f"input:{name}"
        delta = input_deltas.get(name)
        with side.describe(target):
            rows, n = side.inserted(target, delta, True) if delta is not None else (None, None)
            results.extend(_user_checks(target, rows, n, list(exps)))

    for name in dict.fromkeys([*view_deltas, *(n for n, e in view_expectations.items() if e)]):
        target = f"view:{name}"
        delta = view_deltas.get(name)
        exps = list(view_expectations.get(name) or ())
        if delta is None:
            results.extend(_user_checks(target, None, 0, exps))
            continue
        with side.view(name, delta, name in set_views, target, bool(exps)) as (builtin, rows):
            results.extend(builtin.results)
            results.extend(_user_checks(target, rows, builtin.inserted_rows, exps))

    report = GateReport(timestep=timestep, results=results,
                        elapsed_s=time.perf_counter() - started)
    log.info("quality gate t=%d: %d checks, %d failed, %d warnings in %.2fs", timestep,
             len(results), len(report.failed), len(report.warnings), report.elapsed_s)
    return report


def enforce(report: GateReport) -> None:
    """Raise ``QualityGateFailed`` if any ``fail`` check did not hold; warnings pass."""
    if report.failed:
        raise QualityGateFailed(report)
