"""Key lookups in a trace's Parquet files with pyarrow (``state.lookup.TraceFiles``).

Exact results (NULL keys matching NULL, iteration ranges) against a Python filter, on sorted
files with small row groups, unsorted files and files without statistics; and the point of it:
a lookup of a few keys in a sorted file decodes only the row groups that can hold them.
"""
from __future__ import annotations

import datetime
import random

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.state.fs import LocalFileSystem
from spark_jobs.state.lookup import TraceFiles

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string()), ("_iter", pa.int32()), ("_weight", pa.int64())])


def _rows(n: int, seed: int) -> list[tuple]:
    rng = random.Random(seed)
    return [(None if rng.random() < 0.02 else rng.randrange(500), f"v{rng.randrange(9)}", rng.randrange(6),
             rng.choice([1, -1, 2])) for _ in range(n)]


def _write(path, rows: list[tuple], **kw) -> str:
    pq.write_table(pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], SCHEMA), str(path), **kw)
    return str(path)


def _expected(rows: list[tuple], keys: set, lo, hi) -> list[tuple]:
    return sorted((r for r in rows if r[0] in keys and (lo is None or r[2] >= lo) and (hi is None or r[2] <= hi)),
                  key=repr)


def _got(table: pa.Table) -> list[tuple]:
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def test_lookups_are_exact_on_sorted_unsorted_and_statistics_free_files(tmp_path):
    a, b, c = _rows(3000, 1), _rows(500, 2), _rows(200, 3)
    files = [_write(tmp_path / "sorted.parquet", sorted(a, key=lambda r: (r[0] is not None, r[0] or 0, r[2])),
                    row_group_size=100),
             _write(tmp_path / "unsorted.parquet", b),
             _write(tmp_path / "nostats.parquet", c, write_statistics=False)]
    trace = TraceFiles(LocalFileSystem(), files, SCHEMA)
    everything = a + b + c
    assert trace.rows() == len(everything)
    assert trace.max_of("_iter") == max(r[2] for r in everything)
    for keys, lo, hi in [({3, 250, 499}, None, None), ({7, None}, 2, 2), ({None}, None, 3), (set(), None, None),
                         ({-5, 10_000}, None, None), (set(range(0, 500, 7)), 1, None)]:
        got = trace.lookup("k", list(keys), (lo, hi), "_iter")
        assert _got(got) == _expected(everything, keys, lo, hi), (keys, lo, hi)
        assert got.schema == SCHEMA


def test_a_lookup_made_once_is_the_same_and_keeps_nothing(tmp_path):
    """``cache=False`` (the bag check of an integral nothing else reads): the same rows and schema
    (string columns decoded as dictionaries, cast back), no decoded group kept, and groups an
    earlier lookup kept are reused."""
    a, b = _rows(3000, 5), _rows(400, 6)
    files = [_write(tmp_path / "sorted.parquet", sorted(a, key=lambda r: (r[0] is not None, r[0] or 0)),
                    row_group_size=100), _write(tmp_path / "unsorted.parquet", b)]
    everything = a + b
    for keys in [{3, 250, 499}, {7, None}, {None}, set(), set(range(0, 500, 7))]:
        once = TraceFiles(LocalFileSystem(), files, SCHEMA)
        got = once.lookup("k", list(keys), cache=False)
        assert _got(got) == _expected(everything, keys, None, None), keys
        assert got.schema == SCHEMA
        assert once.decoded_rows() == 0
    warm = TraceFiles(LocalFileSystem(), files, SCHEMA)
    warm.lookup("k", [3, 250])
    kept = warm.decoded_rows()
    got = warm.lookup("k", [3, 250, 499], cache=False)
    assert _got(got) == _expected(everything, {3, 250, 499}, None, None)
    assert warm.decoded_rows() == kept


