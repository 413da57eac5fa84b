"""End to end through a real Airflow: scripts/airflow_local.sh starts `airflow standalone`
(SQLite, LocalExecutor, 127.0.0.1 only, its own AIRFLOW_HOME) and, when the profile is Spark
Connect, a Connect server, so task processes start no JVM of their own. DAG runs are triggered
through the REST API; results are read from the data root and checked against DuckDB.

- three timesteps with new input files between them equal a full recompute, and a stage task
  killed mid-run (``os._exit`` at the ``mid_step`` failpoint, first try only) is retried by
  Airflow and changes nothing;
- a failed `fail` expectation fails the run and leaves the manifest where it was; after the bad
  input file is replaced, the next run commits correct views;
- a broken circuit is an import error in Airflow with the validator's message, next to the
  working DAGs;
- stopping leaves no process behind;
- (opt-in, DBSP_E2E_SPARK_SUBMIT=1) with ``spark.submit: spark-submit`` every task is a
  spark-submit of stage_main.py and the run commits.

Knobs: DBSP_E2E_SPARK=local|connect (default: connect when scripts/spark_connect.sh exists),
DBSP_E2E_RUN_TIMEOUT (seconds per DAG run).
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from spark_jobs.config import load_config
from spark_jobs.examples.generators import RevenueGenerator, write_parquet
from spark_jobs.runtime.circuit import state_root
from spark_jobs.spec import CircuitError, validate_file
from spark_jobs.state import StateStore
from tests import oracle
from tests.airflow_support import BROKEN_CIRCUIT, ERRORS, ROOT, LocalAirflow, free_port, task_log

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

REVENUE = "revenue_by_region"
CHECKED = "checked_payments"
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
PAYMENTS = pa.schema([("payment_id", pa.int64()), ("amount", pa.float64())])


class Env:
    """The test's world: circuits, data root, profile and the running Airflow."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.circuits = base / "circuits"
        self.data = base / "data"
        self.circuits.mkdir()
        self.data.mkdir()
        text = (ROOT / "circuits" / f"{REVENUE}.yaml").read_text()
        # manual runs only: an @hourly schedule would add a run of its own when unpaused
        (self.circuits / f"{REVENUE}.yaml").write_text(text.replace('schedule: "@hourly"', "schedule: none"))
        (self.circuits / f"{CHECKED}.yaml").write_text(CHECKED_YAML)
        (self.circuits / "broken.yaml").write_text(BROKEN_CIRCUIT)
        self.profile = base / "profile.yaml"
        # Spark Connect when the server script is there (tasks then start no JVM); override with
        # DBSP_E2E_SPARK=local|connect
        mode = os.environ.get("DBSP_E2E_SPARK") or ("connect" if (ROOT / "scripts" / "spark_connect.sh").exists() else "local")
        connect = mode == "connect"
        source = (ROOT / "config" / ("connect.yaml" if connect else "local.yaml")).read_text()
        spark_env: dict[str, str] = {}
        if connect:
            port = free_port()
            source = source.replace("sc://127.0.0.1:15002", f"sc://127.0.0.1:{port}")
            spark_env = {"SPARK_CONNECT_RUN_DIR": str(base / "spark-connect"), "SPARK_CONNECT_UI_PORT": "off"}
        self.profile.write_text(source)
        inherited = {k: v for k, v in os.environ.items()
                     if not k.startswith(("AIRFLOW", "DBSP_", "SPARK_CONNECT_", "SPARK_CLUSTER_"))}
        self.env = {**inherited, **spark_env,
                    "DBSP_CONFIG": str(self.profile), "DBSP_DATA_ROOT": str(self.data),
                    "DBSP_CIRCUITS_DIR": str(self.circuits), "DBSP_ALLOW_FAILPOINTS": "1",
                    "DBSP_TASK_RETRY_DELAY_SECONDS": "1", "AIRFLOW_PARALLELISM": "4"}
        self.airflow = LocalAirflow(base / "airflow_home", self.env)
        self.config = load_config(str(self.profile), data_root=str(self.data))
        # a local-mode task starts its own JVM: far slower than a Connect client
        self.run_timeout = float(os.environ.get("DBSP_E2E_RUN_TIMEOUT") or (300 if connect else 900))

    def store(self, circuit: str) -> StateStore:
        """The circuit's committed state, read without Spark (manifests only)."""
        return StateStore(None, state_root(self.config, circuit), circuit, "")

    def run(self, dag_id: str, conf: dict | None = None, expect: str = "success") -> str:
        api = self.airflow.api
        run_id = api.trigger(dag_id, conf)
        seconds = api.wait_for_run(dag_id, run_id, self.airflow.home, timeout=self.run_timeout, expect=expect)
        print(f"{dag_id} run {run_id}: {expect} after {seconds:.0f} s")
        return run_id

    def show(self, circuit: str, view: str) -> Counter:
        """The committed view through `dbsp show --format csv`, floats rounded like the oracle."""
        out = subprocess.run([str(ROOT / ".venv" / "bin" / "dbsp"), "show", str(self.circuits / f"{circuit}.yaml"),
                              view, "--format", "csv", "--data-root", str(self.data)],
                             env=self.env, capture_output=True, text=True, timeout=180)
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
    env = Env(tmp_path_factory.mktemp("airflow_e2e"))
    try:
        api = env.airflow.start()
        print(env.airflow.start_output)
        for dag_id in (REVENUE, CHECKED):
            api.wait_for_dag(dag_id)
            api.unpause(dag_id)
        yield env
    finally:
        print(env.airflow.stop())


