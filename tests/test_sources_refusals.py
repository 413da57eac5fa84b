"""Input files that do not match the declared schema are refused, all at once, with reasons."""
from __future__ import annotations

import os
import pickle

import pyarrow as pa
import pytest

from spark_jobs.executor.sources import InputRefused, pending_files, read_changes, read_snapshot, widens
from spark_jobs.executor.sources.spark_types import parse_type
from tests.test_sources import make_spec, write_parquet, write_text

GOOD = {"id": [1], "name": ["a"], "amount": [1.0]}


def refusal(spark, spec, tmp_path) -> dict[str, list[str]]:
    """Read every pending file; return {file name: [reasons]} of the refusal (it must refuse)."""
    files = pending_files(spec, str(tmp_path), set())
    with pytest.raises(InputRefused) as info:
        read_changes(spark, spec, files)
    out: dict[str, list[str]] = {}
    for path, reason in info.value.problems:
        out.setdefault(os.path.basename(path), []).append(reason)
    for f in files:  # refused files stay where they are
        assert os.path.exists(f.path)
    return out


def test_parquet_schema_refusals_name_file_and_reason(spark, tmp_path):
    inbox = tmp_path / "inbox"
    write_parquet(inbox / "good.parquet", GOOD)
    write_parquet(inbox / "missing.parquet", {"id": [1], "name": ["a"]})
    write_parquet(inbox / "extra.parquet", {**GOOD, "colour": ["red"]})
    write_parquet(inbox / "type.parquet", {**GOOD, "id": ["1"]})
    write_parquet(inbox / "narrow.parquet", {**GOOD, "amount": pa.array([1], pa.int64())})
    write_parquet(inbox / "case.parquet", {"ID": [1], "name": ["a"], "amount": [1.0]})
    write_parquet(inbox / "weight.parquet", {**GOOD, "_weight": [1.0]})
    write_parquet(inbox / "nanos.parquet", {**GOOD, "amount": pa.array([1], pa.timestamp("ns"))})
    write_text(inbox / "broken.parquet", "not parquet")
    got = refusal(spark, make_spec(), tmp_path)
    assert "good.parquet" not in got
    assert got["missing.parquet"] == ["missing column amount"]
    assert got["extra.parquet"] == ["unexpected column colour"]
    assert got["type.parquet"] == ["column id has type string but the schema says long"]
    assert got["narrow.parquet"] == ["column amount has type long but the schema says double"]
    assert got["case.parquet"] == ["missing column id (the file has ID: names are case-sensitive)",
                                   "unexpected column ID"]
    assert got["weight.parquet"] == ["column _weight has type double but must be an integer type "
                                     "(byte, short, int or long)"]
    assert "nanosecond timestamps" in got["nanos.parquet"][0]
    assert got["broken.parquet"][0].startswith("not a readable Parquet file")


def test_nulls_refused_where_not_nullable(spark, tmp_path):
    write_parquet(tmp_path / "p" / "nulls.parquet", {"id": [1, None], "name": [None, None], "amount": [1.0, 2.0]})
    write_parquet(tmp_path / "p" / "wnull.parquet", {**GOOD, "_weight": pa.array([None], pa.int64())})
    assert refusal(spark, make_spec(path="p"), tmp_path) == {
        "nulls.parquet": ["column id is declared not nullable but has 1 null value(s)"],
        "wnull.parquet": ["column _weight has 1 null value(s); leave the column out for +1"]}
    write_text(tmp_path / "c" / "nulls.csv", "id,name,amount\n,a,1\n2,b,\n")
    assert refusal(spark, make_spec(fmt="csv", path="c"), tmp_path) == {
        "nulls.csv": ["column id is declared not nullable but has 1 null value(s)"]}
    write_text(tmp_path / "j" / "nulls.json", '{"name": "a"}\n{"id": null}\n{"id": 3}\n')
    assert refusal(spark, make_spec(fmt="json", path="j"), tmp_path) == {
        "nulls.json": ["column id is declared not nullable but has 2 null value(s)"]}


