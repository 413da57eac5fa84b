"""One Airflow DAG per circuit; one DAG run per DBSP timestep.

``build_dags()`` reads every ``*.yaml`` in the circuits folder and returns ``{dag_id: DAG}``.
The tasks depend on the circuit's ``orchestration.tasks``:

    per_step:   timestep (plan, every stage, the check and the commit in one task)
    per_stage:  plan >> inputs.<input stages> >> stages.<operator stages> >> quality_check >> commit

An empty run (no input has a new file) is skipped: ``timestep`` itself, or everything after
``plan``; the task that commits updates one Asset per view (``assets.py``), so other circuits can
be scheduled on them; a schedule may name assets.

A circuit that does not validate must not hide the others. Airflow's DagBag calls
``dag.validate()`` on every DAG of a file before bagging it and records an exception there as the
file's import error; so ``build_error_dags()`` collects every broken circuit into one
``InvalidCircuitsDAG`` whose ``validate()`` raises the validator's own message (``dbsp validate``),
for all broken circuits at once since import errors are keyed by file. That DAG is loaded by a
file of its own (dags/dbsp_circuit_errors.py): Airflow 3.3 marks every DAG of a file with an
import error as stale, so the valid DAGs (dags/dbsp_circuits.py) must not share its file.

Parsing is Spark-free and cheap (spec + IR only); tasks import the runtime when they run. In a
task's own process (Airflow re-parses the DAG file there) only that task's circuit is built, and
without its docs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Sequence

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, Param, TaskGroup, get_parsing_context

import spark_jobs
from spark_jobs.config import Config, load_config
from spark_jobs.errors import DbspError
from spark_jobs.ir.compile import CompiledCircuit
from spark_jobs.orchestration import assets, docs, tasks
from spark_jobs.orchestration.links import QualityReportLink
from spark_jobs.orchestration.submission import Submission, submission_for
from spark_jobs.orchestration.svg import circuit_svg
from spark_jobs.runtime.circuit import compile_file
from spark_jobs.runtime.stages import Stage, stage_graph
from spark_jobs.spec import CircuitError, Problem

CIRCUITS_DIR_ENV = "DBSP_CIRCUITS_DIR"
RETRY_DELAY_ENV = "DBSP_TASK_RETRY_DELAY_SECONDS"
START_DATE = datetime(2024, 1, 1, tzinfo=timezone.utc)  # fixed: a moving start_date confuses the scheduler
RETRIES = 2  # safe: every step is idempotent for its run id
DEFAULT_RETRY_DELAY = 30.0
TAGS = ["dbsp"]
INVALID_DAG_ID = "dbsp_invalid_circuits"
STAGE_MAIN = Path(spark_jobs.__file__).resolve().parent / "runtime" / "stage_main.py"


# ---- finding circuits ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadedCircuit:
    path: str
    compiled: CompiledCircuit
    stages: list[Stage]

    @property
    def name(self) -> str:
        return self.compiled.spec.name


# Airflow renders a task's arguments (op_kwargs, application_args) as Jinja templates; the circuit
# file's path is one of them, so a file named "{{ conn.x.password }}.yaml" would be rendered
JINJA_MARKERS = ("{{", "{%", "{#")


@dataclass
class Discovery:
    circuits: list[LoadedCircuit] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # of the circuits that could not be loaded


def circuits_dir(config: Config | None = None) -> str:
    """$DBSP_CIRCUITS_DIR, else the profile's ``circuits_dir``."""
    return os.environ.get(CIRCUITS_DIR_ENV) or (config or load_config()).circuits_dir


def circuit_files(folder: str) -> list[str]:
    """Circuit files of a folder (not recursive); names starting with ``.`` or ``_`` are skipped."""
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"circuits folder {folder!r} does not exist "
                                f"(set ${CIRCUITS_DIR_ENV} or circuits_dir in the profile)")
    return sorted(os.path.join(folder, n) for n in os.listdir(folder)
                  if n.endswith((".yaml", ".yml")) and not n.startswith((".", "_")))


