"""A circuit over a PostgreSQL table and a Delta table, with a PostgreSQL sink, run by Airflow.

The first timestep (the snapshot) is a step in this process; the second is a DAG run by
`airflow dags test` (a real Airflow: its metadata DB, the DAG parsed from dags/, every task run,
the dbsp plugin's listener writing the run note). Its connection is an Airflow connection
(``AIRFLOW_CONN_SHOP`` in Airflow's JSON form, which only Airflow reads: no ``DBSP_CONN_SHOP`` is
in its environment), so the tasks get it from Airflow. Then: the views and the sink table are
right, the run's note names the Delta version and the PostgreSQL log position its commit
recorded and the ones it read from, and the password is in none of the Airflow home (its DB), the data root (manifests,
quality reports, published tables) or the tasks' logs (`dags test` prints them).
"""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections import Counter
from decimal import Decimal

import pyarrow as pa
import pytest

from spark_jobs.config import load_config
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from tests.airflow_support import ROOT, free_port
from tests.postgres_support import server  # noqa: F401 - the shared server fixture

pytestmark = [pytest.mark.airflow, pytest.mark.slow]
psycopg = pytest.importorskip("psycopg")
dl = pytest.importorskip("deltalake")

CIRCUIT = """\
name: pg_airflow
inputs:
  orders:
    schema: {id: long, customer: string, amount: "decimal(12,2)"}
    source: {kind: postgres, table: public.af_orders, connection: shop}
  rates:
    schema: {customer: string, rate: long}
    source: {kind: delta, path: tables/rates}
nodes:
  totals: {op: aggregate, input: orders, group_by: [customer], aggregates: {orders: "count(*)", spent: "sum(amount)"}}
  rated: {op: join, left: totals, right: rates, on: [customer]}
outputs:
  rated: {}
  totals:
    key: [customer]
    sink: {kind: postgres, table: public.af_totals, connection: shop}
"""
RATES = pa.schema([("customer", pa.string()), ("rate", pa.int64())])


def _notes(home) -> list[str]:
    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute("SELECT n.content FROM dag_run_note n JOIN dag_run r ON r.id = n.dag_run_id "
                          "WHERE r.dag_id = 'pg_airflow' ORDER BY r.id").fetchall()
    return [r[0] for r in rows]


def test_a_dag_run_reads_postgres_and_delta_through_an_airflow_connection(server, tmp_path, monkeypatch):
    from spark_jobs.executor.sources.pg_log import lsn_text
    from spark_jobs.executor.sources.pg_scan import recorded_position
    from spark_jobs.orchestration.airflow_env import environment

    conn = psycopg.connect(server.uri, autocommit=True)
    for t in ("af_orders", "af_totals"):
        conn.execute(f"DROP TABLE IF EXISTS {t}")
    conn.execute("CREATE TABLE af_orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2))")
    conn.execute("CREATE TABLE af_totals (customer text PRIMARY KEY, orders bigint, spent numeric(22,2))")
    conn.execute("INSERT INTO af_orders VALUES (1, 'ann', 10.50), (2, 'bob', 3.00), (3, 'ann', 1.25)")
    data, home = tmp_path / "data", tmp_path / "home"
    delta = str(data / "tables" / "rates")
    dl.write_deltalake(delta, pa.table({"customer": ["ann", "bob"], "rate": [1, 2]}, schema=RATES))
    (tmp_path / "circuits").mkdir()
    (tmp_path / "circuits" / "pg_airflow.yaml").write_text(CIRCUIT)
    profile = tmp_path / "profile.yaml"  # in-process steps: no JVM in the tasks
    profile.write_text((ROOT / "config" / "local.yaml").read_text().replace("engine: auto", "engine: arrow"))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "DBSP_"))}
    base.update(DBSP_CONFIG=str(profile), DBSP_DATA_ROOT=str(data), DBSP_CIRCUITS_DIR=str(tmp_path / "circuits"))
    env = environment(str(home), config=load_config(str(profile)), port=free_port(), base=base, force=True)
    env["AIRFLOW_CONN_SHOP"] = json.dumps({"conn_type": "postgres", "host": "127.0.0.1", "port": server.port,
                                           "login": "dbsp", "password": server.password, "schema": "postgres"})
    assert not any(k.startswith("DBSP_CONN_") for k in env)
    airflow = str(ROOT / ".venv" / "bin" / "airflow")
    outputs = []
    migrated = subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    cfg = load_config(str(profile), data_root=str(data))
    circuit = str(tmp_path / "circuits" / "pg_airflow.yaml")
    with monkeypatch.context() as m:  # the first timestep by hand (the CLI's way to the connection)
        m.setenv("DBSP_CONN_SHOP", server.uri)
        run_step(open_circuit(circuit, cfg))
    recorded = [recorded_position(open_circuit(circuit, cfg).store.manifest().consumed("orders"))]
    conn.execute("UPDATE af_orders SET amount = 4.00, customer = 'ann' WHERE id = 2")
    conn.execute("DELETE FROM af_orders WHERE id = 1")
    conn.execute("INSERT INTO af_orders VALUES (4, 'bob', 7.75)")
    dl.write_deltalake(delta, pa.table({"customer": ["bob"], "rate": [5]}, schema=RATES), mode="overwrite")
    out = subprocess.run([airflow, "dags", "test", "pg_airflow"], env=env, capture_output=True, text=True,
                         timeout=900, cwd=tmp_path)
    outputs.append(out.stdout + out.stderr)
    (tmp_path / "dags_test.log").write_text(outputs[-1])  # kept for a failure's reader
    assert out.returncode == 0 and "state=success" in outputs[-1], outputs[-1][-5000:]
    rt = open_circuit(circuit, cfg)
    assert rt.store.last_committed() == 2
    recorded.append(recorded_position(rt.store.manifest().consumed("orders")))
    totals = Counter(tuple(r) for r in conn.execute("SELECT customer, orders, spent FROM af_totals"))
    assert totals == Counter({("ann", 2, Decimal("5.25")): 1, ("bob", 1, Decimal("7.75")): 1})
    from tests.test_postgres_inputs import _view

    rt = open_circuit(str(tmp_path / "circuits" / "pg_airflow.yaml"), cfg)
    assert _view(rt, "rated") == Counter({("bob", 1, Decimal("7.75"), 5): 1})
    [note] = _notes(home)
    assert (f"input `orders`: PostgreSQL log position {lsn_text(recorded[1])} (changes since "
            f"{lsn_text(recorded[0])})") in note, note
    assert "input `rates`: Delta version 1 (changes since version 0)" in note, note
    secret = server.password.encode()
    for root in (home, data, tmp_path / "circuits"):
        for folder, _, names in os.walk(root):
            for n in names:
                with open(os.path.join(folder, n), "rb") as fh:
                    assert secret not in fh.read(), os.path.join(folder, n)
    # `dags test` runs the tasks in its own process: their logs are its output
    assert "committed timestep 2" in outputs[0] and "[DAG TEST] end task" in outputs[0]
    assert server.password not in outputs[0]
    conn.close()
