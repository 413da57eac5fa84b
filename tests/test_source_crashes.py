"""Real `dbsp step` processes killed at random points over a PostgreSQL input, a Delta input and a
PostgreSQL sink, as the chaos test (tests/chaos.py) kills steps over file inputs.

One circuit reads a PostgreSQL table (snapshot, then its replication slot) and a Delta table
(`deltalake` appends, deletes, updates, merges, optimizes), and writes a keyed view back to
PostgreSQL. Between random changes of both tables, a `dbsp step` subprocess is told to die on the
spot at a random failpoint (``DBSP_FAILPOINT_KILL=1``, exit 137: what ``kill -9`` leaves; the
points include ``after_manifest``, committed but the slot not advanced, and
``sink_before_commit``, inside the sink's transaction) or is killed with SIGKILL after a random
delay. After every kill: the slot never stands past the position the last manifest recorded (it
moves only after the commit), and the sink's progress row never passes the last commit. After
every clean step (the restart): every view equals the query over the PostgreSQL table as it is and
over the Delta table at the recorded version, and the sink table equals its view: no change was
lost or applied twice.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import Counter
from decimal import Decimal

import pyarrow as pa
import pytest

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from spark_jobs.spec.model import WEIGHT
from spark_jobs.state import failpoints
from spark_jobs.state.arrow_read import read_view
from tests.postgres_support import server  # noqa: F401 - the shared server fixture

psycopg = pytest.importorskip("psycopg")
dl = pytest.importorskip("deltalake")

CIRCUIT = """\
name: crashy
inputs:
  orders:
    schema: {id: long, cust: string, amount: "decimal(10,2)"}
    source: {kind: postgres, table: public.crash_orders, connection: shop}
  t:
    schema: {k: long, g: string, v: long}
    source: {kind: delta, path: tables/t}
nodes:
  per_cust: {op: aggregate, input: orders, group_by: [cust], aggregates: {n: "count(*)", total: "sum(amount)"}}
  per_g: {op: aggregate, input: t, group_by: [g], aggregates: {n: "count(*)", total: "sum(v)"}}
outputs:
  orders: {}
  t: {}
  per_g: {}
  per_cust:
    key: [cust]
    sink: {kind: postgres, table: public.crash_totals, connection: shop}
