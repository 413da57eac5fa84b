"""An edited circuit file picked up by real Airflow: a new DAG version, and a run with the
``apply_change`` param bootstraps the new view (runtime/change.py, orchestration/dag_factory.py).

`airflow dags test` parses dags/ (the DAG factory reads the circuit file), stores the serialized
DAG (Airflow 3 gives it a new ``dag_version`` when it differs from the last) and runs every task
in its own process. The first run loads the circuit; then the file gains a view and a change
arrives: a run without the param is refused (nothing committed), one with ``mode: apply_change``
commits the timestep with the old view's state kept and the new view whole.
"""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections import Counter

import pytest

from spark_jobs.config import load_config
from spark_jobs.runtime.circuit import open_circuit
from tests.airflow_support import ROOT, free_port
from tests.engines import write_change

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

CIRCUIT = """\
name: evolving
inputs:
  t:
    schema: {id: long, g: string, v: long}
    source: {kind: changes, path: inbox/t, format: parquet}
nodes:
  per_g: {op: aggregate, input: t, group_by: [g], aggregates: {n: "count(*)", s: "sum(v)"}}
outputs:
  per_g: {}
"""
EDITED = CIRCUIT.replace("outputs:", "  big: {op: filter, input: t, where: \"v > 4\"}\noutputs:\n  big: {}")
COLUMNS = {"id": "long", "g": "string", "v": "long"}


def _versions(home) -> list[int]:
    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute("SELECT version_number FROM dag_version WHERE dag_id = 'evolving' "
                          "ORDER BY version_number").fetchall()
    return [r[0] for r in rows]


def test_an_edited_circuit_is_a_new_dag_version_and_a_run_with_the_param_applies_it(tmp_path):
    from spark_jobs.orchestration.airflow_env import environment
    from spark_jobs.state.arrow_read import read_view

    data, home, circuits = tmp_path / "data", tmp_path / "home", tmp_path / "circuits"
    circuits.mkdir()
    path = circuits / "evolving.yaml"
    path.write_text(CIRCUIT)
    profile = tmp_path / "profile.yaml"  # in-process steps: no JVM in the tasks
    profile.write_text((ROOT / "config" / "local.yaml").read_text().replace("engine: auto", "engine: arrow"))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "DBSP_"))}
    base.update(DBSP_CONFIG=str(profile), DBSP_DATA_ROOT=str(data), DBSP_CIRCUITS_DIR=str(circuits))
    env = environment(str(home), config=load_config(str(profile)), port=free_port(), base=base, force=True)
    # Airflow skips writing a DAG serialized less than this many seconds ago (default 30): the
    # edit below comes a few seconds after the first run on a quiet machine
    env["AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL"] = "0"
    airflow = str(ROOT / ".venv" / "bin" / "airflow")
    migrated = subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert migrated.returncode == 0, migrated.stderr[-3000:]

    def dags_test(*conf: str) -> subprocess.CompletedProcess:
        out = subprocess.run([airflow, "dags", "test", "evolving", *conf], env=env, capture_output=True,
                             text=True, timeout=600, cwd=tmp_path)
        (tmp_path / f"dags_test_{len(_versions(home))}.log").write_text(out.stdout + out.stderr)
        return out

    rows = Counter({(i, "ab"[i % 2], i): 1 for i in range(1, 9)})
    write_change(str(data), "t", 1, COLUMNS, rows)
    first = dags_test()
    assert first.returncode == 0 and "state=success" in first.stdout + first.stderr, first.stderr[-4000:]
    assert _versions(home) == [1]

    path.write_text(EDITED)  # the edit, and a change: one row out, two in
    change = Counter({(1, "b", 1): -1, (20, "a", 7): 1, (21, "c", 2): 1})
    write_change(str(data), "t", 2, COLUMNS, change)
    rows.update(change)
    rows = +rows
    refused = dags_test()
    log = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "apply-change" in log and "new view(s) big" in log, log[-4000:]
    cfg = load_config(str(profile), data_root=str(data))
    assert open_circuit(str(path), cfg).store.last_committed() == 1
    applied = dags_test("-c", json.dumps({"mode": "apply_change"}))
    assert applied.returncode == 0 and "state=success" in applied.stdout + applied.stderr, applied.stderr[-4000:]
    assert _versions(home) == [1, 2]  # the edited file is the DAG's second version

    rt = open_circuit(str(path), cfg)
    manifest = rt.store.manifest()
    assert manifest.timestep == 2 and manifest.meta["mode"] == "apply_change"

    def view(name: str) -> Counter:
        table = read_view(rt.store, name)
        cols = [c for c in table.column_names if c != "_weight"]
        return +Counter({tuple(r[c] for c in cols): r["_weight"] for r in table.to_pylist()})

    assert view("big") == Counter({row: n for row, n in rows.items() if row[2] > 4})
    groups: dict = {}
    for (_, g, v), n in rows.items():
        count, total = groups.get(g, (0, 0))
        groups[g] = (count + n, total + n * v)
    assert view("per_g") == Counter({(g, n, s): 1 for g, (n, s) in groups.items()})
