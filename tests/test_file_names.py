"""File names are data: any name POSIX allows is read on both engines (Spark and the in-process
Arrow path), and keyed change records without a sequence column apply in the order of the plain
path strings whatever the characters (Spark reports paths URI-encoded: ``x%20b`` sorted after
``x!b``, ``v%5B1%5D`` before ``v1``)."""
from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from spark_jobs.state.arrow_read import read_view
from tests.policies import config

ENGINES = ["spark", "arrow"]

# every character class that URIs, globs or Hadoop's Path treat specially, and non-ASCII
NAMES = ["a:b", "x b", "x!b", "v[1]", "v1", "a{b", "a_b", "p%41", "p%", "p+q", "h#1", "h$1", "q?1",
         "st*r", "n\nl", "tab\tx", "é", "日本", "z", "back\\slash", "semi;colon", "'quote\"", "a,b", "=eq",
         "x[1]:y", "c:{d,e}", "q?:r", "2024-01-01T00:00:00*"]

CHANGES = """\
name: names
inputs:
  t:
    schema: {k: long, v: string}
    source: {kind: changes, path: inbox/t, format: FMT}
nodes:
  f: {op: filter, input: t, where: "true"}
outputs: [f]
"""

CDC = """\
name: order
inputs:
  t:
    schema: {k: long, v: string, op: string}
    key: [k]
    source: {kind: cdc, path: inbox/t, format: FMT}
nodes:
  f: {op: filter, input: t, where: "true"}
outputs: [f]
"""


def _write(path: Path, fmt: str, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema(
            [(c, pa.int64() if c == "k" else pa.string()) for c in rows[0]])), path)
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        cols = list(rows[0])
        path.write_text(",".join(cols) + "\n" + "".join(",".join(str(r[c]) for c in cols) + "\n" for r in rows))


def _view(rt) -> Counter:  # noqa: ANN001
    table = read_view(rt.store, "f")
    if table is None:
        return Counter()
    cols = [c for c in table.column_names if c != "_weight"]
    return Counter({tuple(r[c] for c in cols): r["_weight"] for r in table.to_pylist()})


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_any_posix_name_is_read(spark, tmp_path, engine, fmt):
    root = tmp_path / "data"
    for i, name in enumerate(NAMES):
        _write(root / "inbox" / "t" / f"{name}.{fmt}", fmt, [{"k": i, "v": "x"}])
    f = tmp_path / "c.yaml"
    f.write_text(CHANGES.replace("FMT", fmt))
    rt = open_circuit(str(f), config(root, engine=engine))
    report = run_step(rt)
    if fmt == "parquet":  # text formats are read by Spark ("read by Spark"): the same names, on Spark
        assert report.engine == engine, report.engine_reason
    assert _view(rt) == Counter({(i, "x"): 1 for i in range(len(NAMES))})
    consumed = sorted(r["name"] for r in rt.store.manifest().consumed("t"))
    assert consumed == sorted(f"{n}.{fmt}" for n in NAMES)


# pairs of names whose encoded forms (x%20b, v%5B1%5D, a%7Bb, a%23b, ...) sort the other way
PAIRS = [("x b", "x!b"), ("v1", "v[1]"), ("a_b", "a{b"), ("a#b", "a$b"), ("a b", "a:b"), ("p%", "p+"),
         ("z", "é"), ("é", "日本"), ("n\nl", "n l"), ("a%25", "a%"), ("q", "q?"), ("x", "x\\"),
         ("v[1]:b", "v[1]:a")]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_cdc_records_without_sequence_apply_in_plain_path_order(spark, tmp_path, engine, fmt):
    """Key p's records sit in the two files of pair p (inserts, which replace): the file whose
    plain path sorts last wins, as Python's string order says (of the whole name: ``a%.jsonl``
    sorts before ``a%25.jsonl``)."""
    root = tmp_path / "data"
    later = [max(pair, key=lambda n: f"{n}.{fmt}") for pair in PAIRS]
    for p, pair in enumerate(PAIRS):
        for name in pair:
            rows = [{"k": p, "v": name, "op": "c"}]
            path = root / "inbox" / "t" / f"{name}.{fmt}"
            if path.exists():  # a pair member shared with another pair: one more record
                rows = (json.loads(x) for x in path.read_text().splitlines()) if fmt == "jsonl" else \
                    pq.read_table(path).to_pylist()
                rows = [*rows, {"k": p, "v": name, "op": "c"}]
            _write(path, fmt, rows)
    f = tmp_path / "c.yaml"
    f.write_text(CDC.replace("FMT", fmt))
    rt = open_circuit(str(f), config(root, engine=engine))
    run_step(rt)
    assert _view(rt) == Counter({(p, name): 1 for p, name in enumerate(later)})
    assert os.path.exists(root / "inbox" / "t" / f"a:b.{fmt}")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_corrupt_file_with_an_awkward_name_is_refused_by_that_name(spark, tmp_path, engine):
    """The refusal names the file (as it is on disk) and the true cause, whatever its name."""
    from spark_jobs.executor.sources import InputRefused

    root = tmp_path / "data"
    folder = root / "inbox" / "t"
    for i, name in enumerate(["ok 1", "ok:2"]):
        _write(folder / f"{name}.parquet", "parquet", [{"k": i, "v": "x"}])
    bad = folder / "x b%[1]:é#?.parquet"
    pq.write_table(pa.table({"k": pa.array(range(2000), pa.int64()), "v": pa.array(["y"] * 2000)}), bad,
                   compression="snappy")
    data = bytearray(bad.read_bytes())
    for i in range(8, len(data) // 2):  # the pages, not the footer
        data[i] = (data[i] * 7 + 13) % 256
    bad.write_bytes(bytes(data))
    f = tmp_path / "c.yaml"
    f.write_text(CHANGES.replace("FMT", "parquet"))
    rt = open_circuit(str(f), config(root, engine=engine))
    with pytest.raises(InputRefused) as err:
        run_step(rt)
    [(named, reason)] = err.value.problems
    assert named == str(bad), err.value
    assert "cannot be read" in reason or "corrupt" in reason.lower() or "parquet" in reason.lower(), reason
    assert rt.store.last_committed() == 0
