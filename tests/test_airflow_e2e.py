"""End to end through a real Airflow, started once for the whole module as the README says:
`make airflow` (standalone: SQLite, LocalExecutor, 127.0.0.1 only, its own AIRFLOW_HOME, and a
Spark Connect server, so task processes start no JVM), in a copy of this project where the
README's walkthrough runs command by command, as written.

- the walkthrough: validate, explain, a step by hand, the DAG found, a run started by files
  landing in an input folder (an asset event from the folder watcher), an empty run skipped, a
  full refresh, the run notes;
- three timesteps of a `per_stage` circuit equal a full recompute, and a stage task killed
  mid-run (``os._exit`` at the ``mid_step`` failpoint, first try only) is retried by Airflow and
  changes nothing; the same circuit with `per_step` commits the same views;
- a failed `fail` expectation fails the run, leaves the manifest where it was and names the input
  file behind the failing rows; after the file is replaced the next run commits correct views;
- a chained circuit runs on another circuit's view Asset and reads its change feed;
- a broken circuit is an import error with the validator's message, next to the working DAGs;
- (where Chromium and Playwright are installed) the UI in a browser: login, DAG docs with the
  circuit picture, graph, a triggered run whose note shows its timestep and row counts;
  screenshots in tests/screenshots/ (git-ignored);
- `scripts/airflow_local.sh stop` leaves no process behind;
- (opt-in, DBSP_E2E_SPARK_SUBMIT=1) with ``spark.submit: spark-submit`` every task is a
  spark-submit of stage_main.py and the run commits.

Knob: DBSP_E2E_RUN_TIMEOUT (seconds per DAG run).
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from spark_jobs.config import load_config
from spark_jobs.examples.generators import PaperExampleGenerator, RevenueGenerator, write_parquet
from spark_jobs.runtime.circuit import state_root
from spark_jobs.spec import CircuitError, validate_file
from spark_jobs.state import StateStore
from tests import oracle
from tests.airflow_support import BROKEN_CIRCUIT, ERRORS, ROOT, LocalAirflow, free_port, task_log
from tests.test_timestep_tasks import CHAIN_DOWN as CHAIN_DOWN_YAML
from tests.test_timestep_tasks import CHAIN_UP as CHAIN_UP_YAML

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

REVENUE, REVENUE_STEP, CHECKED, UP, DOWN = "revenue_by_region", "revenue_step", "checked_payments", "chain_up", "chain_down"
CHECKED_YAML = """\
name: checked_payments
description: Payments with a policy-fail expectation, to show the gate stopping a commit.
inputs:
  payments:
    schema: {payment_id: long, amount: double}
    source: {kind: changes, path: inbox/payments, format: parquet}
nodes:
  settled: {op: filter, input: payments, where: "amount is not null"}
outputs:
  settled:
    expectations:
      - expect_column_values_to_be_between: {column: amount, min_value: 0}   # policy fail
"""
# the chained circuits of tests/test_timestep_tasks.py, with their own input folder, and the
# downstream one scheduled on the upstream one's view Asset
CHAIN_UP = CHAIN_UP_YAML.replace("name: up", "name: chain_up").replace("path: inbox/t", "path: chain/inbox/t")
CHAIN_DOWN = CHAIN_DOWN_YAML.replace("name: down", "name: chain_down\nschedule: {assets: [chain_up.per_x]}").replace(
    "path: feeds/up/per_x", "path: feeds/chain_up/per_x")
PAYMENTS = pa.schema([("payment_id", pa.int64()), ("amount", pa.float64())])
SCREENSHOTS = ROOT / "tests" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


# ---- the README's tour ---------------------------------------------------------------------------
def walkthrough_commands(readme: Path = ROOT / "README.md") -> list[str]:
    """Every command of the README's five-minute tour: the lines of its ```bash blocks, comments cut."""
    text = readme.read_text(encoding="utf-8")
    start = text.index("## A five-minute tour")
    section = text[start:text.index("\n## ", start)]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def plain(command: str) -> str:
    """The command without the venv's folder: `.venv/bin/dbsp step x` is `dbsp step x`."""
    return command.removeprefix(".venv/bin/")


