"""Row-group admission from statistics (``state.rowgroups``): the vectorized test admits exactly
the groups a per-group comparison of Python values admits, for every key type, NULLs and groups
without statistics; and a footer is read once per process, never served for a rewritten file."""
from __future__ import annotations

import datetime
import os
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.state.fs import LocalFileSystem
from spark_jobs.state.lookup import TraceFiles
from spark_jobs.state.rowgroups import FOOTERS, column_stats

DAY = datetime.date(2021, 1, 1)
POOLS = {
    pa.int64(): list(range(-40, 60)),
    pa.int32(): list(range(0, 50)),
    pa.date32(): [DAY + datetime.timedelta(days=d) for d in range(80)],
    pa.string(): [f"k{i:03d}" for i in range(70)],
    pa.float64(): [x / 4 for x in range(-20, 40)],  # compared as Python values (no array kind)
}


def _expected(path: str, column: str, probe: list, want_null: bool) -> list[bool]:
    """Per group: does it hold a probed value (or NULL), judged from its actual rows."""
    f = pq.ParquetFile(path)
    out = []
    stats_of = column_stats(f.metadata, column)
    for g in range(f.metadata.num_row_groups):
        values = f.read_row_group(g, columns=[column]).column(0).to_pylist()
        holds = any(v in probe for v in values if v is not None) or (want_null and None in values)
        out.append(holds)
        if not stats_of.known[g]:
            out[-1] = True  # no statistics: always read
    return out


def test_admission_is_a_superset_of_the_holding_groups_and_exact_on_sorted_files(tmp_path):
    rng = random.Random(3)
    for i, (dtype, pool) in enumerate(POOLS.items()):
        for sort in (True, False):
            values = [None if rng.random() < 0.03 else rng.choice(pool) for _ in range(900)]
            if sort:
                values.sort(key=lambda v: (v is not None, v if v is not None else pool[0]))
            path = str(tmp_path / f"{i}-{sort}.parquet")
            pq.write_table(pa.table({"k": pa.array(values, dtype)}), path, row_group_size=60,
                           write_statistics=rng.random() < 0.8 or sort)
            stats = column_stats(pq.ParquetFile(path).metadata, "k")
            for _ in range(25):
                probe = sorted(set(rng.sample(pool, rng.randrange(0, 6))))
                want_null = rng.random() < 0.3
                got = list(stats.admitted(probe, want_null))
                holding = _expected(path, "k", probe, want_null)
                assert all(g or not h for g, h in zip(got, holding)), (dtype, probe)  # never misses a group
                if sort:  # sorted: statistics are tight, nothing else is admitted
                    by_range = [(not stats.known[g]) or (want_null and stats.nulls[g]) or any(
                        stats.values[g][0] <= v <= stats.values[g][1] for v in probe)
                        for g in range(len(got))]
                    assert got == by_range, (dtype, probe)


def test_a_footer_is_read_once_and_a_rewritten_file_is_read_again(tmp_path):
    path = str(tmp_path / "t.parquet")
    schema = pa.schema([("k", pa.int64()), ("_weight", pa.int64())])
    pq.write_table(pa.table({"k": np.arange(100), "_weight": np.ones(100, np.int64)}, schema=schema), path,
                   row_group_size=10)
    a = TraceFiles(LocalFileSystem(), [path], schema)
    b = TraceFiles(LocalFileSystem(), [path], schema)
    assert a._index[0] is b._index[0]  # one footer per process
    assert a.lookup("k", [5, 95]).column("k").to_pylist() == [5, 95]
    os.remove(path)
    pq.write_table(pa.table({"k": np.arange(100, 300), "_weight": np.ones(200, np.int64)}, schema=schema), path,
                   row_group_size=10)
    c = TraceFiles(LocalFileSystem(), [path], schema)
    assert c.rows() == 200 and c.lookup("k", [5, 150]).column("k").to_pylist() == [150]
    FOOTERS.clear()
