"""Dates and timestamps outside 0001-01-01 .. 9999-12-31 (valid Parquet ``timestamp[us]`` that
Spark reads: year 10000, year 0, negative years) are refused when read, on both engines, naming
the file and the value; nothing is committed, so no publish or ``dbsp show`` ever meets them.
Just inside the range is committed as it is (``executor/sources/time_range.py``)."""
from __future__ import annotations

import datetime
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.errors import EXIT_REFUSED, DbspError
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from tests.engines import output_delta
from tests.policies import config, make_input_folders

CIRCUIT = """\
name: times
inputs:
  a:
    schema: {k: long, ts: timestamp, d: date}
    source: {kind: changes, path: inbox/a, format: parquet}
nodes:
  v: {op: select, input: a, columns: [k, ts, d]}
outputs: [v]
"""
US = 10**6
YEAR_10000 = 253402300800 * US  # 10000-01-01T00:00:00Z
YEAR_0 = -62135596800 * US - 1  # one microsecond before 0001-01-01: year 0
NEGATIVE = -62135596800 * US - 400 * 366 * 86400 * US  # about year -400


def _open(tmp_path, engine: str):  # noqa: ANN202
    path = tmp_path / "c.yaml"
    path.write_text(CIRCUIT)
    rt = open_circuit(str(path), config(tmp_path / "data", engine=engine))
    make_input_folders(rt)
    return rt, str(tmp_path / "data" / "inbox" / "a")


def _write(folder: str, name: str, micros: list[int], days: list[int], statistics: bool = True) -> None:
    table = pa.table({"k": pa.array(range(len(micros)), pa.int64()),
                      "ts": pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                      "d": pa.array(days, pa.int32()).cast(pa.date32())})
    pq.write_table(table, os.path.join(folder, name), write_statistics=statistics)


@pytest.mark.parametrize("engine", ["arrow", "spark"])
@pytest.mark.parametrize("micros, days, shown", [
    ([0, YEAR_10000], [0, 0], "10000-01-01"),
    ([YEAR_0], [0], "0000-12-31"),
    ([NEGATIVE], [0], "-0"),
    ([0], [2932897], "10000-01-01"),  # a date one day past 9999-12-31
])
@pytest.mark.parametrize("statistics", [True, False])
def test_a_time_outside_the_range_is_refused_when_read(spark, tmp_path, engine, micros, days, shown, statistics):
    rt, folder = _open(tmp_path, engine)
    _write(folder, "bad.parquet", micros, days, statistics)
    with pytest.raises(DbspError) as refused:
        run_step(rt)
    text = refused.value.user_message()
    assert refused.value.exit_code == EXIT_REFUSED, text
    assert "bad.parquet" in text and shown in text and "0001-01-01 .. 9999-12-31" in text, text
    assert rt.store.manifest() is None


@pytest.mark.parametrize("engine", ["arrow", "spark"])
def test_the_ends_of_the_range_are_committed(spark, tmp_path, engine):
    rt, folder = _open(tmp_path, engine)
    _write(folder, "ok.parquet", [-62135596800 * US, 253402300799 * US + 999999], [-719162, 2932896])
    run_step(rt)
    got, _ = output_delta(rt, "v")
    utc = datetime.timezone.utc
    assert got == {(0, datetime.datetime(1, 1, 1, tzinfo=utc), datetime.date(1, 1, 1)): 1,
                   (1, datetime.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=utc), datetime.date(9999, 12, 31)): 1}


@pytest.mark.parametrize("engine", ["arrow", "spark"])
@pytest.mark.parametrize("fmt, text", [
    ("csv", "k,ts,d\n1,10000-01-01 00:00:00,2020-01-01\n"),
    ("json", '{"k": 1, "ts": "+10000-01-01T00:00:00", "d": "2020-01-01"}\n'),
])
def test_text_formats_refuse_a_time_outside_the_range_too(spark, tmp_path, engine, fmt, text):
    path = tmp_path / "c.yaml"
    path.write_text(CIRCUIT.replace("format: parquet", f"format: {fmt}"))
    rt = open_circuit(str(path), config(tmp_path / "data", engine=engine))
    make_input_folders(rt)
    with open(tmp_path / "data" / "inbox" / "a" / ("bad.csv" if fmt == "csv" else "bad.jsonl"), "w") as fh:
        fh.write(text)
    with pytest.raises(DbspError) as refused:
        run_step(rt)
    message = refused.value.user_message()
    assert refused.value.exit_code == EXIT_REFUSED and "bad." in message and "10000-01-01" in message, message
    assert rt.store.manifest() is None
