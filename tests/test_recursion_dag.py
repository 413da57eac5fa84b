"""A recursive circuit through the DAG-run protocol (plan, one task per stage, check, commit):
the recursive node is one stage whose nested state (per-iteration traces and depth) is staged and
committed like any other state, and the closure equals a Python fixed point after each run."""
from __future__ import annotations

import pytest

from spark_jobs.config import load_config
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.stages import stage_graph
from tests.test_recursion import closure
from tests.test_recursion_runtime import TC, _view, _write
from tests.test_timestep_tasks import _dag_run

pytestmark = pytest.mark.slow


def test_transitive_closure_as_dag_runs_matches_python(spark, tmp_path):
    rt = open_circuit(TC, load_config(data_root=str(tmp_path)))
    assert [(s.name, s.kind) for s in stage_graph(rt.compiled)] == [("edges", "input"), ("closure", "operator")]
    edges: set[tuple[int, int]] = set()
    steps = [{(1, 2): 1, (2, 3): 1, (3, 4): 1, (4, 2): 1, (5, 5): 1},  # a cycle and a self-loop
             {(3, 4): -1, (0, 1): 1},                                   # a delete breaks the cycle
             {(4, 2): -1, (3, 4): 1, (2, 3): -1}]
    for t, change in enumerate(steps, start=1):
        _write(tmp_path, "edges", f"b{t:03d}.parquet", change, ("src", "dst"))
        for e, w in change.items():
            (edges.add if w > 0 else edges.discard)(e)
        assert _dag_run(rt, f"run-{t}")["timestep"] == t
        assert _view(rt, "closure") == closure(edges), f"timestep {t}"
    traces = rt.store.status()["traces"]
    assert "closure/depth" in traces and any(k.startswith("closure/I(") for k in traces)
