"""The bag check's three ways of looking a large change's deletes up agree (issue 14).

A change not held on the driver has its net negative tuples collected, then looked up on the
driver in the integral's row groups (decoded and kept), or streamed when that lookup would decode
too much (``TraceFiles.matching``), or, beyond the driver's bounds, checked by a Spark semi-join.
Each path must refuse the same ghost deletes (NULL keys included) naming the file, commit
nothing, and accept the same valid deletes; the spies prove which path ran.
"""
from __future__ import annotations

import os
from collections import Counter

import pytest

from spark_jobs.executor import bag_check
from spark_jobs.executor.sources import InputRefused
from spark_jobs.runtime.step import run_step
from spark_jobs.state.lookup import TraceFiles
from tests.test_bag_check import _circuit, _expected, _rt, _views, _write

PATHS = {  # policy sections of each path (every change goes the Spark step's way: local_change_rows=0)
    "driver lookup": {},
    "driver stream": {"narrow": {"max_decoded_rows": 0}},
    "spark semi-join": {"bag_check": {"max_tuples": 0}},
}


@pytest.mark.parametrize("path", PATHS)
def test_every_path_refuses_and_accepts_the_same_deletes(spark, tmp_path, monkeypatch, path):
    calls: Counter = Counter()
    for owner, name in ((TraceFiles, "matching"), (bag_check, "_on_spark")):
        real = getattr(owner, name)
        monkeypatch.setattr(owner, name, lambda *a, _real=real, _n=name, **k: calls.update([_n]) or _real(*a, **k))
    rt = _rt(_circuit(tmp_path), tmp_path, engine="spark", local_change_rows=0, **PATHS[path])
    _write(tmp_path, "001.parquet", [(1, "a", 2), (2, "b", 1), (None, "n", 1), (3, "c", 1)])
    run_step(rt)
    bad = _write(tmp_path, "002.parquet", [(1, "a", -1), (2, "b", -2), (4, "ghost", -1), (None, "n", -1),
                                           (None, "zz", -1), (3, "c", 1), (3, "c", -2)])
    with pytest.raises(InputRefused) as err:
        run_step(rt)
    assert [p for p, _ in err.value.problems] == [bad]
    assert "(3 row(s) of input items would)" in err.value.problems[0][1]  # (2, b), (4, ghost), (NULL, zz)
    assert rt.store.last_committed() == 1
    os.remove(bad)
    _write(tmp_path, "003.parquet", [(1, "a", -2), (2, "b", -1), (None, "n", -1), (5, "e", 1), (3, "c", -1)])
    run_step(rt)
    assert _views(rt) == _expected(Counter({(5, "e"): 1}))
    expected = {"driver lookup": Counter(), "driver stream": Counter(matching=2),
                "spark semi-join": Counter(_on_spark=2)}[path]
    assert calls == expected
