"""Delta table inputs (`source: {kind: delta, path: ...}`) against a recompute.

A table is written by ``deltalake`` from pyarrow with random appends, overwrites, deletes,
updates, merges and optimizes (several versions per step, or none); at every step the circuit's
views, integrated from their committed deltas, must equal the query over the table as it is at
the version the manifest records. With the change data feed on and off (the two ways a change
is read), partitioned or not. Also: a view published by one circuit read by another (the chain),
a crash at every point of a step (the version is applied once), a replaced table refused, a
full refresh, and the Spark step path.
"""
from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pytest

from spark_jobs.executor.arrow.readers.delta_tables import _files_with_deletion_vectors
from spark_jobs.executor.sources import InputRefused
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from spark_jobs.spec import load_circuit_text
from spark_jobs.spec.errors import CircuitError as SpecError
from spark_jobs.state import InjectedFailure, armed
from spark_jobs.state.arrow_read import read_view
from spark_jobs.spec.model import WEIGHT
from tests.policies import config

dl = pytest.importorskip("deltalake")

CIRCUIT = """\
name: {name}
inputs:
  t:
    schema: {{k: long, g: string, v: long}}
    source: {{kind: delta, path: {path}}}
nodes:
  big: {{op: filter, input: t, where: "v > 3"}}
  per_g: {{op: aggregate, input: t, group_by: [g], aggregates: {{n: "count(*)", total: "sum(v)"}}}}
outputs: [t, big, per_g]
"""
SCHEMA = pa.schema([("k", pa.int64()), ("g", pa.string()), ("v", pa.int64())])


def _rows(rng: random.Random, n: int, start: int) -> pa.Table:
    return pa.table({"k": list(range(start, start + n)),
                     "g": [rng.choice(["a", "b", "c", None]) for _ in range(n)],
                     "v": [rng.choice([None, *range(8)]) for _ in range(n)]}, schema=SCHEMA)


class Table:
    """A Delta table changed at random by ``deltalake`` the ways other jobs change tables."""

    def __init__(self, path: str, rng: random.Random, cdf: bool, partitioned: bool, dv: bool = False) -> None:
        self.path, self.rng, self.next_key = path, rng, 0
        config_ = {"delta.enableChangeDataFeed": "true"} if cdf else {}
        if dv:  # the deletion vector feature on (deltalake still rewrites files: no vector is written)
            config_["delta.enableDeletionVectors"] = "true"
        config_ = config_ or None
        dl.write_deltalake(path, self._fresh(5), partition_by=["g"] if partitioned else None,
                           configuration=config_)

    def _fresh(self, n: int) -> pa.Table:
        table = _rows(self.rng, n, self.next_key)
        self.next_key += n
        return table

    def change(self, op: str | None = None) -> str:
        op = op or self.rng.choice(["append", "append", "delete", "update", "merge", "merge", "optimize", "overwrite"])
        t = dl.DeltaTable(self.path)
        if op == "append":
            dl.write_deltalake(self.path, self._fresh(self.rng.randint(1, 6)), mode="append")
        elif op == "delete":
            t.delete(f"v = {self.rng.randint(0, 7)}")
        elif op == "update":
            t.update(predicate=f"k % 3 = {self.rng.randint(0, 2)}", updates={"v": "v + 1"})
        elif op == "merge":
            keys = self.rng.sample(range(self.next_key + 3), 4)
            source = pa.table({"k": keys, "g": [self.rng.choice("abc") for _ in keys],
                               "v": [self.rng.randint(0, 7) for _ in keys]}, schema=SCHEMA)
            (t.merge(source, "s.k = t.k", source_alias="s", target_alias="t")
             .when_matched_update_all().when_not_matched_insert_all().execute())
            self.next_key += 3
        elif op == "optimize":
            t.optimize.compact()
        else:
            dl.write_deltalake(self.path, self._fresh(self.rng.randint(0, 5)), mode="overwrite")
        return op

    def rows(self, version: int | None = None) -> Counter:
        return _table_rows(self.path, version)


def _table_rows(path: str, version: int | None = None) -> Counter:
    # deltalake's own DataFusion scan: another reader than the step's (which reads the files)
    table = pa.table(dl.DeltaTable(path, version=version).scan(columns=["k", "g", "v"]))
    return Counter((r["k"], r["g"], r["v"]) for r in table.to_pylist())


