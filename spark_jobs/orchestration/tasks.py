"""What a DAG's tasks run: one step of one timestep (plan, a stage, all stages, check, commit).

Runs inside the Airflow task process. The runtime (and so pyspark) is imported inside the
callable, never at module level, because the factory imports this module on every DAG parse.
Every step is idempotent for a run id, so Airflow retries are safe; errors that a retry cannot
fix (a failed `fail` expectation, refused input files, a changed circuit) fail the task at once.

Each callable returns a small JSON summary (XCom) with ``timing``: seconds spent importing the
runtime, opening the circuit (compile; Spark session), and in the step's own work; the rest of
the task's duration is Airflow's (process, DAG parse, API calls). The benchmark reads it, and
``spark_opened``: whether the task opened a Spark session (an in-process step never does).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

from spark_jobs.errors import EXIT_FAILED, DbspError
from spark_jobs.orchestration import logs

log = logging.getLogger(__name__)

STEPS = ("plan", "stage", "stages", "check", "commit", "timestep")
MODES = ("incremental", "full_refresh", "recompute", "apply_change")  # = spark_jobs.runtime.timestep.MODES (not imported: pyspark)
PLAN_XCOM_KEY = "dbsp_plan"  # the plan of a run the plan task skips (else: its return value)
FAILED_PHASE_XCOM_KEY = "dbsp_failed_phase"  # where a one-task timestep stopped (plan, stages, check, commit)

# Fault injection for tests and drills: with DBSP_ALLOW_FAILPOINTS=1 in the workers' environment,
# a run triggered with conf {"dbsp_failpoint": {"task": "stages.x", "point": "mid_step",
# "kill": true, "tries": [1]}} arms that failpoint (spark_jobs/state/failpoints.py) in that task's
# process on those tries only, so the retry shows what a crashed attempt leaves behind.
ALLOW_FAILPOINTS_ENV = "DBSP_ALLOW_FAILPOINTS"
FAILPOINT_CONF_KEY = "dbsp_failpoint"
# A local Spark driver started by a task logs to stdout (INFO in the task log) at WARN and above,
# not to stderr, which Airflow logs at ERROR: config/log4j2-tasks.properties.
LOG4J_TASKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           "config", "log4j2-tasks.properties")


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


def quiet_jvm_startup() -> None:
    """Send a local Spark driver's log4j output to stdout at WARN (before the JVM starts)."""
    if os.path.exists(LOG4J_TASKS) and "PYSPARK_SUBMIT_ARGS" not in os.environ:
        os.environ["PYSPARK_SUBMIT_ARGS"] = (f'--driver-java-options "-Dlog4j2.configurationFile=file:{LOG4J_TASKS}" '
                                             "pyspark-shell")


@contextmanager
def jvm_stderr_logged() -> Iterator[None]:
    """A JVM started in the body writes its stderr into this process's log at INFO level.

    Airflow logs whatever a task writes to stderr at ERROR; a local Spark driver writes its
    start-up lines there (the JVM's own warnings, which no log4j setting reaches). The JVM
    inherits this process's stderr when it starts, so for that moment stderr is a pipe that a
    thread copies into the log, for as long as the JVM lives."""
    read, write = os.pipe()
    saved = os.dup(2)
    os.dup2(write, 2)
    os.close(write)

    def copy() -> None:
        with os.fdopen(read, errors="replace") as lines:
            for line in lines:
                if line.strip():
                    log.info("spark: %s", line.rstrip())

    threading.Thread(target=copy, name="jvm-stderr", daemon=True).start()
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def open_spark(rt) -> None:
    """How this task starts the circuit's Spark session if a step needs one (most in-process
    steps do not): a Connect channel as is, a local/cluster driver whose JVM logs to stdout and
    whose stderr is logged at INFO."""
    def opener(start):
        if rt.config.spark.mode == "connect":
            return start()
        quiet_jvm_startup()
        with jvm_stderr_logged():
            return start()

    rt.spark_opener = opener


