"""The orchestration layer's parts that need neither Spark nor a running Airflow: the folder
watcher's trigger, run notes, the files behind a failed check, log tables, the preload hook."""
from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pyarrow as pa
import pytest

from spark_jobs.examples.generators import write_csv, write_parquet
from spark_jobs.orchestration import logs, run_note, warm
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.config import load_config

ROOT = Path(__file__).resolve().parent.parent
CIRCUIT = """\
name: watched
inputs:
  t:
    schema: {id: long, amount: double}
    source: {kind: changes, path: inbox/t, format: parquet}
  c:
    schema: {id: long, name: string}
    source: {kind: snapshots, path: snapshots/c, format: csv}
nodes:
  big: {op: filter, input: t, where: "amount > 2"}
outputs:
  big: {}
"""
ROWS = pa.schema([("id", pa.int64()), ("amount", pa.float64())])


@pytest.fixture
def circuit(tmp_path: Path) -> Path:
    path = tmp_path / "watched.yaml"
    path.write_text(CIRCUIT)
    return path


def _events(trigger, *phases) -> list[list[dict]]:
    """Run the trigger (one poll loop) through ``phases``: callables changing files, each waiting
    5 polls after its change, or ``(callable, polls)``; the payloads yielded in each phase."""
    async def collect():
        out: list[list[dict]] = [[]]

        async def consume():
            async for event in trigger.run():
                out[-1].append(event.payload)

        task = asyncio.ensure_future(consume())
        for phase in phases:
            change, polls = phase if isinstance(phase, tuple) else (phase, 5)
            change()
            await asyncio.sleep(trigger.poll_seconds * polls)
            out.append([])
        task.cancel()
        return out[:-1]

    return asyncio.run(collect())


def test_the_folder_watcher_announces_new_and_replaced_files_once(circuit, tmp_path):
    from spark_jobs.orchestration.watch import InputFilesTrigger

    data = tmp_path / "data"
    trigger = InputFilesTrigger(circuit_path=str(circuit), input_names=["t", "c"], config_path="",
                                data_root=str(data), poll_seconds=0.2)
    classpath, kwargs = trigger.serialize()
    assert classpath == "spark_jobs.orchestration.watch.InputFilesTrigger" and kwargs["input_names"] == ["t", "c"]
    assert trigger.pending() == set()  # no folders yet: nothing, no error

    def batch_starts():
        write_parquet(str(data / "inbox" / "t" / "t-1.parquet"), [{"id": 1, "amount": 3.0}], ROWS)
        write_parquet(str(data / "inbox" / "t" / ".t-2.parquet"), [{"id": 2, "amount": 3.0}], ROWS)  # hidden

    def batch_ends():  # half a poll later, in another folder
        write_csv(str(data / "snapshots" / "c" / "c-1.csv"), [{"id": 1, "name": "a"}], ["id", "name"])

    def nothing():
        pass

    def replace_one():  # a file replaced by another of the same name is news again
        write_parquet(str(data / "inbox" / "t" / "t-1.parquet"), [{"id": 1, "amount": 30.0}, {"id": 5, "amount": 1.0}], ROWS)
        os.utime(data / "inbox" / "t" / "t-1.parquet", (1, 1))

    starts, first, second, third = _events(trigger, (batch_starts, 0.5), batch_ends, nothing, replace_one)
    # a batch landing in two folders, file after file, is one event (one run), once it has settled
    assert starts == [] and len(first) == 1 and first[0]["new_files"] == 2, (starts, first)
    assert any(f.startswith("t: ") and f.endswith("t-1.parquet") for f in first[0]["files"])
    assert second == []  # announced files are not announced again while they wait
    assert len(third) == 1 and third[0]["new_files"] == 1 and third[0]["files"][0].endswith("t-1.parquet"), third


