"""PostgreSQL inputs (`source: {kind: postgres, table: schema.name, connection: NAME}`) on a real server.

The server is the project's own (``spark_jobs/local_postgres.py``: the pinned pgserver wheel's
PostgreSQL 16, wal_level=logical, a temporary folder, 127.0.0.1). Random streams of inserts,
updates and deletes (several per key per step, key changes, a transaction left open across a
step) run against a table; after every step the circuit's views, integrated from their committed
deltas, equal the query over the table as committed before the step's position, and the manifest
holds that position. A crash at any point of a step applies each change once; the password never
reaches the state folder.
"""
from __future__ import annotations

import contextlib
import os
import random
from collections import Counter
from decimal import Decimal

import pytest

from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from spark_jobs.spec.model import WEIGHT
from spark_jobs.state import InjectedFailure, armed
from spark_jobs.state.arrow_read import read_view
from tests.policies import config
from tests.postgres_support import server  # noqa: F401 - the shared server fixture

psycopg = pytest.importorskip("psycopg")


CIRCUIT = """\
name: {name}
inputs:
  orders:
    schema: {{id: long, cust: string, amount: "decimal(10,2)", note: string}}
    source: {{kind: postgres, table: public.{table}, connection: shop}}
nodes:
  big: {{op: filter, input: orders, where: "amount > 5"}}
  per_cust: {{op: aggregate, input: orders, group_by: [cust], aggregates: {{n: "count(*)", total: "sum(amount)"}}}}
outputs: [orders, big, per_cust]
"""


def _view(rt, view: str) -> Counter:
    table = read_view(rt.store, view)
    if table is None:
        return Counter()
    cols = [c for c in table.column_names if c != WEIGHT]
    return +Counter({tuple(r[c] for c in cols): r[WEIGHT] for r in table.to_pylist()})


def _expected(rows: list[tuple]) -> dict[str, Counter]:
    orders = Counter(rows)
    big = Counter(r for r in rows if r[2] is not None and r[2] > 5)
    groups: dict = {}
    for _, cust, amount, _ in rows:
        n, total = groups.get(cust, (0, None))
        groups[cust] = (n + 1, total if amount is None else (total or Decimal(0)) + amount)
    return {"orders": orders, "big": big,
            "per_cust": Counter({(c, n, t): 1 for c, (n, t) in groups.items()})}


class Orders:
    """A table changed at random through its own connections."""

    def __init__(self, uri: str, table: str, rng: random.Random) -> None:
        self.uri, self.table, self.rng, self.next_id = uri, table, rng, 1
        self.conn = psycopg.connect(uri, autocommit=True)
        self.conn.execute(f"DROP TABLE IF EXISTS {table}")
        self.conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, cust text, amount numeric(10,2), note text)")
        self.open = None  # a transaction left open across a step

    def _amount(self):
        return self.rng.choice([None, Decimal("0.50"), Decimal("3.25"), Decimal("7.00"), Decimal("12.10")])

    def _ids(self, conn) -> list[int]:
        return [r[0] for r in conn.execute(f"SELECT id FROM {self.table} ORDER BY id").fetchall()]

    def change(self, conn=None) -> None:
        conn = conn or self.conn
        ids = self._ids(conn)
        op = self.rng.choice(["insert", "insert", "update", "update", "delete", "rekey"] if ids else ["insert"])
        if op == "insert":
            conn.execute(f"INSERT INTO {self.table} VALUES (%s, %s, %s, %s)",
                         (self.next_id, self.rng.choice(["x", "y", None]), self._amount(),
                          self.rng.choice([None, "n", "é"])))
            self.next_id += 1
        elif op == "update":
            conn.execute(f"UPDATE {self.table} SET amount = %s, cust = %s WHERE id = %s",
                         (self._amount(), self.rng.choice(["x", "y", "z"]), self.rng.choice(ids)))
        elif op == "delete":
            conn.execute(f"DELETE FROM {self.table} WHERE id = %s", (self.rng.choice(ids),))
        else:
            conn.execute(f"UPDATE {self.table} SET id = %s WHERE id = %s", (self.next_id, self.rng.choice(ids)))
            self.next_id += 1

    def rows(self) -> list[tuple]:
        return [tuple(r) for r in self.conn.execute(f"SELECT id, cust, amount, note FROM {self.table}").fetchall()]