def execute(step: str, circuit: str, run_id: str, stage: str | None = None, mode: str = "incremental",
            config: str | None = None, on_phase=None) -> dict:
    """Run one step of the timestep ``run_id`` against the runtime contract; adds ``timing``."""
    t0 = time.perf_counter()
    from spark_jobs.config import load_config
    from spark_jobs.runtime import timestep
    from spark_jobs.runtime.circuit import open_circuit

    if step not in STEPS:
        raise ValueError(f"unknown step {step!r}; expected one of {STEPS}")
    t1 = time.perf_counter()
    rt = open_circuit(circuit, load_config(config))
    open_spark(rt)  # started when (if) the step needs Spark: an in-process step never does
    t2 = time.perf_counter()
    summary = timestep.run_task(rt, step, run_id, stage, mode, on_phase)
    t3 = time.perf_counter()
    summary["timing"] = {"imports": round(t1 - t0, 3), "open": round(t2 - t1, 3), "work": round(t3 - t2, 3)}
    summary["spark_opened"] = "spark" in vars(rt)  # an in-process step must not open a Spark session
    return summary


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


def _log_lines(lines: list[str]) -> None:
    for line in lines:
        log.info("%s", line)


def _downstream(context: dict[str, Any]) -> list[str]:
    task = context.get("task")
    return sorted(task.get_flat_relative_ids(upstream=False)) if task is not None else []


def _on_plan(summary: dict, result: dict, context: dict[str, Any]) -> None:
    """Log the plan; skip the rest of the run when it is empty (unless empty steps commit)."""
    from airflow.sdk.exceptions import DownstreamTasksSkipped

    if isinstance(summary.get("inputs"), dict):
        _log_lines(logs.plan_lines(summary))
    if summary.get("empty") and not context.get("commit_empty"):
        log.info("no input has new files: the rest of this run is skipped and nothing is committed "
                 "(set orchestration.commit_empty: true to commit empty timesteps)")
        ti = context.get("ti")
        if ti is not None:  # a skipping task returns nothing: the run's note needs the plan
            ti.xcom_push(key=PLAN_XCOM_KEY, value=result)
        raise DownstreamTasksSkipped(tasks=_downstream(context))


def _on_commit(summary: dict, context: dict[str, Any]) -> None:
    """Log what the timestep changed and attach it to the view assets' events."""
    from spark_jobs.orchestration.assets import commit_extra

    _log_lines(logs.commit_lines(summary))
    task, events = context.get("task"), context.get("outlet_events")
    if task is None or events is None:
        return
    for asset in task.outlets:
        view = asset.name.split(".", 1)[-1]
        events[asset].extra = commit_extra(summary, view)


def _log_phase(name: str, summary: dict) -> None:
    """A one-task timestep's log, written as each phase ends (the task logs its phases' tables
    while it runs, as the separate tasks of ``per_stage`` do)."""
    if name == "plan" and isinstance(summary.get("inputs"), dict):
        _log_lines(logs.plan_lines(summary))
    elif name == "stage":  # one stage of the one-task timestep, logged as it ends
        _log_lines(logs.stage_lines(summary))
    elif name == "stages":  # every stage's table was logged as the stage ended
        log.info("%s", logs.stages_line(summary))
    elif name == "check":
        _log_lines(str(summary.get("summary") or summary.get("skipped") or "").splitlines())
        log.info("quality report: %s", summary.get("report"))


def _on_timestep(summary: dict, result: dict, context: dict[str, Any]) -> None:
    """A one-task timestep ended: an empty run is marked skipped (nothing committed), a committed
    one attaches what it changed to the view assets' events."""
    from airflow.sdk.exceptions import AirflowSkipException

    if summary.get("skipped"):
        log.info("no input has new files: nothing is committed (set orchestration.commit_empty: true "
                 "to commit empty timesteps)")
        ti = context.get("ti")
        if ti is not None:  # a skipped task returns nothing: the run's note needs the plan
            ti.xcom_push(key=PLAN_XCOM_KEY, value=result.get("plan"))
        raise AirflowSkipException("no input has new files")
    if summary.get("commit"):
        _on_commit(summary["commit"], context)