def test_csv_refusals(spark, tmp_path):
    inbox = tmp_path / "inbox"
    write_text(inbox / "good.csv", "id,name,amount\n1,a,1.5\n")
    write_text(inbox / "value.csv", "id,name,amount\n1,a,1.5\n2,b,lots\n3,c,many\n")
    write_text(inbox / "int.csv", "id,name,amount\n1.0,a,1\n")
    write_text(inbox / "header.csv", "id,name,amount,colour\n1,a,1,red\n")
    write_text(inbox / "dup.csv", "id,name,amount,id\n1,a,1,1\n")
    write_text(inbox / "weight.csv", "id,name,amount,_weight\n1,a,1,1.5\n2,b,2,\n")
    write_text(inbox / "ragged.csv", "id,name,amount\n1,a\n")
    got = refusal(spark, make_spec(fmt="csv"), tmp_path)
    assert "good.csv" not in got
    assert got["value.csv"] == ["column amount: 2 value(s) are not a valid double, e.g. 'lots'"]
    assert got["int.csv"] == ["column id: 1 value(s) are not a valid long, e.g. '1.0'"]
    assert got["header.csv"] == ["unexpected column colour"]
    assert got["dup.csv"] == ["duplicate column id in the header"]
    assert sorted(got["weight.csv"]) == ["column _weight has 1 null value(s); leave the column out for +1",
                                         "column _weight must hold integers: 1 value(s) are not, e.g. '1.5'"]
    assert got["ragged.csv"] == ["1 malformed row(s) (wrong number of fields), e.g. '1,a'"]


def test_csv_decimal_with_too_many_places_is_refused(spark, tmp_path):
    write_text(tmp_path / "inbox" / "d.csv", "id,price\n1,1.25\n2,1.255\n")
    spec = make_spec(fmt="csv", cols=(("id", "long", False), ("price", "decimal(10,2)", True)))
    assert refusal(spark, spec, tmp_path) == {
        "d.csv": ["column price: 1 value(s) are not a valid decimal(10,2), e.g. '1.255'"]}


def test_json_refusals(spark, tmp_path):
    inbox = tmp_path / "inbox"
    write_text(inbox / "good.jsonl", '{"id": 1, "name": "a", "amount": 1}\n')
    write_text(inbox / "syntax.jsonl", '{"id": 1}\n{"id": 2,\n')
    write_text(inbox / "type.jsonl", '{"id": "x"}\n')
    write_text(inbox / "array.jsonl", '[1, 2]\n')
    write_text(inbox / "extra.jsonl", '{"id": 1, "colour": "red"}\n{"id": 2, "size": 3, "colour": "b"}\n')
    write_text(inbox / "weight.jsonl", '{"id": 1, "_weight": 1.5}\n{"id": 2, "_weight": null}\n')
    got = refusal(spark, make_spec(fmt="json"), tmp_path)
    assert "good.jsonl" not in got
    assert got["syntax.jsonl"] == ["a line is not valid JSON: 1 bad line(s), e.g. '{\"id\": 2,'"]
    assert got["type.jsonl"] == ['column id has value "x" which is not a valid long: 1 bad line(s), '
                                 'e.g. \'{"id": "x"}\'']
    assert got["array.jsonl"][0].startswith("a line is not a JSON object")
    assert got["extra.jsonl"] == ["unexpected column(s) colour, size"]
    assert sorted(got["weight.jsonl"]) == ["column _weight has 1 null value(s); leave the column out for +1",
                                           "column _weight must hold integers: 1 value(s) are not, e.g. '1.5'"]


def test_one_bad_file_refuses_the_step_and_only_it_is_reported(spark, tmp_path):
    write_parquet(tmp_path / "inbox" / "a_good.parquet", GOOD)
    write_parquet(tmp_path / "inbox" / "b_bad.parquet", {"id": [1], "name": ["a"]})
    write_text(tmp_path / "inbox" / "c_wrong_format.csv", "id,name,amount\n1,a,1\n")
    spec = make_spec()
    files = pending_files(spec, str(tmp_path), set())
    with pytest.raises(InputRefused) as info:
        read_changes(spark, spec, files)
    assert [(os.path.basename(p), r) for p, r in info.value.problems] == [
        ("b_bad.parquet", "missing column amount"),
        ("c_wrong_format.csv", "a csv file in a parquet source")]
    assert "input orders: 2 file(s) refused" in str(info.value)
    assert read_changes(spark, spec, files[:1]).count() == 1  # the good file alone reads fine


def test_snapshot_refuses_weight_and_names_the_file_inside_the_folder(spark, tmp_path):
    write_text(tmp_path / "snaps" / "1" / "part-0.csv", "id,name,amount,_weight\n1,a,1,1\n")
    spec = make_spec(kind="snapshots", path="snaps", fmt="csv")
    [item] = pending_files(spec, str(tmp_path), set())
    with pytest.raises(InputRefused) as info:
        read_snapshot(spark, spec, item)
    assert info.value.problems == [(str(tmp_path / "snaps" / "1" / "part-0.csv"),
                                    "unexpected column _weight (a snapshot has no _weight: each row counts once)")]


