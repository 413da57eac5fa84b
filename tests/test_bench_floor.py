"""The in-process floor benchmark must not rot: ``python -m bench.floor --smoke`` on tiny data,
in this process (no Spark: its loads run in-process). Every step's view is checked against
DuckDB's Q3 over the integrated inputs by the benchmark itself; this asserts it was right, and
that the lean generator's changes delete rows that exist (the bag check would refuse them)."""
from __future__ import annotations

import json

from bench import floor


def test_floor_smoke(tmp_path) -> None:
    result = floor.main(["--smoke", "--out", str(tmp_path), "--work-dir", str(tmp_path), "--max-rss-gib", "0"])
    saved = json.loads((tmp_path / "floor-smoke.json").read_text())
    assert saved["runs"] and (tmp_path / "floor-smoke.md").exists()
    for run in result["runs"]:
        assert run["duckdb_s"] > 0 and run["load"]["engine"] == "arrow"
        for point in run["points"]:
            assert point["views_right"], point
            assert point["engines"] == ["arrow"] and point["modes"] == ["incremental"]
            assert {"bag check", "evaluate circuit", "commit"} <= set(point["phases"])
    assert {t["target"].split(" ")[0] for t in result["targets"]} >= {"100-row", "1,000-row", "DuckDB"}