def _expected(rows: Counter) -> dict[str, Counter]:
    big = Counter({r: w for r, w in rows.items() if r[2] is not None and r[2] > 3})
    groups: dict = {}
    for (k, g, v), w in rows.items():
        n, total = groups.get(g, (0, None))
        groups[g] = (n + w, total if v is None else (total or 0) + v * w)
    return {"t": +rows, "big": big, "per_g": Counter({(g, n, total): 1 for g, (n, total) in groups.items()})}


def _view(rt, view: str) -> Counter:
    table = read_view(rt.store, view)
    if table is None:
        return Counter()
    cols = [c for c in table.column_names if c != WEIGHT]
    return +Counter({tuple(r[c] for c in cols): r[WEIGHT] for r in table.to_pylist()})


def _both_ways(rt, path: str, base: int, version: int) -> dict:
    """The change from ``base`` to ``version`` as a step reads it, and by file lists only."""
    from spark_jobs.executor.arrow.inputs import _target
    from spark_jobs.executor.arrow.readers.delta_tables import read_change
    from spark_jobs.executor.sources.discovery import InputFile
    from spark_jobs.executor.sources.reading import declared

    spec = rt.compiled.spec.inputs["t"]
    d = declared(spec, allow_weight=False)
    name = f"_delta_log/{version:020d}.json"
    item = InputFile(f"{path}/{name}", 0, 0.0, name, base=base)
    read = read_change(spec, item, d, _target(d))
    lists = read_change(spec, item, d, _target(d), feed=False)

    def rows(t):
        return Counter({tuple(r[c] for c in ("k", "g", "v")): r[WEIGHT] for r in t.to_pylist()})
    return {"read": rows(read.table), "file lists": rows(lists.table), "how": read.how}


def _consumed_version(rt) -> int:
    from spark_jobs.executor.sources.delta_log import consumed_versions

    return consumed_versions(rt.store.manifest().consumed("t"))[-1]


def _circuit(tmp_path, name: str = "dl", path: str = "tables/t") -> str:
    file = tmp_path / f"{name}.yaml"
    file.write_text(CIRCUIT.format(name=name, path=path))
    return str(file)


@pytest.mark.parametrize("cdf,partitioned,seed", [(False, False, 1), (True, False, 2), (False, True, 3),
                                                  (True, True, 4)])
def test_views_over_a_randomly_changed_table_equal_a_recompute(tmp_path, cdf, partitioned, seed):
    rng = random.Random(seed)
    table = Table(str(tmp_path / "tables" / "t"), rng, cdf, partitioned)
    cfg = config(tmp_path, engine="arrow")
    file = _circuit(tmp_path)
    ops: list[str] = []
    used: set[str] = set()
    first = ["append", "delete", "update", "merge", "optimize", "overwrite"]  # each at least once
    rng.shuffle(first)
    for step in range(12):
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            ops.append(table.change(first.pop() if first else None))
        before = _consumed_version(open_circuit(file, cfg)) if step else None
        report = run_step(open_circuit(file, cfg))
        rt = open_circuit(file, cfg)
        version = _consumed_version(rt)
        assert version == dl.DeltaTable(table.path).version()
        if before is not None and before < version:  # the feed and the file lists give one change
            ways = _both_ways(rt, table.path, before, version)
            assert ways["file lists"] == ways["read"], (step, ops)
            used.add(ways["how"])
        expected = _expected(table.rows(version))
        for view in ("t", "big", "per_g"):
            assert _view(rt, view) == expected[view], (step, view, ops)
        assert report.engine == "arrow"
    assert not first
    assert ("change data feed" in used) if cdf else used == {"file lists"}, used


def test_no_new_version_is_no_change_and_the_version_is_recorded_once_per_step(tmp_path):
    table = Table(str(tmp_path / "tables" / "t"), random.Random(7), False, False)
    file, cfg = _circuit(tmp_path), config(tmp_path, engine="arrow")
    run_step(open_circuit(file, cfg))
    rt = open_circuit(file, cfg)
    before = rt.store.manifest().consumed("t")
    assert [r["name"] for r in before] == ["_delta_log/00000000000000000000.json"]
    report = run_step(open_circuit(file, cfg))
    assert report.inputs[0].files == []
    for _ in range(3):
        table.change()
    run_step(open_circuit(file, cfg))
    consumed = open_circuit(file, cfg).store.manifest().consumed("t")
    assert len(consumed) == 2 and consumed[-1]["name"].endswith(f"{dl.DeltaTable(table.path).version():020d}.json")


