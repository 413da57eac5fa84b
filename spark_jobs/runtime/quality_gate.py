"""Run the data-quality gate of a timestep (shared by `dbsp step` and the DAG's check task)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from spark_jobs.quality import GateReport, enforce, run_gate, write_report
from spark_jobs.quality.gate import run_gate_tables
from spark_jobs.quality.report import CheckResult
from spark_jobs.runtime.circuit import CircuitRuntime
from spark_jobs.runtime.event_time import LateRows, iso

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame


def quality_dir(rt: CircuitRuntime) -> str:
    """Where the timesteps' quality reports go (a path only: no Spark session is started)."""
    return rt.committed.fs.join(rt.committed.root, "quality")


def set_views(rt: CircuitRuntime) -> set[str]:
    """Views whose value is a set (every weight 1): distinct, set operators, aggregates."""
    query = rt.compiled.optimized
    return {view for view, node_id in query.outputs.items() if query[node_id].is_set}


def late_check(late: LateRows) -> CheckResult:
    """The report's line for an input's late rows: a warning when rows were dropped."""
    return CheckResult("dbsp_late_rows", f"input:{late.input}", "warn", success=late.rows == 0, builtin=True,
                       details={"late_inserted": late.inserted, "late_deleted": late.deleted,
                                "note": f"{late.column} below watermark {iso(late.before.watermark_us)}; "
                                        f"watermark now {iso(late.after.watermark_us)}"})


def check_timestep(rt: CircuitRuntime, timestep: int, view_deltas: dict[str, "DataFrame"],
                   input_deltas: dict[str, "DataFrame"], view_previous: dict[str, "DataFrame | None"] | None = None,
                   late: "Sequence[LateRows]" = (), local: "dict[str, pa.Table] | None" = None) -> GateReport:
    """Check the view deltas (and declared input expectations); keep the report (with a line per
    timed input on its late rows); raise ``QualityGateFailed`` when a `fail` check does not hold.
    ``local``: the same changes held on the driver (Arrow tables by ``view:``/``input:`` target)
    for GE's pandas engine."""
    spec = rt.compiled.spec
    previous = view_previous if view_previous is not None else {v: rt.store.read_view(v) for v in view_deltas}
    report = run_gate(rt.spark, timestep, view_deltas=view_deltas, view_previous=previous,
                      set_views=set_views(rt),
                      view_expectations={v: list(o.expectations) for v, o in spec.outputs.items()},
                      input_deltas=input_deltas,
                      input_expectations={n: list(i.expectations) for n, i in spec.inputs.items()},
                      local=local)
    report.results.extend(late_check(x) for x in late)
    write_report(report, quality_dir(rt))
    enforce(report)
    return report


def check_timestep_tables(rt: CircuitRuntime, timestep: int, view_deltas: dict[str, "pa.Table"],
                          input_deltas: dict[str, "pa.Table"], files_of: Callable[[str], Any],
                          late: "Sequence[LateRows]" = ()) -> GateReport:
    """``check_timestep`` for an in-process step (Arrow tables). The previous view is looked up
    in its trace's Parquet row groups by the delta's tuples (``files_of(trace)``, the step's
    reader of trace files); Spark starts only if a declared expectation that pandas cannot check
    has rows to check."""
    from spark_jobs.executor.arrow.zsets import semi
    from spark_jobs.state.store import view_trace_id

    def previous_rows(view: str, delta: "pa.Table") -> "pa.Table | None":
        files = files_of(view_trace_id(view))
        cols = [c for c in delta.column_names if c != "_weight"]
        if files is None or delta.num_rows == 0:
            return None
        if not cols:
            return files.read_all()
        found = files.lookup(cols[0], delta.column(cols[0]).unique().to_pylist())
        return semi(found, delta, cols, cols) if len(cols) > 1 else found

    def frame(rows: "pa.Table") -> "DataFrame":
        return rt.spark.createDataFrame(rows)

    spec = rt.compiled.spec
    report = run_gate_tables(timestep, view_deltas=view_deltas, previous_rows=previous_rows,
                             set_views=set_views(rt),
                             view_expectations={v: list(o.expectations) for v, o in spec.outputs.items()},
                             input_deltas=input_deltas,
                             input_expectations={n: list(i.expectations) for n, i in spec.inputs.items()},
                             frame=frame)
    report.results.extend(late_check(x) for x in late)
    write_report(report, quality_dir(rt))
    enforce(report)
    return report
