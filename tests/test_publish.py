"""Published views: Delta tables that follow the committed views, timestep by timestep.

A random stream of inserts, deletes and updates is committed for 20 timesteps and published
after each. After every one the published tables, read back with the ``deltalake`` reader and
with DuckDB (its own replay of the Delta log, no deltalake), equal what ``dbsp show`` prints; the version of each timestep
(its commit metadata) holds the view of that timestep, and its change data feed equals the
view's delta. Crashes between the commit and the publish (and in the middle of catching up) are
repaired by the next publish or by ``dbsp publish``. A keyless view holds a tuple of weight n as
n rows; a keyed view is maintained by MERGE (NULL keys included).

Publishing reads only the manifests and the view deltas, so the 20-step stream commits them
with pyarrow in the store's layout (no Spark: CI time); a shorter stream runs through
``run_step`` with real Spark, and tests/test_cdc.py and tests/test_shop_cdc.py publish from
``dbsp step`` and the DAG's commit task.
"""
from __future__ import annotations

import json
import os
import random
from collections import Counter

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from spark_jobs.cli.main import main as dbsp
from spark_jobs.config import load_config
from spark_jobs.publish import PublishError, targets, version_timesteps
from spark_jobs.publish.delta import commit_change, open_table
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from spark_jobs.state import failpoints
from tests import oracle

CIRCUIT = """
name: pub
inputs:
  t:
    schema: {id: long, g: string, x: long}
    source: {kind: changes, path: inbox/t, format: parquet}
nodes:
  gx:    {op: select, input: t, columns: [g, x]}
  per_g: {op: aggregate, input: t, group_by: [g], aggregates: {n: "count(*)", s: "sum(x)"}}
  per_id: {op: aggregate, input: t, group_by: [id], aggregates: {n: "count(*)", s: "sum(x)"}}
outputs:
  gx: {}
  per_g: {key: [g]}
  per_id: {key: [id]}
"""


def _counter(table: pa.Table | None, columns: list[str], weight: str | None = None) -> Counter:
    """Rows of a table as a Counter of tuples: copies counted, or summed ``weight`` column."""
    out: Counter = Counter()
    if table is None:
        return out
    data = list(zip(*[table.column(c).to_pylist() for c in columns])) if table.num_rows else []
    weights = table.column(weight).to_pylist() if weight else [1] * len(data)
    for row, w in zip(data, weights):
        out[row] += w
    return +out if not weight else Counter({k: v for k, v in out.items() if v})


def _cdf(uri: str, version: int, columns: list[str]) -> Counter:
    """The change data feed of one version as a Z-set."""
    sign = {"insert": 1, "update_postimage": 1, "delete": -1, "update_preimage": -1}
    feed = pa.table(DeltaTable(uri).load_cdf(starting_version=version, ending_version=version).read_all())
    out: Counter = Counter()
    for row in feed.select(columns + ["_change_type"]).to_pylist():
        out[tuple(row[c] for c in columns)] += sign[row["_change_type"]]
    return Counter({k: v for k, v in out.items() if v})


def _duckdb(uri: str, columns: list[str], version: int | None = None) -> Counter:
    """The table at ``version`` (newest if None) as DuckDB alone reads it: its own replay of the
    Delta log's JSON commits (files added and not removed up to the version), then those Parquet
    files. No deltalake in the read: a DuckDB read of the files deltalake lists would check
    deltalake twice, and DuckDB's delta extension cannot be downloaded here."""
    log = os.path.join(uri, "_delta_log")
    assert not [f for f in os.listdir(log) if "checkpoint" in f], "a checkpoint: this replay reads JSON commits only"
    actions = (r"SELECT CAST(regexp_extract(filename, '(\d+)\.json$', 1) AS BIGINT) AS v, "
               f"\"add\".path AS added, \"remove\".path AS removed FROM read_json('{log}/*.json', filename = true, "
               "format = 'newline_delimited', columns = {'add': 'STRUCT(path VARCHAR)', 'remove': 'STRUCT(path VARCHAR)'})")
    upto = "" if version is None else f"WHERE v <= {int(version)}"
    con = duckdb.connect()
    newest, = con.execute(f"SELECT max(v) FROM ({actions})").fetchone()
    assert version is None or version <= newest, f"{uri} has no version {version}"
    live = [os.path.join(uri, p) for p, in con.execute(
        f"WITH a AS (SELECT * FROM ({actions}) {upto}) SELECT DISTINCT url_decode(added) FROM a "
        "WHERE added IS NOT NULL AND added NOT IN (SELECT removed FROM a WHERE removed IS NOT NULL)").fetchall()]
    if not live:
        return Counter()
    names = ", ".join(f'"{c}"' for c in columns)
    return Counter(con.execute(f"SELECT {names} FROM read_parquet({live!r})").fetchall())


