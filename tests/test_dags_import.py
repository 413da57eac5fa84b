"""The DAG factory seen through Airflow's own DagBag: one DAG per circuit, the task graph of the
stages, and broken circuits reported as import errors with the validator's message."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spark_jobs.config import load_config
from spark_jobs.runtime.circuit import compile_file
from spark_jobs.runtime.stages import stage_graph
from spark_jobs.spec import CircuitError, validate_file
from tests.airflow_support import BROKEN_CIRCUIT, ERRORS, LOADER, ROOT, dagbag, use_isolated_home

pytestmark = pytest.mark.airflow
CIRCUITS = sorted((ROOT / "circuits").glob("*.yaml"))


@pytest.fixture(scope="module", autouse=True)
def airflow_home(tmp_path_factory):
    use_isolated_home(tmp_path_factory.mktemp("airflow_home"))


@pytest.fixture
def circuits_env(monkeypatch):
    """Point the loader at a circuits folder (and the default profile) for one test."""
    monkeypatch.delenv("DBSP_CONFIG", raising=False)

    def use(folder: Path) -> None:
        monkeypatch.setenv("DBSP_CIRCUITS_DIR", str(folder))
    return use


def _per_stage(folder: Path, tmp: Path) -> Path:
    """Copies of the circuits of ``folder`` with ``orchestration: {tasks: per_stage}``."""
    for path in sorted(folder.glob("*.yaml")):
        (tmp / path.name).write_text(path.read_text() + "\norchestration: {tasks: per_stage}\n")
    return tmp


def test_one_dag_per_circuit_with_one_task_for_all_stages(circuits_env):
    circuits_env(ROOT / "circuits")
    bag = dagbag()
    assert bag.import_errors == {}
    compiled = {c.spec.name: c for c in map(compile_file, map(str, CIRCUITS))}
    assert set(bag.dags) == set(compiled)
    for name, c in compiled.items():
        dag = bag.dags[name]
        assert dag.max_active_runs == 1 and dag.catchup is False and "dbsp" in dag.tags
        assert dag.schedule == c.spec.schedule  # None for circuits without a schedule
        assert dag.params["mode"] == "incremental"
        assert dag.params.get_param("mode").schema["enum"] == ["incremental", "full_refresh", "recompute", "apply_change"]
        assert c.spec.orchestration.tasks == "per_step"  # the default
        assert set(dag.task_ids) == {"timestep"}  # the whole timestep in one task: no task-to-task hops
        assert dag.get_task("timestep").retries == 2
        assert dag.get_task("timestep").retry_policy is not None  # a failed check is not retried
        assert "backfill" not in {str(getattr(t, "value", t)) for t in dag.allowed_run_types}  # no Backfill
        assert dag.dag_display_name.startswith(f"{name} — {c.spec.description[:20]}")  # the list shows it
        assert {a.name for a in dag.get_task("timestep").outlets} == {f"{name}.{v}" for v in c.spec.outputs}
        assert "State" in dag.doc_md and c.spec.text.strip() in dag.doc_md


def test_per_stage_makes_one_task_per_stage(circuits_env, tmp_path):
    circuits_env(_per_stage(ROOT / "circuits", tmp_path))
    bag = dagbag()
    assert bag.import_errors == {}
    for path in CIRCUITS:
        c = compile_file(str(path))
        dag = bag.dags[c.spec.name]
        stages = stage_graph(c)
        ids = {s.name: ("inputs." if s.kind == "input" else "stages.") + s.name for s in stages}
        assert set(dag.task_ids) == {"plan", "quality_check", "commit", *ids.values()}
        for s in stages:
            task = dag.get_task(ids[s.name])
            expected = {ids[u] for u in s.upstream} or {"plan"}
            assert task.upstream_task_ids == expected, s.name
            assert task.retries == 2 and task.retry_delay.total_seconds() <= 60
        sinks = {ids[s.name] for s in stages} - {ids[u] for s in stages for u in s.upstream}
        assert dag.get_task("quality_check").upstream_task_ids == sinks
        assert dag.get_task("commit").upstream_task_ids == {"quality_check"}


def test_the_docs_show_the_circuit_as_an_svg_drawn_at_parse_time(circuits_env, tmp_path, monkeypatch):
    import re
    import xml.etree.ElementTree as ET

    monkeypatch.setenv("DBSP_DOCS_DIR", str(tmp_path / "docs"))
    (tmp_path / "c").mkdir()
    circuits_env(_per_stage(ROOT / "circuits", tmp_path / "c"))
    dag = dagbag().dags["revenue_by_region"]
    found = re.search(r"\[Open the picture of the incremental circuit\]\(/dbsp/docs/([^)]+\.svg)\)", dag.doc_md)
    assert found, dag.doc_md[:500]
    assert "```mermaid" not in dag.doc_md and "data:" not in dag.doc_md  # the UI strips data: URLs
    svg = ET.parse(tmp_path / "docs" / found.group(1)).getroot()
    texts = {t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")}
    c = compile_file(str(ROOT / "circuits" / "revenue_by_region.yaml"))
    for node in c.incremental:  # every operator is drawn, and every task is in the legend
        assert any(node.id in (t or "") for t in texts), node.id
    assert {"inputs.orders", "stages.enriched", "view by_region"} <= texts
    assert svg.get("width").isdigit() and svg.get("viewBox").endswith(f"{svg.get('width')} {svg.get('height')}")
    assert "![" not in dag.doc_md  # linked, not shrunk into the modal
    assert "```text" not in dag.doc_md  # no wide fixed-width tables: Markdown tables wrap


def test_the_legend_says_what_a_colour_is_in_each_orchestration_mode(tmp_path):
    """per_step runs every stage in the one task ``timestep``: the legend names each stage once
    (not "timestep" once per colour) and says whose stages they are; per_stage names the tasks.
    The docs describe the tasks of the circuit's own mode and link the picture at full size."""
    import xml.etree.ElementTree as ET

    from spark_jobs.orchestration.dag_factory import task_ids
    from spark_jobs.orchestration.docs import dag_doc
    from spark_jobs.orchestration.svg import circuit_svg

    (tmp_path / "per_stage.yaml").write_text((ROOT / "circuits" / "revenue_by_region.yaml").read_text()
                                             + "\norchestration: {tasks: per_stage}\n")
    c = compile_file(str(ROOT / "circuits" / "revenue_by_region.yaml"))
    stages, ns = stage_graph(c), "{http://www.w3.org/2000/svg}text"
    ids = task_ids(stages)
    for per_step, heading, names in (
            (True, 'Colour: a stage of the one task "timestep" (per_step)', {"input orders", "stage enriched"}),
            (False, "Colour: the Airflow task computing it (per_stage)", {"inputs.orders", "stages.enriched"})):
        texts = [t.text for t in ET.fromstring(circuit_svg(c.incremental, stages, ids, per_step=per_step)).iter(ns)]
        assert heading in texts and names <= set(texts), texts
        legend = texts[texts.index(heading) + 1:]
        assert len(legend) == len(set(legend)) == len(stages) + 1 and "timestep" not in legend, legend
        mode = c if per_step else compile_file(str(tmp_path / "per_stage.yaml"))
        doc = dag_doc("c.yaml", mode, stages, ids, "local", "/dbsp/docs/x.svg")
        assert "[Open the picture of the incremental circuit](/dbsp/docs/x.svg)" in doc
        assert ("phase of task `timestep`" in doc and "`quality_check`" not in doc) if per_step else \
            ("| `stages.enriched` |" in doc and "phase of task" not in doc), doc


