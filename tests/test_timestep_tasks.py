"""The DAG-run protocol in one process: plan, one task per stage, check, commit — with retries,
killed stages, a failing quality gate and a full refresh."""
from __future__ import annotations

import pytest

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.examples.generators import RevenueGenerator
from spark_jobs.quality import QualityGateFailed
from spark_jobs.runtime import timestep
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.stages import stage_graph
from spark_jobs.state import failpoints
from tests import oracle

pytestmark = pytest.mark.slow
REVENUE = str(PROJECT_ROOT / "circuits" / "revenue_by_region.yaml")


def _rt(path, root):
    return open_circuit(path, load_config(data_root=str(root)))


def _views(rt):
    return {v: oracle.view_counter(rt, v) for v in rt.compiled.spec.outputs}


def _dag_run(rt, run_id: str, mode: str = "incremental", before_commit=None) -> dict:
    timestep.plan(rt, run_id, mode=mode)
    for stage in stage_graph(rt.compiled):
        timestep.run_stage(rt, run_id, stage.name)
    timestep.check(rt, run_id)
    if before_commit:
        before_commit()
    return timestep.commit(rt, run_id)


def test_stage_graph_of_the_revenue_circuit():
    rt = _rt(REVENUE, "/tmp/unused")
    stages = {s.name: s for s in stage_graph(rt.compiled)}
    assert {"orders", "customers", "paid", "enriched", "by_region", "order_extremes", "big_spenders"} <= set(stages)
    assert set(stages["enriched"].upstream) == {"paid", "customers"}
    assert stages["orders"].kind == "input" and stages["enriched"].kind == "operator"
    assert "I(paid)" in stages["paid"].nodes  # an integrator lives with the stream it integrates


def test_dag_runs_match_recompute_and_are_idempotent(spark, tmp_path):
    gen = RevenueGenerator(str(tmp_path), seed=9)
    rt = _rt(REVENUE, tmp_path)
    for i in range(1, 4):
        gen.write_batch(new_orders=30, deletes=6)
        result = _dag_run(rt, f"run-{i}")
        assert result["timestep"] == i
        assert _views(rt) == oracle.revenue_by_region(str(tmp_path))
    # a retried commit (or a whole retried run) of a committed run changes nothing
    assert timestep.commit(rt, "run-3")["timestep"] == 3
    assert timestep.plan(rt, "run-3")["already_committed"]
    assert rt.store.last_committed() == 3


def test_a_killed_stage_retried_gives_the_same_result(spark, tmp_path):
    roots = {"ref": tmp_path / "ref", "kill": tmp_path / "kill"}
    for name, root in roots.items():
        RevenueGenerator(str(root), seed=4).write_batch()
    ref = _rt(REVENUE, roots["ref"])
    _dag_run(ref, "r1")
    rt = _rt(REVENUE, roots["kill"])
    timestep.plan(rt, "k1")
    stages = stage_graph(rt.compiled)
    for stage in stages:
        if stage.name == "by_region":  # dies after writing part of its staged state
            with failpoints.armed("after_state_write"), pytest.raises(failpoints.InjectedFailure):
                timestep.run_stage(rt, "k1", stage.name)
        timestep.run_stage(rt, "k1", stage.name)  # the retry (a no-op for finished stages)
        timestep.run_stage(rt, "k1", stage.name)
    timestep.check(rt, "k1")
    timestep.commit(rt, "k1")
    assert _views(rt) == _views(ref) == oracle.revenue_by_region(str(roots["kill"]))


def test_failed_quality_gate_commits_nothing(spark, tmp_path):
    gen = RevenueGenerator(str(tmp_path), seed=2)
    strict = tmp_path / "strict.yaml"
    strict.write_text(open(REVENUE).read().replace(
        "expect_column_values_to_be_between: {column: orders, min_value: 1}",
        "expect_column_values_to_be_between: {column: orders, min_value: 1, max_value: 2}"))
    rt = _rt(str(strict), tmp_path)
    gen.write_batch(new_orders=60)
    timestep.plan(rt, "q1")
    for stage in stage_graph(rt.compiled):
        timestep.run_stage(rt, "q1", stage.name)
    with pytest.raises(QualityGateFailed, match="max_value"):
        timestep.check(rt, "q1")
    assert rt.store.last_committed() == 0


def test_full_refresh_rebuilds_the_same_views(spark, tmp_path):
    gen = RevenueGenerator(str(tmp_path), seed=6)
    rt = _rt(REVENUE, tmp_path)
    for i in range(2):
        gen.write_batch()
        _dag_run(rt, f"inc-{i}")
    before = _views(rt)
    gen.write_batch()
    _dag_run(rt, "refresh", mode="full_refresh")
    assert rt.store.last_committed() == 3
    assert _views(rt) == oracle.revenue_by_region(str(tmp_path))
    assert _views(rt) != before
