"""The stage tasks of a DAG run, driven in-process as Airflow would run them, in either
``orchestration.tasks`` mode: one task per stage, or one task for all stages."""
from __future__ import annotations

from spark_jobs.runtime import timestep

TASK_MODES = ("per_stage", "per_step")


def run_stage_tasks(rt, run_id: str, tasks: str) -> None:
    """What the DAG runs between ``plan`` and ``quality_check``."""
    if tasks == "per_step":
        timestep.run_stages(rt, run_id)
        return
    for stage in timestep.stage_graph(rt.compiled):
        timestep.run_stage(rt, run_id, stage.name)