def _circuit(tmp_path, name: str, table: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(CIRCUIT.format(name=name, table=table))
    return str(path)


def _position(rt) -> int:
    from spark_jobs.executor.sources.pg_scan import recorded_position

    return recorded_position(rt.store.manifest().consumed("orders"))


def test_views_follow_random_inserts_updates_and_deletes(server, tmp_path, monkeypatch):
    monkeypatch.setenv("DBSP_CONN_SHOP", server.uri)
    rng = random.Random(3)
    orders = Orders(server.uri, "orders_a", rng)
    for _ in range(6):
        orders.change()
    file, cfg = _circuit(tmp_path, "pga", "orders_a"), config(tmp_path, engine="arrow")
    positions = []
    side = psycopg.connect(server.uri)  # a transaction left open across steps
    for step in range(10):
        for _ in range(rng.randint(0, 6)):
            orders.change()
        if step % 3 == 1:
            side.execute("BEGIN")
            for _ in range(2):
                orders.change(side)
        report = run_step(open_circuit(file, cfg))
        assert report.engine == "arrow"
        rt = open_circuit(file, cfg)
        expected = _expected(orders.rows())  # the open transaction's changes are not in it yet
        for view in ("orders", "big", "per_cust"):
            assert _view(rt, view) == expected[view], (step, view)
        positions.append(_position(rt))
        if step % 3 == 1:
            side.commit()  # lands in the next step
    side.close()
    assert positions == sorted(positions) and len(set(positions)) > 5


@pytest.mark.parametrize("point", ["begin", "after_state_write", "mid_step", "before_manifest", "after_manifest"])
def test_a_crash_at_any_point_applies_each_change_once(server, tmp_path, monkeypatch, point):
    monkeypatch.setenv("DBSP_CONN_SHOP", server.uri)
    rng = random.Random(17)
    table = f"orders_{point}"
    orders = Orders(server.uri, table, rng)
    file, cfg = _circuit(tmp_path, f"pgc_{point}", table), config(tmp_path, engine="arrow")
    for _ in range(4):
        orders.change()
    run_step(open_circuit(file, cfg))
    for _ in range(3):
        for _ in range(5):
            orders.change()
        with armed(point), pytest.raises(InjectedFailure):
            run_step(open_circuit(file, cfg))
        run_step(open_circuit(file, cfg))  # the retry; after the manifest it reads the next changes
        rt = open_circuit(file, cfg)
        assert _view(rt, "orders") == _expected(orders.rows())["orders"]


def test_no_password_in_the_state_and_a_missing_key_or_column_is_refused(server, tmp_path, monkeypatch):
    from spark_jobs.executor.sources.pg_log import PostgresRefused

    monkeypatch.setenv("DBSP_CONN_SHOP", server.uri)
    orders = Orders(server.uri, "orders_p", random.Random(1))
    orders.change()
    file, cfg = _circuit(tmp_path, "pgp", "orders_p"), config(tmp_path, engine="arrow")
    run_step(open_circuit(file, cfg))
    orders.change()
    run_step(open_circuit(file, cfg))
    for folder, _, names in os.walk(tmp_path):
        for n in names:
            with open(os.path.join(folder, n), "rb") as fh:
                assert server.password.encode() not in fh.read(), os.path.join(folder, n)
    orders.conn.execute("CREATE TABLE nokey (id bigint, cust text, amount numeric(10,2), note text)")
    with pytest.raises(PostgresRefused, match="no primary key"):
        run_step(open_circuit(_circuit(tmp_path, "pgk", "nokey"), cfg))
    orders.conn.execute("ALTER TABLE orders_p DROP COLUMN note")
    with pytest.raises(PostgresRefused, match="note"):
        run_step(open_circuit(file, cfg))


def test_an_unknown_connection_says_what_to_set(tmp_path, monkeypatch):
    from spark_jobs.connections import NoConnection

    monkeypatch.delenv("DBSP_CONN_SHOP", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_SHOP", raising=False)
    with pytest.raises(NoConnection, match="DBSP_CONN_SHOP"):
        run_step(open_circuit(_circuit(tmp_path, "pgn", "orders_n"), config(tmp_path, engine="arrow")))


SINK_CIRCUIT = """\
name: {name}
inputs:
  orders:
    schema: {{id: long, cust: string, amount: "decimal(10,2)", note: string}}
    source: {{kind: postgres, table: public.{table}, connection: shop}}
nodes:
  per_cust: {{op: aggregate, input: orders, group_by: [cust], aggregates: {{n: "count(*)", total: "sum(amount)"}}}}
outputs:
  per_cust:
    key: [cust]
    sink: {{kind: postgres, table: public.{target}, connection: shop}}
"""


def _sink_rows(orders: Orders, target: str) -> Counter:
    return Counter(tuple(r) for r in orders.conn.execute(f"SELECT cust, n, total FROM {target}").fetchall())


def test_a_keyed_view_is_upserted_into_a_postgres_table_once_per_timestep(server, tmp_path, monkeypatch):
    """The sink table equals the view after every step; a crash inside the sink's transaction and a
    retried commit apply nothing twice; a target whose columns differ is refused before writing."""
    from spark_jobs.publish.postgres_sink import SinkRefused, sink_views

    monkeypatch.setenv("DBSP_CONN_SHOP", server.uri)
    rng = random.Random(8)
    orders = Orders(server.uri, "orders_s", rng)
    orders.conn.execute("DROP TABLE IF EXISTS cust_totals")
    orders.conn.execute("CREATE TABLE cust_totals (cust text, n bigint, total numeric(20,2))")
    path = tmp_path / "pgs.yaml"
    path.write_text(SINK_CIRCUIT.format(name="pgs", table="orders_s", target="cust_totals"))
    cfg = config(tmp_path, engine="arrow")
    for step in range(6):
        for _ in range(rng.randint(1, 5)):
            orders.change()
        if step == 3:
            with armed("sink_before_commit"), contextlib.suppress(InjectedFailure):
                run_step(open_circuit(str(path), cfg))  # committed; the sink's transaction rolled back
        else:
            run_step(open_circuit(str(path), cfg))
        rt = open_circuit(str(path), cfg)
        sink_views(rt.compiled.spec, rt.committed)  # a retried commit: applies only what is missing
        view = _view(rt, "per_cust")
        assert _sink_rows(orders, "cust_totals") == view, step
        progress = orders.conn.execute("SELECT timestep FROM dbsp_progress WHERE view = 'per_cust'").fetchone()[0]
        assert progress == rt.store.last_committed()
    orders.conn.execute("DROP TABLE IF EXISTS other_totals")
    orders.conn.execute("CREATE TABLE other_totals (cust text, n bigint)")
    path.write_text(SINK_CIRCUIT.format(name="pgs", table="orders_s", target="other_totals"))
    rt = open_circuit(str(path), cfg)
    with pytest.raises(SinkRefused, match="has columns"):
        sink_views(rt.compiled.spec, rt.committed)
    assert orders.conn.execute("SELECT count(*) FROM other_totals").fetchone()[0] == 0


def test_a_connection_comes_from_airflow_inside_a_task_and_is_never_printed(monkeypatch):
    """Inside a task (AIRFLOW_CTX_DAG_ID set) the Airflow connection is used, here in Airflow's
    own JSON environment form; messages describe it without its password."""
    from spark_jobs.connections import describe, redact, resolve

    monkeypatch.delenv("DBSP_CONN_SHOPX", raising=False)
    monkeypatch.setenv("AIRFLOW_CTX_DAG_ID", "x")
    monkeypatch.setenv("AIRFLOW_CONN_SHOPX", '{"conn_type": "postgres", "host": "127.0.0.1", "port": 5433, '
                                             '"login": "u", "password": "s3cret-pw", "schema": "db"}')
    uri = resolve("shopx")
    assert uri.startswith("postgresql://u:") and "127.0.0.1:5433/db" in uri
    assert "s3cret-pw" not in describe(uri) and "s3cret-pw" not in redact(f"failed: {uri}", ("s3cret-pw",))
    assert redact("host=h password='a b' user=u") == "host=h password=*** user=u"


def test_the_example_circuit_writes_back_to_postgres_and_publishes_delta(server, tmp_path, monkeypatch):
    """circuits/shop_postgres.yaml on the local server: its view in the sink table and in its
    published Delta table, after a snapshot step and a replication step."""
    import deltalake

    from tests.conftest import ROOT

    monkeypatch.setenv("DBSP_CONN_SHOP", server.uri)
    conn = psycopg.connect(server.uri, autocommit=True)
    conn.execute("DROP TABLE IF EXISTS public.orders")
    conn.execute("CREATE TABLE public.orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2), status text)")
    conn.execute("DROP TABLE IF EXISTS public.customer_totals")
    conn.execute("CREATE TABLE public.customer_totals (customer text PRIMARY KEY, orders bigint, spent numeric(22,2))")
    conn.execute("INSERT INTO orders VALUES (1, 'ann', 10.50, 'paid'), (2, 'bob', 3.00, 'open'), (3, 'ann', 1.25, 'paid')")
    cfg = config(tmp_path, engine="arrow")
    circuit = str(ROOT / "circuits" / "shop_postgres.yaml")
    run_step(open_circuit(circuit, cfg))
    conn.execute("UPDATE orders SET status = 'paid' WHERE id = 2")
    conn.execute("DELETE FROM orders WHERE id = 1")
    run_step(open_circuit(circuit, cfg))
    rt = open_circuit(circuit, cfg)
    expected = Counter({("ann", 1, Decimal("1.25")): 1, ("bob", 1, Decimal("3.00")): 1})
    assert _view(rt, "customer_totals") == expected
    assert Counter(tuple(r) for r in conn.execute("SELECT customer, orders, spent FROM customer_totals")) == expected
    table = deltalake.DeltaTable(str(tmp_path / "views" / "shop_postgres" / "customer_totals")).to_pyarrow_table()
    assert Counter((r["customer"], r["orders"], r["spent"]) for r in table.to_pylist()) == expected
    conn.close()


def _dag_run(rt, run_id: str, tasks: str = "per_step") -> dict:
    from spark_jobs.runtime import timestep
    from tests.dag_tasks import run_stage_tasks

    p = timestep.plan(rt, run_id)
    run_stage_tasks(rt, run_id, tasks)
    timestep.check(rt, run_id)
    return {"plan": p, "commit": timestep.commit(rt, run_id)}


@pytest.mark.parametrize("tasks", ["per_step", "per_stage"])
def test_a_dag_run_reads_the_planned_position_and_its_note_names_it(server, tmp_path, monkeypatch, tasks):
    """The DAG's tasks (plan, stages, check, commit) as Airflow runs them: the plan freezes the
    position, the stages read up to it, the commit records it; the run note names it."""
    from spark_jobs.orchestration.run_note import success_note

    monkeypatch.setenv("DBSP_CONN_SHOP", server.uri)
    rng = random.Random(31)
    table = f"orders_dag_{tasks}"
    orders = Orders(server.uri, table, rng)
    file, cfg = _circuit(tmp_path, f"pgd_{tasks}", table), config(tmp_path, engine="arrow")
    for run in range(3):
        for _ in range(4):
            orders.change()
        done = _dag_run(open_circuit(file, cfg), f"run-{run}", tasks)
        rt = open_circuit(file, cfg)
        assert _view(rt, "orders") == _expected(orders.rows())["orders"]
        note = success_note("x", done["commit"], done["plan"])
        assert "PostgreSQL log position" in note and ("snapshot" in note if run == 0 else "changes since" in note)


TYPES_CIRCUIT = """\
name: {name}
inputs:
  t:
    schema: {{id: long, i: int, d: double, b: boolean, day: date, at: timestamp, local: timestamp_ntz,
             m: "decimal(10,3)", s: string}}
    {key}source: {{kind: postgres, table: public.{table}, connection: shop}}
nodes:
  f: {{op: filter, input: t, where: "true"}}
outputs: [f]
"""


def _typed_rows(conn, table: str) -> Counter:
    import datetime

    out = Counter()
    for r in conn.execute(f"SELECT id, i, d, b, day, at, local, m, s FROM {table}").fetchall():
        r = list(r)
        r[5] = None if r[5] is None else r[5].astimezone(datetime.timezone.utc)
        out[tuple(r)] += 1
    return out


@pytest.mark.parametrize("engine,identity", [("arrow", "pk"), ("arrow", "full"), ("spark", "pk")])
def test_every_supported_type_on_both_engines_and_a_full_identity_key(server, tmp_path, monkeypatch, engine,
                                                                       identity, request):
    """Values of each supported type (NULLs, infinities, negative decimals, time zones, text
    with quotes and non-ASCII) arrive as PostgreSQL holds them, on the Arrow and the Spark step;
    a table without a primary key is read by a declared key once its replica identity is FULL."""
    if engine == "spark":
        request.getfixturevalue("spark")
    monkeypatch.setenv("DBSP_CONN_SHOP", server.uri)
    table = f"typed_{engine}_{identity}"
    conn = psycopg.connect(server.uri, autocommit=True)
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    pk = "PRIMARY KEY" if identity == "pk" else ""
    conn.execute(f"CREATE TABLE {table} (id bigint {pk}, i integer, d double precision, b boolean, day date, "
                 f"at timestamptz, local timestamp, m numeric(10,3), s text)")
    if identity == "full":
        conn.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
    conn.execute("SET TimeZone = 'Europe/Paris'")
    insert = f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
    conn.execute(insert, (1, 7, 1.5, True, "2024-02-29", "2024-03-31 02:30:00+02", "1999-12-31 23:59:59.123456",
                          "-12.345", "it's \"é\""))
    conn.execute(insert, (2, None, None, None, None, None, None, None, None))
    key = "key: [id]\n    " if identity == "full" else ""
    path = tmp_path / "typed.yaml"
    path.write_text(TYPES_CIRCUIT.format(name=f"pgt_{engine}_{identity}", table=table, key=key))
    cfg = config(tmp_path, engine=engine)
    run_step(open_circuit(str(path), cfg))
    conn.execute(insert, (3, -2147483648, float("inf"), False, "0001-01-01", "2038-01-19 03:14:08+00",
                          "2024-01-01 00:00:00", "9999999.999", ""))
    conn.execute(f"UPDATE {table} SET s = 'changed', d = -0.25 WHERE id = 1")
    conn.execute(f"DELETE FROM {table} WHERE id = 2")
    report = run_step(open_circuit(str(path), cfg))
    assert report.engine == engine
    rt = open_circuit(str(path), cfg)
    assert _view(rt, "f") == _typed_rows(conn, table)
    conn.close()


def test_a_profile_names_a_connection_without_its_password(server, tmp_path, monkeypatch):
    """The CLI's other way: the profile's `connections:` holds a password-less URI and libpq takes
    the password from PGPASSWORD; a URI with its password is accepted too (DESIGN's
    `connections: {NAME: URI}`), and an unreadable value is refused without echoing it."""
    from dataclasses import replace

    from spark_jobs.config import ProfileError, load_config

    monkeypatch.delenv("DBSP_CONN_SHOP", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_SHOP", raising=False)
    monkeypatch.setenv("PGPASSWORD", server.password)
    orders = Orders(server.uri, "orders_prof", random.Random(4))
    orders.change()
    cfg = replace(config(tmp_path, engine="arrow"), connections={"shop": f"postgresql://dbsp@127.0.0.1:{server.port}/postgres"})
    rt = open_circuit(_circuit(tmp_path, "pgprof", "orders_prof"), cfg)
    run_step(rt)
    assert _view(open_circuit(_circuit(tmp_path, "pgprof", "orders_prof"), cfg), "orders") == Counter(orders.rows())
    profile = tmp_path / "p.yaml"
    profile.write_text(f"connections:\n  shop: {server.uri}\n")
    assert load_config(str(profile)).connections == {"shop": server.uri}
    profile.write_text("connections:\n  shop: [1]\n")
    with pytest.raises(ProfileError, match="must be a connection string"):
        load_config(str(profile))


def _refused_step(file: str, cfg, match: str) -> str:
    from spark_jobs.executor.sources.pg_log import PostgresRefused

    with pytest.raises(PostgresRefused, match=match) as caught:
        run_step(open_circuit(file, cfg))
    return str(caught.value)


def test_a_truncate_stops_the_input_and_a_full_refresh_reads_the_table_again(server, spark, tmp_path, monkeypatch):
    """TRUNCATE is not in the log as deletes: the step stops with a message naming the table and the
    way out, commits nothing, and a full refresh rebuilds the views from the table as it is."""
    monkeypatch.setenv("DBSP_CONN_SHOP", server.uri)
    orders = Orders(server.uri, "orders_trunc", random.Random(2))
    for _ in range(4):
        orders.change()
    file, cfg = _circuit(tmp_path, "pgtr", "orders_trunc"), config(tmp_path, engine="arrow")
    run_step(open_circuit(file, cfg))
    last = open_circuit(file, cfg).store.last_committed()
    orders.conn.execute("TRUNCATE orders_trunc")
    orders.change()
    message = _refused_step(file, cfg, "TRUNCATE")
    assert "public.orders_trunc" in message and "--full-refresh" in message
    assert open_circuit(file, cfg).store.last_committed() == last  # nothing committed
    _refused_step(file, cfg, "TRUNCATE")  # and it stays stopped
    run_step(open_circuit(file, cfg), full_refresh=True)
    assert _view(open_circuit(file, cfg), "orders") == Counter(orders.rows())
    orders.change()
    run_step(open_circuit(file, cfg))  # and reads the log again after it
    assert _view(open_circuit(file, cfg), "orders") == Counter(orders.rows())


@pytest.mark.parametrize("alter,match", [
    ("ALTER TABLE {t} ALTER COLUMN amount TYPE text", "column amount is text in the table but the schema says decimal"),
    ("ALTER TABLE {t} ALTER COLUMN id TYPE numeric(20,0)", "column id is numeric.* but the schema says bigint"),
    ("ALTER TABLE {t} RENAME COLUMN cust TO customer", "column cust is not in the table"),
])
def test_a_schema_change_of_the_source_table_stops_the_input(server, tmp_path, monkeypatch, alter, match):
    """A declared column whose type changed (to one the declared type cannot hold), renamed or
    dropped stops the input with a message naming the column, before anything is read or
    committed; changes logged before the ALTER are not applied half-way."""
    monkeypatch.setenv("DBSP_CONN_SHOP", server.uri)
    table = f"orders_alter_{abs(hash(alter)) % 1000}"
    orders = Orders(server.uri, table, random.Random(6))
    for _ in range(3):
        orders.change()
    file, cfg = _circuit(tmp_path, f"pgal{table[-3:]}", table), config(tmp_path, engine="arrow")
    run_step(open_circuit(file, cfg))
    before = _view(open_circuit(file, cfg), "orders")
    orders.change()
    orders.conn.execute(alter.format(t=table))
    message = _refused_step(file, cfg, match)
    assert f"public.{table}" in message
    assert _view(open_circuit(file, cfg), "orders") == before


def test_a_column_added_to_the_source_table_is_ignored(server, tmp_path, monkeypatch):
    """Only the declared columns are read: a column added to the table changes nothing."""
    monkeypatch.setenv("DBSP_CONN_SHOP", server.uri)
    orders = Orders(server.uri, "orders_added", random.Random(12))
    for _ in range(3):
        orders.change()
    file, cfg = _circuit(tmp_path, "pgadd", "orders_added"), config(tmp_path, engine="arrow")
    run_step(open_circuit(file, cfg))
    orders.conn.execute("ALTER TABLE orders_added ADD COLUMN extra text DEFAULT 'x'")
    for _ in range(4):
        orders.change()
    run_step(open_circuit(file, cfg))
    assert _view(open_circuit(file, cfg), "orders") == Counter(orders.rows())


_RNG = random.Random(0)
BIG = "".join(_RNG.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(6000))  # incompressible


@pytest.mark.parametrize("identity", ["default", "full"])
def test_an_unchanged_toasted_value_in_an_update(server, tmp_path, monkeypatch, identity):
    """A text value over 2 KB is stored out of line (TOAST); an UPDATE of other columns logs it as
    'unchanged' without its value. With REPLICA IDENTITY FULL the old row in the log carries it;
    with the default identity it is the value the key's row held: the committed one, or the one
    an earlier change of the same step wrote, or the old key's when the update changed the key.
    The views hold the right value every time, never a missing or stale one."""
    monkeypatch.setenv("DBSP_CONN_SHOP", server.uri)
    table = f"orders_toast_{identity}"
    orders = Orders(server.uri, table, random.Random(14))
    if identity == "full":
        orders.conn.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
    other = BIG[::-1]
    orders.conn.execute(f"INSERT INTO {table} VALUES (1, 'x', 1.00, %s), (2, 'y', 2.00, 'small'), "
                        f"(3, 'z', 3.00, %s)", (BIG, other))
    toast = orders.conn.execute(f"SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = '{table}'::regclass"
                                ).fetchone()[0]
    assert orders.conn.execute(f"SELECT count(*) FROM {toast}").fetchone()[0] > 0  # stored out of line
    file, cfg = _circuit(tmp_path, f"pgtoast{identity}", table), config(tmp_path, engine="arrow")
    run_step(open_circuit(file, cfg))
    orders.conn.execute(f"UPDATE {table} SET amount = 9.50 WHERE id = 1")  # note: unchanged, not in the log
    orders.conn.execute(f"UPDATE {table} SET cust = 'w' WHERE id = 2")
    orders.conn.execute(f"UPDATE {table} SET id = 30 WHERE id = 3")  # a key change leaving the value alone
    orders.conn.execute(f"INSERT INTO {table} VALUES (4, 'v', 4.00, %s)", (other + "4",))
    orders.conn.execute(f"UPDATE {table} SET amount = 4.50 WHERE id = 4")  # held by this step's insert
    run_step(open_circuit(file, cfg))
    got = _view(open_circuit(file, cfg), "orders")
    assert got == Counter(orders.rows())
    assert {r[0]: r[3] for r in got} == {1: BIG, 2: "small", 30: other, 4: other + "4"}
    orders.conn.execute(f"UPDATE {table} SET amount = 1.25, cust = 'q' WHERE id = 30")  # the committed row's
    orders.conn.execute(f"UPDATE {table} SET note = 'short now' WHERE id = 1")
    run_step(open_circuit(file, cfg))
    assert _view(open_circuit(file, cfg), "orders") == Counter(orders.rows())


def test_a_keyless_table_needs_replica_identity_full_even_with_a_declared_key(server, tmp_path, monkeypatch):
    monkeypatch.setenv("DBSP_CONN_SHOP", server.uri)
    conn = psycopg.connect(server.uri, autocommit=True)
    conn.execute("DROP TABLE IF EXISTS keyless")
    conn.execute("CREATE TABLE keyless (id bigint, cust text, amount numeric(10,2), note text)")
    conn.execute("INSERT INTO keyless VALUES (1, 'x', 1.00, NULL)")
    path = tmp_path / "pgkl.yaml"
    path.write_text(CIRCUIT.format(name="pgkl", table="keyless").replace("    source:", "    key: [id]\n    source:"))
    cfg = config(tmp_path, engine="arrow")
    message = _refused_step(str(path), cfg, "no primary key")
    assert "REPLICA IDENTITY FULL" in message
    conn.execute("ALTER TABLE keyless REPLICA IDENTITY FULL")
    run_step(open_circuit(str(path), cfg))
    conn.execute("UPDATE keyless SET amount = 2.00")
    run_step(open_circuit(str(path), cfg))
    assert _view(open_circuit(str(path), cfg), "orders") == Counter([(1, "x", Decimal("2.00"), None)])
    conn.close()


def test_a_keyless_view_is_refused_by_a_postgres_sink(server, tmp_path, monkeypatch):
    """A keyless view cannot be written to a PostgreSQL table (which copy of a duplicate would a
    delete remove?): the circuit is refused when it is loaded (`dbsp validate`, a DAG's import),
    with the line of the sink and the key to declare; the sink itself refuses it too, writing
    nothing."""
    from dataclasses import replace

    from spark_jobs.publish.postgres_sink import SinkRefused, sink_view
    from spark_jobs.spec.errors import CircuitError as SpecError

    monkeypatch.setenv("DBSP_CONN_SHOP", server.uri)
    orders = Orders(server.uri, "orders_kv", random.Random(9))
    orders.change()
    orders.conn.execute("DROP TABLE IF EXISTS kv_totals")
    orders.conn.execute("CREATE TABLE kv_totals (cust text, n bigint, total numeric(20,2))")
    path = tmp_path / "pgkv.yaml"
    keyed = SINK_CIRCUIT.format(name="pgkv", table="orders_kv", target="kv_totals")
    path.write_text(keyed.replace("    key: [cust]\n", ""))
    cfg = config(tmp_path, engine="arrow")
    with pytest.raises(SpecError, match=r"pgkv.yaml:10: .*needs outputs\.per_cust\.key") as caught:
        open_circuit(str(path), cfg)
    assert "per_cust" in str(caught.value)
    path.write_text(keyed)
    rt = open_circuit(str(path), cfg)
    run_step(rt)
    keyless = replace(rt.compiled.spec.outputs["per_cust"], key=())
    with pytest.raises(SinkRefused, match=r"needs outputs\.per_cust\.key"):
        sink_view("pgkv", keyless, rt.committed, rt.committed.last_committed())


RESHAPE_CIRCUIT = """\
name: pgrs
inputs:
  orders:
    schema: {id: long, cust: string, amount: long}
    source: {kind: changes, path: inbox/orders, format: parquet}
nodes:
  per_cust: {op: aggregate, input: orders, group_by: [cust], aggregates: {n: "count(*)", total: "sum(amount)"}}
outputs:
  per_cust:
    key: [cust]
    sink: {kind: postgres, table: public.rs_totals, connection: shop}
"""


def test_a_view_reshaped_by_a_circuit_change_is_refused_until_its_table_is_altered_then_rewritten(
        server, tmp_path, monkeypatch):
    """A change of the circuit gives a sunk view another column (runtime/change.py): the table is
    the user's, so it is not altered here. `dbsp plan-change` says so, the sink refuses naming the
    table and the column to add; once the table is altered, the sink rewrites its rows from the
    whole view in one transaction and goes on with the deltas. (A files input: no replication slot.)"""
    from spark_jobs.publish.postgres_sink import SinkRefused, sink_views
    from spark_jobs.runtime.change import plan_change
    from tests.engines import write_change

    monkeypatch.setenv("DBSP_CONN_SHOP", server.uri)
    rng = random.Random(10)
    conn = psycopg.connect(server.uri, autocommit=True)
    conn.execute("DROP TABLE IF EXISTS rs_totals")
    conn.execute("CREATE TABLE rs_totals (cust text, n bigint, total bigint)")
    held: Counter = Counter()
    columns = {"id": "long", "cust": "string", "amount": "long"}

    def change(t: int) -> None:
        rows: Counter = Counter()
        for _ in range(6):
            if held and rng.random() < 0.3:
                row = rng.choice(sorted(held, key=repr))
                rows[row] -= 1
                held[row] -= 1
                if not held[row]:
                    del held[row]
            else:
                row = (rng.randint(1, 50), rng.choice(["x", "y", "z", None]), rng.randint(1, 9))
                rows[row] += 1
                held[row] += 1
        write_change(str(tmp_path), "orders", t, columns, Counter({r: w for r, w in rows.items() if w}))

    path = tmp_path / "pgrs.yaml"
    path.write_text(RESHAPE_CIRCUIT)
    cfg = config(tmp_path, engine="arrow")
    for t in (1, 2):
        change(t)
        run_step(open_circuit(str(path), cfg))
    path.write_text(RESHAPE_CIRCUIT.replace('total: "sum(amount)"}', 'total: "sum(amount)", top: "max(id)"}'))
    rt = open_circuit(str(path), cfg)
    plan = plan_change(rt)
    assert plan.views == {"per_cust": "reshaped"}
    assert any("alter its PostgreSQL table public.rs_totals" in line for line in plan.lines({})), plan.lines({})
    change(3)
    said: list[str] = []
    assert run_step(rt, progress=said.append, apply_change=True).mode == "apply_change"  # committed
    assert any("sink not written yet" in s and "add column(s) top" in s for s in said), said
    rt = open_circuit(str(path), cfg)
    with pytest.raises(SinkRefused, match=r"changed its columns at timestep 3 .* table public.rs_totals still has "
                                          r"the old ones .*add column\(s\) top"):
        sink_views(rt.compiled.spec, rt.committed)
    conn.execute("ALTER TABLE rs_totals ADD COLUMN top bigint")
    (result,) = sink_views(rt.compiled.spec, rt.committed)
    assert result.after == 3 and "rewritten from the whole view at timestep 3" in result.note

    def rows() -> Counter:
        return Counter(tuple(r) for r in conn.execute("SELECT cust, n, total, top FROM rs_totals").fetchall())

    assert rows() == _view(rt, "per_cust") and rows()
    change(4)
    run_step(open_circuit(str(path), cfg))  # later steps apply their deltas
    rt = open_circuit(str(path), cfg)
    assert rows() == _view(rt, "per_cust") and rt.store.last_committed() == 4
    conn.close()


def test_changes_committed_after_the_plan_wait_for_the_next_timestep(server, tmp_path, monkeypatch):
    """The plan fixes the log position a timestep reads up to: transactions that commit after it
    (while the stages run) are not in the timestep, whose views equal the table as it was at the
    recorded position; the next timestep brings them."""
    from spark_jobs.runtime import timestep
    from tests.dag_tasks import run_stage_tasks

    monkeypatch.setenv("DBSP_CONN_SHOP", server.uri)
    rng = random.Random(23)
    orders = Orders(server.uri, "orders_late", rng)
    file, cfg = _circuit(tmp_path, "pglate", "orders_late"), config(tmp_path, engine="arrow")
    for _ in range(4):
        orders.change()
    run_step(open_circuit(file, cfg))
    for run in range(3):
        for _ in range(4):
            orders.change()
        at_plan = orders.rows()
        rt = open_circuit(file, cfg)
        timestep.plan(rt, f"late-{run}")
        for _ in range(3):
            orders.change()  # committed after the plan, before the stages read
        run_stage_tasks(rt, f"late-{run}", "per_stage")
        timestep.check(rt, f"late-{run}")
        timestep.commit(rt, f"late-{run}")
        assert _view(open_circuit(file, cfg), "orders") == Counter(at_plan), run
    run_step(open_circuit(file, cfg))
    assert _view(open_circuit(file, cfg), "orders") == Counter(orders.rows())
