"""Equality is Spark's equality on both engines, over the values at the edges: NaN with several
payloads, -0.0 and 0.0, ±inf, NULL, the largest decimal(38,10), timestamps at the ends of
Spark's range, strings with NUL. Three timesteps insert and delete these rows, deleting with
*another representation* of an equal value (0.0 for -0.0, another NaN payload), on Spark and
in-process on Arrow; after every step each engine's view (its deltas integrated) must equal
Spark's own batch answer to the same SQL over the inputs so far, and no step may fail (no
stuck circuit: the bag check and the quality gate accept the deletes)."""
from __future__ import annotations

import datetime
import decimal
import math
import os
import struct
from collections import Counter

import pyarrow as pa
import pytest
import pyarrow.parquet as pq

from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from tests.engines import output_delta
from tests.policies import config, make_input_folders


def _nan(payload: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000000 | payload))[0]


NAN_A, NAN_B, NAN_C = _nan(0), _nan(0x123), struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000042))[0]
INF = float("inf")
UTC = datetime.timezone.utc
T_MIN = datetime.datetime(1, 1, 1, tzinfo=UTC)
T_MAX = datetime.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
D_MAX = decimal.Decimal("9999999999999999999999999999.9999999999")
D_MIN = decimal.Decimal("-9999999999999999999999999999.9999999999")  # (D_MIN rounds to 28 digits)

A = {"k": pa.int64(), "x": pa.float64(), "m": pa.decimal128(38, 10), "ts": pa.timestamp("us", tz="UTC"),
     "s": pa.string()}
B = {"y": pa.float64(), "t": pa.string()}

VIEWS = {
    "rows": "SELECT k, x, m, ts, s FROM a",
    "xs": "SELECT DISTINCT x FROM a",
    "by_x": "SELECT x, count(*) AS n, min(m) AS lo, max(ts) AS hi FROM a GROUP BY x",
    "by_s": "SELECT s, count(*) AS n, max(x) AS top FROM a GROUP BY s",
    "j_x": "SELECT a.k, a.x, b.t FROM a JOIN b ON a.x = b.y",
    "j_s": "SELECT a.k, b.y FROM a JOIN b ON a.s = b.t",
    "only_a": "SELECT x FROM a EXCEPT SELECT y AS x FROM b",
    "both": "SELECT x FROM a INTERSECT SELECT y AS x FROM b",
}

CIRCUIT = """\
name: edges
inputs:
  a:
    schema: {k: long, x: double, m: "decimal(38,10)", ts: timestamp, s: string}
    source: {kind: changes, path: inbox/a, format: parquet}
  b:
    schema: {y: double, t: string}
    source: {kind: changes, path: inbox/b, format: parquet}
nodes:
""" + "".join(f"  {v}: {{op: sql, query: \"{q}\"}}\n" for v, q in VIEWS.items()) + \
    f"outputs: [{', '.join(VIEWS)}]\n"

# (row, weight) per input and timestep; deletes name an equal value in another representation
STEPS = [
    {"a": [((1, -0.0, D_MAX, T_MIN, "a\x00b"), 1), ((2, NAN_A, D_MIN, T_MAX, "\x00"), 1),
           ((3, INF, decimal.Decimal("0E-10"), None, ""), 2), ((4, -INF, None, T_MIN, None), 1),
           ((5, None, decimal.Decimal("-1E-10"), T_MAX, "a\x00b"), 1), ((6, 0.0, D_MAX, T_MAX, "z"), 1)],
     "b": [((0.0, "a\x00b"), 1), ((NAN_B, "\x00"), 1), ((INF, "x"), 1), ((None, None), 1)]},
    {"a": [((1, 0.0, D_MAX, T_MIN, "a\x00b"), -1), ((2, NAN_B, D_MIN, T_MAX, "\x00"), -1),
           ((7, NAN_C, D_MAX, T_MIN, "\x00"), 1), ((8, -0.0, None, None, "z"), 1)],
     "b": [((-0.0, "a\x00b"), -1), ((NAN_C, "q"), 1)]},
    {"a": [((3, INF, decimal.Decimal("0E-10"), None, ""), -1), ((7, NAN_B, D_MAX, T_MIN, "\x00"), -1)],
     "b": [((NAN_A, "\x00"), -1), ((-0.0, "z"), 1)]},
]


def _key(value):  # noqa: ANN001, ANN202
    """A value as Spark's equality sees it (one NaN, one zero), comparable in a Counter."""
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else value + 0.0
    if isinstance(value, datetime.datetime) and value.tzinfo is None:  # Spark's collect: local (UTC) time
        return value.replace(tzinfo=UTC)
    return value


def _spark_row(row: tuple) -> tuple:
    """A row with every NaN as one object (a Counter then holds NaN rows as Spark groups them)."""
    return tuple(NAN_A if isinstance(v, float) and math.isnan(v) else v for v in row)


def _write(root: str, name: str, t: int, rows: list[tuple[tuple, int]]) -> None:
    types = A if name == "a" else B
    folder = os.path.join(root, "inbox", name)
    os.makedirs(folder, exist_ok=True)
    cols = {c: pa.array([r[i] for r, _ in rows], typ) for i, (c, typ) in enumerate(types.items())}
    cols["_weight"] = pa.array([w for _, w in rows], pa.int64())
    pq.write_table(pa.table(cols), os.path.join(folder, f"t{t}.parquet"))