"""
POINTS = ("begin", "after_state_write", "mid_step", "before_manifest", "after_manifest", "before_publish",
          "mid_publish", "sink_before_commit")
SCHEMA = pa.schema([("k", pa.int64()), ("g", pa.string()), ("v", pa.int64())])


def _view(rt, view: str) -> Counter:
    table = read_view(rt.store, view)
    if table is None:
        return Counter()
    cols = [c for c in table.column_names if c != WEIGHT]
    return +Counter({tuple(r[c] for c in cols): r[WEIGHT] for r in table.to_pylist()})


def _aggregate(rows: Counter, group: int, value: int) -> Counter:
    groups: dict = {}
    for row, w in rows.items():
        n, total = groups.get(row[group], (0, None))
        v = row[value]
        groups[row[group]] = (n + w, total if v is None else (total or 0) + v * w)
    return Counter({(g, n, t): 1 for g, (n, t) in groups.items() if n})


class World:
    """The two source tables, changed at random, and the circuit's files."""

    def __init__(self, root, uri: str, rng: random.Random) -> None:
        self.root, self.uri, self.rng = root, uri, rng
        self.conn = psycopg.connect(uri, autocommit=True)
        for t in ("crash_orders", "crash_totals"):
            self.conn.execute(f"DROP TABLE IF EXISTS {t}")
        self.conn.execute("CREATE TABLE crash_orders (id bigint PRIMARY KEY, cust text, amount numeric(10,2))")
        self.conn.execute("CREATE TABLE crash_totals (cust text, n bigint, total numeric(20,2))")
        self.next_id = self.next_key = 0
        self.delta = str(root / "data" / "tables" / "t")
        dl.write_deltalake(self.delta, self._fresh(4))
        self.circuit = root / "crashy.yaml"
        self.circuit.write_text(CIRCUIT)
        local = (PROJECT_ROOT / "config" / "local.yaml").read_text()
        self.profile = root / "profile.yaml"  # every step in-process on Arrow: no JVM
        self.profile.write_text(local.replace("engine: auto", "engine: arrow"))
        self.config = load_config(str(self.profile), data_root=str(root / "data"))

    def _fresh(self, n: int) -> pa.Table:
        k = list(range(self.next_key, self.next_key + n))
        self.next_key += n
        return pa.table({"k": k, "g": [self.rng.choice("abc") for _ in k],
                         "v": [self.rng.choice([None, *range(6)]) for _ in k]}, schema=SCHEMA)

    def change(self) -> None:
        """A few PostgreSQL changes (in one or several transactions) and a Delta version or none."""
        for _ in range(self.rng.randint(1, 3)):
            with self.conn.transaction():
                for _ in range(self.rng.randint(1, 3)):
                    ids = [r[0] for r in self.conn.execute("SELECT id FROM crash_orders").fetchall()]
                    op = self.rng.choice(["insert", "insert", "update", "delete", "rekey"] if ids else ["insert"])
                    amount = self.rng.choice([None, Decimal("1.50"), Decimal("4.00"), Decimal("9.25")])
                    if op == "insert":
                        self.conn.execute("INSERT INTO crash_orders VALUES (%s, %s, %s)",
                                          (self.next_id, self.rng.choice("xyz"), amount))
                        self.next_id += 1
                    elif op == "update":
                        self.conn.execute("UPDATE crash_orders SET amount = %s, cust = %s WHERE id = %s",
                                          (amount, self.rng.choice("xyz"), self.rng.choice(ids)))
                    elif op == "delete":
                        self.conn.execute("DELETE FROM crash_orders WHERE id = %s", (self.rng.choice(ids),))
                    else:
                        self.conn.execute("UPDATE crash_orders SET id = %s WHERE id = %s",
                                          (self.next_id, self.rng.choice(ids)))
                        self.next_id += 1
        op = self.rng.choice(["none", "append", "append", "delete", "update", "merge", "optimize"])
        if op == "append":
            dl.write_deltalake(self.delta, self._fresh(self.rng.randint(1, 4)), mode="append")
        elif op == "delete":
            dl.DeltaTable(self.delta).delete(f"v = {self.rng.randint(0, 5)}")
        elif op == "update":
            dl.DeltaTable(self.delta).update(predicate=f"k % 3 = {self.rng.randint(0, 2)}", updates={"v": "v + 1"})
        elif op == "merge":
            source = self._fresh(2)
            source = pa.concat_tables([source, pa.table({"k": [self.rng.randrange(self.next_key)], "g": ["c"],
                                                         "v": [5]}, schema=SCHEMA)])
            (dl.DeltaTable(self.delta).merge(source, "s.k = t.k", source_alias="s", target_alias="t")
             .when_matched_update_all().when_not_matched_insert_all().execute())
        elif op == "optimize":
            dl.DeltaTable(self.delta).optimize.compact()

    def step_killed(self, point: str | None, delay: float | None) -> str:
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
        if point:
            env.update({failpoints.ENV_VAR: point, failpoints.KILL_VAR: "1"})
        cmd = [sys.executable, "-m", "spark_jobs.cli.main", "step", str(self.circuit), "--config",
               str(self.profile), "--data-root", str(self.root / "data")]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, cwd=PROJECT_ROOT)
        try:
            _out, err = proc.communicate(timeout=delay if delay is not None else 300)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return "killed -9"
        assert proc.returncode in (0, 137), f"dbsp step failed ({proc.returncode}):\n{err.decode()[-3000:]}"
        return f"died at {point}" if proc.returncode == 137 else "committed"

    def slot_and_recorded(self) -> tuple[int | None, int | None]:
        from spark_jobs.executor.sources.pg_log import lsn_int
        from spark_jobs.executor.sources.pg_scan import recorded_position

        rt = open_circuit(str(self.circuit), self.config)
        m = rt.store.manifest()
        recorded = recorded_position(m.consumed("orders")) if m else None
        slot = rt.compiled.spec.inputs["orders"].source.slot
        found = self.conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                                  (slot,)).fetchone()
        return (lsn_int(found[0]) if found else None), recorded

    def progress(self) -> int:
        found = self.conn.execute("SELECT to_regclass('public.dbsp_progress')").fetchone()[0]
        if found is None:
            return 0
        row = self.conn.execute("SELECT timestep FROM dbsp_progress WHERE circuit = 'crashy' AND view = 'per_cust'"
                                ).fetchone()
        return row[0] if row else 0

    def check(self, where: str) -> None:
        from spark_jobs.executor.sources.delta_log import consumed_versions

        rt = open_circuit(str(self.circuit), self.config)
        orders = Counter(tuple(r) for r in self.conn.execute("SELECT id, cust, amount FROM crash_orders").fetchall())
        version = consumed_versions(rt.store.manifest().consumed("t"))[-1]
        assert version == dl.DeltaTable(self.delta).version(), where
        t = dl.DeltaTable(self.delta, version=version).to_pyarrow_table(columns=["k", "g", "v"])
        t_rows = Counter(tuple(r.values()) for r in t.to_pylist())
        assert _view(rt, "orders") == orders, where
        assert _view(rt, "per_cust") == _aggregate(orders, 1, 2), where
        assert _view(rt, "t") == t_rows, where
        assert _view(rt, "per_g") == _aggregate(t_rows, 1, 2), where
        sink = Counter(tuple(r) for r in self.conn.execute("SELECT cust, n, total FROM crash_totals").fetchall())
        assert sink == _view(rt, "per_cust"), where
        assert self.progress() == rt.store.last_committed(), where


