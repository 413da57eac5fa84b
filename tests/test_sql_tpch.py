"""The TPC-H SQL circuit (``circuits/tpch_sql.yaml``) through the real engine: on tiny generated
data with TPC-H refresh changes (new orders with their line items; whole orders deleted with all
their line items), every query's view equals DuckDB's result at every step.

CI runs the initial load and DBSP_TPCH_STEPS (default 3) changes; set it higher for a longer run.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.sql_streams import SqlStream
from tests.tpch_small import TinyTpch

pytestmark = pytest.mark.slow

CIRCUIT = Path(__file__).resolve().parent.parent / "circuits" / "tpch_sql.yaml"
STEPS = int(os.environ.get("DBSP_TPCH_STEPS", "3"))


def test_tpch_queries_equal_duckdb_at_every_step(spark, tmp_path):
    stream = SqlStream(tmp_path, CIRCUIT.read_text(), real_files=True)
    data = TinyTpch(seed=11)
    stream.step(data.initial())
    seen = {view: 0 for view in stream.spec.outputs}
    for _ in range(STEPS):
        stream.step(data.change())
        for view, rows in stream.duckdb().items():
            seen[view] += bool(rows)
    empty = [v for v, n in seen.items() if not n]
    assert not empty, f"queries whose result stayed empty (the test data should exercise them): {empty}"