def _batch(spark, inputs: dict[str, Counter]) -> dict[str, Counter]:  # noqa: ANN001
    """Spark's own answer: each view's SQL over the integrated inputs."""
    from pyspark.sql.types import (DecimalType, DoubleType, LongType, StringType, StructField, StructType,
                                   TimestampType)

    schemas = {"a": StructType([StructField("k", LongType()), StructField("x", DoubleType()),
                                StructField("m", DecimalType(38, 10)), StructField("ts", TimestampType()),
                                StructField("s", StringType())]),
               "b": StructType([StructField("y", DoubleType()), StructField("t", StringType())])}
    for name, bag in inputs.items():  # through Arrow: PySpark's own conversion fails on year 1
        types = A if name == "a" else B
        rows = [row for row, n in bag.items() for _ in range(n)]
        table = pa.table({c: pa.array([r[i] for r in rows], t) for i, (c, t) in enumerate(types.items())})
        spark.createDataFrame(table, schemas[name]).createOrReplaceTempView(name)
    out = {}
    for view, query in VIEWS.items():
        result = spark.sql(query).toArrow()
        out[view] = Counter(tuple(_key(v) for v in r.values()) for r in result.to_pylist())
    return out


def _integrate(total: Counter, delta: Counter) -> None:
    for row, w in delta.items():
        total[tuple(_key(v) for v in row)] += w
    for row in [r for r, w in total.items() if w == 0]:
        del total[row]


def test_edge_values_agree_with_spark_on_both_engines(spark, tmp_path):
    path = tmp_path / "circuit.yaml"
    path.write_text(CIRCUIT)
    roots = {e: str(tmp_path / e) for e in ("spark", "arrow")}
    rts = {e: open_circuit(str(path), config(roots[e], engine=e)) for e in roots}
    for rt in rts.values():
        make_input_folders(rt)
    views = {e: {v: Counter() for v in VIEWS} for e in roots}
    inputs = {"a": Counter(), "b": Counter()}
    for t, changes in enumerate(STEPS, start=1):
        for name, rows in changes.items():
            for root in roots.values():
                _write(root, name, t, rows)
            for row, w in rows:
                inputs[name][_spark_row(row)] += w  # integrated with Spark's equality
        for engine, rt in rts.items():
            report = run_step(rt)  # raises on a refusal or a failed quality gate: a stuck circuit
            assert report.engine == engine, report.engine_reason
            assert not report.published.failed, report.published.summary()  # every view publishable
            for view in VIEWS:
                _integrate(views[engine][view], output_delta(rt, view)[0])
        want = _batch(spark, {n: Counter({r: w for r, w in bag.items() if w}) for n, bag in inputs.items()})
        for engine in roots:
            for view in VIEWS:
                got = {_row(r): w for r, w in views[engine][view].items()}
                assert got == dict(want[view]), (
                    f"timestep {t}, {engine}, view {view}:\n got  {sorted(got.items(), key=repr)}\n"
                    f" want {sorted(want[view].items(), key=repr)}")
    for engine, rt in rts.items():  # and the published tables hold the views (NaN deletes matched)
        for view in VIEWS:
            assert _published(rt, view) == views[engine][view], f"{engine}: published table of {view}"


def _row(row: tuple) -> tuple:
    return tuple(_key(v) for v in row)


def _published(rt, view: str) -> Counter:  # noqa: ANN001
    """The rows of a view's published Delta table, compared as Spark compares them."""
    import deltalake

    from spark_jobs.publish import publish_views

    uri = next(r.uri for r in publish_views(rt).results if r.view == view)
    table = deltalake.DeltaTable(uri).to_pyarrow_table()
    return Counter(_row(tuple(r.values())) for r in table.to_pylist())


def _not_utf8_file(folder: str) -> None:
    """A Parquet file whose string column holds a lone surrogate's bytes (as CESU-8 writers
    produce) and a stray byte: pyarrow writes such bytes unchecked, Spark reads them unchecked."""
    raw = pa.array([b"ok", b"a\xed\xa0\x80b", b"\xff"], pa.binary())
    strings = pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())
    os.makedirs(folder, exist_ok=True)
    pq.write_table(pa.table({"y": pa.array([1.0, 2.0, 3.0]), "t": strings}), os.path.join(folder, "t2.parquet"))


def test_strings_that_are_not_utf8_are_refused_alike_on_both_engines(spark, tmp_path):
    """Both engines refuse the file, naming it, the column and the first bad row; nothing is
    committed, and the circuit goes on once the file is replaced."""
    from spark_jobs.errors import DbspError

    path = tmp_path / "circuit.yaml"
    path.write_text(CIRCUIT)
    for engine in ("spark", "arrow"):
        root = str(tmp_path / engine)
        rt = open_circuit(str(path), config(root, engine=engine))
        make_input_folders(rt)
        _write(root, "b", 1, [((1.0, "x"), 1)])
        run_step(rt)
        folder = os.path.join(root, "inbox", "b")
        _not_utf8_file(folder)
        with pytest.raises(DbspError) as refused:
            run_step(rt)
        assert "t2.parquet: column t: row 1 holds bytes that are not UTF-8 text" in str(refused.value), engine
        assert refused.value.exit_code == 2
        assert rt.committed.last_committed() == 1, engine
        os.remove(os.path.join(folder, "t2.parquet"))
        _write(root, "b", 2, [((2.0, "y"), 1)])
        assert run_step(rt).engine == engine
        assert rt.committed.last_committed() == 2