def _bootstrap_stamp(project: Path) -> str:
    """The name of the stamp scripts/bootstrap.sh looks for (its hash over the lock file,
    pyproject.toml, the project path and uv's version): the copy reuses this venv as is."""
    uv = re.search(r'^UV_VERSION="([^"]+)"', (ROOT / "scripts" / "bootstrap.sh").read_text(), re.M).group(1)
    data = (project / "requirements.lock").read_bytes() + (project / "pyproject.toml").read_bytes()
    data += f"{project}\n{uv}\n".encode()
    return ".installed-" + hashlib.sha256(data).hexdigest()[:16]


class Project:
    """A fresh clone of this project (of a clean checkout; else a copy of its tracked and new
    files) in a temp folder, with this venv linked in:
    the README's commands run there as written, and cannot touch the real circuits/ or data/."""

    def __init__(self, base: Path) -> None:
        self.root = base / "project"
        status = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True)
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                                capture_output=True, text=True)
        if status.returncode == 0 and not status.stdout.strip():  # a clean checkout (CI): a real clone
            subprocess.run(["git", "clone", "-q", str(ROOT), str(self.root)], check=True)
        elif listed.returncode == 0:  # edits not committed yet: the files a commit would carry
            for rel in listed.stdout.splitlines():
                src = ROOT / rel
                if src.is_file():
                    (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, self.root / rel)
        else:  # not a git checkout: the tree without what git would ignore
            shutil.copytree(ROOT, self.root, ignore=shutil.ignore_patterns(
                ".git", ".venv", "data", ".airflow", ".run", "__pycache__", "*.egg-info", "screenshots"))
        venv = self.root / ".venv"
        venv.mkdir()
        for entry in (ROOT / ".venv").iterdir():
            if not entry.name.startswith(".installed-"):
                (venv / entry.name).symlink_to(entry)
        (venv / _bootstrap_stamp(self.root)).write_text("")
        self.home = self.root / ".airflow"
        self.data = self.root / "data"
        inherited = {k: v for k, v in os.environ.items()
                     if not k.startswith(("AIRFLOW", "DBSP_", "SPARK_CONNECT_", "SPARK_CLUSTER_", "PYTHONPATH"))}
        self.env = {**inherited, "PYTHONPATH": str(self.root),  # this copy's spark_jobs, not the real one
                    "AIRFLOW_PORT": str(free_port()), "DBSP_SPARK_REMOTE": f"sc://127.0.0.1:{free_port()}",
                    "SPARK_CONNECT_UI_PORT": "off", "DBSP_ALLOW_FAILPOINTS": "1",
                    "DBSP_TASK_RETRY_DELAY_SECONDS": "1", "DBSP_WATCH_POLL_SECONDS": "2",
                    "SPARK_LOCAL_IP": "127.0.0.1"}
        self.run_timeout = float(os.environ.get("DBSP_E2E_RUN_TIMEOUT") or 300)
        self.airflow = LocalAirflow(self.home, self.env, port=int(self.env["AIRFLOW_PORT"]), root=self.root)
        self.config = load_config(str(self.root / "config" / "connect.yaml"), data_root=str(self.data))
        self.process: subprocess.Popen | None = None

    def shell(self, command: str, sourced: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        script = f"{sourced}\n{command}" if sourced else command
        return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def start(self, command: str, timeout: float = 360) -> None:
        """Run ``make airflow`` (foreground by design) in the background until Airflow is up."""
        self.log = open(self.root / "make_airflow.log", "w")
        self.process = subprocess.Popen(["bash", "-c", command], cwd=self.root, env=self.env, stdout=self.log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while "Airflow UI:" not in (self.root / "make_airflow.log").read_text():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"`{command}` did not start Airflow:\n{self.output()[-4000:]}")
            time.sleep(1)
        self.airflow.connect()

    def output(self) -> str:
        return (self.root / "make_airflow.log").read_text(errors="replace")

    @property
    def api(self):
        return self.airflow.api

    def store(self, circuit: str) -> StateStore:
        """The circuit's committed state, read without Spark (manifests only)."""
        return StateStore(None, state_root(self.config, circuit), circuit, "")

    def run(self, dag_id: str, conf: dict | None = None, expect: str = "success") -> str:
        run_id = self.api.trigger(dag_id, conf)
        seconds = self.api.wait_for_run(dag_id, run_id, self.home, timeout=self.run_timeout, expect=expect)
        print(f"{dag_id} run {run_id}: {expect} after {seconds:.0f} s")
        return run_id

    def runs(self, dag_id: str) -> list[dict]:
        return self.api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=run_after&limit=100")["dag_runs"]

    def wait_for_new_run(self, dag_id: str, known: set[str], run_type: str | None = None) -> dict:
        """The first run of ``dag_id`` not in ``known`` (of ``run_type``), once it has ended."""
        deadline = time.monotonic() + self.run_timeout
        while time.monotonic() < deadline:
            new = [r for r in self.runs(dag_id) if r["dag_run_id"] not in known
                   and (run_type is None or r["run_type"] == run_type)]
            if new and new[0]["state"] in ("success", "failed"):
                return new[0]
            time.sleep(1)
        raise AssertionError(f"no new {run_type or ''} run of {dag_id} ended in {self.run_timeout:.0f} s: "
                             f"{[(r['dag_run_id'], r['state']) for r in self.runs(dag_id)]}")

    def wait_for_commit(self, dag_id: str, timestep: int) -> dict:
        """The run that committed ``timestep`` (its note says so), once it has ended."""
        deadline = time.monotonic() + self.run_timeout
        while time.monotonic() < deadline:
            for run in self.runs(dag_id):
                if f"**timestep {timestep}**" in (run.get("note") or "") and run["state"] == "success":
                    return run
                if run["state"] == "failed":
                    raise AssertionError(self.api.describe(dag_id, run["dag_run_id"], self.home))
            time.sleep(1)
        raise AssertionError(f"no run of {dag_id} committed timestep {timestep} in {self.run_timeout:.0f} s: "
                             f"{[(r['dag_run_id'], r['state'], r.get('note')) for r in self.runs(dag_id)]}")

    def note(self, dag_id: str, run_id: str) -> str:
        return self.api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").get("note") or ""

    def states(self, dag_id: str, run_id: str) -> dict[str, str]:
        return {ti["task_id"]: ti["state"] for ti in self.api.task_instances(dag_id, run_id)}

    def show(self, circuit: str, view: str) -> Counter:
        """The committed view through `dbsp show --format csv`, floats rounded like the oracle."""
        out = subprocess.run([str(self.root / ".venv" / "bin" / "dbsp"), "show", circuit, view, "--format", "csv",
                              "--config", "connect"], cwd=self.root, env=self.env,
                             capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stderr
        rows = list(csv.reader(io.StringIO(out.stdout)))
        assert rows[0][-1] == "_weight"
        return Counter({tuple(_value(v) for v in r[:-1]): int(r[-1]) for r in rows[1:]})


def _value(text: str):
    if text == "":
        return None
    for cast in (int, float):
        try:
            value = cast(text)
            return round(value, 6) if isinstance(value, float) else value
        except ValueError:
            pass
    return text


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    project = Project(tmp_path_factory.mktemp("airflow_e2e"))
    circuits = project.root / "circuits"
    revenue = (circuits / f"{REVENUE}.yaml").read_text().replace('schedule: "@hourly"', "schedule: none")
    revenue = revenue.replace("path: inbox/", "path: revenue/inbox/").replace("path: snapshots/", "path: revenue/snapshots/")
    (circuits / f"{REVENUE}.yaml").write_text(revenue + "orchestration: {tasks: per_stage}\n")
    (circuits / f"{REVENUE_STEP}.yaml").write_text(revenue.replace(f"name: {REVENUE}", f"name: {REVENUE_STEP}"))
    for name, text in ((CHECKED, CHECKED_YAML), (UP, CHAIN_UP), (DOWN, CHAIN_DOWN), ("broken", BROKEN_CIRCUIT)):
        (circuits / f"{name}.yaml").write_text(text)
    commands = walkthrough_commands(project.root / "README.md")
    assert "make airflow" in commands
    try:
        project.start("make airflow")
        print(project.output())
        for dag_id in (REVENUE, REVENUE_STEP, CHECKED, UP, DOWN):
            project.api.wait_for_dag(dag_id)
            project.api.unpause(dag_id)
        yield project
    finally:
        print(project.airflow.stop())
        if project.process is not None and project.process.poll() is None:
            os.killpg(project.process.pid, signal.SIGTERM)


def test_the_readme_walkthrough(world):
    """Every command of the README's walkthrough, as written, in order (`make airflow` started
    this module's Airflow; `scripts/airflow_local.sh stop` is the last test)."""
    commands = walkthrough_commands(world.root / "README.md")
    sourced, batches, runs_before = None, 0, set()
    for written in commands:
        command = plain(written)
        if command == "make airflow" or command == "scripts/airflow_local.sh stop":
            continue
        if command.startswith("source "):
            sourced = command
            assert (world.root / command.split()[1]).exists(), command
            continue
        if command.startswith("airflow dags trigger my_view"):
            runs_before = {r["dag_run_id"] for r in world.runs("my_view")}
        if command == "airflow dags details my_view":
            # the README starts Airflow after the tour copied the circuit, so its first parse has
            # it; here Airflow was started first (the fixture), so the file was copied after
            # that parse: wait for the next one (dag_dir_list_interval), as a user would see it
            world.api.wait_for_dag("my_view")
        out = world.shell(written, sourced, timeout=900)  # the tour's first step starts a local JVM
        text = out.stdout + out.stderr
        allowed = (0, 1) if command == "airflow dags list-import-errors" else (0,)  # 1: it found some
        assert out.returncode in allowed, f"`{command}` failed ({out.returncode}):\n{text}"
        if command.startswith("python -m spark_jobs.examples.generators"):
            batches += 1
            assert f"batch {batches} in " in text and "orders" in text, text
            if batches == 2:  # the DAG is unpaused: the files landing start a run (asset event)
                run = world.wait_for_commit("my_view", 2)
                assert run["run_type"] == "asset_triggered", run
                assert "**timestep 2** (incremental) committed: +" in run["note"], run["note"]
                assert re.search(r"\| by_region \| \d+ \| \d+ \|", run["note"]), run["note"]
                links = world.api.call("GET", f"/api/v2/dags/my_view/dagRuns/{run['dag_run_id']}"
                                              "/taskInstances/timestep/links")
                assert links["extra_links"].get("Quality report") == "/dbsp/quality/my_view/", links
        elif command == "dbsp step my_view":  # quiet: no Spark banner, counts as it goes, each line once
            assert "timestep 1" in text and "timestep 1: read input orders: 1 file(s), 60 rows" in text, text
            assert "Using Spark's default log4j profile" not in text and "Setting default log level" not in text, text
            said = [line.strip() for line in text.splitlines() if line.strip()]
            assert len(said) == len(set(said)), text
        elif command == "dbsp explain circuits/my_view.yaml":
            assert "by_region" in text and "state" in text.lower(), text
        elif command == "airflow dags details my_view":
            assert "Revenue per region" in text, text  # the circuit's description
        elif command == "airflow dags list-runs my_view":
            assert "my_view" in text, text
        elif command == "dbsp show my_view by_region":
            assert "region" in text and "revenue" in text, text
        elif command == "dbsp status my_view":
            assert "1" in text, text
        elif command.startswith("dbsp validate"):
            assert "ok" in text, text
        elif command == "airflow dags list-import-errors":
            assert "broken.yaml:7: node 'big'" in text, text
        elif command.startswith("airflow dags trigger my_view"):
            run = world.wait_for_new_run("my_view", runs_before)
            states = world.states("my_view", run["dag_run_id"])
            assert run["state"] == "success", world.api.describe("my_view", run["dag_run_id"], world.home)
            if "full_refresh" in command:
                assert states == {t: "success" for t in states}
                assert "**timestep 3** (full_refresh) committed: +" in run["note"], run["note"]
            else:  # no new file since the asset-triggered run: skipped in seconds, nothing committed
                assert states == {"timestep": "skipped"}, states  # per_step: the one task, skipped
                assert "no new input files" in run["note"] and "timestep 3 skipped" in run["note"], run["note"]
    assert batches == 2
    store = world.store("my_view")
    assert store.last_committed() == 3 and store.manifest(3).meta["mode"] == "full_refresh"
    report = world.api.call("GET", "/dbsp/quality/my_view/t000000000003.json")  # the plugin's page
    assert report["timestep"] == 3 and report["results"]
    for bad in ("/dbsp/quality/my_view/..%2F..%2Fmanifests", "/dbsp/quality/..%2Fx/index.html"):
        with pytest.raises(AssertionError, match="404"):
            world.api.call("GET", bad)


def test_a_broken_circuit_is_an_import_error_next_to_working_dags(world):
    errors = world.api.import_errors()
    assert len(errors) == 1 and errors[0]["filename"].endswith(ERRORS.name), errors
    expected = str(CircuitError(validate_file(str(world.root / "circuits" / "broken.yaml"))))
    assert expected in errors[0]["stack_trace"]
    assert "broken.yaml:7: node 'big'" in errors[0]["stack_trace"]
    # listed (the list hides stale DAGs) and free of import errors: they stay scheduled
    dags = {d["dag_id"]: d for d in world.api.call("GET", "/api/v2/dags")["dags"]}
    assert {REVENUE, CHECKED} <= set(dags) and "broken_circuit" not in dags, dags
    assert not any(dags[d]["has_import_errors"] or dags[d]["is_stale"] for d in (REVENUE, CHECKED))


def test_per_stage_timesteps_equal_a_recompute_a_killed_stage_is_retried_and_per_step_agrees(world):
    gen = RevenueGenerator(str(world.data / "revenue"))
    store = world.store(REVENUE)
    for t in (1, 2, 3):
        gen.write_batch()
        kill = {"dbsp_failpoint": {"task": "stages.enriched", "point": "mid_step", "kill": True}} if t == 2 else None
        run_id = world.run(REVENUE, kill)
        assert store.last_committed() == t
        assert store.manifest(t).meta["run_id"] == run_id  # one DAG run = one timestep
        if kill:
            tis = {ti["task_id"]: ti for ti in world.api.task_instances(REVENUE, run_id)}
            assert tis["stages.enriched"]["try_number"] == 2, world.api.describe(REVENUE, run_id, world.home)
            assert all(ti["state"] == "success" for ti in tis.values())
    log = "\n".join(task_log(world.home, REVENUE, run_id, "stages.enriched"))
    assert "operator" in log and "state read" in log and "enriched[ΔaΔb]" in log  # the stage's table
    expected = oracle.revenue_by_region(str(world.data / "revenue"))
    for view in ("by_region", "order_extremes", "big_spenders"):
        assert world.show(REVENUE, view) == expected[view], view
    # the same circuit with every stage in one task, over the same files in one timestep
    run_id = world.run(REVENUE_STEP)
    assert set(world.states(REVENUE_STEP, run_id)) == {"timestep"}  # per_step: the whole timestep in one task
    for view in ("by_region", "order_extremes", "big_spenders"):
        assert world.show(REVENUE_STEP, view) == expected[view], view


def _payments(world, name: str, rows: list[dict]) -> None:
    write_parquet(str(world.data / "inbox" / "payments" / name), rows, PAYMENTS)


def test_a_failed_expectation_blocks_the_commit_and_names_the_file(world):
    store = world.store(CHECKED)
    good = [{"payment_id": i, "amount": 10.0 * i} for i in range(1, 6)]
    _payments(world, "payments-0001.parquet", good)
    world.run(CHECKED)
    assert store.last_committed() == 1

    bad = [{"payment_id": 6, "amount": 5.0}, {"payment_id": 7, "amount": -3.0}]
    _payments(world, "payments-0002.parquet", bad)
    _payments(world, "payments-0003.parquet", good[:1])
    run_id = world.run(CHECKED, expect="failed")
    tis = {ti["task_id"]: ti for ti in world.api.task_instances(CHECKED, run_id)}
    assert tis["timestep"]["state"] == "failed" and tis["timestep"]["try_number"] == 1  # not retried
    log = task_log(world.home, CHECKED, run_id, "timestep")
    assert any("FAIL" in line and "expect_column_values_to_be_between" in line for line in log), log
    # the failure starts with its summary (check, view, example row, files), once, no traceback
    errors = [line for line in log if line.startswith("error: ")]
    assert errors[0] == "error: quality gate failed at timestep 2: 1 failing check(s)", log
    assert errors[1].startswith("error:   FAIL view:settled expect_column_values_to_be_between") and "e.g." in errors[1]
    assert sum("FAIL view:settled" in line for line in log) == 1, log
    assert not [line for line in log if "Traceback" in line or line.startswith("    at ")], log
    named = [line for line in log if "rows from" in line]
    assert named and "payments-0002.parquet" in named[0] and "payments-0003" not in named[0], log
    assert store.last_committed() == 1  # the manifest did not advance
    note = world.note(CHECKED, run_id)
    assert "failed** at `timestep` (check) — the quality gate stopped the commit" in note, note

    fixed = [{"payment_id": 6, "amount": 5.0}, {"payment_id": 7, "amount": 3.0}]
    _payments(world, "payments-0002.parquet", fixed)  # replaces the bad file (atomic rename)
    world.run(CHECKED)
    assert store.last_committed() == 2
    settled = Counter({(r["payment_id"], r["amount"]): 1 for r in good + fixed}) + Counter({(1, 10.0): 1})
    assert world.show(CHECKED, "settled") == settled


def test_a_chained_circuit_runs_on_the_other_circuits_view(world):
    """chain_down is scheduled on the Asset chain_up.per_x and reads its change feed."""
    gen = PaperExampleGenerator(str(world.data / "chain"), seed=7)  # writes chain/inbox/t (and r)
    for i in (1, 2):
        before = {r["dag_run_id"] for r in world.runs(DOWN)}
        gen.write_batch(inserts=15, deletes=5)
        world.run(UP)
        down = world.wait_for_new_run(DOWN, before, run_type="asset_triggered")
        assert down["state"] == "success", world.api.describe(DOWN, down["dag_run_id"], world.home)
        assert f"**timestep {i}**" in down["note"], down["note"]
        # (asked once the run it started has started: Airflow 3.3's events endpoint fails on a
        # created run without a start date)
        events = world.api.call("GET", "/api/v2/assets/events?source_dag_id=chain_up&limit=100")["asset_events"]
        extra = max(events, key=lambda e: e["timestamp"])["extra"]
        assert extra["timestep"] == i and {"rows_inserted", "rows_deleted", "mode"} <= set(extra), extra
        assert extra["summary"] == (f"timestep {i} ({extra['mode']}): +{extra['rows_inserted']} / "
                                    f"-{extra['rows_deleted']} rows"), extra
    per_x = world.show(UP, "per_x")
    assert world.show(DOWN, "many") == Counter({row: w for row, w in per_x.items() if row[1] >= 2})


def test_the_ui_in_a_browser(world):
    """Playwright drives Debian's Chromium: login, the DAG's docs and graph, a triggered run
    whose page shows its timestep and row counts. Screenshots: tests/screenshots/."""
    pytest.importorskip("playwright.sync_api", reason="pip install playwright (requirements.lock)")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM}: scripts/ensure_chromium.sh (run by `make test`) could not "
                    "install it (it needs root and Debian's packages: apt-get install -y chromium)")
    from tests.browser import drive_the_ui

    SCREENSHOTS.mkdir(exist_ok=True)
    RevenueGenerator(str(world.data / "revenue")).write_batch()

    def finished_run(before: set[str]) -> str:
        return world.wait_for_new_run(REVENUE_STEP, before)["dag_run_id"]

    found = drive_the_ui(f"http://127.0.0.1:{world.airflow.port}", "admin",
                         json.loads((world.home / "simple_auth_manager_passwords.json.generated").read_text())["admin"],
                         REVENUE_STEP, SCREENSHOTS, CHROMIUM, CHROMIUM_ARGS, finished_run,
                         lambda: {r["dag_run_id"] for r in world.runs(REVENUE_STEP)})
    committed = world.store(REVENUE_STEP).last_committed()
    assert world.store(REVENUE_STEP).manifest(committed).meta["run_id"] == found["run_id"]
    assert f"timestep {committed} (incremental) committed: +" in found["note_preview"], found["note_preview"]
    assert f"timestep {committed}" in found["note"] and "rows inserted" in found["note"], found["note"]
    for view, change in world.store(REVENUE_STEP).manifest(committed).outputs.items():
        assert f"{view}\t{change.rows_inserted}\t{change.rows_deleted}" in found["note"], (view, found["note"])
        # the Views tab: each view's asset event of this timestep, its row counts in plain sight
        shown = f"{committed}\t{view}\t+{change.rows_inserted}\t-{change.rows_deleted}\tincremental\t"
        assert shown in found["views_tab"], (shown, found["views_tab"])
    assert found["docs_image"].startswith("/dbsp/docs/revenue_step-") and "Incremental circuit" in found["docs_text"]
    # the first hour: the docs link the diagram (inline, the modal shrank it to 7 px labels); the link
    # opens it at full size, every label readable (>= 10 px on screen), with a legend that says
    # what a colour is under per_step
    status, kind, svg = found["docs_full_size"]
    assert found["docs_font_px"] >= 10, found["docs_font_px"]
    assert found["docs_images_inline"] == 0 and status == 200 and "svg" in kind, found
    assert 'Colour: a stage of the one task &quot;timestep&quot; (per_step)' in svg and svg.count(">timestep<") == 0
    assert found["dag_list_name"].startswith(f"{REVENUE_STEP} — Paid revenue"), found["dag_list_name"]
    # a circuit has no backfill: Airflow draws the choice greyed out, the UI theme hides it
    assert found["backfill_drawn"] and found["backfill_visible"] is False and found["backfill_offered"] is False
    assert "dbsp_view_is_set" in found["quality_page"] and "PASS" in found["quality_page"]
    assert found["quality_link"] == f"/dbsp/quality/{REVENUE_STEP}/" and found["extra_link"] == "Quality report"
    assert found["extra_link_href"] == found["quality_link"], found
    assert "timestep" in found["graph"] and found["import_errors_badge"]