class Stream:
    """Rows (id, g, x): inserts (ids may repeat), deletes and updates (same id, new x)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.bag, self.next_id = rng, Counter(), 0

    def change(self) -> Counter:
        rng, delta = self.rng, Counter()
        live = list((+self.bag).elements())
        for row in rng.sample(live, min(len(live), rng.randint(0, 3))):  # deletes
            delta[row] -= 1
        for row in rng.sample(live, min(len(live), rng.randint(0, 3))):  # updates: same id and g, new x
            if delta[row] + self.bag[row] > 0:
                delta[row] -= 1
                delta[(row[0], row[1], rng.randint(0, 4))] += 1
        for _ in range(rng.randint(1, 4)):  # inserts; a few ids and values repeat: weights > 1
            self.next_id += 1
            row = (rng.choice((self.next_id, 1)), rng.choice(("a", "b", "c", None)), rng.randint(0, 2))
            delta[row] += rng.choice((1, 1, 2))
        self.bag.update(delta)
        return Counter({k: v for k, v in delta.items() if v})

    def views(self) -> dict[str, Counter]:
        gx: Counter = Counter()
        groups: dict = {}
        ids: dict = {}
        for (i, g, x), w in (+self.bag).items():
            gx[(g, x)] += w
            n, s = groups.get(g, (0, 0))
            groups[g] = (n + w, s + x * w)
            n, s = ids.get(i, (0, 0))
            ids[i] = (n + w, s + x * w)
        return {"gx": gx, "per_g": Counter({(g, n, s): 1 for g, (n, s) in groups.items()}),
                "per_id": Counter({(i, n, s): 1 for i, (n, s) in ids.items()})}


def _write(root, t: int, rows: Counter) -> None:
    folder = os.path.join(str(root), "inbox", "t")
    os.makedirs(folder, exist_ok=True)
    cols = list(zip(*rows)) if rows else [[], [], []]
    pq.write_table(pa.table({"id": pa.array(cols[0], pa.int64()), "g": pa.array(cols[1], pa.string()),
                             "x": pa.array(cols[2], pa.int64()), "_weight": pa.array(list(rows.values()), pa.int64())}),
                   os.path.join(folder, f"t{t:03d}.parquet"))


VIEW_COLUMNS = {"gx": {"g": "string", "x": "long"}, "per_g": {"g": "string", "n": "long", "s": "long"},
                "per_id": {"id": "long", "n": "long", "s": "long"}}


class Committed:
    """Committed timesteps of the circuit's views, written as the state store writes them (a
    manifest per timestep listing each view's delta and its view trace; Parquet files), with
    pyarrow instead of Spark: publishing reads only these. Manifests older than two timesteps
    are deleted, as the store's garbage collection does, so old deltas are found by listing."""

    def __init__(self, config, spec) -> None:
        from spark_jobs.runtime.circuit import state_root
        from spark_jobs.state import StateStore

        self.store = StateStore(None, state_root(config, spec.name), spec.name, "f")
        self.views: dict[str, Counter] = {v: Counter() for v in VIEW_COLUMNS}
        self.traces: dict = {}

    def commit(self, t: int, views: dict[str, Counter]) -> None:
        import json

        from spark_jobs.state import Manifest, OutputEntry, TraceEntry
        from spark_jobs.state.manifest import FileStat
        from spark_jobs.state.store import view_trace_id

        s, outputs = self.store, {}
        for view, cols in VIEW_COLUMNS.items():
            delta = Counter(views[view])
            delta.subtract(self.views[view])
            delta = Counter({k: w for k, w in delta.items() if w})
            self.views[view] = Counter(views[view])
            schema = {"type": "struct", "fields": [{"name": c, "type": ty, "nullable": True, "metadata": {}}
                                                   for c, ty in list(cols.items()) + [("_weight", "long")]]}
            entry = self.traces.setdefault(view, TraceEntry(kind="zset", schema=json.dumps(schema)))
            if not delta:
                outputs[view] = OutputEntry(None)
                continue
            rel = s.layout.new_output_dir(view, t)
            os.makedirs(s.layout.abs(rel))
            rows = list(delta)
            arrow = {"string": pa.string(), "long": pa.int64()}
            table = pa.table({c: pa.array([r[i] for r in rows], arrow[ty]) for i, (c, ty) in enumerate(cols.items())}
                             | {"_weight": pa.array(list(delta.values()), pa.int64())})
            pq.write_table(table, os.path.join(s.layout.abs(rel), "part-0.parquet"))
            entry.deltas.append((t, rel))
            entry.files[rel] = FileStat(len(rows), 1)
            outputs[view] = OutputEntry(rel, sum(w for w in delta.values() if w > 0),
                                        -sum(w for w in delta.values() if w < 0), len(rows), 1)
        manifest = Manifest(circuit=s.circuit, fingerprint=s.fingerprint, timestep=t,
                            traces={view_trace_id(v): e for v, e in self.traces.items()}, outputs=outputs)
        s.fs.publish_text(s.layout.manifest_path(t), manifest.to_json(), ".tmp-", exclusive=True)
        if t > 2:
            s.fs.remove_file(s.layout.manifest_path(t - 2))


