"""Run the data-quality gate of a timestep (shared by `dbsp step` and the DAG's check task)."""
from __future__ import annotations

from pyspark.sql import DataFrame

from spark_jobs.quality import GateReport, enforce, run_gate, write_report
from spark_jobs.runtime.circuit import CircuitRuntime


def quality_dir(rt: CircuitRuntime) -> str:
    """Where the timesteps' quality reports go (a path only: no Spark session is started)."""
    return rt.committed.fs.join(rt.committed.root, "quality")


def set_views(rt: CircuitRuntime) -> set[str]:
    """Views whose value is a set (every weight 1): distinct, set operators, aggregates."""
    query = rt.compiled.optimized
    return {view for view, node_id in query.outputs.items() if query[node_id].is_set}


def check_timestep(rt: CircuitRuntime, timestep: int, view_deltas: dict[str, DataFrame],
                   input_deltas: dict[str, DataFrame], view_previous: dict[str, DataFrame | None] | None = None,
                   local: dict | None = None) -> GateReport:
    """Check the view deltas (and declared input expectations); keep the report; raise
    ``QualityGateFailed`` when a `fail` check does not hold. ``local``: the same changes held
    on the driver (Arrow tables by ``view:``/``input:`` target) for GE's pandas engine."""
    spec = rt.compiled.spec
    previous = view_previous if view_previous is not None else {v: rt.store.read_view(v) for v in view_deltas}
    report = run_gate(rt.spark, timestep, view_deltas=view_deltas, view_previous=previous,
                      set_views=set_views(rt),
                      view_expectations={v: list(o.expectations) for v, o in spec.outputs.items()},
                      input_deltas=input_deltas,
                      input_expectations={n: list(i.expectations) for n, i in spec.inputs.items()},
                      local=local)
    write_report(report, quality_dir(rt))
    enforce(report)
    return report