def test_a_few_keys_in_a_sorted_file_decode_only_their_row_groups(tmp_path):
    rows = sorted(_rows(5000, 4), key=lambda r: (r[0] is not None, r[0] or 0))
    trace = TraceFiles(LocalFileSystem(), [_write(tmp_path / "t.parquet", rows, row_group_size=100)], SCHEMA)
    got = trace.lookup("k", [42, 43], (None, None), "_iter")
    assert _got(got) == _expected(rows, {42, 43}, None, None)
    assert trace.decoded_rows() <= 300  # 1-3 groups of 100, not 5000 rows
    trace.lookup("k", [42], (None, None), "_iter")  # the same groups again: read once per TraceFiles
    assert trace.decoded_rows() <= 300


def test_a_cached_lookup_decodes_whole_only_the_groups_holding_a_probed_key(tmp_path):
    """Statistics admit a group whenever a probed key lies within its min/max; the probed column
    of the admitted groups is read first and only the groups really holding a key are decoded
    whole (and kept). Random probes, present and absent, interleaved with earlier lookups of the
    same TraceFiles, against a Python filter."""
    rng = random.Random(5)
    rows = sorted(((2 * rng.randrange(2000), f"v{i % 9}", i % 6, 1) for i in range(4000)), key=lambda r: r[0])
    trace = TraceFiles(LocalFileSystem(), [_write(tmp_path / "t.parquet", rows, row_group_size=100)], SCHEMA)
    odd = [2 * rng.randrange(2000) + 1 for _ in range(50)]  # never stored: within the groups' ranges
    assert trace.lookup("k", odd).num_rows == 0
    assert trace.decoded_rows() == 0  # admitted by statistics, decoded none
    for _ in range(30):
        keys = set(rng.sample(range(4000), rng.choice([1, 5, 40])))
        got = trace.lookup("k", list(keys), (None, None), "_iter")
        assert _got(got) == _expected(rows, keys, None, None)
    held = {g for g in range(40) if any(r[0] in keys for r in rows[g * 100:(g + 1) * 100])}
    assert trace.decoded_rows() <= 100 * 40 and len(held) * 100 <= trace.decoded_rows()
    # date keys, runs of one key across groups (a binary search over the sorted key column)
    schema = pa.schema([("d", pa.date32()), ("v", pa.string()), ("_weight", pa.int64())])
    days = sorted(rng.randrange(300) for _ in range(3000))
    table = pa.table({"d": pa.array(days, pa.int32()).cast(pa.date32()), "v": [str(i) for i in range(3000)],
                      "_weight": [1] * 3000}, schema=schema)
    pq.write_table(table, str(tmp_path / "d.parquet"), row_group_size=50)
    dated = TraceFiles(LocalFileSystem(), [str(tmp_path / "d.parquet")], schema)
    for _ in range(20):
        probe = table.column("d").take(pa.array(rng.sample(range(3000), rng.choice([1, 7])))).to_pylist()
        probe.append(datetime.date(2001, 1, 1))  # absent
        got = dated.lookup("d", probe)
        assert sorted(got.column("v").to_pylist()) == sorted(
            v for d, v in zip(table.column("d").to_pylist(), table.column("v").to_pylist()) if d in set(probe))


