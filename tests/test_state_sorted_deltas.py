"""An in-process step writes a key-sorted trace's deltas sorted, and merges them sorted, as Spark's
``append`` does: a lookup of a few keys then decodes the row groups they fall in, not a whole
unsorted delta (after a 100k-row W1 step, 80k line items at every lookup until the next
compaction). No Spark: the store commits with pyarrow."""
from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_jobs.policy import StatePolicy
from spark_jobs.state import StateStore

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string()), ("_weight", pa.int64())])


def _table(keys: list[int]) -> pa.Table:
    return pa.table({"k": keys, "v": [f"v{k % 7}" for k in keys], "_weight": [1] * len(keys)}, schema=SCHEMA)


def _step(store: StateStore, keys: list[int]) -> None:
    tx = store.begin()
    tx.in_process = True
    tx.append_table("I(x)", _table(keys), sort_by=("k", "v"))
    tx.commit()


def _no_spark():
    raise AssertionError("an in-process step started Spark")


def test_in_process_deltas_and_their_merges_are_sorted_and_looked_up_by_row_group(tmp_path):
    rng = random.Random(7)
    policy = StatePolicy(sorted_row_group_bytes=4096, delta_fanout=2, compact_fraction=1e9)
    store = StateStore(_no_spark, str(tmp_path), "c", "fp", policy=policy)
    _step(store, list(range(0, 200_000, 2)))  # the base
    everything = list(range(0, 200_000, 2))
    for _ in range(3):
        keys = rng.sample(range(1, 200_000, 2), 20_000)
        everything += keys
        _step(store, keys)
    entry = store.manifest().traces["I(x)"]
    assert entry.deltas, "a delta of this size is kept as a delta (no compaction)"
    for _, d in entry.deltas:
        for path, _ in store.fs.data_files(store.layout.abs(d)):
            f = pq.ParquetFile(path)
            assert f.metadata.num_row_groups > 1  # small row groups, as a sorted base's
            k = f.read().column("k")
            assert pc.all(pc.greater_equal(k.slice(1), k.slice(0, len(k) - 1))).as_py()  # sorted
    files = store.trace_files("I(x)")
    probe = rng.sample(everything, 5)
    got = files.lookup("k", probe)
    assert sorted(got.column("k").to_pylist()) == sorted(probe)
    assert files.decoded_rows() < 0.1 * files.rows()  # a few groups, not the deltas whole


def test_a_key_pyarrow_cannot_order_is_written_as_it_is(tmp_path):
    """An array-typed key (Spark groups and joins on arrays; pyarrow cannot sort them): the delta
    is written unsorted instead of failing the step."""
    store = StateStore(_no_spark, str(tmp_path), "c", "fp", policy=StatePolicy(compact_fraction=1e9))
    for keys in ([[1, 2], [0]], [[3], [1, 1]]):
        tx = store.begin()
        tx.in_process = True
        tx.append_table("I(a)", pa.table({"k": keys, "_weight": [1, 1]}), sort_by=("k",))
        tx.commit()
    files = store.trace_files("I(a)")
    assert sorted(map(tuple, files.read_all().column("k").to_pylist())) == [(0,), (1, 1), (1, 2), (3,)]


