"""Differential reading: the same input files read by the Spark readers (``executor/sources``) and
the in-process ones (``executor/arrow/inputs.py``) must give the same Z-set (rows, weights and
column types) or the same refusal (every file, every reason, word for word)."""
from __future__ import annotations

import math
import os
from collections import Counter
from typing import Any, Sequence

import pyarrow as pa

from spark_jobs.executor.arrow import inputs as arrow_inputs
from spark_jobs.executor.engine import NotLocal
from spark_jobs.executor.sources import InputFile, InputRefused, data_files, read_changes, read_snapshot
from spark_jobs.spec.model import WEIGHT, Column, InputSpec, Source


def spec_of(columns: Sequence[tuple[str, str, bool]], fmt: str, kind: str = "changes", path: str = "inbox",
            options: dict | None = None) -> InputSpec:
    return InputSpec("t", tuple(Column(n, t, nullable) for n, t, nullable in columns), Source(kind, path, fmt, options or {}))


def _value(v: Any) -> Any:
    if isinstance(v, float):
        return "NaN" if math.isnan(v) else (v, math.copysign(1.0, v))  # -0.0 and 0.0 are told apart
    return v


def _zset(rows: Sequence[dict]) -> Counter:
    out: Counter = Counter()
    for r in rows:
        out[tuple((k, _value(v)) for k, v in r.items() if k != WEIGHT)] += r[WEIGHT]
    return Counter({k: w for k, w in out.items() if w})


def spark_result(spark, spec: InputSpec, files: Sequence[InputFile], snapshot: bool = False) -> tuple:
    """("rows", Z-set, Arrow schema) or ("refused", problems) of the Spark reader."""
    try:
        df = read_snapshot(spark, spec, files[0]) if snapshot else read_changes(spark, spec, files)
        table = df.toArrow()
    except InputRefused as exc:
        return "refused", exc.problems
    return "rows", _zset(table.to_pylist()), table.schema


def arrow_result(spec: InputSpec, files: Sequence[InputFile], snapshot: bool = False) -> tuple:
    """The same from the in-process reader (raises ``NotLocal`` where it leaves the files to Spark)."""
    try:
        table = (arrow_inputs.read_snapshot(spec, files[0]) if snapshot else arrow_inputs.read_changes(spec, files))[0]
    except InputRefused as exc:
        return "refused", exc.problems
    return "rows", _zset(table.to_pylist()), table.schema


def assert_same(spark, spec: InputSpec, files: Sequence[InputFile], snapshot: bool = False) -> tuple:
    """Both readers agree on ``files``; returns the Spark reader's result (``NotLocal`` where the
    in-process reader leaves the files to Spark)."""
    got = arrow_result(spec, files, snapshot)
    want = spark_result(spark, spec, files, snapshot)
    assert got[0] == want[0], f"arrow {got[0]} {got[1:]!r:.2000}\nspark {want[0]} {want[1:]!r:.2000}"
    if want[0] == "refused":
        assert got[1] == want[1], f"refusals differ:\n arrow {got[1]}\n spark {want[1]}"
    else:
        assert got[1] == want[1], (f"rows differ:\n only arrow {dict(got[1] - want[1])}\n "
                                   f"only spark {dict(want[1] - got[1])}")
        assert got[2].types == want[2].types, f"types differ: arrow {got[2]} spark {want[2]}"
    return want


def write(root, name: str, data: str | bytes) -> str:
    path = os.path.join(str(root), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if name.endswith(".gz"):
        import gzip

        raw = gzip.compress(raw)
    elif name.endswith(".bz2"):
        import bz2

        raw = bz2.compress(raw)
    with open(path, "wb") as fh:
        fh.write(raw)
    return path


def files_under(root, folder: str = "inbox") -> list[InputFile]:
    return data_files(os.path.join(str(root), folder))


def local_or_none(spec: InputSpec, files: Sequence[InputFile]) -> bool:
    """Whether the in-process reader takes these files (False: it leaves them to Spark)."""
    try:
        arrow_result(spec, files)
    except NotLocal:
        return False
    return True
