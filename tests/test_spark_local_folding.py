"""A small change handed to Spark as rows (a local relation) gives Spark SQL's answer over files.

Spark's optimizer evaluates a filter over a local relation early (``ConvertToLocalRelation``),
before the rules that simplify it: ``NOT - col0 NOT BETWEEN (NULL) AND col1 * - col0 / + 0`` is
never true, and over files Spark drops the filter without dividing; over rows it divided by zero
and failed the step under ANSI (sqllogictest random/groupby). The step now runs again without that
rule, and equals DuckDB at every step; a division by zero that Spark evaluates anyway still fails
the step.
"""
from __future__ import annotations

import random

import pytest

from tests.sql_streams import SqlStream
from tests.streams import RandomRelation

CIRCUIT = """
name: local_folding
inputs:
  tab2:
    schema: {col0: long, col1: long}
    source: {kind: changes, path: inbox/tab2, format: parquet}
nodes:
  v:
    op: sql
    query: "SELECT - - COUNT(*) AS col1 FROM tab2 WHERE NOT - col0 NOT BETWEEN (NULL) AND col1 * - col0 / + 0 GROUP BY col0"
  w: {op: sql, query: "SELECT col0, count(*) AS n FROM tab2 GROUP BY col0"}
outputs: [v, w]
"""


def _relation(seed: int) -> RandomRelation:
    rng = random.Random(seed)
    return RandomRelation(["col0", "col1"], {"col0": lambda r: r.randint(1, 9), "col1": lambda r: r.randint(0, 9)},
                          rng)


def test_a_filter_spark_drops_over_files_does_not_fail_over_rows(tmp_path, spark):
    stream = SqlStream(tmp_path, CIRCUIT, in_process=True)
    stream.use_engine("arrow")  # Arrow refuses the division by zero: each step runs on Spark
    rel = _relation(4)
    for t in range(3):
        stream.step({"tab2": rel.change(5 if t == 0 else 2, 0 if t == 0 else 2)})
    assert len(stream.fallbacks) == 3 and all("DIVIDE_BY_ZERO" in r for r in stream.fallbacks), stream.fallbacks


def test_a_division_by_zero_spark_evaluates_still_fails_the_step(tmp_path, spark):
    from spark_jobs.runtime.step import run_step

    stream = SqlStream(tmp_path, CIRCUIT.replace("WHERE NOT - col0 NOT BETWEEN (NULL) AND col1 * - col0 / + 0",
                                                 "WHERE col1 * - col0 / + 0 > 1"), in_process=True)
    stream.use_engine("arrow")
    stream._write("tab2", {(1, 2): 1})
    stream.t += 1
    with pytest.raises(Exception, match="DIVIDE_BY_ZERO"):
        run_step(stream.rt)
    assert stream.rt.store.last_committed() == 0