def test_the_schedule_of_the_yaml(circuits_env, tmp_path):
    for i, schedule in enumerate(["@daily", "*/15 * * * *", "none"]):
        text = (ROOT / "circuits" / "paper_example.yaml").read_text()
        text = text.replace("name: paper_example", f"name: c{i}\nschedule: \"{schedule}\"")
        (tmp_path / f"c{i}.yaml").write_text(text)
    circuits_env(tmp_path)
    bag = dagbag()
    assert bag.import_errors == {}
    assert [bag.dags[f"c{i}"].schedule for i in range(3)] == ["@daily", "*/15 * * * *", None]


def test_schedules_on_assets_inputs_and_other_circuits_views(circuits_env, tmp_path):
    from airflow.sdk import AssetAny
    from airflow.timetables.assets import AssetOrTimeSchedule

    from spark_jobs.orchestration.watch import InputFilesTrigger

    paper = (ROOT / "circuits" / "paper_example.yaml").read_text()
    (tmp_path / "paper_example.yaml").write_text(paper)
    (tmp_path / "watched.yaml").write_text(paper.replace("name: paper_example", "name: watched\nschedule: on_inputs"))
    (tmp_path / "chained.yaml").write_text(paper.replace(
        "name: paper_example", "name: chained\nschedule: {cron: '0 * * * *', assets: [paper_example.v, t]}"))
    circuits_env(tmp_path)
    bag = dagbag()
    assert bag.import_errors == {}
    watched = bag.dags["watched"].timetable.asset_condition
    assert isinstance(watched, AssetAny)  # any of the named assets starts a run
    (asset,) = watched.objects  # one asset for the circuit's input folders: one event per batch
    assert asset.name == "watched.inputs" and asset.uri.startswith("file://")
    (watcher,) = asset.watchers  # the triggerer polls the input folders for new files
    assert isinstance(watcher.trigger, InputFilesTrigger) and watcher.trigger.input_names == ["t", "r"]
    chained = bag.dags["chained"]
    assert isinstance(chained.timetable, AssetOrTimeSchedule)
    names = {a.name for a in chained.timetable.asset_condition.objects}
    assert names == {"paper_example.v", "chained.inputs"}
    commit = bag.dags["paper_example"].get_task("timestep")  # per_step: the one task commits
    assert "paper_example.v" in {a.name for a in commit.outlets}  # the producer of that asset