def _show(capsys, path, root, view: str, *extra: str) -> Counter:
    """What `dbsp show CIRCUIT VIEW --format json` prints, as {tuple: weight}."""
    capsys.readouterr()
    assert dbsp(["show", str(path), view, "--format", "json", "--data-root", str(root), *extra]) == 0
    rows = json.loads(capsys.readouterr().out)
    return Counter({tuple(r[c] for c in VIEW_COLUMNS[view]): r["_weight"] for r in rows})


def _check_tables(capsys, path, root, config, spec, t: int) -> dict[str, Counter]:
    """Each published table equals `dbsp show` (read by deltalake and by DuckDB); its newest
    version is timestep t, and the change feed of t's version is `dbsp show --delta --at t`.
    Returns what `dbsp show` printed."""
    shown_now = {}
    for target in targets(config, spec):
        columns = list(VIEW_COLUMNS[target.view])
        shown = shown_now[target.view] = _show(capsys, path, root, target.view)
        table = DeltaTable(target.uri)
        assert _counter(table.to_pyarrow_table(), columns) == shown, f"{target.view} at timestep {t}"
        assert _duckdb(target.uri, columns) == shown, f"{target.view} (DuckDB) at timestep {t}"
        versions = {ts: v for v, ts in version_timesteps(target.uri).items()}
        assert max(versions) == t and table.transaction_version(target.app_id) == t
        delta = _show(capsys, path, root, target.view, "--delta", "--at", str(t))
        assert _cdf(target.uri, versions[t], columns) == delta, f"{target.view}: change feed of timestep {t}"
    return shown_now