def test_consumed_files_are_not_announced(circuit, tmp_path):
    """Files a committed timestep consumed (the manifest says so) are not pending."""
    from spark_jobs.orchestration.watch import InputFilesTrigger
    from spark_jobs.runtime import timestep

    data = tmp_path / "data"
    write_parquet(str(data / "inbox" / "t" / "t-1.parquet"), [{"id": 1, "amount": 3.0}], ROWS)
    (data / "snapshots" / "c").mkdir(parents=True)  # no snapshot yet: an empty folder (a missing one refuses a step)
    trigger = InputFilesTrigger(circuit_path=str(circuit), input_names=["t"], config_path="",
                                data_root=str(data), poll_seconds=0.2)
    assert len(trigger.pending()) == 1
    rt = open_circuit(str(circuit), load_config(data_root=str(data)))
    from spark_jobs.runtime.inputs import choose_inputs

    files = choose_inputs(rt.compiled.spec.inputs, str(data), None).files["t"]
    with rt.committed.begin() as txn:  # a commit that consumed the file (no Spark: only the manifest)
        txn.consume("t", [f.record() for f in files])
        txn.commit()
    assert trigger.pending() == set()
    assert timestep.plan(rt, "r1")["empty"]


def test_run_notes_say_what_a_timestep_changed():
    note = run_note.success_note("rev", {"timestep": 7, "mode": "incremental",
                                         "views": {"by_region": {"inserted": 5, "deleted": 3}}}, None)
    assert note.startswith("**timestep 7** (incremental) committed: +5 / −3 rows in 1 view(s)")
    assert "| by_region | 5 | 3 |" in note and "(/dbsp/quality/rev/)" in note
    empty = run_note.success_note("rev", None, {"timestep": 8, "empty": True})
    assert "no new input files" in empty and "stays at timestep 7" in empty
    failed = run_note.failure_note("rev", {"timestep": 8, "mode": "incremental"}, ["quality_check"])
    assert "**timestep 8 (incremental) failed** at `quality_check`" in failed and "quality gate" in failed
    many = run_note.success_note("rev", {"timestep": 1, "views": {f"v{i}": {"inserted": i, "deleted": 0}
                                                                  for i in range(40)}}, None)
    assert len(many) <= run_note.MAX_NOTE and "more" in many


def test_a_failed_check_names_the_files_holding_its_values(circuit, tmp_path):
    from spark_jobs.runtime.culprits import culprit_files

    data = tmp_path / "data"
    good, bad = data / "inbox" / "t" / "t-1.parquet", data / "inbox" / "t" / "t-2.parquet"
    write_parquet(str(good), [{"id": 1, "amount": 3.0}], ROWS)
    write_parquet(str(bad), [{"id": 2, "amount": -4.0}, {"id": 3, "amount": None}], ROWS)
    snap = data / "snapshots" / "c" / "c-1.csv"
    write_csv(str(snap), [{"id": 1, "name": "ann"}, {"id": 2, "name": "-4"}], ["id", "name"])
    rt = open_circuit(str(circuit), load_config(data_root=str(data)))
    plan = {"inputs": {"t": [{"path": str(good)}, {"path": str(bad)}], "c": [{"path": str(snap)}]}}
    # a column check on an input: exactly the file with the value (a double -4.0 as GE reports it)
    details = {"kwargs": {"column": "amount", "min_value": 0}, "partial_unexpected_list": [-4.0]}
    assert culprit_files(rt, plan, "input:t", details) == ([str(bad)], True)
    assert culprit_files(rt, plan, "input:t", {"kwargs": {"column": "amount"},
                                               "partial_unexpected_list": [None]}) == ([str(bad)], True)
    # a view column with the same name: searched in every input; a computed value is not found,
    # so every file of the timestep is named
    assert culprit_files(rt, plan, "view:big", details) == ([str(bad)], True)
    files, exact = culprit_files(rt, plan, "view:big", {"kwargs": {"column": "amount"},
                                                        "partial_unexpected_list": [123.5]})
    assert not exact and set(files) == {str(good), str(bad), str(snap)}
    files, exact = culprit_files(rt, plan, "view:big", {"kwargs": {"min_value": 3}})  # a table-level check
    assert not exact and len(files) == 3