def test_validation_costs_at_most_one_spark_job(spark, tmp_path):
    """Parquet footers prove non-null columns without a job; CSV checks of all files are one aggregate."""
    sc = spark.sparkContext

    def jobs(group: str, fn) -> int:
        sc.setJobGroup(group, group)
        try:
            fn()
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        return len(sc.statusTracker().getJobIdsForGroup(group))

    for i in range(3):
        write_parquet(tmp_path / "p" / f"{i}.parquet", {**GOOD, "_weight": [2]})
        write_text(tmp_path / "c" / f"{i}.csv", "id,name,amount,_weight\n1,a,1.0,2\n")
    p, c = make_spec(path="p"), make_spec(fmt="csv", path="c")
    assert jobs("parquet", lambda: read_changes(spark, p, pending_files(p, str(tmp_path), set()))) == 0
    # one action for the three files: a group-by, which AQE runs as a shuffle job + a result job
    assert jobs("csv", lambda: read_changes(spark, c, pending_files(c, str(tmp_path), set()))) <= 2


def test_refusal_pickles_and_combines():
    a = InputRefused([("/x/2.csv", "r2"), ("/x/1.csv", "r1")], "orders")
    b = InputRefused([("/y/1.csv", "r3")], "customers")
    again = pickle.loads(pickle.dumps(a))
    assert again.problems == [("/x/1.csv", "r1"), ("/x/2.csv", "r2")] and again.input_name == "orders"
    both = InputRefused.combine([a, b])
    assert len(both.problems) == 3 and both.input_name == "customers, orders"


@pytest.mark.parametrize("found,declared,ok", [
    ("int", "long", True), ("byte", "int", True), ("long", "int", False), ("float", "double", True),
    ("int", "double", True), ("long", "double", False), ("int", "float", False), ("short", "float", True),
    ("int", "decimal(10,0)", True), ("int", "decimal(11,2)", False), ("long", "decimal(19,0)", True),
    ("decimal(5,2)", "decimal(7,3)", True), ("decimal(5,2)", "decimal(7,1)", False),
    ("double", "decimal(38,10)", False), ("string", "long", False), ("timestamp_ntz", "timestamp", True),
    ("timestamp", "timestamp_ntz", False), ("date", "timestamp", False), ("varchar(3)", "string", True),
])
def test_accepted_widenings(found, declared, ok):
    assert widens(parse_type(found), parse_type(declared)) is ok


def test_a_vanished_snapshot_is_refused_not_read_as_empty(spark, tmp_path):
    write_text(tmp_path / "snaps" / "1.csv", "id,name,amount\n1,a,1\n")
    spec = make_spec(kind="snapshots", path="snaps", fmt="csv")
    [item] = pending_files(spec, str(tmp_path), set())
    os.remove(item.path)
    with pytest.raises(InputRefused, match="disappeared"):
        read_snapshot(spark, spec, item)


def test_random_bytes_and_huge_weights_are_refused_with_the_file_named(spark, tmp_path):
    """Issue 13.6: a CSV of random bytes (a csv.Error before), and weights outside |w| <= 2^31-1
    (an overflow inside an aggregate before) in every format."""
    import random

    rng = random.Random(1)
    inbox = tmp_path / "inbox"
    os.makedirs(inbox, exist_ok=True)
    (inbox / "noise.csv").write_bytes(bytes(rng.randrange(256) for _ in range(4096)) + b"\0")
    write_text(inbox / "big.csv", "id,name,amount,_weight\n1,a,1,1000000000000000000\n2,b,2,-2147483648\n")
    got = refusal(spark, make_spec(fmt="csv"), tmp_path)
    assert got["noise.csv"][0].startswith("not a readable CSV file")
    assert got["big.csv"] == ["column _weight must lie between -2147483647 and 2147483647: 2 value(s) do not, "
                              "e.g. '-2147483648'"]
    write_text(tmp_path / "j" / "big.jsonl", '{"id": 1, "_weight": 2147483648}\n{"id": 2, "_weight": 5}\n')
    assert refusal(spark, make_spec(fmt="json", path="j"), tmp_path) == {
        "big.jsonl": ["column _weight must lie between -2147483647 and 2147483647: 1 value(s) do not, "
                      "e.g. '2147483648'"]}
    write_parquet(tmp_path / "p" / "big.parquet", {**GOOD, "_weight": pa.array([10 ** 18], pa.int64())})
    write_parquet(tmp_path / "p" / "ok.parquet", {**GOOD, "_weight": pa.array([2147483647], pa.int64())})
    assert refusal(spark, make_spec(path="p"), tmp_path) == {
        "big.parquet": ["column _weight must lie between -2147483647 and 2147483647: its values reach "
                        "1000000000000000000"]}