def test_a_trace_keeps_its_own_row_group_size_through_appends_merges_and_compaction(tmp_path):
    """``row_group_bytes`` is a trace's setting (a while loop's per-iteration state looks a few
    keys up at a time), not the store's: written with it, kept in the manifest, used again by the
    merges and compactions the store does later; a trace without it keeps the store's groups."""
    policy = StatePolicy(sorted_row_group_bytes=1 << 20, sorted_row_group_rows=1 << 20, delta_fanout=2,
                         compact_fraction=0.5)  # groups by bytes only (no row cap)
    store = StateStore(_no_spark, str(tmp_path), "c", "fp", policy=policy)

    def groups(trace: str) -> list[int]:
        entry = store.manifest().traces[trace]
        return [pq.ParquetFile(p).metadata.num_row_groups
                for d in entry.dirs for p, _ in store.fs.data_files(store.layout.abs(d))]

    for t, keys in enumerate((list(range(50_000)), list(range(50_000, 80_000)), list(range(80_000, 110_000)))):
        tx = store.begin()
        tx.in_process = True
        tx.append_table("small", _table(keys), sort_by=("k",), row_group_bytes=8192 if t == 0 else 0)
        tx.append_table("default", _table(keys), sort_by=("k",))
        tx.commit()
    small, default = store.manifest().traces["small"], store.manifest().traces["default"]
    assert small.row_group_bytes == 8192 and default.row_group_bytes == 0
    assert len(small.dirs) < 3, "merged or compacted since the first step"
    assert min(groups("small")) > 10 * max(groups("default"))
    assert sorted(store.trace_files("small").read_all().column("k").to_pylist()) == list(range(110_000))


def test_sorted_files_are_written_with_the_policy_codec(tmp_path):
    """Sorted trace files use ``state.sorted_compression`` (lookups decode whole row groups);
    unsorted ones stay snappy. Either reads back the same rows."""
    import pyarrow.parquet as pq

    from spark_jobs.state.arrow_trace import write_dir
    from spark_jobs.state.fs import LocalFileSystem

    table = pa.table({"k": pa.array(range(5000, 0, -1), pa.int64()), "_weight": pa.array([1] * 5000, pa.int64())})
    for sort_by, codec, want in ((["k"], "none", "UNCOMPRESSED"), (["k"], "zstd", "ZSTD"), ([], "none", "SNAPPY")):
        out = tmp_path / f"{codec}-{len(sort_by)}"
        write_dir(LocalFileSystem(), str(out), table, StatePolicy(sorted_compression=codec), sort_by=sort_by)
        (f,) = [p for p in out.iterdir() if not p.name.startswith("_")]  # data files (not sidecars)
        meta = pq.ParquetFile(f).metadata
        assert meta.row_group(0).column(0).compression == want
        assert sorted(pq.read_table(f).column("k").to_pylist()) == list(range(1, 5001))


def test_only_the_bag_checks_input_integrals_get_small_row_groups():
    """An input's integral that no operator reads (W1's inputs are filtered and projected before
    their joins) is read only by the bag check, which decodes every group a deleted key falls in:
    its trace gets ``BAG_ROW_GROUP_BYTES``; an integral a join reads keeps the store's default."""
    from spark_jobs.ir.incrementalize import BAG_ROW_GROUP_BYTES, bag_integrals, bag_only, integral_row_group_bytes
    from spark_jobs.config import PROJECT_ROOT
    from spark_jobs.runtime.circuit import compile_file

    compiled = compile_file(str(PROJECT_ROOT / "bench" / "circuits" / "w1_tpch.yaml"))
    inc = compiled.incremental
    assert set(bag_integrals(inc).values()) == {"I(customer)", "I(orders)", "I(lineitem)"}
    for tid in ("I(customer)", "I(orders)", "I(lineitem)"):
        assert bag_only(inc, tid) and integral_row_group_bytes(inc, tid) == BAG_ROW_GROUP_BYTES
    assert integral_row_group_bytes(inc, "I(items)") == 0  # the join's integral


