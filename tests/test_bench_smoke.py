"""The benchmark harness must not rot: run `python -m bench.run --smoke` for real (a subprocess
with its own Spark session) and check that every results file exists and is well-formed."""
from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

STEP_KEYS = {"change_rows", "seconds", "jobs", "bytes_written", "bytes_read", "view_bytes_read",
             "state_bytes", "state_rows", "compactions", "timestep", "engine", "engine_reason",
             "bytes_actually_read"}
SIZE_KEYS = {"workload", "size", "input_rows_total", "load", "steps", "step_median_s", "jobs_median",
             "bytes_written_median", "bytes_read_median", "recompute", "ratio_step_over_recompute",
             "speedup_recompute_over_step", "correct"}


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bench-smoke")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, "-m", "bench.run", "--smoke", "--out", str(out),
                           "--work-dir", str(out / "work")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


@pytest.mark.slow
def test_smoke_results_json(smoke: Path) -> None:
    results = json.loads((smoke / "results.json").read_text())
    assert results["meta"]["smoke"] is True and results["meta"]["complete"] is True
    assert set(results["workloads"]) == {"identity", "w1", "w2"}  # w1q10 only in `make bench`
    for key, wl in results["workloads"].items():
        assert wl["sizes"], key
        for size in wl["sizes"]:
            assert SIZE_KEYS <= set(size), (key, SIZE_KEYS - set(size))
            assert size["steps"] and all(STEP_KEYS <= set(s) for s in size["steps"])
            assert all(s["bytes_written"] > 0 and s["bytes_actually_read"] > 0 for s in size["steps"])
            # in-process steps run no Spark job; Spark steps run some
            assert all((s["jobs"] == 0) == (s["engine"] == "arrow") for s in size["steps"]), size["steps"]
            assert _positive(size["step_median_s"]) and _positive(size["recompute"]["median_s"])
            assert size["correct"]["ok"], (key, size["correct"])  # the engine's view == recompute
            if key != "identity":
                assert size["bytes_read_median"] > 0  # operator state exists and is read
                assert size["duckdb"]["matches_spark"], size["duckdb"]
    q3 = results["workloads"]["w1"]["sizes"][-1]  # the hand-written step ran beside the engine's
    assert _positive(q3["reference_median_s"]) and q3["reference_correct"]["ok"], q3.get("reference_correct")
    ident = results["workloads"]["identity"]["sizes"][-1]
    assert ident["sweep"] and "break_even" in ident and ident["profile"]["phases"]
    # every sweep point's view is checked after it is applied (the first point is the steps before)
    assert all(p["correct"]["ok"] for p in ident["sweep"][1:]), ident["sweep"]
    assert ident["engines"]["steps"] == {"arrow": len(ident["steps"])}  # a small change runs in-process
    assert results["floor"]["jobs_median"] == 0


@pytest.mark.slow
def test_smoke_tables_and_plot(smoke: Path) -> None:
    with open(smoke / "results.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert {r["workload"] for r in table} == {"identity", "w1", "w2"}
    assert all(float(r["step_median_s"]) > 0 and (r["engine"] in ("arrow", "spark") or " / " in r["engine"])
               for r in table)
    md = (smoke / "results.md").read_text()
    assert "| workload | size |" in md and "**Floor**" in md and "Where one identity" in md
    assert "**w1** (Q3) targets" in md
    png = (smoke / "step_vs_recompute.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert not (smoke / "work").exists() or not any((smoke / "work").iterdir())  # data cleaned up


def test_nexmark_bench_smoke(tmp_path: Path) -> None:
    """`python -m bench.nexmark --smoke` (in this process, in-process steps): results, plot, table."""
    from bench import nexmark

    nexmark.main(["--smoke", "--out", str(tmp_path)])
    results = json.loads((tmp_path / "nexmark-smoke.json").read_text())
    assert set(results["runs"]) == set(nexmark.CIRCUITS)
    for circuit, rows in results["runs"].items():
        assert len(rows) == 8 and all(r["engine"] == "arrow" and r["state_rows"] > 0 for r in rows), circuit
        assert sum(r["events"] for r in rows) == rows[-1]["events_total"] > 0
        summary = results["summary"][circuit]
        assert _positive(summary["events_per_s_median"]) and _positive(summary["step_median_s"])
    md = (tmp_path / "nexmark-smoke.md").read_text()
    assert "| circuit | engines | step median s |" in md and "State rows per step, nexmark_hot_items" in md
    assert (tmp_path / "nexmark-smoke.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
