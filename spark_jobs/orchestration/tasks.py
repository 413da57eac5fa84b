"""What a DAG's tasks run: one step of one timestep (plan, a stage, the quality check, commit).

Runs inside the Airflow task process. The runtime (and so pyspark) is imported inside the
callable, never at module level, because the factory imports this module on every DAG parse.
Every step is idempotent for a run id, so Airflow retries are safe; errors that a retry cannot
fix (a failed `fail` expectation, refused input files, a changed circuit) fail the task at once.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any

log = logging.getLogger(__name__)

STEPS = ("plan", "stage", "check", "commit")
MODES = ("incremental", "full_refresh")  # = spark_jobs.runtime.timestep.MODES (not imported: pyspark)

# Fault injection for tests and drills: with DBSP_ALLOW_FAILPOINTS=1 in the workers' environment,
# a run triggered with conf {"dbsp_failpoint": {"task": "stages.x", "point": "mid_step",
# "kill": true, "tries": [1]}} arms that failpoint (spark_jobs/state/failpoints.py) in that task's
# process on those tries only, so the retry shows what a crashed attempt leaves behind.
ALLOW_FAILPOINTS_ENV = "DBSP_ALLOW_FAILPOINTS"
FAILPOINT_CONF_KEY = "dbsp_failpoint"


def _not_retryable() -> tuple[type[BaseException], ...]:
    """Errors a retry cannot fix: the data or the circuit must change first."""
    from spark_jobs.executor.refusal import ValueRefused
    from spark_jobs.executor.sources import InputRefused
    from spark_jobs.quality import ExpectationConfigError, QualityGateFailed
    from spark_jobs.spec import CircuitError
    from spark_jobs.state import FingerprintMismatch, LeaseHeld, LeaseLost

    return (QualityGateFailed, InputRefused, FingerprintMismatch, CircuitError, ExpectationConfigError,
            LeaseHeld, LeaseLost, ValueRefused)


def arm_failpoint(context: dict[str, Any]) -> str | None:
    """Arm the failpoint the run's conf asks for, if this task and try match (see above)."""
    if os.environ.get(ALLOW_FAILPOINTS_ENV) != "1":
        return None
    conf = getattr(context.get("dag_run"), "conf", None) or {}
    wanted = conf.get(FAILPOINT_CONF_KEY)
    ti = context.get("ti")
    if not isinstance(wanted, dict) or ti is None or wanted.get("task") != ti.task_id:
        return None
    if ti.try_number not in wanted.get("tries", [1]):
        return None
    os.environ["DBSP_FAILPOINT"] = str(wanted["point"])
    if wanted.get("kill"):
        os.environ["DBSP_FAILPOINT_KILL"] = "1"  # os._exit(137) at the point, like kill -9
    log.warning("fault injection: failpoint %r armed for try %s", wanted["point"], ti.try_number)
    return str(wanted["point"])


def execute(step: str, circuit: str, run_id: str, stage: str | None = None, mode: str = "incremental",
            config: str | None = None) -> dict:
    """Run one step of the timestep ``run_id`` against the runtime contract."""
    from spark_jobs.config import load_config
    from spark_jobs.runtime import timestep
    from spark_jobs.runtime.circuit import open_circuit

    if step not in STEPS:
        raise ValueError(f"unknown step {step!r}; expected one of {STEPS}")
    return timestep.run_task(open_circuit(circuit, load_config(config)), step, run_id, stage, mode)


def give_up(circuit: str, run_id: str, config: str | None, exc: BaseException) -> None:
    """The run cannot go on: give its writer's lease back, so a `dbsp step` or the next run need
    not wait for it to expire (not when the failure was about the lease itself)."""
    from spark_jobs.state import LeaseHeld, LeaseLost

    if isinstance(exc, (LeaseHeld, LeaseLost)):
        return
    try:
        from spark_jobs.config import load_config
        from spark_jobs.runtime.circuit import open_circuit
        from spark_jobs.runtime.writer import give_up_run

        give_up_run(open_circuit(circuit, load_config(config)), run_id)
    except Exception:  # the lease then expires on its own
        log.warning("could not release the lease of run %s", run_id, exc_info=True)


def compact(summary: dict) -> dict:
    """The summary as JSON-able data for XCom, with file lists reduced to counts."""
    out = json.loads(json.dumps(summary, default=str))
    inputs = out.get("inputs")
    if isinstance(inputs, dict):
        out["inputs"] = {k: (len(v) if isinstance(v, list) else v) for k, v in inputs.items()}
    return out


def run_step(step: str, circuit: str, stage: str | None = None, config: str | None = None,
             **context: Any) -> dict:
    """PythonOperator callable: one step in this process (Spark local, Connect or cluster driver)."""
    from airflow.sdk.exceptions import AirflowFailException

    arm_failpoint(context)
    mode = str((context.get("params") or {}).get("mode") or "incremental")
    run_id = str(context["run_id"])
    what = f"{step} {stage}" if stage else step
    log.info("dbsp %s: circuit %s, run %s, mode %s", what, circuit, run_id, mode)
    try:
        summary = execute(step, circuit, run_id, stage, mode, config)
    except _not_retryable() as exc:
        log.error("dbsp %s failed (not retried: retrying cannot fix this):\n%s", what, exc)
        give_up(circuit, run_id, config, exc)
        raise AirflowFailException(f"{type(exc).__name__}: {exc}") from exc
    result = compact(summary)
    log.info("dbsp %s summary:\n%s", what, json.dumps(result, indent=1, sort_keys=True))
    return result


def stage_main_args(circuit: str, step: str, stage: str | None, config: str | None) -> list[str]:
    """Arguments of ``spark_jobs/runtime/stage_main.py`` (templated: run id and mode per run)."""
    args = ["--circuit", circuit, "--run-id", "{{ run_id }}", "--step", step]
    if stage:
        args += ["--stage", stage]
    if step == "plan":
        args += ["--mode", "{{ params.mode }}"]
    if config:
        args += ["--config", config]
    return args