def test_a_large_sorted_write_is_one_file_sorted_across_its_chunks(tmp_path):
    """A key-sorted directory is ONE file however many ``rows_per_file`` chunks it is written in
    (each extra file cost every lookup touching it an admission, an open and a read call: SF10's
    line-item integral was 61 files), its rows in key order across the chunks and its row groups
    whole; an unsorted write is still split by ``rows_per_file``. Lookups of random keys in the
    one file return what a filter of the table returns."""
    from spark_jobs.state.arrow_trace import write_dir
    from spark_jobs.state.fs import LocalFileSystem
    from spark_jobs.state.lookup import TraceFiles

    rng = random.Random(11)
    keys = [rng.randrange(50_000) for _ in range(20_000)]
    table = _table(keys)
    policy = StatePolicy(rows_per_file=3_000, sorted_row_group_bytes=2048)
    fs = LocalFileSystem()
    sorted_dir, plain_dir = tmp_path / "sorted", tmp_path / "plain"
    write_dir(fs, str(sorted_dir), table, policy, sort_by=("k", "v"))
    write_dir(fs, str(plain_dir), table, policy)
    (f,) = [p for p in sorted_dir.iterdir() if p.name.endswith(".parquet")]
    assert len([p for p in plain_dir.iterdir() if p.name.endswith(".parquet")]) == 7  # 20k rows / 3k
    seen: list[int] = []  # a write with a per-file hook (bag sidecars) keeps files of whole chunks
    write_dir(fs, str(tmp_path / "hooked"), table, policy, sort_by=("k", "v"), each_file=lambda _p, rows: seen.append(rows.num_rows))
    assert len(seen) > 1 and sum(seen) == 20_000
    meta = pq.ParquetFile(f).metadata
    assert meta.num_rows == 20_000 and meta.num_row_groups > 7
    sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
    assert len(set(sizes[:-1])) == 1  # whole groups per chunk: only the last one is short
    got = pq.read_table(f)
    assert got.column("k").to_pylist() == sorted(keys)
    files = TraceFiles(fs, [str(f)], SCHEMA)
    for _ in range(20):
        probe = [rng.randrange(50_000) for _ in range(rng.choice([1, 10, 200]))]
        found = files.lookup("k", probe)
        want = table.filter(pc.is_in(table.column("k"), value_set=pa.array(probe, pa.int64())))
        assert sorted(found.column("k").to_pylist()) == sorted(want.column("k").to_pylist())
        assert found.num_rows == want.num_rows


def test_an_in_process_view_delta_is_sorted_in_small_row_groups_and_read_back_the_same(tmp_path):
    """The quality gate looks the previous view up in ``view:<view>``'s files by a delta's tuples;
    a view delta written in-process is sorted on its columns in small row groups (snappy, as
    before), so that lookup decodes the groups of the delta's keys, not the load's whole view."""
    from spark_jobs.state.arrow_read import read_delta, read_view
    from spark_jobs.state.store import view_trace_id

    rng = random.Random(3)
    keys = [rng.randrange(10**6) for _ in range(30_000)]
    view = pa.table({"k": keys, "v": [f"v{k % 7}" for k in keys], "_weight": [1] * len(keys)}, schema=SCHEMA)
    store = StateStore(_no_spark, str(tmp_path), "c", "fp", policy=StatePolicy(sorted_row_group_bytes=16384))
    tx = store.begin()
    tx.in_process = True
    tx.write_output_table("q", view)
    m = tx.commit()
    (f,) = [p for p in (tmp_path / m.outputs["q"].delta).iterdir() if p.name.endswith(".parquet")]
    meta = pq.ParquetFile(f).metadata
    assert meta.num_row_groups > 10 and meta.row_group(0).column(0).compression == "SNAPPY"
    assert pq.read_table(f).column("k").to_pylist() == sorted(keys)
    files = store.trace_files(view_trace_id("q"))
    probe = rng.sample(keys, 3)
    found = files.lookup("k", probe)
    assert sorted(found.column("k").to_pylist()) == sorted(k for k in keys if k in set(probe))
    assert files.decoded_rows() <= 3 * meta.row_group(0).num_rows
    for got in (read_view(store, "q"), read_delta(store, "q", 1)):
        assert sorted(got.to_pylist(), key=repr) == sorted(pc_consolidated(view).to_pylist(), key=repr)


def pc_consolidated(table: pa.Table) -> pa.Table:
    sums = table.group_by(["k", "v"]).aggregate([("_weight", "sum")]).rename_columns(["k", "v", "_weight"])
    return sums.select(["k", "v", "_weight"])