@pytest.mark.parametrize("point", ["begin", "after_state_write", "mid_step", "before_manifest", "after_manifest"])
def test_a_crash_at_any_point_applies_each_version_once(tmp_path, point):
    rng = random.Random(11)
    table = Table(str(tmp_path / "tables" / "t"), rng, False, False)
    file, cfg = _circuit(tmp_path), config(tmp_path, engine="arrow")
    run_step(open_circuit(file, cfg))
    for _ in range(3):
        table.change()
    table.change()
    with armed(point), pytest.raises(InjectedFailure):
        run_step(open_circuit(file, cfg))
    run_step(open_circuit(file, cfg))  # the retry (after the manifest: nothing left to read)
    rt = open_circuit(file, cfg)
    version = _consumed_version(rt)
    assert version == dl.DeltaTable(table.path).version()
    assert _view(rt, "t") == _expected(table.rows(version))["t"]


def test_a_replaced_table_is_refused_and_a_full_refresh_reads_it_whole(tmp_path):
    path = str(tmp_path / "tables" / "t")
    table = Table(path, random.Random(3), False, False)
    table.change()
    file, cfg = _circuit(tmp_path), config(tmp_path, engine="arrow")
    run_step(open_circuit(file, cfg))
    import shutil

    from spark_jobs.executor.arrow.inputs import read_delta
    from spark_jobs.runtime.inputs import choose_inputs

    shutil.rmtree(path)
    dl.write_deltalake(path, _rows(random.Random(9), 4, 100))
    with pytest.raises(InputRefused, match="full-refresh"):
        run_step(open_circuit(file, cfg))
    rt = open_circuit(file, cfg)
    chosen = choose_inputs(rt.compiled.spec.inputs, str(tmp_path), rt.store.manifest(), full_refresh=True)
    [item] = chosen.files["t"]
    assert item.base is None and item.name.endswith("00000000000000000000.json")
    change = read_delta(rt.compiled.spec.inputs["t"], [item]).table
    assert Counter({tuple(r[c] for c in ("k", "g", "v")): r[WEIGHT] for r in change.to_pylist()}) == table.rows()


def test_a_missing_column_or_a_narrowing_type_is_refused(tmp_path):
    path = str(tmp_path / "tables" / "t")
    dl.write_deltalake(path, pa.table({"k": pa.array([1], pa.int64()), "g": ["a"], "v": pa.array([1.5])}))
    file, cfg = _circuit(tmp_path), config(tmp_path, engine="arrow")
    with pytest.raises(InputRefused, match="column v has type double but the schema says long"):
        run_step(open_circuit(file, cfg))


def test_format_and_options_do_not_apply_to_a_delta_source():
    text = CIRCUIT.format(name="x", path="tables/t").replace("kind: delta,", "kind: delta, format: csv,")
    with pytest.raises(SpecError, match="does not apply to kind delta"):
        load_circuit_text(text)
    load_circuit_text(CIRCUIT.format(name="x", path="views/other/v"))  # a published view is a fine input
    with pytest.raises(SpecError, match="inside '_dbsp/'"):
        load_circuit_text(CIRCUIT.format(name="x", path="_dbsp/x"))


UPSTREAM = """\
name: up
inputs:
  orders:
    schema: {id: long, cust: string, amount: long}
    source: {kind: changes, path: inbox/orders, format: parquet}
nodes:
  per_cust: {op: aggregate, input: orders, group_by: [cust], aggregates: {n: "count(*)", total: "sum(amount)"}}
  kept: {op: filter, input: orders, where: "amount > 2"}
outputs:
  per_cust: {key: [cust]}
  kept: {}
"""
DOWNSTREAM = """\
name: down
inputs:
  totals:
    schema: {cust: string, n: long, total: long}
    source: {kind: delta, path: views/up/per_cust}
  kept:
    schema: {id: long, cust: string, amount: long}
    source: {kind: delta, path: views/up/kept}
nodes:
  rich: {op: filter, input: totals, where: "total > 10"}
  joined: {op: join, left: kept, right: totals, on: [cust]}
outputs: [rich, joined]
"""


