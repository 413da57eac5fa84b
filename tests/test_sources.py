"""Input sources: discovery of pending files, reading each format as a Z-set, snapshot deltas."""
from __future__ import annotations

import datetime as dt
import os
from collections import Counter
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.executor.sources import (InputFile, pending_files, read_changes, read_snapshot,
                                         resolve_path, snapshot_delta, spark_schema)
from spark_jobs.spec.model import Column, InputSpec, Source

COLS = (("id", "long", False), ("name", "string", True), ("amount", "double", True))


def make_spec(kind: str = "changes", fmt: str = "parquet", path: str = "inbox", cols=COLS,
              options: dict | None = None) -> InputSpec:
    return InputSpec("orders", tuple(Column(n, t, nullable) for n, t, nullable in cols),
                     Source(kind, path, fmt, options or {}))


def write_parquet(path, columns: dict, schema: pa.Schema | None = None) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.table(columns, schema=schema), path)
    return str(path)


def write_text(path, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)
    return str(path)


def as_counter(df) -> Counter:
    out: Counter = Counter()
    for row in df.collect():
        out[tuple(row)[:-1]] += row["_weight"]
    return Counter({k: v for k, v in out.items() if v})


# ---- discovery -------------------------------------------------------------------------------

def test_resolve_path(tmp_path):
    assert resolve_path(Source("changes", "inbox/o"), str(tmp_path)) == str(tmp_path / "inbox" / "o")
    # absolute paths only under a root the profile allows (tests/test_input_confinement.py)
    assert resolve_path(Source("changes", "/abs/o"), str(tmp_path), ["/abs"]) == "/abs/o"
    assert resolve_path(Source("changes", "file:///abs/o"), str(tmp_path), ["/abs"]) == "/abs/o"
    assert resolve_path(Source("changes", "inbox"), "s3a://bucket/root/") == "s3a://bucket/root/inbox"


def test_pending_changes_recursive_sorted_hidden_skipped_consumed_skipped(tmp_path):
    inbox = tmp_path / "inbox"
    for name in ["b.parquet", "a/z.parquet", "a/c.csv", "_SUCCESS", ".b.parquet.crc", "_temporary/0/x.parquet",
                 ".staging/y.parquet", "_y.parquet", "notes.txt"]:
        write_text(inbox / name, "x")
    spec = make_spec()
    paths = [f.path for f in pending_files(spec, str(tmp_path), set())]
    assert paths == [str(inbox / "a/c.csv"), str(inbox / "a/z.parquet"), str(inbox / "b.parquet")]
    first = pending_files(spec, str(tmp_path), set())[0]
    assert first.as_dict() == {"path": first.path, "name": "a/c.csv", "size": 1, "mtime": first.mtime,
                               "fingerprint": first.fingerprint} and first.mtime > 0
    assert first.fingerprint.startswith("b2:") and "path" not in first.record()  # no mount point in manifests
    assert InputFile.from_dict(first.as_dict()) == first
    later = pending_files(spec, str(tmp_path), {str(inbox / "a/c.csv"), str(inbox / "b.parquet")})
    assert [f.path for f in later] == [str(inbox / "a/z.parquet")]


def test_missing_folder_is_no_changes(tmp_path):
    assert pending_files(make_spec(path="nowhere"), str(tmp_path), set()) == []
    assert pending_files(make_spec(kind="snapshots", path="nowhere"), str(tmp_path), set()) == []


def test_spark_written_folder_counts_its_part_files(spark, tmp_path):
    spark.createDataFrame([(1, "a", 1.0)], "id long, name string, amount double") \
        .coalesce(1).write.parquet(str(tmp_path / "inbox" / "batch1"))
    files = pending_files(make_spec(), str(tmp_path), set())
    assert len(files) == 1 and files[0].path.endswith(".parquet") and "part-" in files[0].path
    assert as_counter(read_changes(spark, make_spec(), files)) == Counter({(1, "a", 1.0): 1})


# ---- changes, per format --------------------------------------------------------------------