def test_stop_leaves_no_process_behind(world):
    assert "scripts/airflow_local.sh stop" in walkthrough_commands(world.root / "README.md")
    out = world.shell("scripts/airflow_local.sh stop")
    assert out.returncode == 0 and "stopped" in out.stdout, out.stdout + out.stderr
    world.process.wait(timeout=60)  # `make airflow` returns once everything it started is gone
    assert world.airflow.leftovers() == []
    assert not (world.home / "airflow_local.pid").exists()


@pytest.mark.skipif(os.environ.get("DBSP_E2E_SPARK_SUBMIT") != "1",
                    reason="each task is a spark-submit (a JVM per task, minutes): set DBSP_E2E_SPARK_SUBMIT=1")
def test_spark_submit_tasks_commit_a_timestep(tmp_path):
    """Profile ``spark.submit: spark-submit``: every task is a SparkSubmitOperator running
    stage_main.py (here with master local[2]); `airflow dags test` runs the DAG without a scheduler."""
    from spark_jobs.orchestration.airflow_env import environment

    (tmp_path / "circuits").mkdir()
    (tmp_path / "circuits" / f"{CHECKED}.yaml").write_text(CHECKED_YAML)
    profile = tmp_path / "submit.yaml"
    profile.write_text((ROOT / "config" / "local.yaml").read_text().replace(
        "  mode: local ", "  submit: spark-submit\n  mode: local "))
    data = tmp_path / "data"
    write_parquet(str(data / "inbox" / "payments" / "p1.parquet"),
                  [{"payment_id": 1, "amount": 2.0}, {"payment_id": 2, "amount": 3.0}], PAYMENTS)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "DBSP_"))}
    base.update(DBSP_CONFIG=str(profile), DBSP_DATA_ROOT=str(data), DBSP_CIRCUITS_DIR=str(tmp_path / "circuits"))
    env = environment(str(tmp_path / "home"), config=load_config(str(profile)), port=free_port(), base=base, force=True)
    assert "AIRFLOW_CONN_SPARK_DBSP" in env and shutil.which("spark-submit", path=env["PATH"])
    airflow = str(ROOT / ".venv" / "bin" / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    out = subprocess.run([airflow, "dags", "test", CHECKED], env=env, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0 and "state=success" in out.stdout + out.stderr, (out.stdout + out.stderr)[-5000:]
    assert "Spark-Submit cmd: spark-submit" in out.stdout + out.stderr
    store = StateStore(None, state_root(load_config(str(profile), data_root=str(data)), CHECKED), CHECKED, "")
    assert store.last_committed() == 1