def test_an_in_process_merge_nets_out_every_cancellation_on_a_random_stream(tmp_path):
    """Merges of deltas consolidate only the rows that can cancel (``arrow_trace.settle``): on a
    random stream of inserts and deletes the trace keeps the value of every change summed, and no
    merged file holds a tuple with rows of both signs or a zero weight (a join would multiply
    them: ``executor/arrow/kernels._settled``). Float first columns go through ``consolidate``."""
    from collections import Counter

    from spark_jobs.state import arrow_trace

    rng = random.Random(11)
    store = StateStore(_no_spark, str(tmp_path), "c", "fp",
                       policy=StatePolicy(sorted_row_group_bytes=4096, delta_fanout=2, compact_fraction=1e9))
    want: Counter = Counter()
    merged = 0
    for _ in range(12):
        rows = Counter()
        for _ in range(rng.randrange(50, 400)):
            k = rng.randrange(300)
            if want[(k, f"v{k % 7}")] + rows[(k, f"v{k % 7}")] > 0 and rng.random() < 0.4:
                rows[(k, f"v{k % 7}")] -= 1
            else:
                rows[(k, f"v{k % 7}")] += 1
        items = [(k, v, w) for (k, v), w in rows.items() if w]
        tx = store.begin()
        tx.in_process = True
        tx.append_table("I(x)", pa.table({"k": [i[0] for i in items], "v": [i[1] for i in items],
                                          "_weight": [i[2] for i in items]}, schema=SCHEMA), sort_by=("k", "v"))
        tx.commit()
        want.update(rows)
        entry = store.manifest().traces["I(x)"]
        got: Counter = Counter()
        for d in entry.dirs:
            signs: dict = {}
            for path, _ in store.fs.data_files(store.layout.abs(d)):
                for r in pq.read_table(path).to_pylist():
                    assert r["_weight"] != 0
                    signs.setdefault((r["k"], r["v"]), set()).add(r["_weight"] > 0)
                    got[(r["k"], r["v"])] += r["_weight"]
            assert all(len(s) == 1 for s in signs.values()), f"{d}: a tuple with rows of both signs"
        merged += sum(1 for t, _ in entry.deltas if t < store.last_committed())
        assert +got == +want and -got == -want
    assert merged, "the stream merged deltas"
    floats = pa.table({"f": [0.0, -0.0, float("nan"), float("nan")], "_weight": [1, -1, 1, -1]})
    assert arrow_trace.settle(floats, "zset").equals(arrow_trace.consolidate(floats, "zset"))  # as before
    ints = pa.table({"k": [1, 1, 2, 2, 3], "_weight": [1, -1, 1, 1, 0]})
    assert sorted(arrow_trace.settle(ints, "zset").to_pylist(), key=str) == [{"k": 2, "_weight": 1}] * 2


def test_sorted_row_groups_hold_at_most_the_policy_rows_however_narrow_the_rows(tmp_path):
    """A narrow trace (an integer key, a short string and a weight) is written in groups of at most
    ``sorted_row_group_rows`` rows, not 256 KiB of rows: a probed key decodes that many rows."""
    store = StateStore(_no_spark, str(tmp_path), "c", "fp", policy=StatePolicy(sorted_row_group_rows=2048))
    tx = store.begin()
    tx.in_process = True
    tx.append_table("I(k)", _table(list(range(200_000))), sort_by=("k",))
    tx.commit()
    entry = store.manifest().traces["I(k)"]
    metas = [pq.ParquetFile(p).metadata for d in entry.dirs for p, _ in store.fs.data_files(store.layout.abs(d))]
    sizes = [m.row_group(g).num_rows for m in metas for g in range(m.num_row_groups)]
    assert max(sizes) == 2048 and sum(sizes) == 200_000
    files = store.trace_files("I(k)")
    assert files.lookup("k", [5, 150_000]).column("k").to_pylist() == [5, 150_000]
    assert files.decoded_rows() <= 2 * 2048