def test_parquet_round_trip_with_weights_and_widening(spark, tmp_path):
    inbox = tmp_path / "inbox"
    write_parquet(inbox / "1.parquet", {"id": [1, 2], "name": ["a", None], "amount": [1.5, 2.0]})
    # other column order, int32 id (widened to long), explicit weights
    write_parquet(inbox / "2.parquet", {"amount": [1.5, 9.0], "_weight": [-1, 3], "name": ["a", "c"],
                                        "id": pa.array([1, 3], pa.int32())})
    spec = make_spec()
    df = read_changes(spark, spec, pending_files(spec, str(tmp_path), set()))
    assert df.columns == ["id", "name", "amount", "_weight"]
    assert [f.dataType.simpleString() for f in df.schema] == ["bigint", "string", "double", "bigint"]
    assert as_counter(df) == Counter({(2, None, 2.0): 1, (3, "c", 9.0): 3})


def test_csv_round_trip_types_weights_and_header_order(spark, tmp_path):
    cols = (("id", "long", False), ("day", "date", True), ("price", "decimal(10,2)", True),
            ("ok", "boolean", True), ("name", "string", True))
    inbox = tmp_path / "inbox"
    write_text(inbox / "1.csv", "id,day,price,ok,name\n1,2024-01-02,3.50,true,x\n2,,,false,\n")
    write_text(inbox / "2.csv", "name,_weight,ok,price,day,id\n\"q, r\",-1,true,1.25,2024-02-03,3\nz,2,,0,,4\n")
    spec = make_spec(fmt="csv", cols=cols)
    df = read_changes(spark, spec, pending_files(spec, str(tmp_path), set()))
    assert df.columns == ["id", "day", "price", "ok", "name", "_weight"]
    assert as_counter(df) == Counter({
        (1, dt.date(2024, 1, 2), Decimal("3.50"), True, "x"): 1,
        (2, None, None, False, None): 1,
        (3, dt.date(2024, 2, 3), Decimal("1.25"), True, "q, r"): -1,
        (4, None, Decimal("0.00"), None, "z"): 2,
    })


def test_csv_options_pass_through(spark, tmp_path):
    write_text(tmp_path / "inbox" / "1.csv", "id;name;amount\n1;a;2,5\n".replace("2,5", "2.5"))
    spec = make_spec(fmt="csv", options={"sep": ";"})
    df = read_changes(spark, spec, pending_files(spec, str(tmp_path), set()))
    assert as_counter(df) == Counter({(1, "a", 2.5): 1})


def test_json_lines_round_trip_with_per_row_weights(spark, tmp_path):
    write_text(tmp_path / "inbox" / "1.jsonl",
               '{"id": 1, "name": "a", "amount": 1.5}\n\n'
               '{"id": 2, "amount": 2, "_weight": -1}\n'
               '{"id": 3, "name": "c", "amount": null, "_weight": 3}\n')
    write_text(tmp_path / "inbox" / "2.json", '{"id": 1, "name": "a", "amount": 1.5, "_weight": 2}\n')
    spec = make_spec(fmt="json")
    df = read_changes(spark, spec, pending_files(spec, str(tmp_path), set()))
    assert df.columns == ["id", "name", "amount", "_weight"]
    assert as_counter(df) == Counter({(1, "a", 1.5): 3, (2, None, 2.0): -1, (3, "c", None): 3})


def test_no_files_is_the_empty_zset(spark):
    df = read_changes(spark, make_spec(), [])
    assert df.schema == spark_schema(make_spec()) and df.count() == 0


def test_empty_text_files_hold_no_rows(spark, tmp_path):
    for fmt, name in (("csv", "e.csv"), ("json", "e.json")):
        write_text(tmp_path / fmt / name, "")
        spec = make_spec(fmt=fmt, path=fmt)
        assert read_changes(spark, spec, pending_files(spec, str(tmp_path), set())).count() == 0


