"""Run the data-quality gate of a timestep (shared by `dbsp step` and the DAG's check task)."""
from __future__ import annotations

from pyspark.sql import DataFrame

from spark_jobs.quality import GateReport, enforce, run_gate, write_report
from spark_jobs.quality.report import CheckResult
from spark_jobs.runtime.circuit import CircuitRuntime
from spark_jobs.runtime.event_time import LateRows, iso


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


def check_timestep(rt: CircuitRuntime, timestep: int, view_deltas: dict[str, DataFrame],
                   input_deltas: dict[str, DataFrame], view_previous: dict[str, DataFrame | None] | None = None,
                   late: list[LateRows] = (), local: dict | None = None) -> GateReport:
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