def _failure(path: str, what: str, exc: BaseException) -> list[Problem]:
    if isinstance(exc, CircuitError):
        return list(exc.problems)  # exactly what `dbsp validate` prints
    return [Problem(path, 1, None, f"{what}: {type(exc).__name__}: {exc}")]


def discover(folder: str, allowed_roots: Sequence[str] = (), only: str | None = None) -> Discovery:
    """Load and compile every circuit; collect the problems of those that fail. With ``only``
    (a task's own process), just the circuit of that name when ``<only>.yaml`` holds it."""
    found = Discovery()
    names: dict[str, str] = {}
    files = circuit_files(folder)
    if only:
        mine = [f for f in files if os.path.splitext(os.path.basename(f))[0] == only]
        files = mine or files
    for path in files:
        if any(marker in path for marker in JINJA_MARKERS):
            found.problems.append(Problem(path, 1, None, (
                "the circuit's file path holds a Jinja template marker ({{, {% or {#): Airflow renders task "
                "arguments as templates, so it would not reach the task as written; rename the file")))
            continue
        try:
            compiled = compile_file(path, allowed_roots)
            loaded = LoadedCircuit(path, compiled, stage_graph(compiled))
        except Exception as exc:  # noqa: BLE001 - every failure must become a visible import error
            found.problems += _failure(path, "cannot compile the circuit", exc)
            continue
        if loaded.name in names:
            found.problems.append(Problem(path, 1, None, f"circuit name '{loaded.name}' is already used by "
                                          f"{names[loaded.name]}: each circuit is a DAG and DAG ids must be unique"))
            continue
        names[loaded.name] = path
        found.circuits.append(loaded)
    if only and len(files) == 1 and found.circuits and found.circuits[0].name != only:
        return discover(folder, allowed_roots)  # the file named after the DAG holds another circuit
    return found


# ---- building one DAG -------------------------------------------------------------------------------
# A circuit's run is its next timestep, whatever date Airflow gives it: a backfill (runs for
# past dates) means nothing for it, so the API refuses one and the trigger dialog greys the
# option out (Airflow 3.3 shows the choice whenever a DAG has a schedule; it cannot be hidden).
RUN_TYPES = ("manual", "scheduled", "asset_triggered", "operator_triggered")
DISPLAY_DESCRIPTION_CHARS = 60