def test_a_schedule_on_a_view_no_circuit_publishes_is_an_import_error(circuits_env, tmp_path):
    paper = (ROOT / "circuits" / "paper_example.yaml").read_text()
    (tmp_path / "paper_example.yaml").write_text(paper)
    (tmp_path / "orphan.yaml").write_text(paper.replace(
        "name: paper_example", "name: orphan\nschedule: {assets: [paper_example.no_such_view]}"))
    circuits_env(tmp_path)
    bag = dagbag()
    assert set(bag.dags) == {"paper_example"}
    message = bag.import_errors[ERRORS.name]
    assert "orphan.yaml" in message and "'paper_example.no_such_view'" in message and "paper_example.v" in message


def test_a_broken_circuit_is_an_import_error_and_hides_nothing(circuits_env, tmp_path):
    shutil.copy(ROOT / "circuits" / "paper_example.yaml", tmp_path / "good.yaml")
    bad = tmp_path / "broken.yaml"
    bad.write_text(BROKEN_CIRCUIT)
    circuits_env(tmp_path)
    bag = dagbag()
    assert set(bag.dags) == {"paper_example"}
    assert list(bag.import_errors) == [ERRORS.name]  # not the file of the valid DAGs: see the factory
    assert bag.dags["paper_example"].fileloc == str(LOADER)
    message = bag.import_errors[ERRORS.name]
    expected = str(CircuitError(validate_file(str(bad))))  # what `dbsp validate` prints
    assert expected in message
    assert f"{bad}:7: node 'big'" in message and "'tt'" in message and "did you mean 't'" in message


def test_every_broken_circuit_is_reported_in_the_one_error(circuits_env, tmp_path):
    shutil.copy(ROOT / "circuits" / "paper_example.yaml", tmp_path / "a.yaml")
    shutil.copy(ROOT / "circuits" / "paper_example.yaml", tmp_path / "b_same_name.yaml")
    (tmp_path / "broken.yaml").write_text(BROKEN_CIRCUIT)
    (tmp_path / "yaml_error.yaml").write_text("name: x\ninputs: [\n")
    (tmp_path / "_ignored.yaml").write_text("not: a circuit")
    circuits_env(tmp_path)
    bag = dagbag()
    assert set(bag.dags) == {"paper_example"}
    message = bag.import_errors[ERRORS.name]
    assert "3 circuit file(s)" in message
    for problem in validate_file(str(tmp_path / "yaml_error.yaml")) + validate_file(str(tmp_path / "broken.yaml")):
        assert str(problem) in message
    assert "circuit name 'paper_example' is already used by" in message


def test_a_circuit_file_named_like_a_jinja_template_is_an_import_error(circuits_env, tmp_path):
    """Airflow renders task arguments as templates, the circuit's path among them: a file named
    "{{ ... }}.yaml" never becomes a DAG (its path would be rendered, e.g. into a secret)."""
    shutil.copy(ROOT / "circuits" / "paper_example.yaml", tmp_path / "good.yaml")
    text = (ROOT / "circuits" / "paper_example.yaml").read_text().replace("name: paper_example", "name: other")
    for name in ("{{ conn.x.password }}.yaml", "{% if 1 %}x{% endif %}.yaml", "{# c #}.yaml"):
        (tmp_path / name).write_text(text)
    circuits_env(tmp_path)
    bag = dagbag()
    assert set(bag.dags) == {"paper_example"}
    message = bag.import_errors[ERRORS.name]
    assert "3 circuit file(s)" in message and message.count("Jinja template marker") == 3