def test_gzipped_csv(spark, tmp_path):
    import gzip
    os.makedirs(tmp_path / "inbox")
    with gzip.open(tmp_path / "inbox" / "1.csv.gz", "wt") as fh:
        fh.write("id,name,amount\n7,g,1.0\n")
    spec = make_spec(fmt="csv")
    assert as_counter(read_changes(spark, spec, pending_files(spec, str(tmp_path), set()))) == \
        Counter({(7, "g", 1.0): 1})


def test_timestamps_from_pandas_and_spark(spark, tmp_path):
    cols = (("id", "long", False), ("ts", "timestamp", True))
    when = dt.datetime(2024, 5, 6, 7, 8, 9)
    write_parquet(tmp_path / "inbox" / "naive.parquet",
                  {"id": [1], "ts": pa.array([when], pa.timestamp("us"))})
    spark.createDataFrame([(2, when)], "id long, ts timestamp").coalesce(1) \
        .write.parquet(str(tmp_path / "inbox" / "spark"))  # INT96
    spec = make_spec(cols=cols)
    got = as_counter(read_changes(spark, spec, pending_files(spec, str(tmp_path), set())))
    assert got == Counter({(1, when): 1, (2, when): 1})


# ---- snapshots --------------------------------------------------------------------------------

def test_pending_snapshots_by_name_after_newest_consumed(tmp_path):
    snaps = tmp_path / "snaps"
    write_text(snaps / "2024-01-01.csv", "id\n")
    write_text(snaps / "2024-01-03" / "part-0.csv", "id\n")
    write_text(snaps / "2024-01-03" / "_SUCCESS", "")
    write_text(snaps / "2024-01-02" / "_SUCCESS", "")                        # empty snapshot: ready
    write_text(snaps / "2024-01-04" / "_temporary" / "0" / "part-0.csv", "")  # still being written
    os.makedirs(snaps / "2024-01-05")                                         # nothing in it yet
    write_text(snaps / "_tmp.csv", "id\n")
    spec = make_spec(kind="snapshots", path="snaps", fmt="csv")
    names = [f.name for f in pending_files(spec, str(tmp_path), set())]
    assert names == ["2024-01-01.csv", "2024-01-02", "2024-01-03"]
    later = pending_files(spec, str(tmp_path), {str(snaps / "2024-01-02")})
    assert [f.name for f in later] == ["2024-01-03"]  # 01-01 is older than a consumed snapshot
    assert later[0].size == len("id\n")


def test_snapshot_delta_insert_delete_update(spark, tmp_path):
    cols = (("id", "long", False), ("name", "string", True))
    spec = make_spec(kind="snapshots", path="snaps", fmt="csv", cols=cols)
    snaps = tmp_path / "snaps"
    write_text(snaps / "1.csv", "id,name\n1,a\n2,b\n2,b\n")
    write_text(snaps / "2" / "part-0.csv", "name,id\nb,2\nB,3\n")
    write_text(snaps / "2" / "part-1.csv", "id,name\n4,d\n")
    items = pending_files(spec, str(tmp_path), set())
    first = read_snapshot(spark, spec, items[0])
    d1 = snapshot_delta(first, None)
    assert as_counter(d1) == Counter({(1, "a"): 1, (2, "b"): 2})
    second = read_snapshot(spark, spec, items[1])
    previous = d1.select("_weight", "name", "id")  # column order does not matter
    d2 = snapshot_delta(second, previous)
    assert as_counter(d2) == Counter({(1, "a"): -1, (2, "b"): -1, (3, "B"): 1, (4, "d"): 1})
    assert d2.groupBy("id", "name").count().where("count > 1").count() == 0  # consolidated


def test_glob_characters_in_names_are_literal(spark, tmp_path):
    write_text(tmp_path / "inbox" / "x[1].csv", "id,name,amount\n1,bracket,1.0\n")
    write_text(tmp_path / "inbox" / "x1.csv", "id,name,amount\n2,plain,1.0\n")
    spec = make_spec(fmt="csv")
    files = [f for f in pending_files(spec, str(tmp_path), set()) if f.name == "x[1].csv"]
    assert as_counter(read_changes(spark, spec, files)) == Counter({(1, "bracket", 1.0): 1})