def test_a_cached_lookup_decodes_the_probed_column_once(tmp_path, monkeypatch):
    """The groups holding a probed key are decoded without the probed column (its chunks, read
    by the key pass, are reused): the same rows and schema, each byte counted once."""
    rng = random.Random(8)
    rows = sorted(((rng.randrange(3000), f"v{i % 9}", i % 6, 1) for i in range(5000)), key=lambda r: r[0])
    path = _write(tmp_path / "t.parquet", rows, row_group_size=100)
    asked: list[list[str]] = []
    real = pq.ParquetFile.read_row_groups

    def read_row_groups(self, groups, columns=None, **kw):  # noqa: ANN001, ANN202 - pyarrow's
        asked.append(list(columns or []))
        return real(self, groups, columns=columns, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", read_row_groups)
    trace = TraceFiles(LocalFileSystem(), [path], SCHEMA)
    for _ in range(10):
        keys = set(rng.sample(range(3000), rng.choice([3, 30, 300])))
        got = trace.lookup("k", list(keys), (None, 4), "_iter")
        assert _got(got) == _expected(rows, keys, None, 4) and got.schema == SCHEMA
    assert ["k"] in asked and ["v", "_iter", "_weight"] in asked and SCHEMA.names not in asked
    meta = pq.ParquetFile(path).metadata
    key_only = {g for (_, _, g) in trace._keys} - {g for (_, g) in trace._decoded}
    def chunks(g: int, cols: range) -> int:
        return sum(meta.row_group(g).column(c).total_compressed_size for c in cols)

    assert trace.bytes_read == sum(chunks(g, range(4)) for _, g in trace._decoded) + sum(
        chunks(g, range(1)) for g in key_only)


def test_repeated_lookups_search_each_file_s_decoded_groups_merged_and_stay_exact(tmp_path):
    """From a file's second lookup on, its decoded groups are searched as one merged table; a
    merge is rebuilt when more groups were decoded since (never stale), and an unsorted file or
    a NULL probe takes the group-by-group path. Every result against a Python filter."""
    rng = random.Random(11)
    sorted_rows = sorted(((rng.randrange(4000), f"v{i % 9}", i % 6, rng.choice([1, -1])) for i in range(6000)),
                         key=lambda r: r[0])
    other = sorted(((rng.randrange(4000, 6000), "w", 0, 1) for _ in range(900)), key=lambda r: r[0])
    unsorted = [(rng.randrange(6000), "u", 1, 2) for _ in range(300)]
    files = [_write(tmp_path / "a.parquet", sorted_rows, row_group_size=100),
             _write(tmp_path / "b.parquet", other, row_group_size=50),
             _write(tmp_path / "c.parquet", unsorted)]
    everything = sorted_rows + other + unsorted
    for paths in (files[:2], files):
        trace = TraceFiles(LocalFileSystem(), paths, SCHEMA)
        rows = [r for r in everything if paths is files or r[1] != "u"]
        for n in range(40):
            keys = set(rng.sample(range(6000), rng.choice([1, 10, 200, 1500])))
            if n % 13 == 5:
                keys.add(None)  # NULL probed: the group-by-group path
            got = trace.lookup("k", list(keys))
            assert _got(got) == _expected(rows, keys, None, None) and got.schema == SCHEMA
        merged = {f: m for (_, f), (_, m) in trace._merges.items()}
        assert merged.get(0) is not None and merged.get(1) is not None  # sorted: merged and used
        assert merged.get(2, None) is None  # unsorted: never merged
        counts = {f: n for (_, f), (n, _) in trace._merges.items()}
        assert counts[0] == sum(1 for f, _ in trace._decoded if f == 0)  # merged what is decoded now


def test_a_streamed_match_finds_what_a_lookup_finds_and_keeps_nothing_decoded(tmp_path):
    """``matching`` (the bag check's lookup of many keys) is exact on the same files, NULL keys
    included, caches no row group, and stops at its bound on found rows."""
    import pytest

    from spark_jobs.state.lookup import TooMany

    a, b, c = _rows(3000, 5), _rows(500, 6), _rows(200, 7)
    files = [_write(tmp_path / "sorted.parquet", sorted(a, key=lambda r: (r[0] is not None, r[0] or 0)),
                    row_group_size=100),
             _write(tmp_path / "unsorted.parquet", b),
             _write(tmp_path / "nostats.parquet", c, write_statistics=False)]
    trace = TraceFiles(LocalFileSystem(), files, SCHEMA)
    everything = a + b + c
    for keys in [{3, 250, 499}, {7, None}, {None}, set(), {-5, 10_000}, set(range(0, 500, 3))]:
        got = trace.matching("k", list(keys), max_found=10_000)
        assert _got(got) == _expected(everything, keys, None, None), keys
        assert got.schema == SCHEMA
    assert trace.decoded_rows() == 0 and trace.bytes_read > 0
    with pytest.raises(TooMany):
        trace.matching("k", list(range(500)), max_found=100)


def test_a_streamed_match_in_small_batches_decodes_only_groups_holding_a_key(tmp_path):
    """In batches of a few groups: where statistics admit every group (an unsorted file) but few
    hold a probed key, the key column is read first and only the groups holding a key are
    decoded; where most groups hit (dense probes), reading the key column first stops. Exact
    either way."""
    rng = random.Random(9)
    keys = list(range(5000))
    rng.shuffle(keys)
    rows = [(k, f"v{k % 7}" * 20, k % 6, 1) for k in keys]
    path = _write(tmp_path / "t.parquet", rows, row_group_size=100)
    meta = pq.ParquetFile(path).metadata

    def chunk_bytes(g: int, columns: range) -> int:
        return sum(meta.row_group(g).column(c).total_compressed_size for c in columns)

    holding = [g for g in range(meta.num_row_groups) if {17, 4321} & set(keys[g * 100:(g + 1) * 100])]
    key_pass = sum(chunk_bytes(g, range(1)) for g in range(meta.num_row_groups))
    for probe, sparse in [({17, 4321}, True), (set(range(0, 5000, 2)) | {None}, False)]:
        trace = TraceFiles(LocalFileSystem(), [path], SCHEMA)
        got = trace.matching("k", list(probe), max_found=10_000, batch_rows=250)
        assert _got(got) == _expected(rows, probe, None, None)
        if sparse:  # the key column of all 50 groups, then only the groups holding 17 or 4321, whole
            assert trace.bytes_read == key_pass + sum(chunk_bytes(g, range(meta.num_columns)) for g in holding)


def test_key_sets_answer_as_is_in_does_for_every_key_type_and_null():
    """``KeySet.member`` (a binary search in one sorted array for many integer or date keys, else
    ``is_in``) says True exactly where ``is_in`` does, NULL matching only a probed NULL."""
    import datetime

    import pyarrow.compute as pc

    from spark_jobs.state.lookup import KeySet

    rng = random.Random(11)
    days = [datetime.date(2020, 1, 1) + datetime.timedelta(days=d) for d in range(40)]
    for dtype, pool in [(pa.int64(), list(range(-50, 50))), (pa.int32(), list(range(30))),
                        (pa.date32(), days), (pa.string(), [f"s{i}" for i in range(30)])]:
        for want_null in (False, True):
            probe = rng.sample(pool, 12)
            keys = pa.chunked_array([pa.array([None if rng.random() < 0.1 else rng.choice(pool) for _ in range(200)],
                                              dtype) for _ in range(3)])
            want = pc.fill_null(pc.is_in(keys, value_set=pa.array(probe + ([None] if want_null else []), dtype),
                                         skip_nulls=not want_null), False)
            for sorted_from in (0, 1_000):  # the sorted array, and is_in
                got = KeySet(sorted(probe), want_null, dtype, sorted_from=sorted_from).member(keys)
                assert got.to_pylist() == want.to_pylist(), (dtype, want_null, sorted_from)
            assert KeySet([], want_null, dtype, sorted_from=0).member(keys).to_pylist() == \
                (pc.is_null(keys).to_pylist() if want_null else [False] * len(keys))


def test_random_probes_over_many_files_agree_with_a_filter_for_every_lookup_and_key_type(tmp_path):
    """Differential, random: several sorted and unsorted files (string columns read as dictionaries
    by the lean lookups, one chunk per row group), probes of int, date and string keys, sparse and
    dense; one ``Probe`` reused by ``admitted_rows``, ``lookup`` and ``matching`` (its converted
    keys are kept across calls and files), ``matching`` in small batches so a probe dense in the
    first files skips the key pass in the next. Every way gives the rows a Python filter gives."""
    import datetime

    from spark_jobs.state.lookup import Probe

    schema = pa.schema([("k", pa.int64()), ("d", pa.date32()), ("s", pa.string()), ("x", pa.float64()),
                        ("_weight", pa.int64())])
    day0 = datetime.date(1995, 1, 1)
    for seed in range(4):
        rng = random.Random(seed)
        files, rows = [], []
        for i in range(rng.randint(2, 6)):
            part = [(None if rng.random() < 0.02 else rng.randrange(400),
                     day0 + datetime.timedelta(days=rng.randrange(60)), f"s{rng.randrange(40):02d}",
                     rng.random(), rng.choice([1, 1, 2, -1])) for _ in range(rng.randint(50, 900))]
            if rng.random() < 0.7:
                part.sort(key=lambda r: (r[0] is not None, r[0] or 0))
            rows += part
            path = tmp_path / f"s{seed}-f{i}.parquet"
            pq.write_table(pa.Table.from_pylist([dict(zip(schema.names, r)) for r in part], schema), str(path),
                           row_group_size=rng.choice([16, 50, 200]))
            files.append(str(path))
        for column, at in [("k", 0), ("d", 1), ("s", 2)]:
            values = sorted({r[at] for r in rows if r[at] is not None}, key=repr)
            for density in (0.01, 0.3, 0.9):
                keys = [v for v in values if rng.random() < density] + ([None] if rng.random() < 0.3 else [])
                want = sorted((r for r in rows if r[at] in set(keys)), key=repr)
                probe = Probe(keys)
                lean = TraceFiles(LocalFileSystem(), files, schema)
                assert lean.admitted_rows(column, probe) >= len(want)
                for got in (lean.lookup(column, probe, cache=False),
                            TraceFiles(LocalFileSystem(), files, schema).lookup(column, probe),
                            TraceFiles(LocalFileSystem(), files, schema).matching(column, probe, 10**6, batch_rows=40)):
                    assert got.schema == schema
                    assert sorted((tuple(r.values()) for r in got.to_pylist()), key=repr) == want, (seed, column, density)


def test_files_admitted_by_their_range_hold_every_probed_key_and_no_file_is_missed(tmp_path):
    """``admitting_files`` (the bag check's file choice) keeps every file holding a probed key,
    on sorted and unsorted files, files with NULL keys, an all-NULL file (no statistics: admitted
    by its groups) and probes with NULL or past every file."""
    rng = random.Random(2530)
    fs = LocalFileSystem()
    for case in range(40):
        paths, held = [], []
        for i in range(rng.randint(1, 6)):
            lo = rng.randint(-50, 200)
            keys = [None] * 5 if rng.random() < 0.1 else [
                None if rng.random() < 0.05 else lo + rng.randint(0, rng.choice([3, 30, 300])) for _ in range(rng.randint(1, 40))]
            if rng.random() < 0.5:
                keys.sort(key=lambda k: (k is not None, k or 0))
            table = pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array(range(len(keys)), pa.int64())})
            path = str(tmp_path / f"c{case}-{i}.parquet")
            pq.write_table(table, path, row_group_size=rng.choice([2, 7, 100]))
            paths.append(path)
            held.append({k for k in keys if k is not None})
        files = TraceFiles(fs, paths, pa.schema([("k", pa.int64()), ("v", pa.int64())]))
        probe = [rng.randint(-60, 520) for _ in range(rng.randint(1, 12))] + ([None] if rng.random() < 0.1 else [])
        got = files.admitting_files("k", probe)
        assert got == sorted(set(got))
        assert set(files.admitting("k", probe)) <= set(got), case
        assert {f for f, keys in enumerate(held) if keys & set(probe)} <= set(got), case
