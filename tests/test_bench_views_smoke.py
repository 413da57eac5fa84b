"""``bench.views`` (many SQL views in one circuit) runs, in-process, and its views equal DuckDB's."""
from __future__ import annotations

from bench.views import run, views


def test_many_views_bench_runs_and_its_views_equal_duckdb():
    result = run(10, 100, 1, warmup=1, seed=3)
    assert result["correct"], result["wrong views"]
    assert [s["kind"] for s in result["steps"]] == ["load", "warm-up", "measured"]
    assert {s["engine"] for s in result["steps"]} == {"arrow"}
    assert len(views(100)) == 100 and len(set(views(100).values())) == 100