def test_spark_submit_profile_makes_spark_submit_tasks(circuits_env, tmp_path, monkeypatch):
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from spark_jobs.orchestration.airflow_env import environment, spark_settings

    profile = tmp_path / "submit.yaml"
    profile.write_text((ROOT / "config" / "cluster.yaml").read_text().replace(
        "  mode: cluster ", "  submit: spark-submit\n  mode: cluster "))
    monkeypatch.setenv("DBSP_CONFIG", str(profile))
    (tmp_path / "c").mkdir()
    monkeypatch.setenv("DBSP_CIRCUITS_DIR", str(_per_stage(ROOT / "circuits", tmp_path / "c")))
    bag = dagbag()
    assert bag.import_errors == {}
    dag = bag.dags["paper_example"]
    stage = dag.get_task("stages.joined")
    assert isinstance(stage, SparkSubmitOperator) and isinstance(dag.get_task("commit"), SparkSubmitOperator)
    assert stage._conn_id == "spark_dbsp" and Path(stage.application).name == "stage_main.py"
    args = stage.application_args
    assert args[args.index("--step") + 1] == "stage" and args[args.index("--stage") + 1] == "joined"
    assert "{{ run_id }}" in args and args[args.index("--config") + 1] == str(profile)
    # the connection the launcher exports resolves to the profile's master
    env = spark_settings(load_config(str(profile)))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DBSP", env["AIRFLOW_CONN_SPARK_DBSP"])
    assert SparkSubmitHook(conn_id="spark_dbsp")._resolve_connection()["master"] == "spark://127.0.0.1:7077"
    full = environment(str(tmp_path / "home"), config=load_config(str(profile)), base={"PATH": "/usr/bin"})
    assert shutil.which("spark-submit", path=full["PATH"])  # the hook runs `spark-submit` from PATH


