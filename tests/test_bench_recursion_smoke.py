"""W3 must not rot either: run `python -m bench.recursion --smoke` for real (a subprocess with its
own Spark session, results into a tmp folder) and check that its results are well-formed and
mean something: every timed step's view equals the from-scratch closure, and so does the view
after the last step (against Spark's from-scratch closure and a Python fixed point)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# what bench/recursion.py runs under --smoke: 40 components of 12 nodes, 14 edges each;
# batches of 2 and 5 edges, 1 repeat on the main loop here (2 by default: CI time), then the
# "sorted" loop once per batch
COMPONENTS, NODES, EDGES, BATCHES, REPEATS = 40, 12, 40 * 14, (2, 5), 1
STEP_KEYS = {"kind", "batch", "lookup", "step_seconds", "step_jobs", "step_iterations",
             "step_iteration_seconds", "view_changes", "load_average"}
SCRATCH_KEYS = {"from_scratch_seconds", "from_scratch_jobs", "from_scratch_iterations", "closure_rows",
                "matches_scratch"}


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


@pytest.fixture(scope="module")
def w3(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bench-recursion-smoke")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, "-m", "bench.recursion", "--smoke", "--repeats", str(REPEATS),
                           "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


@pytest.mark.slow
def test_recursion_smoke_results(w3: Path) -> None:
    assert sorted(p.name for p in w3.iterdir()) == ["recursion-smoke.json", "recursion-smoke.md"]
    r = json.loads((w3 / "recursion-smoke.json").read_text())
    assert r["smoke"] is True and r["complete"] is True
    assert (r["components"], r["nodes_per_component"], r["edges"]) == (COMPONENTS, NODES, EDGES)
    assert r["batches"] == list(BATCHES) and r["repeats"] == REPEATS
    # the closure holds every edge and more; the per-iteration state is at least the closure
    assert r["closure_rows"] > r["edges"] and r["state_rows"] >= r["closure_rows"]
    assert _positive(r["initial_step_seconds"]) and r["initial_step_iterations"] > 1

    steps = r["steps"]
    main = [s for s in steps if s["lookup"] == r["lookup"]]
    other = [s for s in steps if s["lookup"] != r["lookup"]]
    assert len(main) == len(BATCHES) * REPEATS * 2 and len(other) == len(BATCHES) * 2
    assert [(s["batch"], s["kind"]) for s in other] == [(b, k) for b in BATCHES for k in ("insert", "delete")]
    for s in steps:
        assert STEP_KEYS <= set(s), STEP_KEYS - set(s)
        assert _positive(s["step_seconds"]) and s["step_iterations"] >= 1, s
        assert all(math.isfinite(x) and x >= 0 for x in s["step_iteration_seconds"])
        assert len(s["view_changes"]) == 2 and all(isinstance(n, int) and n >= 0 for n in s["view_changes"])
    assert sum(sum(s["view_changes"]) for s in steps) > 0  # the steps changed the closure
    for s in main:  # each timed step was checked against the closure computed from scratch
        assert SCRATCH_KEYS <= set(s), SCRATCH_KEYS - set(s)
        assert s["matches_scratch"] is True, s
        assert _positive(s["from_scratch_seconds"]) and s["closure_rows"] > 0
    assert all("matches_scratch" not in s for s in other)  # covered by the final check below

    check = r["correct"]  # the view after every step (the other loop's too)
    assert check["ok"] is True and check["view_equals_scratch"] is True and check["view_equals_python"] is True
    assert check["scratch_differences"] == 0
    assert check["view_rows"] == check["scratch_rows"] == check["python_rows"] > 0
    assert any(s["closure_rows"] != r["closure_rows"] for s in main)  # the closure moved with the changes


@pytest.mark.slow
def test_recursion_smoke_markdown(w3: Path) -> None:
    md = (w3 / "recursion-smoke.md").read_text()
    assert md.startswith(f"Transitive closure: {EDGES} edges in {COMPONENTS} DAG components")
    assert "| change | edges | loop |" in md and "view = scratch" in md
    rows = [line for line in md.splitlines() if line.startswith(("| insert |", "| delete |"))]
    assert len(rows) == len(BATCHES) * REPEATS * 2 + len(BATCHES) * 2
    assert {line.split("|")[2].strip() for line in rows} == {str(b) for b in BATCHES}  # the batch sizes
    assert "| NO |" not in md and "Correct after the last step: yes" in md