def test_a_view_published_by_one_circuit_is_read_by_another(tmp_path):
    """The chain: `up` publishes a keyed view (MERGE) and a bag view (appends and deletes); `down`
    reads both tables as Delta inputs, on random streams of inserts and deletes upstream."""
    from tests.engines import write_change

    (tmp_path / "up.yaml").write_text(UPSTREAM)
    (tmp_path / "down.yaml").write_text(DOWNSTREAM)
    cfg = config(tmp_path, engine="arrow")
    rng = random.Random(5)
    live: Counter = Counter()
    columns = {"id": "long", "cust": "string", "amount": "long"}
    for t in range(1, 9):
        change: Counter = Counter()
        for row in rng.sample(sorted(live.elements()), min(len(live), rng.randint(0, 3))):
            change[row] -= 1
        for i in range(rng.randint(1, 4)):
            change[(t * 10 + i, rng.choice("xyz"), rng.randint(0, 6))] += rng.choice((1, 1, 2))
        change = +change | Counter({r: w for r, w in change.items() if w < 0})
        live.update(change)
        live = +live
        write_change(str(tmp_path), "orders", t, columns, Counter({r: w for r, w in change.items() if w}))
        run_step(open_circuit(str(tmp_path / "up.yaml"), cfg))
        if rng.random() < 0.7:
            run_step(open_circuit(str(tmp_path / "down.yaml"), cfg))
            down = open_circuit(str(tmp_path / "down.yaml"), cfg)
            up = open_circuit(str(tmp_path / "up.yaml"), cfg)
            per_cust = _view(up, "per_cust")
            kept = _view(up, "kept")
            assert _view(down, "rich") == Counter({r: w for r, w in per_cust.items() if r[2] is not None and r[2] > 10})
            joined = Counter()
            for a, wa in kept.items():
                for b, wb in per_cust.items():
                    if a[1] == b[0]:
                        joined[(a[1], a[0], a[2]) + b[1:]] += wa * wb  # the join key first
            assert _view(down, "joined") == joined


def test_the_spark_step_reads_the_same_change(spark, tmp_path):
    rng = random.Random(21)
    table = Table(str(tmp_path / "tables" / "t"), rng, False, False)
    file = _circuit(tmp_path)
    run_step(open_circuit(file, config(tmp_path, engine="spark")))
    for _ in range(3):
        table.change()
    report = run_step(open_circuit(file, config(tmp_path, engine="spark")))
    assert report.engine == "spark"
    rt = open_circuit(file, config(tmp_path))
    expected = _expected(table.rows(_consumed_version(rt)))
    for view in ("t", "big", "per_g"):
        assert _view(rt, view) == expected[view]


def test_a_table_written_from_pandas_and_a_dag_run_over_it(tmp_path):
    """A table `deltalake` writes from pandas; the DAG's tasks (plan, stages, check, commit) read
    the planned version and the run note names it."""
    import pandas as pd

    from spark_jobs.orchestration.run_note import success_note
    from spark_jobs.runtime import timestep

    path = str(tmp_path / "tables" / "t")
    dl.write_deltalake(path, pd.DataFrame({"k": [1, 2, 3], "g": ["a", "b", None], "v": [5, 6, None]}).astype(
        {"v": "Int64"}))
    file, cfg = _circuit(tmp_path), config(tmp_path, engine="arrow")
    for run in range(2):
        if run:
            dl.DeltaTable(path).delete("k = 2")
            dl.write_deltalake(path, pd.DataFrame({"k": [9], "g": ["c"], "v": [7]}), mode="append")
        rt = open_circuit(file, cfg)
        p = timestep.plan(rt, f"r{run}")
        timestep.run_stages(rt, f"r{run}")
        timestep.check(rt, f"r{run}")
        commit = timestep.commit(rt, f"r{run}")
        rt = open_circuit(file, cfg)
        assert _view(rt, "t") == _table_rows(path)
        note = success_note("x", commit, p)
        assert f"Delta version {dl.DeltaTable(path).version()}" in note


_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def _z85(data: bytes) -> str:
    out = []
    for i in range(0, len(data), 4):
        n, chunk = int.from_bytes(data[i:i + 4], "big"), []
        for _ in range(5):
            chunk.append(_Z85[n % 85])
            n //= 85
        out.append("".join(reversed(chunk)))
    return "".join(out)


def _inline_vector(rows: list[int]) -> dict:
    """A deletion vector as the Delta protocol stores one inline: the magic number, then a
    RoaringBitmapArray of one 32-bit portable RoaringBitmap (one array container), Z85 encoded."""
    import struct

    rows = sorted(rows)
    assert rows and len(rows) % 2 == 0 and rows[-1] < 65536  # Z85 takes 4-byte groups: 32 + 2n bytes
    bitmap = (struct.pack("<IIHH", 12346, 1, 0, len(rows) - 1) + struct.pack("<I", 16)
              + b"".join(struct.pack("<H", r) for r in rows))
    data = struct.pack("<iqi", 1681511377, 1, 0) + bitmap
    return {"storageType": "i", "pathOrInlineDv": _z85(data), "sizeInBytes": len(data), "cardinality": len(rows)}


