"""Statistics sidecars (``state.stats_sidecar``): a new process admits row groups from them exactly
as from the footers, reads a footer only for a file it decodes, and never trusts a sidecar that
does not hold for its file (another file's, torn, an older format): it reads the footer instead."""
from __future__ import annotations

import datetime
import os
import random
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_jobs.policy import StatePolicy
from spark_jobs.state import stats_sidecar
from spark_jobs.state.arrow_trace import write_dir
from spark_jobs.state.fs import LocalFileSystem
from spark_jobs.state.lookup import TraceFiles
from spark_jobs.state.rowgroups import FOOTERS, column_stats

DAY = datetime.date(2021, 1, 1)


def _table(rng: random.Random, n: int) -> pa.Table:
    def maybe(v):  # noqa: ANN001, ANN202
        return None if rng.random() < 0.04 else v
    return pa.table({
        "k": pa.array([maybe(rng.randrange(-2**40, 2**40) if rng.random() < 0.1 else rng.randrange(300))
                       for _ in range(n)], pa.int64()),
        "i": pa.array([maybe(rng.randrange(50)) for _ in range(n)], pa.int32()),
        "s": pa.array([maybe(f"s{rng.randrange(200):03d}") for _ in range(n)], pa.string()),
        "d": pa.array([maybe(DAY + datetime.timedelta(days=rng.randrange(-900, 900))) for _ in range(n)], pa.date32()),
        "x": pa.array([maybe(rng.random()) for _ in range(n)], pa.float64()),  # no array kind: footer
        "_weight": pa.array([rng.choice([1, 1, 2, -1]) for _ in range(n)], pa.int64()),
    })


def _same_stats(a, b) -> None:  # noqa: ANN001 - two ColumnStats
    assert a.kind == b.kind
    assert np.array_equal(a.rows, b.rows) and np.array_equal(a.known, b.known) and np.array_equal(a.nulls, b.nulls)
    assert list(a.low) == list(b.low) and list(a.high) == list(b.high)
    assert list(a.values) == list(b.values)