def test_a_broken_circuit_is_an_import_error_next_to_working_dags(world):
    errors = world.airflow.api.import_errors()
    assert len(errors) == 1 and errors[0]["filename"].endswith(ERRORS.name), errors
    expected = str(CircuitError(validate_file(str(world.circuits / "broken.yaml"))))
    assert expected in errors[0]["stack_trace"]
    assert "broken.yaml:7: node 'big'" in errors[0]["stack_trace"]
    # listed (the list hides stale DAGs) and free of import errors: they stay scheduled
    dags = {d["dag_id"]: d for d in world.airflow.api.call("GET", "/api/v2/dags")["dags"]}
    assert {REVENUE, CHECKED} <= set(dags) and "broken_circuit" not in dags, dags
    assert not any(dags[d]["has_import_errors"] or dags[d]["is_stale"] for d in (REVENUE, CHECKED))


def test_three_timesteps_equal_a_full_recompute_and_a_killed_stage_is_retried(world):
    gen = RevenueGenerator(str(world.data))
    store = world.store(REVENUE)
    for t in (1, 2, 3):
        gen.write_batch()
        kill = {"dbsp_failpoint": {"task": "stages.enriched", "point": "mid_step", "kill": True}} if t == 2 else None
        run_id = world.run(REVENUE, kill)
        assert store.last_committed() == t
        assert store.manifest(t).meta["run_id"] == run_id  # one DAG run = one timestep
        if kill:
            tis = {ti["task_id"]: ti for ti in world.airflow.api.task_instances(REVENUE, run_id)}
            assert tis["stages.enriched"]["try_number"] == 2, world.airflow.api.describe(REVENUE, run_id, world.airflow.home)
            assert all(ti["state"] == "success" for ti in tis.values())
    expected = oracle.revenue_by_region(str(world.data))
    for view in ("by_region", "order_extremes", "big_spenders"):
        assert world.show(REVENUE, view) == expected[view], view


def _payments(world, name: str, rows: list[dict]) -> None:
    write_parquet(str(world.data / "inbox" / "payments" / name), rows, PAYMENTS)


def test_a_failed_expectation_blocks_the_commit_until_the_input_is_fixed(world):
    store = world.store(CHECKED)
    good = [{"payment_id": i, "amount": 10.0 * i} for i in range(1, 6)]
    _payments(world, "payments-0001.parquet", good)
    world.run(CHECKED)
    assert store.last_committed() == 1

    bad = [{"payment_id": 6, "amount": 5.0}, {"payment_id": 7, "amount": -3.0}]
    _payments(world, "payments-0002.parquet", bad)
    run_id = world.run(CHECKED, expect="failed")
    tis = {ti["task_id"]: ti for ti in world.airflow.api.task_instances(CHECKED, run_id)}
    assert tis["quality_check"]["state"] == "failed" and tis["quality_check"]["try_number"] == 1  # not retried
    assert tis["commit"]["state"] == "upstream_failed"
    log = "\n".join(task_log(world.airflow.home, CHECKED, run_id, "quality_check"))
    assert "QualityGateFailed" in log and "expect_column_values_to_be_between" in log
    assert store.last_committed() == 1  # the manifest did not advance

    fixed = [{"payment_id": 6, "amount": 5.0}, {"payment_id": 7, "amount": 3.0}]
    _payments(world, "payments-0002.parquet", fixed)  # replaces the bad file (atomic rename)
    world.run(CHECKED)
    assert store.last_committed() == 2
    assert world.show(CHECKED, "settled") == Counter({(r["payment_id"], r["amount"]): 1 for r in good + fixed})


def test_stop_leaves_no_process_behind(world):
    out = world.airflow.stop()
    assert "stopped" in out, out
    assert world.airflow.leftovers() == []
    assert not (world.airflow.home / "airflow_local.pid").exists()


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