class NotRetried(SystemExit, DbspError):
    """Ends a task whose failure no retry can fix, with the error's exit code and no traceback.

    The task log is what a user reads after a failed run: it must start with what failed (a
    failed check's FAIL lines, the input files behind its rows), said once. Airflow prints a
    traceback, with the message in it, for any exception but ``SystemExit`` (logged as one
    "Task exited" line); ``NoRetryOnDbspErrors`` makes Airflow fail such a task at once."""

    exit_code = EXIT_FAILED  # each carries its error's
    retryable = False

    def __init__(self, error: DbspError):
        SystemExit.__init__(self, int(error.exit_code or EXIT_FAILED))
        self.error = error
        self.exit_code = int(error.exit_code or EXIT_FAILED)


def retry_policy():
    """The tasks' retry policy: a task that ended with ``NotRetried`` fails at once (Airflow
    would retry a ``SystemExit``); other failures retry as the task's ``retries`` say."""
    from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy

    class NoRetryOnDbspErrors(RetryPolicy):
        def evaluate(self, exception, try_number, max_tries, context=None):  # noqa: ANN001, ANN201
            if isinstance(exception, NotRetried):
                return RetryDecision.fail(f"{type(exception.error).__name__}: retrying cannot fix this")
            return RetryDecision.default()

    return NoRetryOnDbspErrors()


def run_step(step: str, circuit: str, stage: str | None = None, config: str | None = None,
             commit_empty: bool = False, **context: Any) -> dict:
    """PythonOperator callable: one step in this process (Spark local, Connect or cluster driver)."""
    arm_failpoint(context)
    mode = str((context.get("params") or {}).get("mode") or "incremental")
    run_id = str(context["run_id"])
    what = f"{step} {stage}" if stage else step
    log.info("dbsp %s: circuit %s, run %s, mode %s", what, circuit, run_id, mode)
    try:
        extra = {"on_phase": _log_phase} if step == "timestep" else {}  # its log follows its phases
        summary = execute(step, circuit, run_id, stage, mode, config, **extra)
    except DbspError as exc:
        _note_phase(context, exc)
        if exc.retryable:  # Airflow retries the task (spark_jobs/errors.py says which errors may)
            raise
        for line in str(exc).splitlines():  # the message, once, first: e.g. the FAIL lines of the gate
            log.error("%s", line)
        log.error("dbsp %s failed (%s, exit code %s); not retried: retrying cannot fix this", what,
                  type(exc).__name__, exc.exit_code)
        give_up(circuit, run_id, config, exc)
        raise NotRetried(exc) from None
    except Exception as exc:
        _note_phase(context, exc)
        raise
    result = compact(summary)
    if step == "plan":
        _on_plan(summary, result, {**context, "commit_empty": commit_empty})
    elif step == "stage":
        _log_lines(logs.stage_lines(summary))
    elif step == "stages":
        for one in summary.get("stages", []):
            _log_lines(logs.stage_lines(one))
        if summary.get("skipped"):  # a recomputed run: its commit computes the timestep
            _log_lines([str(summary["skipped"])])
    elif step == "check":
        _log_phase("check", summary)
    elif step == "commit":
        _on_commit(summary, context)
    elif step == "timestep":
        _on_timestep(summary, result, context)
    timing = result.get("timing") or {}
    log.info("dbsp %s: %s", what, ", ".join(f"{k} {v:.2f} s" for k, v in timing.items()))
    return result


def _note_phase(context: dict[str, Any], exc: BaseException) -> None:
    """Where a one-task timestep stopped (the run's note says "the quality gate stopped it")."""
    phase = getattr(exc, "dbsp_phase", None) or getattr(exc.__cause__, "dbsp_phase", None)
    ti = context.get("ti")
    if phase and ti is not None:
        try:
            ti.xcom_push(key=FAILED_PHASE_XCOM_KEY, value=phase)
        except Exception:  # noqa: BLE001 - the note is a nicety; the failure is what matters
            log.debug("could not record the failed phase", exc_info=True)


def stage_main_args(circuit: str, step: str, stage: str | None, config: str | None) -> list[str]:
    """Arguments of ``spark_jobs/runtime/stage_main.py`` (templated: run id and mode per run)."""
    args = ["--circuit", circuit, "--run-id", "{{ run_id }}", "--step", step]
    if stage:
        args += ["--stage", stage]
    if step in ("plan", "timestep"):
        args += ["--mode", "{{ params.mode }}"]
    if config:
        args += ["--config", config]
    return args