def test_a_sidecar_gives_the_footers_statistics_for_every_column_kind(tmp_path):
    rng = random.Random(11)
    for i in range(6):
        table = _table(rng, rng.randrange(1, 700))
        path = str(tmp_path / f"f{i}.parquet")
        if i % 2:
            table = table.sort_by([("k", "ascending")])
        pq.write_table(table, path, row_group_size=rng.choice([7, 50, 200]),
                       write_statistics=True if i < 3 else ["k", "s"])
        assert stats_sidecar.write(path)
        meta = pq.read_metadata(path)
        summary = stats_sidecar.read(path, os.path.getsize(path))
        assert summary is not None and summary.num_rows == meta.num_rows
        assert list(summary.rows) == [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        for g in range(meta.num_row_groups):
            rg = meta.row_group(g)
            assert summary.bytes[g] == sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
        for column in table.column_names:
            footer = column_stats(meta, column)
            held = summary.column(column)
            if held is not None:
                _same_stats(held, footer)
            else:  # only columns the arrays cannot hold are left to the footer
                assert footer.kind not in ("int", "date", "str"), column


def _written(tmp_path, rng: random.Random, files: int) -> tuple[list[str], pa.Table]:  # noqa: ANN001
    """Trace directories as the in-process writer makes them: sorted files of 1-6 row groups of
    1,024 rows (each a sidecar, ``MIN_GROUPS`` lowered for the test) and unsorted ones (none)."""
    fs, paths, tables = LocalFileSystem(), [], []
    policy = StatePolicy(sorted_row_group_bytes=2048)
    for i in range(files):
        table = _table(rng, rng.randrange(50, 6000))
        stat = write_dir(fs, str(tmp_path / f"t{i}"), table, policy, sort_by=("k",) if i % 3 else ())
        assert stat.rows == table.num_rows
        tables.append(table)
        paths += [p for p, _ in fs.data_files(str(tmp_path / f"t{i}"))]
    return paths, pa.concat_tables(tables)


def _oracle(all_rows: pa.Table, column: str, values: list) -> list:
    present = [v for v in values if v is not None]
    keep = pc.fill_null(pc.is_in(all_rows.column(column), pa.array(present, all_rows.schema.field(column).type)), False)
    if None in values:
        keep = pc.or_(keep, pc.is_null(all_rows.column(column)))
    return sorted(all_rows.filter(keep).to_pylist(), key=repr)


def test_only_sorted_files_of_enough_row_groups_get_a_sidecar(tmp_path):
    fs, policy = LocalFileSystem(), StatePolicy(sorted_row_group_bytes=2048)  # 1,024-row groups
    table = _table(random.Random(2), 1024 * stats_sidecar.MIN_GROUPS)
    for name, rows, sort_by, want in (("big", table.num_rows, ("k",), True), ("small", table.num_rows - 1, ("k",), False),
                                      ("unsorted", table.num_rows, (), False)):
        write_dir(fs, str(tmp_path / name), table.slice(0, rows), policy, sort_by=sort_by)
        (path,) = [p for p, _ in fs.data_files(str(tmp_path / name))]
        assert os.path.exists(stats_sidecar.sidecar_path(path)) == want, name


def test_lookups_from_sidecars_equal_lookups_from_footers_and_read_only_the_decoded_files(tmp_path, monkeypatch):
    monkeypatch.setattr(stats_sidecar, "MIN_GROUPS", 1)
    rng = random.Random(5)
    paths, all_rows = _written(tmp_path, rng, 7)
    with_sidecar = [p for p in paths if os.path.exists(stats_sidecar.sidecar_path(p))]
    assert 0 < len(with_sidecar) < len(paths)
    assert max(pq.read_metadata(p).num_row_groups for p in with_sidecar) > 2
    fs = LocalFileSystem()
    for trial in range(12):
        column = ["k", "s", "d", "i"][trial % 4]
        pool = [v for v in all_rows.column(column).to_pylist()]
        values = sorted({v for v in rng.sample(pool, rng.randrange(1, 6)) if v is not None}, key=repr)
        if column == "k":
            values += [rng.randrange(1000, 2000)]  # absent keys too
        if trial % 3 == 0:  # NULL too (it admits every group holding one: most of them)
            values.append(None)
        FOOTERS.clear()
        files = TraceFiles(fs, paths, all_rows.schema)
        assert files.rows() == all_rows.num_rows
        assert not any(ix.footer_read for p, ix in zip(paths, files._index) if p in with_sidecar)  # none before a read
        admitted = files.admitting(column, values)
        got = files.lookup(column, values)
        assert sorted(got.to_pylist(), key=repr) == _oracle(all_rows, column, values), (trial, column, values)
        # a footer was parsed only for files a group of which was admitted (and so decoded)
        assert {f for f, ix in enumerate(files._index) if ix.footer_read} <= set(admitted)
        for p in with_sidecar:  # the same answers from the footers alone
            os.rename(stats_sidecar.sidecar_path(p), stats_sidecar.sidecar_path(p) + ".off")
        FOOTERS.clear()
        plain = TraceFiles(fs, paths, all_rows.schema)
        assert all(ix.footer_read for ix in plain._index)
        assert plain.admitting(column, values) == admitted
        assert plain.admitted_rows(column, [v for v in values if v is not None]) == \
            TraceFiles(fs, paths, all_rows.schema).admitted_rows(column, [v for v in values if v is not None])
        assert sorted(plain.lookup(column, values).to_pylist(), key=repr) == _oracle(all_rows, column, values)
        for p in with_sidecar:
            os.rename(stats_sidecar.sidecar_path(p) + ".off", stats_sidecar.sidecar_path(p))
    FOOTERS.clear()


def test_a_sidecar_that_does_not_hold_for_its_file_is_never_used(tmp_path, monkeypatch):
    monkeypatch.setattr(stats_sidecar, "MIN_GROUPS", 1)
    rng = random.Random(8)
    paths, all_rows = _written(tmp_path, rng, 3)
    a, b = paths[1], paths[2]  # sorted files, sidecars
    assert os.path.getsize(a) != os.path.getsize(b)
    size = os.path.getsize(b)
    good = stats_sidecar.read(b, size)
    assert good is not None
    assert stats_sidecar.read(b, size + 1) is None  # another size: another file
    shutil.copy(stats_sidecar.sidecar_path(a), stats_sidecar.sidecar_path(b))  # another file's
    assert stats_sidecar.read(b, size) is None
    with open(stats_sidecar.sidecar_path(b), "wb") as fh:  # torn / garbage
        fh.write(b"ARROW1\x00\x00 not a sidecar")
    assert stats_sidecar.read(b, size) is None
    os.remove(stats_sidecar.sidecar_path(b))
    assert stats_sidecar.read(b, size) is None
    # an older (or newer) format, or rows that do not add up: the footer is read
    stats_sidecar.write(b)
    side = pa.ipc.open_file(pa.OSFile(stats_sidecar.sidecar_path(b))).read_all()
    for change in ({"dbsp.version": "0"}, {"dbsp.rows": "1"}):
        meta = {**{k.decode(): v.decode() for k, v in side.schema.metadata.items()}, **change}
        with pa.OSFile(stats_sidecar.sidecar_path(b), "wb") as sink:
            with pa.ipc.new_file(sink, side.schema.with_metadata(meta)) as w:
                w.write_table(side.replace_schema_metadata(meta))
        assert stats_sidecar.read(b, size) is None
    # and a lookup over such a file still answers right, from its footer
    FOOTERS.clear()
    files = TraceFiles(LocalFileSystem(), paths, all_rows.schema)
    values = sorted({v for v in all_rows.column("k").to_pylist()[:40] if v is not None})
    assert sorted(files.lookup("k", values).to_pylist(), key=repr) == _oracle(all_rows, "k", values)
    assert files._index[2].footer_read
    FOOTERS.clear()


def test_loop_steps_over_sidecar_state_match_dijkstra(tmp_path, monkeypatch):
    """End to end: shortest paths in-process on a random graph whose sorted traces carry
    sidecars (every sorted file of 1,024-row groups gets one here), each step starting from an
    empty footer cache as a new process does, with insertions and deletions (edges near the
    source too): the integrated view equals Dijkstra's distances at every step."""
    from collections import Counter

    from spark_jobs.runtime.circuit import open_circuit
    from spark_jobs.runtime.step import run_step
    from tests.engines import output_delta, write_change
    from tests.policies import make_input_folders, sorted_small
    from tests.test_iterate import EDGE, SP, START, dijkstra, integrate

    monkeypatch.setattr(stats_sidecar, "MIN_GROUPS", 1)
    rng = random.Random(4)
    rt = open_circuit(SP, sorted_small(tmp_path, engine="arrow", state={"sorted_row_group_bytes": 1024}))
    make_input_folders(rt)
    edges, view = Counter(), Counter()
    for t in range(1, 9):
        change = Counter()
        if t == 1:
            while len(change) < 4000:
                change[(rng.randrange(800), rng.randrange(800), rng.randrange(1, 9))] = 1
        else:
            live = sorted(e for e, n in edges.items() if n > 0)
            for e in rng.sample(live, 15) + rng.sample([e for e in live if e[0] < 40], 5):
                change[e] = -edges[e]
            for _ in range(20):
                e = (rng.randrange(800), rng.randrange(800), rng.randrange(1, 9))
                if e not in change:
                    change[e] += 1
        edges.update(change)
        write_change(str(tmp_path), "weighted_edges", t, EDGE, change)
        if t == 1:
            write_change(str(tmp_path), "start", t, START, Counter({(0, 0): 1}))
        FOOTERS.clear()
        report = run_step(rt)
        assert report.engine == "arrow"
        view = integrate(view, output_delta(rt, "dist")[0])
        assert set(view) == dijkstra(edges, Counter({(0, 0): 1})), f"timestep {t}"
    sidecars = [p for p in (tmp_path).rglob("_stats-*.arrow")]
    assert sidecars, "no trace file got a sidecar: the test does not test them"
    FOOTERS.clear()


def test_a_sorted_trace_spark_writes_gets_sidecars_and_lookups_agree(spark, tmp_path):
    """A load on Spark (the default engine of a local profile's first step) writes the base that
    later steps look up most: its large sorted files get sidecars too, and a lookup from them
    equals one from the footers and the rows written."""
    from spark_jobs.state.store import StateStore

    rng = random.Random(9)
    rows = [(rng.randrange(3000), f"v{rng.randrange(50)}", 1) for _ in range(4_000)]
    policy = StatePolicy(sorted_row_group_bytes=1024, sort_min_rows=0)
    store = StateStore(spark, str(tmp_path), "c", "fp", policy=policy)
    with store.begin() as tx:
        tx.replace("t", spark.createDataFrame(rows, "k long, v string, _weight long"), sort_by=("k",))
        tx.commit()
    files = store.trace_files("t")
    assert files is not None
    held = [p for p in files.paths if os.path.exists(stats_sidecar.sidecar_path(p))]
    assert held and all(pq.read_metadata(p).num_row_groups >= stats_sidecar.MIN_GROUPS for p in held)
    probe = sorted({rng.randrange(3100) for _ in range(30)})
    want = sorted((k, v, w) for k, v, w in rows if k in set(probe))
    FOOTERS.clear()
    fresh = store.trace_files("t")
    got = fresh.lookup("k", probe)
    assert sorted(zip(*(got.column(c).to_pylist() for c in ("k", "v", "_weight")))) == want
    assert all(ix._summary is not None for p, ix in zip(fresh.paths, fresh._index) if p in held)
    FOOTERS.clear()