def _live_adds(path: str) -> dict[str, dict]:
    """The add action of every file the newest version lists (from the JSON commits)."""
    import json
    import os

    log = os.path.join(path, "_delta_log")
    adds: dict[str, dict] = {}
    for name in sorted(n for n in os.listdir(log) if n.endswith(".json")):
        for line in open(os.path.join(log, name)):
            action = json.loads(line)
            if "add" in action:
                adds[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                adds.pop(action["remove"]["path"], None)
    return adds


def _delete_with_vector(path: str, rng: random.Random) -> int:
    """A DELETE as Spark writes one on a table with deletion vectors: one file keeps its data and
    gets a (bigger) vector, in a new commit (remove + add of the same path). Returns rows deleted."""
    import json
    import os
    import time

    adds = _live_adds(path)
    masks = {os.path.basename(r["filepath"]): r["selection_vector"]
             for r in pa.table(dl.DeltaTable(path).deletion_vectors()).to_pylist()}
    candidates = []
    for p, add in sorted(adds.items()):
        n = json.loads(add["stats"])["numRecords"]
        mask = masks.get(os.path.basename(p), [])
        gone = {i for i in range(n) if i < len(mask) and not mask[i]}
        if n - len(gone) >= 2:
            candidates.append((p, add, n, gone))
    if not candidates:
        return 0
    p, add, n, gone = rng.choice(candidates)
    kept = [i for i in range(n) if i not in gone]
    new = set(rng.sample(kept, rng.randint(1, min(3, len(kept)))))
    if (len(gone) + len(new)) % 2:  # an even count (see _inline_vector)
        spare = [i for i in kept if i not in new]
        if spare:
            new.add(spare[0])
        else:
            new.pop()
    if not new:
        return 0
    now = int(time.time() * 1000)
    remove = {"path": p, "deletionTimestamp": now, "dataChange": True, "extendedFileMetadata": True,
              "partitionValues": add.get("partitionValues", {}), "size": add["size"]}
    if add.get("deletionVector"):
        remove["deletionVector"] = add["deletionVector"]
    version = dl.DeltaTable(path).version() + 1
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json"), "x") as fh:
        fh.write(json.dumps({"commitInfo": {"timestamp": now, "operation": "DELETE"}}) + "\n")
        fh.write(json.dumps({"remove": remove}) + "\n")
        fh.write(json.dumps({"add": dict(add, deletionVector=_inline_vector(sorted(gone | new)),
                                         modificationTime=now, dataChange=True)}) + "\n")
    return len(new)


@pytest.mark.parametrize("cdf,partitioned,seed", [(False, False, 40), (True, False, 41), (False, True, 42)])
def test_deletion_vectors_are_applied(tmp_path, cdf, partitioned, seed):
    """A table with deletion vectors: DELETEs that only add a vector to a file (written into the log
    as Spark writes them, inline vectors), mixed with deltalake's own appends, deletes, updates,
    merges, optimizes and overwrites. At every step the views equal deltalake's own DataFusion
    scan of the recorded version (which applies the vectors), from a snapshot and by file lists."""
    rng = random.Random(seed)
    table = Table(str(tmp_path / "tables" / "t"), rng, cdf, partitioned, dv=True)
    dl.write_deltalake(table.path, table._fresh(6), mode="append")
    file, cfg = _circuit(tmp_path), config(tmp_path, engine="arrow")
    vectors = 0
    for step in range(10):
        for _ in range(rng.choice([1, 1, 2])):
            if step == 0 or rng.random() < 0.5:
                vectors += bool(_delete_with_vector(table.path, rng))
            else:
                table.change()
        if step == 0:
            assert _files_with_deletion_vectors(dl.DeltaTable(table.path)) > 0
        if rng.random() < 0.8:
            run_step(open_circuit(file, cfg))
        rt = open_circuit(file, cfg)
        if rt.store.last_committed() == 0:
            continue
        version = _consumed_version(rt)
        expected = _expected(table.rows(version))
        for view in ("t", "big", "per_g"):
            assert _view(rt, view) == expected[view], (step, view)
    assert vectors >= 3