def test_steps_killed_at_random_points_lose_and_repeat_nothing(server, tmp_path, monkeypatch):
    monkeypatch.setenv("DBSP_CONN_SHOP", server.uri)
    rng = random.Random(int(os.environ.get("DBSP_CRASH_SEED", "5")))
    world = World(tmp_path, server.uri, rng)
    world.change()
    run_step(open_circuit(str(world.circuit), world.config))  # the snapshot step
    world.check("first step")
    created, _ = world.slot_and_recorded()  # the slot may start a little past the snapshot's position
    events: Counter = Counter()
    points = list(POINTS)
    rng.shuffle(points)
    steps, i = int(os.environ.get("DBSP_CRASH_STEPS", "4")), 0
    while i < steps or points:  # at least DBSP_CRASH_STEPS iterations, until every point was tried
        i += 1
        world.change()
        for _ in range(rng.choice([1, 1, 2])):  # one or two crashed steps in a row
            if i == 2 or rng.random() < 0.3:  # SIGKILL after a random delay (a step takes a few seconds)
                event = world.step_killed(None, rng.uniform(0.5, 4.0))
                if event == "committed":
                    event = "finished before the kill"
            elif points:
                event = world.step_killed(points.pop(), None)  # every point at least once
            else:
                event = world.step_killed(rng.choice(POINTS), None)
            events[event] += 1
            slot, recorded = world.slot_and_recorded()
            assert slot is not None and recorded is not None and slot <= max(recorded, created), (i, event)
            last = open_circuit(str(world.circuit), world.config).store.last_committed()
            assert world.progress() <= last, (i, event)
        if rng.random() < 0.3:
            world.change()  # changes land between the crash and the restart too
        run_step(open_circuit(str(world.circuit), world.config))  # the restart: a clean step
        world.check(f"iteration {i} after {dict(events)}")
    assert sum(n for e, n in events.items() if e.startswith("died at")) >= len(POINTS)
    assert events["killed -9"] + events["finished before the kill"] >= 1
    print(dict(events))