def test_published_tables_follow_the_committed_views_over_20_random_steps(tmp_path, capsys):
    """20 random timesteps (inserts, deletes, updates; weights above 1; NULL keys) committed
    as the store commits them, each published; a crash after a commit is repaired by the next
    publish, one in the middle of catching up by `dbsp publish`."""
    from spark_jobs.publish import publish
    from spark_jobs.spec import load_circuit_text

    path = tmp_path / "pub.yaml"
    path.write_text(CIRCUIT)
    config, spec = load_config(data_root=str(tmp_path)), load_circuit_text(CIRCUIT)
    committed = Committed(config, spec)
    store = committed.store
    stream = Stream(random.Random(17))
    shown_at: dict[int, dict[str, Counter]] = {}
    for t in range(1, 21):
        stream.change()
        committed.commit(t, stream.views())
        if t == 7:  # a crash after the manifest, before the tables: the next publish repairs it
            with failpoints.armed("before_publish"), pytest.raises(failpoints.InjectedFailure):
                publish(config, spec, store)
            assert {open_table(x).transaction_version(x.app_id) for x in targets(config, spec)} == {6}
        elif t == 12:  # a crash in the middle of publishing (after one table's commit): `dbsp publish` repairs
            with failpoints.armed("mid_publish"), pytest.raises(failpoints.InjectedFailure):
                publish(config, spec, store)
            assert sorted(open_table(x).transaction_version(x.app_id) for x in targets(config, spec)) == [11, 11, 12]
            assert dbsp(["publish", str(path), "--data-root", str(tmp_path)]) == 0
            assert "published timestep(s) 12..12" in capsys.readouterr().out
        else:
            report = publish(config, spec, store)
            assert not report.failed, report.summary()
        if t == 7:  # not published yet: checked at the end, in its version
            shown_at[t] = {v: _show(capsys, path, tmp_path, v) for v in VIEW_COLUMNS}
        else:
            shown_at[t] = _check_tables(capsys, path, tmp_path, config, spec, t)
        assert shown_at[t] == stream.views(), f"timestep {t}"
        if t == 8:  # timestep 7 was published by this publish, as its own version
            for target in targets(config, spec):
                seven = {ts: v for v, ts in version_timesteps(target.uri).items()}[7]
                assert _cdf(target.uri, seven, list(VIEW_COLUMNS[target.view])) == \
                    _show(capsys, path, tmp_path, target.view, "--delta", "--at", "7")
    assert any(w > 1 for w in shown_at[20]["gx"].values()), "no tuple of weight > 1: the bag case was not tested"
    assert any(g is None for g, *_ in shown_at[20]["per_g"]), "no NULL key"
    gone = {i for t in shown_at for i, *_ in shown_at[t]["per_id"]} - {i for i, *_ in shown_at[20]["per_id"]}
    assert gone, "no key of per_id was deleted: the keyed delete was not tested"
    for target in targets(config, spec):  # time travel: version v is its timestep's view, for both readers
        columns = list(VIEW_COLUMNS[target.view])
        versions = {ts: v for v, ts in version_timesteps(target.uri).items()}
        assert sorted(versions) == list(range(21)), f"{target.view}: a timestep without its own version"
        for ts, version in versions.items():
            want = shown_at[ts][target.view] if ts else Counter()  # timestep 0: the empty table
            assert _counter(DeltaTable(target.uri, version=version).to_pyarrow_table(), columns) == want, \
                f"{target.view} version {version} (timestep {ts})"
            assert _duckdb(target.uri, columns, version) == want, f"{target.view} (DuckDB) version {version} (timestep {ts})"

    # a table ahead of the state (the state was reset under it) is rebuilt from the view
    target = targets(config, spec)[0]
    commit_change(open_table(target), target, 25, None)
    report = publish(config, spec, store)
    assert "rebuilt at 20" in report.summary(), report.summary()
    assert _counter(DeltaTable(target.uri).to_pyarrow_table(), ["g", "x"]) == shown_at[20]["gx"]

    # dbsp reset removes the tables with the state
    assert dbsp(["reset", str(path), "--data-root", str(tmp_path), "--yes"]) == 0
    assert not any(os.path.exists(x.uri) for x in targets(config, spec))


# `dbsp step`'s path needs one bag and one keyed view (CI time: every view is Spark jobs per step)
STEP_CIRCUIT = "\n".join(line for line in CIRCUIT.splitlines() if "per_g" not in line) + "\n"


