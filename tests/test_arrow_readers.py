"""The in-process readers against Spark's, file for file (``tests/readers_diff.py``): every format
(Parquet, CSV, JSON lines, plain and compressed) and kind (changes, append_only, snapshots, cdc)
gives the same Z-set, values and types, or the same refusal, every file and reason word for word.
The cases are those of the Spark readers' own tests (test_sources, test_sources_refusals,
test_hostile_inputs, test_cdc), random files, and random strings for every type's cast.
What the in-process readers leave to Spark raises ``NotLocal``, and a step then runs on Spark."""
from __future__ import annotations

import os
import random
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from spark_jobs.executor.arrow import inputs as arrow_inputs
from spark_jobs.executor.arrow.readers import json_lines
from spark_jobs.executor.arrow.readers.csv_files import caster
from spark_jobs.executor.arrow.readers.records import column_array, sql_type
from spark_jobs.executor.engine import NotLocal
from spark_jobs.executor.sources import InputRefused, data_files, pending_files
from spark_jobs.executor.sources.cdc import read_records
from spark_jobs.executor.sources.formats import _parse_csv_value
from spark_jobs.executor.sources.spark_types import parse_type
from spark_jobs.spec import load_circuit_text
from tests.readers_diff import arrow_result, assert_same, files_under, spark_result, spec_of, write

COLS = (("id", "long", False), ("name", "string", True), ("amount", "double", True))
GOOD = {"id": [1], "name": ["a"], "amount": [1.0]}