def test_log_tables_are_aligned_text():
    lines = logs.table(("operator", "rows in"), [("paid", 12), ("enriched[ΔaΔb]", None)], right=(1,))
    assert lines == ["operator        rows in", "--------------  -------",
                     "paid                 12", "enriched[ΔaΔb]        -"]
    summary = {"stage": "paid", "timestep": 3, "mode": "incremental", "seconds": 1.5, "spark_seconds": 1.2,
               "staged_as": "arrow", "inputs": {}, "views": {"v": {"inserted": 2, "deleted": 1}},
               "operators": [{"operator": "paid", "op": "σ", "rows_in": 70, "rows_out": 46, "state_read": None,
                              "state_written": None, "seconds": 0.01}]}
    text = "\n".join(logs.stage_lines(summary))
    assert "stage paid (timestep 3, incremental)" in text and "\\u" not in text and "σ" in text
    assert "view v: +2 / -1 rows" in text
    wide = dict(summary, operators=[dict(o, operator="enriched[ΔaΔb]", op="⋈", rows_in=1_234_567, rows_out=99_999,
                                         state_read=2_000_000, state_written=1_000_000, seconds=12.5)
                                    for o in summary["operators"]])
    assert max(map(len, logs.stage_lines(wide))) <= 72, logs.stage_lines(wide)  # beside the panel's timestamp


def test_the_preload_hook_installs_once_and_never_over_a_users_file(tmp_path, monkeypatch):
    assert "preloaded" in warm.install(str(tmp_path))
    written = (tmp_path / "config" / "airflow_local_settings.py").read_text()
    assert warm.MARKER in written and "__all__" in written
    assert "preloaded" in warm.install(str(tmp_path))  # ours: rewritten
    (tmp_path / "config" / "airflow_local_settings.py").write_text("# my own settings\n")
    assert "yours" in warm.install(str(tmp_path))
    assert (tmp_path / "config" / "airflow_local_settings.py").read_text() == "# my own settings\n"
    monkeypatch.setattr("sys.argv", ["airflow", "api-server"])
    assert not warm.wanted() and warm.preload() == 0.0  # only the scheduler forks task processes
    monkeypatch.setattr("sys.argv", ["airflow", "scheduler"])
    assert warm.wanted()
    monkeypatch.setenv(warm.ENV, "0")
    assert not warm.wanted()