@pytest.mark.slow
def test_steps_publish_their_views_and_repair_a_crash_after_the_manifest(spark, tmp_path, capsys):
    """`dbsp step`'s code path: a crash after the first step's manifest leaves no table; the
    next step creates the tables and publishes both timesteps, each as its own version."""
    path = tmp_path / "pub.yaml"
    path.write_text(STEP_CIRCUIT)
    rt = open_circuit(str(path), load_config(data_root=str(tmp_path)))
    assert [x.view for x in targets(rt.config, rt.compiled.spec)] == ["gx", "per_id"]
    stream = Stream(random.Random(3))
    _write(tmp_path, 1, stream.change())
    with failpoints.armed("before_publish"), pytest.raises(failpoints.InjectedFailure):
        run_step(rt)
    assert rt.committed.last_committed() == 1
    assert all(open_table(x) is None for x in targets(rt.config, rt.compiled.spec))
    one = {v: _show(capsys, path, tmp_path, v, "--delta", "--at", "1") for v in ("gx", "per_id")}
    _write(tmp_path, 2, stream.change())
    report = run_step(rt)
    assert not report.published.failed, report.published.summary()
    assert "published timestep(s) 1..2" in report.published.summary()
    _check_tables(capsys, path, tmp_path, rt.config, rt.compiled.spec, 2)
    for target in targets(rt.config, rt.compiled.spec):
        columns = list(VIEW_COLUMNS[target.view])
        versions = {ts: v for v, ts in version_timesteps(target.uri).items()}
        assert _cdf(target.uri, versions[1], columns) == one[target.view] != Counter()
        # the Spark reader of the committed view agrees with the pyarrow one `dbsp show` uses
        assert oracle.view_counter(rt, target.view, round_floats=False) == stream.views()[target.view]


def test_a_delta_table_someone_else_wrote_is_left_alone(tmp_path):
    from deltalake import write_deltalake

    from spark_jobs.spec import load_circuit_text

    spec = load_circuit_text(CIRCUIT)
    target = targets(load_config(data_root=str(tmp_path)), spec)[0]
    write_deltalake(target.uri, pa.table({"g": ["a"], "x": [1]}))
    with pytest.raises(PublishError, match="did not publish"):
        open_table(target)
    from spark_jobs.publish import remove_tables

    assert remove_tables(load_config(data_root=str(tmp_path)), spec) == []  # dbsp reset leaves it alone
    assert DeltaTable(target.uri).to_pyarrow_table().num_rows == 1


def test_the_copies_a_bag_loses_are_counted_in_the_table(tmp_path):
    """A shrinking tuple's old weight is read from the table's files (string, NULL and date
    first columns; several files, so their statistics are consulted)."""
    import datetime

    from spark_jobs.publish.delta import _old_counts, create
    from spark_jobs.publish.targets import Target

    for first, values in (("s", ["north", "west", None]), ("d", [datetime.date(2024, 1, 1), datetime.date(2024, 2, 1), None])):
        target = Target("c", first, str(tmp_path / first))
        schema = pa.schema([(first, pa.string() if first == "s" else pa.date32()), ("n", pa.int64()), ("_weight", pa.int64())])
        table = create(target, schema)
        for t, (v, copies) in enumerate(zip(values, (3, 1, 3)), start=1):  # one file per commit
            commit_change(table, target, t, pa.table({first: [v], "n": [7], "_weight": [copies]}, schema=schema))
        # a MERGE (3 copies -> 2) rewrites a file: deltalake writes its strings as string views
        commit_change(open_table(target), target, 4, pa.table({first: values[:1], "n": [7], "_weight": [-1]}, schema=schema))
        table = open_table(target)
        probe = pa.table({first: values + values[:1], "n": [7, 7, 7, 8], "_weight": [-1] * 4}, schema=schema)
        assert _old_counts(table, probe, [first, "n"]) == Counter({(values[0], 7): 2, (values[1], 7): 1, (None, 7): 3})
        assert _old_counts(table, probe.slice(1, 1), [first, "n"]) == Counter({(values[1], 7): 1})  # no NULL probed