def test_parsing_never_imports_spark():
    code = ("import runpy, sys, time; t = time.time(); g = {}; [g.update(runpy.run_path(f)) for f in sys.argv[1:]]; "
            "assert 'pyspark' not in sys.modules, 'pyspark imported at parse time'; "
            "print(sorted(k for k, v in g.items() if type(v).__name__ == 'DAG'), round(time.time() - t, 1))")
    out = subprocess.run([sys.executable, "-c", code, str(LOADER), str(ERRORS)], capture_output=True, text=True,
                         env={**os.environ, "DBSP_CIRCUITS_DIR": str(ROOT / "circuits")}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "paper_example" in out.stdout and "revenue_by_region" in out.stdout


def test_failpoints_are_armed_only_when_allowed_and_on_the_chosen_try(monkeypatch):
    from spark_jobs.orchestration.tasks import arm_failpoint

    class TI:
        task_id, try_number = "stages.joined", 1

    class Run:
        conf = {"dbsp_failpoint": {"task": "stages.joined", "point": "mid_step", "kill": True}}

    context = {"ti": TI(), "dag_run": Run()}
    # arm_failpoint writes os.environ itself: setenv first so that monkeypatch records the
    # variables and removes them again after the test (a leaked DBSP_FAILPOINT_KILL=1 would
    # end the next test that runs a step in this process with exit code 137)
    for name in ("DBSP_FAILPOINT", "DBSP_FAILPOINT_KILL", "DBSP_ALLOW_FAILPOINTS"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    assert arm_failpoint(context) is None
    monkeypatch.setenv("DBSP_ALLOW_FAILPOINTS", "1")
    TI.try_number = 2
    assert arm_failpoint(context) is None
    TI.try_number = 1
    assert arm_failpoint(context) == "mid_step"
    assert os.environ["DBSP_FAILPOINT"] == "mid_step" and os.environ["DBSP_FAILPOINT_KILL"] == "1"


def test_task_callable_passes_mode_and_fails_fast_on_errors_retries_cannot_fix(monkeypatch):
    from spark_jobs.orchestration import tasks
    from spark_jobs.spec import Problem

    calls = []

    def fake(step, circuit, run_id, stage=None, mode="incremental", config=None):
        calls.append((step, circuit, run_id, stage, mode))
        if step == "check":
            raise CircuitError([Problem("c.yaml", 3, "v", "bad")])
        return {"timestep": 4, "mode": mode, "empty": False, "inputs": {"orders": [{"path": "a"}, {"path": "b"}]}}

    monkeypatch.setattr(tasks, "execute", fake)
    context = {"run_id": "manual__1", "params": {"mode": "full_refresh"}}
    assert tasks.run_step("plan", "c.yaml", **context) == {"timestep": 4, "mode": "full_refresh", "empty": False,
                                                          "inputs": {"orders": 2}}
    assert calls == [("plan", "c.yaml", "manual__1", None, "full_refresh")]
    with pytest.raises(tasks.NotRetried) as failed:
        tasks.run_step("check", "c.yaml", **context)
    assert "c.yaml:3: node 'v': bad" in str(failed.value.error)


def test_an_empty_plan_skips_the_rest_of_the_run_unless_empty_steps_commit(monkeypatch):
    from airflow.sdk.exceptions import DownstreamTasksSkipped

    from spark_jobs.orchestration import tasks

    pushed = {}

    class TI:
        def xcom_push(self, key, value):
            pushed[key] = value

    class Task:
        def get_flat_relative_ids(self, upstream=False):
            return {"stages", "quality_check", "commit"}

    empty = {"timestep": 3, "mode": "incremental", "empty": True, "inputs": {"orders": []}}
    monkeypatch.setattr(tasks, "execute", lambda *a, **k: dict(empty))
    context = {"run_id": "scheduled__1", "params": {}, "ti": TI(), "task": Task()}
    with pytest.raises(DownstreamTasksSkipped) as skipped:
        tasks.run_step("plan", "c.yaml", **context)
    assert sorted(skipped.value.tasks) == ["commit", "quality_check", "stages"]
    assert pushed[tasks.PLAN_XCOM_KEY]["empty"] is True  # the run note says why nothing was committed
    assert tasks.run_step("plan", "c.yaml", commit_empty=True, **context)["empty"] is True


def test_an_empty_one_task_timestep_is_skipped_unless_empty_steps_commit(monkeypatch):
    """per_step: the timestep task of a run with no new input file ends as skipped (the grid shows
    it), leaving the plan for the run's note; with commit_empty it commits the empty step."""
    from airflow.sdk.exceptions import AirflowSkipException

    from spark_jobs.orchestration import tasks

    pushed = {}

    class TI:
        def xcom_push(self, key, value):
            pushed[key] = value

    plan = {"timestep": 3, "mode": "incremental", "empty": True, "inputs": {"orders": []}}
    monkeypatch.setattr(tasks, "execute", lambda *a, **k: {"plan": dict(plan), "skipped": True})
    context = {"run_id": "scheduled__1", "params": {}, "ti": TI()}
    with pytest.raises(AirflowSkipException):
        tasks.run_step("timestep", "c.yaml", **context)
    assert pushed[tasks.PLAN_XCOM_KEY]["empty"] is True  # the run note says why nothing was committed
    committed = {"plan": dict(plan), "commit": {"timestep": 3, "mode": "incremental", "views": {}}}
    monkeypatch.setattr(tasks, "execute", lambda *a, **k: dict(committed))
    assert tasks.run_step("timestep", "c.yaml", commit_empty=True, **context)["commit"]["timestep"] == 3


def test_an_alias_bomb_is_an_import_error_for_its_circuit_only_and_quick(circuits_env, tmp_path):
    """The DAG processor reads circuits with the same bounded loader as `dbsp validate`."""
    import time

    from spark_jobs.orchestration.dag_factory import discover
    from tests.test_yaml_limits import billion_laughs

    shutil.copy(ROOT / "circuits" / "paper_example.yaml", tmp_path / "good.yaml")
    (tmp_path / "bomb.yaml").write_text(billion_laughs())
    start = time.perf_counter()
    found = discover(str(tmp_path))
    assert time.perf_counter() - start < 5.0  # the bomb itself is refused in milliseconds
    assert [c.name for c in found.circuits] == ["paper_example"]
    assert [p.message for p in found.problems if "expands to more than" in p.message]
    circuits_env(tmp_path)
    bag = dagbag()
    assert set(bag.dags) == {"paper_example"}
    assert "bomb.yaml:1: the YAML expands to more than 100,000 values" in bag.import_errors[ERRORS.name]