def display_name(name: str, description: str | None, width: int = DISPLAY_DESCRIPTION_CHARS) -> str:
    """The name the DAG list shows: the circuit's name and the start of its description (Airflow
    3.3's list has no description column, its cards show it only on hover)."""
    text = " ".join((description or "").split())
    if not text:
        return name
    first = text.split(". ", 1)[0].rstrip(".")
    if len(first) > width:
        first = first[:width - 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"
    return f"{name} — {first}"


def retry_delay() -> timedelta:
    return timedelta(seconds=float(os.environ.get(RETRY_DELAY_ENV, DEFAULT_RETRY_DELAY)))


class DbspTaskOperator(PythonOperator):
    """A step of a timestep in the task process."""

    ui_color = "#e8f1fb"


class DbspReportingTaskOperator(DbspTaskOperator):
    """``quality_check`` and ``commit``: they also link to the circuit's quality reports (a link
    costs its task one more call to Airflow's API, so the other tasks have none)."""

    operator_extra_links = (QualityReportLink(),)


def _make_task(dag: DAG, sub: Submission, circuit: LoadedCircuit, task_id: str, step: str,
               stage: str | None = None, group: TaskGroup | None = None, doc: str | None = None,
               **extra: Any):
    common: dict[str, Any] = {"task_id": task_id, "dag": dag, "task_group": group, "doc_md": doc,
                              "retry_policy": tasks.retry_policy(), **extra}
    if sub.kind == "spark_submit":
        from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

        return SparkSubmitOperator(
            application=str(STAGE_MAIN), conn_id=sub.conn_id, conf=sub.conf,
            application_args=tasks.stage_main_args(circuit.path, step, stage, sub.profile),
            name=f"dbsp-{circuit.name}-{stage or step}", **common)
    kwargs: dict[str, Any] = {"step": step, "circuit": circuit.path, "stage": stage}
    if step in ("plan", "timestep"):
        kwargs["commit_empty"] = circuit.compiled.spec.orchestration.commit_empty
    # the return value is a summary for XCom; the log already shows it as tables
    operator = DbspReportingTaskOperator if step in ("check", "commit", "timestep") else DbspTaskOperator
    return operator(python_callable=tasks.run_step, op_kwargs=kwargs, show_return_value_in_logs=False, **common)


def task_ids(stages: list[Stage]) -> dict[str, str]:
    """Stage name -> task id: input stages in group ``inputs``, operator stages in ``stages``."""
    return {s.name: f"{'inputs' if s.kind == 'input' else 'stages'}.{s.name}" for s in stages}


def _docs(circuit: LoadedCircuit, ids: dict[str, str], sub: Submission, config: Config) -> str:
    spec = circuit.compiled.spec
    svg = circuit_svg(circuit.compiled.incremental, circuit.stages, ids, f"Incremental circuit of {spec.name}",
                      per_step=spec.orchestration.tasks == "per_step")
    image = docs.publish_svg(circuit.name, svg)
    return docs.dag_doc(circuit.path, circuit.compiled, circuit.stages, ids, sub.describe(config), image)


def build_dag(circuit: LoadedCircuit, config: Config, views: dict[str, list[str]] | None = None,
              with_docs: bool = True) -> DAG:
    """The DAG of one circuit (``views``: every circuit's views, to check asset references)."""
    spec, sub = circuit.compiled.spec, submission_for(config)
    per_step = spec.orchestration.tasks == "per_step"
    ids = task_ids(circuit.stages)
    dag = DAG(
        dag_id=circuit.name, schedule=assets.schedule_of(config, spec, circuit.path, views),
        start_date=START_DATE, catchup=False, max_active_runs=1, tags=list(TAGS), auto_register=False,
        description=(spec.description or f"DBSP circuit {circuit.name}")[:200],
        dag_display_name=display_name(circuit.name, spec.description),
        doc_md=_docs(circuit, ids, sub, config) if with_docs else None,
        params={"mode": Param("incremental", type="string", enum=list(tasks.MODES), title="mode",
                              description="incremental: apply the new input changes; full_refresh: "
                                          "rebuild all state from the retained input files (also "
                                          "after editing the circuit); recompute: recompute the views "
                                          "from the integrated inputs the state keeps; apply_change: "
                                          "after editing the circuit, keep the state of unchanged nodes "
                                          "and rebuild the others from the state")},
        default_args={"owner": "dbsp", "retries": RETRIES, "retry_delay": retry_delay()},
        allowed_run_types=RUN_TYPES,
    )
    outlets = [assets.view_asset(config, circuit.name, v) for v in spec.outputs]
    if per_step or not circuit.stages:
        # one task: the whole timestep in one process (no task-to-task hops; a small step runs
        # in-process and never starts Spark); skipped when no input has a new file
        _make_task(dag, sub, circuit, "timestep", "timestep", outlets=outlets,
                   doc="The whole timestep in one process: plans it (last committed + 1, the new "
                       "input files; skipped when there are none), runs every operator stage ("
                       + ", ".join(f"`{s.name}`" for s in circuit.stages) + "), the quality gate, "
                       "and commits the manifest, then publishes the views and updates their Assets.")
        return dag
    plan = _make_task(dag, sub, circuit, "plan", "plan",
                      doc="Freezes this run's timestep (last committed + 1) and its input files; "
                          "skips the rest of the run when no input has a new file.")
    check = _make_task(dag, sub, circuit, "quality_check", "check",
                       doc="Great Expectations and the Z-set checks on the staged view deltas.")
    commit = _make_task(dag, sub, circuit, "commit", "commit", outlets=outlets,
                        doc="Publishes the manifest (the only step that makes the timestep visible) "
                            "and updates the view Assets.")
    groups: dict[str, TaskGroup] = {}
    made: dict[str, Any] = {}
    for s in circuit.stages:
        group_id = ids[s.name].split(".", 1)[0]
        if group_id not in groups:
            tip = "read input changes" if group_id == "inputs" else "operator stages of the incremental circuit"
            groups[group_id] = TaskGroup(group_id, dag=dag, tooltip=tip)
        made[s.name] = _make_task(dag, sub, circuit, s.name, "stage", s.name, groups[group_id],
                                  doc="Operators: " + ", ".join(f"`{n}`" for n in s.nodes))
    feeding = {u for s in circuit.stages for u in s.upstream}
    for s in circuit.stages:
        for up in s.upstream:
            made[up] >> made[s.name]
        if not s.upstream:
            plan >> made[s.name]
        if s.name not in feeding:
            made[s.name] >> check
    check >> commit
    return dag


# ---- broken circuits as an import error ------------------------------------------------------------
class InvalidCircuits(DbspError):
    """Circuits that could not be turned into DAGs; the message is what ``dbsp validate`` says."""

    def __init__(self, folder: str, problems: list[Problem]):
        self.problems = problems
        files = sorted({p.file for p in problems})
        head = (f"{len(files)} circuit file(s) in {folder} could not be loaded; their DAGs are missing "
                f"(the other circuits' DAGs are fine). Fix them and check with `dbsp validate`:")
        super().__init__("\n".join([head, *map(str, problems)]))


class InvalidCircuitsDAG(DAG):
    """Never scheduled: its ``validate()`` raises, so DagBag reports the error and skips only it."""

    def validate(self) -> None:
        raise self.__dict__["_dbsp_error"]


def invalid_circuits_dag(folder: str, problems: list[Problem]) -> DAG:
    dag = InvalidCircuitsDAG(dag_id=INVALID_DAG_ID, schedule=None, start_date=START_DATE,
                             auto_register=False, tags=list(TAGS))
    dag.__dict__["_dbsp_error"] = InvalidCircuits(folder, problems)
    return dag


# ---- the loaders' entry points -------------------------------------------------------------------------
def _build(folder: str | None, config: Config | None) -> tuple[dict[str, DAG], list[Problem], str]:
    config = config or load_config()
    folder = folder or circuits_dir(config)
    task_dag = get_parsing_context().dag_id  # set in a task's own process: build just its DAG
    found = discover(folder, config.allowed_input_roots, only=task_dag)
    views = None if task_dag else {c.name: list(c.compiled.spec.outputs) for c in found.circuits}
    dags: dict[str, DAG] = {}
    for circuit in found.circuits:
        if task_dag and circuit.name != task_dag:
            continue
        try:
            dag = build_dag(circuit, config, views, with_docs=not task_dag)
            dag.validate()  # here, so that a DAG Airflow would refuse is reported like a broken circuit
        except Exception as exc:  # noqa: BLE001 - e.g. a cron string Airflow rejects
            found.problems += _failure(circuit.path, "cannot build the DAG", exc)
            continue
        dags[dag.dag_id] = dag
    return dags, found.problems, folder


def build_dags(folder: str | None = None, config: Config | None = None) -> dict[str, DAG]:
    """``{dag_id: DAG}`` for every valid circuit in ``folder`` (dags/dbsp_circuits.py)."""
    return _build(folder, config)[0]


def build_error_dags(folder: str | None = None, config: Config | None = None) -> dict[str, DAG]:
    """The invalid-circuits DAG when some circuit is broken, else nothing (dags/dbsp_circuit_errors.py).

    It must live in another file than the valid DAGs: Airflow 3.3 marks every DAG of a file that
    has an import error as stale (not scheduled, hidden in the UI).
    """
    _, problems, folder = _build(folder, config)
    if not problems:
        return {}
    bad = invalid_circuits_dag(folder, problems)
    return {bad.dag_id: bad}