@pytest.mark.slow
def test_a_task_s_local_spark_logs_its_start_up_to_stdout_not_stderr():
    """Airflow logs a task's stderr at ERROR level: a local driver started by a task must write
    its log4j lines (start-up included) to stdout (config/log4j2-tasks.properties)."""
    import subprocess
    import sys

    code = ("import logging, sys; logging.basicConfig(stream=sys.stdout, level=logging.INFO); "
            "from spark_jobs.config import load_config; from spark_jobs.runtime.circuit import open_circuit; "
            "from spark_jobs.orchestration.tasks import open_spark; "
            "rt = open_circuit('circuits/paper_example.yaml', load_config()); open_spark(rt); s = rt.spark; "
            "s.range(3).count(); s.sparkContext._jvm.org.apache.log4j.LogManager.getLogger('dbsp.test')"
            ".error('an error logged by the JVM'); print('done')")
    # a test that ran the CLI in this pytest process left its log4j settings in PYSPARK_SUBMIT_ARGS
    # (commands.py sets it when unset): a task process starts without it
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, env={**env, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert out.returncode == 0, out.stderr
    assert "an error logged by the JVM" in out.stdout  # the JVM's log4j output reaches stdout...
    assert "spark: WARNING: Using incubator modules" in out.stdout  # (the JVM's own stderr, at INFO)
    assert out.stderr.strip() == "", out.stderr  # ...and nothing of it is logged at ERROR
    assert "Using Spark's default log4j profile" not in out.stdout + out.stderr


def test_the_docs_report_the_latest_airflow_benchmark():
    """The Airflow page's latency table is the one `python -m bench.airflow` last wrote (issue #16:
    measured in one run and reported in the documentation), row for row."""
    bench = (ROOT / "bench" / "results" / "airflow.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(bench) if line.startswith("| measure (median)"))
    rows = []
    for line in bench[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    readme = (ROOT / "docs" / "airflow.md").read_text(encoding="utf-8")
    assert len(rows) >= 6 and all(row in readme for row in rows), [r for r in rows if r not in readme]
    stamp = bench[2].split(",")[0]  # "<date> <time> UTC": the run the page quotes
    assert stamp in readme, stamp


def test_a_failed_check_ends_its_task_with_the_fail_lines_once_and_no_traceback(monkeypatch, caplog):
    """The task log of a failed quality check starts with the FAIL summary (check, view, example
    row, the input files behind it), says it once, and ends the task without a traceback: a
    ``SystemExit`` (Airflow logs it as one "Task exited" line) that the tasks' retry policy
    fails at once."""
    import logging

    from spark_jobs.orchestration import tasks
    from spark_jobs.quality.report import CheckResult, GateReport, QualityGateFailed

    check = CheckResult("expect_column_values_to_be_between", "view:settled", "fail", False,
                        {"unexpected_count": 1, "element_count": 3, "examples": [{"amount": -3.0}],
                         "kwargs": {"column": "amount", "min_value": 0}})
    failed = QualityGateFailed(GateReport(4, [check]), "input files behind the failing checks:\n"
                               "  view:settled expect_column_values_to_be_between: rows from payments-0002.parquet\n"
                               "      /data/inbox/payments/payments-0002.parquet")

    def fail(*args, **kwargs):
        raise failed

    monkeypatch.setattr(tasks, "execute", fail)
    monkeypatch.setattr(tasks, "give_up", lambda *a: None)
    with caplog.at_level(logging.INFO, logger=tasks.log.name), pytest.raises(tasks.NotRetried) as ended:
        tasks.run_step("timestep", "c.yaml", run_id="manual__1", params={})
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert said[0] == "quality gate failed at timestep 4: 1 failing check(s)", said
    assert said[1].startswith("  FAIL view:settled expect_column_values_to_be_between(column=amount, min_value=0)")
    assert 'e.g. [{"amount": -3.0}]' in said[1] and "rows from payments-0002.parquet" in said[3], said
    assert sum("FAIL view:settled" in r.getMessage() for r in caplog.records) == 1  # once
    assert all(r.exc_info is None for r in caplog.records)
    assert ended.value.code == 3 and ended.value.error is failed
    assert ended.value.__cause__ is None and ended.value.__suppress_context__  # no chained traceback
    policy = tasks.retry_policy()
    assert policy.evaluate(ended.value, 1, 3).action.value == "fail"
    assert policy.evaluate(RuntimeError("a lost executor"), 1, 3).action.value == "default"


def test_the_views_tab_shows_each_event_unfolded_and_escapes_what_it_shows():
    """The plugin's "Views" tab: timestep, view and row counts in plain sight (Airflow folds an
    asset event's extra); names and run ids are escaped, the run link stays inside the UI."""
    import datetime as dt

    from spark_jobs.orchestration.assets import commit_extra
    from spark_jobs.orchestration.view_events import ViewEvent, render

    extra = commit_extra({"timestep": 7, "mode": "incremental",
                          "views": {"by_region": {"inserted": 3, "deleted": 1}}}, "by_region")
    page = render("shop", [ViewEvent(dt.datetime(2026, 11, 29, 10, 0, 0), "shop.by_region",
                                     "manual__<x>", extra)])
    assert "<td class=n>7</td><td>by_region</td><td class=n>+3</td><td class=n>-1</td><td>incremental</td>" in page
    assert 'href="/dags/shop/runs/manual__%3Cx%3E"' in page and "<x>" not in page
    assert "No view has been published yet" in render("shop", [])