def _parquet(root, name: str, columns: dict) -> str:
    path = os.path.join(str(root), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


# ---- the Spark readers' own cases --------------------------------------------------------------

def test_parquet_files_and_their_refusals(spark, tmp_path):
    _parquet(tmp_path, "inbox/good.parquet", GOOD)
    _parquet(tmp_path, "inbox/w.parquet", {"amount": [1.5, 9.0], "_weight": [-1, 3], "name": ["a", "c"],
                                           "id": pa.array([1, 3], pa.int32())})
    assert assert_same(spark, spec_of(COLS, "parquet"), files_under(tmp_path))[0] == "rows"
    for name, cols in {"missing": {"id": [1], "name": ["a"]}, "extra": {**GOOD, "colour": ["red"]},
                       "type": {**GOOD, "id": ["1"]}, "narrow": {**GOOD, "amount": pa.array([1], pa.int64())},
                       "case": {"ID": [1], "name": ["a"], "amount": [1.0]}, "weight": {**GOOD, "_weight": [1.0]},
                       "nanos": {**GOOD, "amount": pa.array([1], pa.timestamp("ns"))},
                       "nulls": {"id": [1, None], "name": [None, None], "amount": [1.0, 2.0]},
                       "wnull": {**GOOD, "_weight": pa.array([None], pa.int64())},
                       "big": {**GOOD, "_weight": pa.array([10 ** 18], pa.int64())}}.items():
        _parquet(tmp_path, f"inbox/{name}.parquet", cols)
    write(tmp_path, "inbox/broken.parquet", "not parquet")
    write(tmp_path, "inbox/c_wrong_format.csv", "id,name,amount\n1,a,1\n")
    assert assert_same(spark, spec_of(COLS, "parquet"), files_under(tmp_path))[0] == "refused"
    # an append_only source refuses a delete, a snapshot a weight column
    _parquet(tmp_path, "ao/ok.parquet", {"id": [1, 2], "_weight": pa.array([1, 3], pa.int64())})
    _parquet(tmp_path, "ao/bad.parquet", {"id": [1, 2], "_weight": pa.array([1, -1], pa.int64())})
    ids = (("id", "long", True),)
    assert assert_same(spark, spec_of(ids, "parquet", "append_only", "ao"), files_under(tmp_path, "ao"))[0] == "refused"


CSV_CASES = {
    "round trip": ((("id", "long", False), ("day", "date", True), ("price", "decimal(10,2)", True),
                    ("ok", "boolean", True), ("name", "string", True)),
                   {"1.csv": "id,day,price,ok,name\n1,2024-01-02,3.50,true,x\n2,,,false,\n",
                    "2.csv": 'name,_weight,ok,price,day,id\n"q, r",-1,true,1.25,2024-02-03,3\nz,2,,0,,4\n'}),
    "refusals": (COLS, {"good.csv": "id,name,amount\n1,a,1.5\n", "value.csv": "id,name,amount\n1,a,1.5\n2,b,lots\n3,c,many\n",
                        "int.csv": "id,name,amount\n1.0,a,1\n", "header.csv": "id,name,amount,colour\n1,a,1,red\n",
                        "dup.csv": "id,name,amount,id\n1,a,1,1\n", "weight.csv": "id,name,amount,_weight\n1,a,1,1.5\n2,b,2,\n",
                        "ragged.csv": "id,name,amount\n1,a\n", "nulls.csv": "id,name,amount\n,a,1\n2,b,\n",
                        "too_many.csv": "id,name,amount\n1,a,1,extra\n",
                        "big.csv": "id,name,amount,_weight\n1,a,1,1000000000000000000\n2,b,2,-2147483648\n"}),
    "decimal places": ((("id", "long", False), ("price", "decimal(10,2)", True)), {"d.csv": "id,price\n1,1.25\n2,1.255\n"}),
    "empty and header only": (COLS, {"e.csv": "", "h.csv": "id,name,amount\n", "blank.csv": "\n"}),
    "gzip and bzip2": (COLS, {"1.csv.gz": "id,name,amount\n7,g,1.0\n", "2.csv.bz2": "amount,id,name\r\n2.5,8,h\r\n"}),
    "glob characters": (COLS, {"x[1].csv": "id,name,amount\n1,bracket,1.0\n", "x1.csv": "id,name,amount\n2,plain,1.0\n"}),
    "lines": (COLS, {"l.csv": "id,name,amount\r\n1,a,1\r\n\r\n   \r2,,\n3,\" b \",\n\t\n4,\"\",5e0"}),
}


@pytest.mark.parametrize("case", sorted(CSV_CASES))
def test_csv_files(spark, tmp_path, case):
    cols, texts = CSV_CASES[case]
    for name, text in texts.items():
        write(tmp_path, f"inbox/{name}", text)
    assert_same(spark, spec_of(cols, "csv"), files_under(tmp_path))


def test_csv_options_and_random_bytes(spark, tmp_path):
    write(tmp_path, "semi/1.csv", "id;name;amount\n1;a;2.5\n")
    assert_same(spark, spec_of(COLS, "csv", path="semi", options={"sep": ";", "header": "false"}), files_under(tmp_path, "semi"))
    write(tmp_path, "tab/1.csv", "id\tname\tamount\n1\ta b\t2.5\n")
    assert_same(spark, spec_of(COLS, "csv", path="tab", options={"sep": "\\t"}), files_under(tmp_path, "tab"))
    rng = random.Random(1)
    write(tmp_path, "noise/noise.csv", bytes(rng.randrange(256) for _ in range(4096)) + b"\0")
    assert assert_same(spark, spec_of(COLS, "csv", path="noise"), files_under(tmp_path, "noise"))[0] == "refused"


JSON_CASES = {
    "weights": {"1.jsonl": '{"id": 1, "name": "a", "amount": 1.5}\n\n{"id": 2, "amount": 2, "_weight": -1}\n'
                           '{"id": 3, "name": "c", "amount": null, "_weight": 3}\n',
                "2.json": '{"id": 1, "name": "a", "amount": 1.5, "_weight": 2}\n'},
    "refusals": {"good.jsonl": '{"id": 1, "name": "a", "amount": 1}\n', "syntax.jsonl": '{"id": 1}\n{"id": 2,\n',
                 "type.jsonl": '{"id": "x"}\n', "array.jsonl": "[1, 2]\n",
                 "extra.jsonl": '{"id": 1, "colour": "red"}\n{"id": 2, "size": 3, "colour": "b"}\n',
                 "weight.jsonl": '{"id": 1, "_weight": "1.5"}\n{"id": 2, "_weight": null}\n',
                 "nulls.json": '{"name": "a"}\n{"id": null}\n{"id": 3}\n',
                 "big.jsonl": '{"id": 1, "_weight": 2147483648}\n{"id": 2, "_weight": 5}\n'},
    "lines": {"l.jsonl": '{"id": 1}\r\n   \n\t\n{"id": 2} trailing\n null\n{"id":3,"id":4}\n{"id": 5, "amount": "NaN"}'},
    "compressed": {"1.jsonl.gz": '{"id": 7, "name": "g"}\n', "2.json.bz2": '{"id": 8, "amount": 1e2}\n'},
    "values": {"v.jsonl": '{"id": 1, "name": 5, "amount": -0.0}\n{"id": -0, "name": true, "amount": "-INF"}\n'
                          '{"id": 2, "name": "\\ud800 \\u00e9", "amount": 123456789012345678901234567890}\n'},
}


@pytest.mark.parametrize("case", sorted(JSON_CASES))
def test_json_lines_files(spark, tmp_path, case):
    for name, text in JSON_CASES[case].items():
        write(tmp_path, f"inbox/{name}", text)
    assert_same(spark, spec_of(COLS, "json"), files_under(tmp_path))


@pytest.mark.parametrize("fmt,texts", [
    ("csv", {"1.csv": "id,name\n1,a\n2,b\n2,b\n"}),
    ("csv", {"1/part-0.csv": "name,id\nb,2\nB,3\n", "1/part-1.csv": "id,name\n4,d\n", "1/_SUCCESS": ""}),
    ("csv", {"1/part-0.csv": "id,name,_weight\n1,a,1\n"}),
    ("json", {"1/part-0.json": '{"id": 1, "_weight": 1}\n{"id": 2}\n'}),
    ("csv", {"1/part-0.csv": "id,name\n1,a\n", "1/part-1.parquet": "not parquet"}),
])
def test_snapshots(spark, tmp_path, fmt, texts):
    for name, text in texts.items():
        write(tmp_path, f"snaps/{name}", text)
    spec = spec_of((("id", "long", False), ("name", "string", True)), fmt, "snapshots", "snaps")
    items = pending_files(spec, str(tmp_path), set())
    assert len(items) == 1
    assert_same(spark, spec, items, snapshot=True)


def test_a_vanished_snapshot_is_refused_by_both(spark, tmp_path):
    write(tmp_path, "snaps/1.csv", "id,name\n1,a\n")
    spec = spec_of((("id", "long", False), ("name", "string", True)), "csv", "snapshots", "snaps")
    [item] = pending_files(spec, str(tmp_path), set())
    os.remove(item.path)
    assert spark_result(spark, spec, [item], snapshot=True) == arrow_result(spec, [item], snapshot=True)


CDC_SPEC = """
name: refusals
inputs:
  orders:
    schema: {order_id: long, amount: double, kind: string, seq: long}
    key: [order_id]
    source: {kind: cdc, path: inbox/orders, format: FMT, op: kind, ops: {I: insert, D: delete}, sequence: seq EXTRA}
nodes: {}
outputs: [orders]
"""


def _records_both(spark, spec, files):
    """(Spark's, Arrow's) records of cdc files, or their refusals."""
    def spark_side():
        try:
            df = read_records(spark, spec, files)
            return "rows", sorted(tuple(r) for r in df.drop("__pos", "__file").collect()) if df is not None else []
        except InputRefused as exc:
            return "refused", exc.problems

    def arrow_side():
        from spark_jobs.executor.arrow.readers import cdc_records

        try:
            parts = arrow_inputs.read_files(spec, files, cdc_records.declaration(spec), cdc_records.envelope_reader(spec))
        except InputRefused as exc:
            return "refused", exc.problems
        records = cdc_records.with_order(parts, spec)
        if records is None:
            return "rows", []
        rows = records.drop_columns(["__file", "__pos"]).to_pylist()
        return "rows", sorted(tuple(r.values()) for r in rows)
    return spark_side(), arrow_side()


@pytest.mark.parametrize("fmt,extra,texts", [
    ("json", "", {"a.jsonl": '{"order_id": 1, "amount": 2.0, "kind": "X", "seq": 1}\n',
                  "b.jsonl": '{"amount": 2.0, "kind": "I", "seq": 2}\n{"order_id": 3, "kind": "I"}\n',
                  "c.jsonl": '{"order_id": 4, "amount": 1.5, "kind": "I", "seq": 3, "_weight": 1}\n',
                  "d.jsonl": '{"order_id": 5, "amount": 2.5, "kind": "D", "seq": 4}\n'}),
    ("csv", "", {"a.csv": "order_id,amount,kind,seq\n1,2.0,X,1\n,1,I,2\n", "b.csv": "order_id,amount,kind,seq\n5,2.5,D,4\n"}),
    ("json", ", after: after, before: before",
     {"e.jsonl": '{"after": {"order_id": 1, "amount": 2.0, "seq": 9}, "kind": "I", "seq": 1, "source": {}}\n'
                 'null\n{"before": {"order_id": 2}, "after": null, "kind": "D", "seq": 2}\n'
                 '{"after": {"order_id": 3, "colour": 1}, "kind": "I", "seq": 3}\n'
                 '{"after": {"order_id": "x"}, "kind": "I", "seq": 4}\n{"after": {"order_id": 5}, "kind": "Q", "seq": 5}\n'}),
    ("json", ", after: after, before: before",
     {"f.jsonl": '{"after": {"order_id": 1, "amount": 2.0}, "kind": "I", "seq": 1}\n'
                 '{"before": {"order_id": 2, "amount": 1}, "kind": "D", "seq": 2}\n'}),
])
def test_cdc_records_and_their_refusals(spark, tmp_path, fmt, extra, texts):
    spec = load_circuit_text(CDC_SPEC.replace("FMT", fmt).replace(" EXTRA", extra)).inputs["orders"]
    for name, text in texts.items():
        write(tmp_path, f"inbox/orders/{name}", text)
    want, got = _records_both(spark, spec, data_files(str(tmp_path / "inbox" / "orders")))
    assert got == want


# ---- random files and strings ----------------------------------------------------------------------

POOLS = {
    "long": ["1", " 2", "+3", "-0", "1.0", "x", "", "9223372036854775808", "\t5", "42"],
    "double": ["1.5", "NaN", "inf", "1e400", "1d", ".5", "abc", "-0", "0x1p3", "2.25", "1e-320"],
    "decimal(10,2)": ["1.25", "-0.00", "1e2", "1.255", "99999999.995", "5.", "abc"],
    "boolean": ["true", "YES", "0", "maybe", " f"],
    "date": ["2024-01-02", "2024-1-2 junk", "2024-02-30", "2024", "+2024-01-01", "x"],
    "timestamp": ["2024-01-02 03:04:05", "2024-01-02T03:04:05.123456789+01:00", "2024-01-02 03:04:05 UTC",
                  "2024-13-01", "2024-01-02T03:04Z", "1999-12-31 23:59:59.999999Z", "junk"],
    "string": ["x", "", " ", "é", '"a,b"', '""', "null", "\\", "a\\b"],
}


def _random_csv(rng: random.Random, cols, weight: bool) -> str:
    header = [c for c, _, _ in cols] + (["_weight"] if weight else [])
    rng.shuffle(header)
    types = {c: t for c, t, _ in cols}
    lines = [",".join(header)]
    for _ in range(rng.randint(0, 6)):
        if rng.random() < 0.08:
            lines.append(rng.choice(["", "   "]))
            continue
        fields = [rng.choice(["1", "-1", "2", "0", "", "1.5", " 3"] if h == "_weight" else POOLS[types[h]])
                  if rng.random() < 0.3 else (["1", "-1", "2"] if h == "_weight" else POOLS[types[h]])[rng.randint(0, 1)]
                  for h in header]
        if rng.random() < 0.05:
            fields = fields[:-1]
        lines.append(",".join(fields))
    end = rng.choice(["\n", "\r\n", "\r"])
    return end.join(lines) + end


def test_random_csv_files(spark, tmp_path):
    """Random files of random columns: odd values of every type, ragged rows, blank lines,
    line ends, quotes, weights, gzip; each batch read by both (a refusal is compared too)."""
    rng = random.Random(int(os.environ.get("READERS_SEED", "7")))
    outcomes = []
    for case in range(int(os.environ.get("READERS_CASES", "24"))):
        chosen = rng.sample(sorted(POOLS), rng.randint(1, 4))
        cols = [(f"c{i}", t, rng.random() < 0.8) for i, t in enumerate(chosen)]
        weight = rng.random() < 0.6
        for f in range(rng.randint(1, 3)):
            write(tmp_path, f"c{case}/f{f}.csv" + (".gz" if rng.random() < 0.2 else ""), _random_csv(rng, cols, weight))
        kind = "append_only" if rng.random() < 0.2 else "changes"
        outcomes.append(_outcome(spark, spec_of(cols, "csv", kind, f"c{case}"), files_under(tmp_path, f"c{case}")))
    assert {"rows", "refused"} <= set(outcomes) and outcomes.count("left to Spark") < len(outcomes) // 4, outcomes


def _outcome(spark, spec, files) -> str:
    """How both readers read a random batch ("rows" or "refused", the same), or "left to Spark"."""
    try:
        return assert_same(spark, spec, files)[0]
    except NotLocal:
        return "left to Spark"


def _random_json(rng: random.Random, cols) -> str:
    pools = {"long": ["1", "-0", '"5"', "1.0", "9223372036854775808", "null"], "double": ["1.5", "NaN", '"NaN"', '"inf"', "1e400", "2"],
             "decimal(10,2)": ["1.25", "1.255", '"1,000.5"', '" 1"', "NaN"], "boolean": ["true", '"true"', "1"],
             "date": ['"2024-01-02"', '"123"', '""', '"2024-01-02GMT"', "20240102"],
             "timestamp": ['"2024-01-02 03:04:05"', "1700000000", "1.5", '"2024-01-02 03:04:05GMT"', '"x"'],
             "string": ['"x"', '""', "5", "true", '"\\u00e9"', "null"]}
    lines = []
    for _ in range(rng.randint(0, 6)):
        if rng.random() < 0.1:
            lines.append(rng.choice(["", "  ", "\t", "null", "[1]", '{"c0": 1,']))
            continue
        pairs = [(c, pools[t][0] if rng.random() < 0.7 else rng.choice(pools[t])) for c, t, _ in cols if rng.random() < 0.9]
        if rng.random() < 0.6:
            pairs.append(("_weight", rng.choice(["1", "-1", "2", '"3"', "0"] if rng.random() < 0.8 else ["1.5", "null", "true"])))
        if rng.random() < 0.05:
            pairs.append(("colour", '"red"'))
        rng.shuffle(pairs)
        lines.append("{" + ", ".join(f'"{k}": {v}' for k, v in pairs) + "}")
    return "\n".join(lines)


def test_random_json_lines_files(spark, tmp_path):
    rng = random.Random(int(os.environ.get("READERS_SEED", "8")))
    outcomes = []
    for case in range(int(os.environ.get("READERS_CASES", "24"))):
        chosen = rng.sample(sorted(POOLS), rng.randint(1, 4))
        cols = [(f"c{i}", t, rng.random() < 0.8) for i, t in enumerate(chosen)]
        for f in range(rng.randint(1, 3)):
            write(tmp_path, f"j{case}/f{f}.jsonl" + (".gz" if rng.random() < 0.2 else ""), _random_json(rng, cols))
        kind = "append_only" if rng.random() < 0.2 else "changes"
        outcomes.append(_outcome(spark, spec_of(cols, "json", kind, f"j{case}"), files_under(tmp_path, f"j{case}")))
    assert {"rows", "refused"} <= set(outcomes) and outcomes.count("left to Spark") < len(outcomes) // 4, outcomes


def _random_strings(rng: random.Random, t: str, n: int) -> list[str]:
    out = []
    for _ in range(n):
        if t in ("date", "timestamp", "timestamp_ntz"):
            s = (rng.choice(["2024-01-02", "2024-1-2", "+2024-02-29", "-0001-01-01", "10000-01-01", "2024", "2024-06",
                             "12345-1-1", "0000-00-00", "9999999-12-31"])
                 + rng.choice(["", " ", "T", " 03:04:05", "T3:4:5", " 23:59:59.999999", "T12:00:00.1234567", " 24:00",
                               " 03:04", "T03", " 03:04:05.", " junk"])
                 + rng.choice(["", "", "Z", " UTC", "+01:00", " -05:30", "GMT+2", "+1:30", "+01:3", "+18:01", "UT",
                               "+0100", "+010203", "z", "@", " GMT"]))
            if rng.random() < 0.1:
                s = rng.choice([" ", "\t", "\x00"]) + s + rng.choice([" ", "\n", ""])
        elif t == "boolean":
            s = "".join(rng.choice("truefalsyno10 TY\t") for _ in range(rng.randint(0, 6)))
        elif rng.random() < 0.5:
            s = "".join(rng.choice("0123456789+-.eE dfxp_") for _ in range(rng.randint(0, 12)))
        else:
            s = (rng.choice(["", "-", "+", " "]) + "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 25)))
                 + rng.choice(["", ".", ".5", ".25", ".255", ".995", "e3", "E-2", "e400", "d", "F", "\u0661"]))
        out.append(s)
    return out


@pytest.mark.parametrize("declared", ["long", "int", "short", "byte", "double", "float", "decimal(10,2)",
                                      "decimal(38,0)", "decimal(5,5)", "boolean", "date", "timestamp", "timestamp_ntz"])
def test_a_csv_field_becomes_the_value_spark_casts_it_to(spark, declared):
    """Random strings through the Spark path's cast of a CSV field (``_parse_csv_value``, one job)
    and through ``csv_files.caster``: equal values (NaN equal to NaN, -0.0 told from 0.0)."""
    rng = random.Random(zlib.crc32(declared.encode()))
    dtype = parse_type(declared)
    strings = _random_strings(rng, declared, 1500)
    plain = {"date": pa.int32(), "timestamp": pa.int64(), "timestamp_ntz": pa.int64()}.get(declared)
    got = spark.createDataFrame([(s,) for s in strings], "s string") \
        .select(_parse_csv_value(F.col("s"), dtype, {}).alias("v")).toArrow().column("v")
    want = (got.cast(plain) if plain else got).to_pylist()
    cast = caster(sql_type(dtype))
    left_to_spark = 0
    for s, spark_value in zip(strings, want):
        try:
            value = column_array([cast(s)], sql_type(dtype))
        except NotLocal:
            left_to_spark += 1
            continue
        mine = (value.cast(plain) if plain else value).to_pylist()[0]
        assert repr(mine) == repr(spark_value), (declared, s, mine, spark_value)
    assert left_to_spark < len(strings) // 10 and sum(v is not None for v in want) > 20


# ---- what stays with Spark -----------------------------------------------------------------------

@pytest.mark.parametrize("fmt,text", [
    ("csv", 'id,name,amount\n1,"a""b",1\n'),                   # a doubled quote
    ("csv", 'id,name,amount\n1,"a\\"b",1\n'),                  # a backslash escape inside quotes
    ("csv", 'id,name,amount\n1,a"b,1\n'),                      # a quote inside an unquoted field
    ("csv", 'id,name,amount\n1,"ab" ,1\n'),                    # text after a closing quote
    ("csv", b"id,name,amount\n1,\xff,1\n"),                    # not UTF-8
    ("json", '{"id": 1, \'name\': \'a\'}\n'),                  # single quotes
    ("json", '{"id": 1, "name": 1.5}\n'),                      # a fraction read into a string
    ("json", '{"id": 1, "amount": +INF}\n'),
    ("json", '{"id": 1}\n\ufeff{"id": 2}\n'),                  # a byte-order mark inside the file
])
def test_what_the_in_process_readers_leave_to_spark(tmp_path, fmt, text):
    write(tmp_path, f"inbox/f.{fmt}", text)
    with pytest.raises(NotLocal):
        arrow_inputs.read_changes(spec_of(COLS, fmt), files_under(tmp_path))


def test_json_lines_that_only_jackson_reads_are_left_to_spark_not_refused():
    with pytest.raises(NotLocal):
        json_lines.parse_line("{'a': 1}", "here")
    assert json_lines.parse_line('{"a": 1} x', "here").value == [("a", "1")]
    assert json_lines.parse_line("\t", "here").empty


def test_the_size_of_a_text_change_is_known_without_spark(tmp_path):
    """The engine choice needs the change's rows: Parquet footers, text files' lines (a large
    compressed file is not estimated), a snapshots input's newest snapshot."""
    from spark_jobs.executor.arrow.readers.sizes import change_rows
    from spark_jobs.runtime.step_engines import change_rows as step_rows

    write(tmp_path, "c/a.csv", "id,name,amount\n1,a,1\n2,b,2\n")
    write(tmp_path, "c/b.csv.gz", "id,name,amount\r\n3,c,3\r\n")
    write(tmp_path, "j/a.jsonl", '{"id": 1}\n{"id": 2}\n{"id": 3}')
    _parquet(tmp_path, "p/a.parquet", {"id": [1, 2, 3, 4]})
    write(tmp_path, "s/1.csv", "id\n1\n")
    write(tmp_path, "s/2/part-0.csv", "id\n1\n2\n")
    csv, jsonl = spec_of(COLS, "csv", path="c"), spec_of(COLS, "json", path="j")
    snaps = spec_of(COLS, "csv", "snapshots", "s")
    assert change_rows(csv, files_under(tmp_path, "c")) == 5  # header lines counted: an estimate
    assert change_rows(jsonl, files_under(tmp_path, "j")) == 2 + 1
    assert change_rows(spec_of(COLS, "parquet", path="p"), files_under(tmp_path, "p")) == 4
    assert change_rows(snaps, pending_files(snaps, str(tmp_path), set())) == 3
    assert step_rows({"c": files_under(tmp_path, "c"), "j": files_under(tmp_path, "j")}, {"c": csv, "j": jsonl}) == 8
    big = tmp_path / "big" / "x.csv.gz"
    big.parent.mkdir()
    big.write_bytes(os.urandom(9 << 20))
    assert change_rows(csv, data_files(str(big.parent))) is None
