"""The DAG-run protocol in one process: plan, one task per stage (or all stages in one task),
check, commit — with retries, killed stages, a failing quality gate, a full refresh, empty runs
and view feeds read by a chained circuit."""
from __future__ import annotations

import os

import pytest

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.examples.generators import RevenueGenerator
from spark_jobs.quality import QualityGateFailed
from spark_jobs.runtime import timestep
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.stages import stage_graph
from spark_jobs.state import failpoints
from spark_jobs.runtime.feeds import feed_dir
from tests import oracle
from tests.dag_tasks import run_stage_tasks

pytestmark = pytest.mark.slow
REVENUE = str(PROJECT_ROOT / "circuits" / "revenue_by_region.yaml")


def _rt(path, root):
    return open_circuit(path, load_config(data_root=str(root)))


def _views(rt):
    return {v: oracle.view_counter(rt, v) for v in rt.compiled.spec.outputs}


def _dag_run(rt, run_id: str, mode: str = "incremental", before_commit=None, per_step: bool = False) -> dict:
    timestep.plan(rt, run_id, mode=mode)
    run_stage_tasks(rt, run_id, "per_step" if per_step else "per_stage")
    checked = timestep.check(rt, run_id)
    assert list(checked["phases"]) == ["read", "checks"]  # the benchmark's split of the task's work
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
        assert list(result["phases"]) == ["read", "write", "feeds", "publish", "retention"] and min(result["phases"].values()) >= 0
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


def test_per_step_commits_what_per_stage_commits(spark, tmp_path):
    """One task for every stage (values kept in memory) commits the same views as one task per
    stage (values staged between processes), and logs the same operator table."""
    roots = {"stage": tmp_path / "per_stage", "step": tmp_path / "per_step"}
    gens = {k: RevenueGenerator(str(r), seed=11) for k, r in roots.items()}
    rts = {k: _rt(REVENUE, r) for k, r in roots.items()}
    for i in (1, 2):
        for k in roots:
            gens[k].write_batch(new_orders=25, deletes=5)
        by_stage = _dag_run(rts["stage"], f"s{i}")
        by_step = _dag_run(rts["step"], f"p{i}", per_step=True)
        assert by_stage["views"] == by_step["views"] and by_step["timestep"] == i
    assert _views(rts["stage"]) == _views(rts["step"]) == oracle.revenue_by_region(str(roots["step"]))


def test_an_empty_run_is_skipped_unless_empty_steps_commit(spark, tmp_path):
    gen = RevenueGenerator(str(tmp_path), seed=5)
    rt = _rt(REVENUE, tmp_path)
    gen.write_batch()
    _dag_run(rt, "full")
    plan = timestep.plan(rt, "nothing-new")
    assert plan["empty"] and plan["timestep"] == 2
    assert not rt.committed.fs.exists(timestep.run_dir(rt, "nothing-new"))  # nothing staged
    assert rt.store.last_committed() == 1
    eager = tmp_path / "eager.yaml"
    eager.write_text(open(REVENUE).read() + "orchestration: {commit_empty: true}\n")
    rt2 = _rt(str(eager), tmp_path)
    assert rt2.compiled.fingerprint == rt.compiled.fingerprint  # orchestration is not the query
    result = _dag_run(rt2, "empty-but-committed", per_step=True)
    assert result["timestep"] == 2 and all(c == {"inserted": 0, "deleted": 0} for c in result["views"].values())


CHAIN_UP = """\
name: up
inputs:
  t:
    schema: {id: long, a: long, x: string}
    source: {kind: changes, path: inbox/t, format: parquet}
nodes:
  big: {op: filter, input: t, where: "a > 2"}
  per_x: {op: aggregate, input: big, group_by: [x], aggregates: {n: "count(*)"}}
outputs:
  per_x: {feed: true}
"""
CHAIN_DOWN = """\
name: down
inputs:
  counts:
    schema: {x: string, n: long}
    source: {kind: changes, path: feeds/up/per_x, format: parquet}
nodes:
  many: {op: filter, input: counts, where: "n >= 2"}
outputs:
  many: {}
"""


def test_a_view_feed_chains_circuits(spark, tmp_path):
    """`feed: true` writes each committed change of a view as a change file; another circuit
    reading that folder maintains its own view of the first circuit's view."""
    from collections import Counter

    from spark_jobs.examples.generators import PaperExampleGenerator

    (tmp_path / "up.yaml").write_text(CHAIN_UP)
    (tmp_path / "down.yaml").write_text(CHAIN_DOWN)
    up, down = _rt(str(tmp_path / "up.yaml"), tmp_path), _rt(str(tmp_path / "down.yaml"), tmp_path)
    gen = PaperExampleGenerator(str(tmp_path), seed=3)
    for i in (1, 2, 3):
        gen.write_batch(inserts=15, deletes=6)
        _dag_run(up, f"u{i}", per_step=True)
        assert sorted(os.listdir(feed_dir(str(tmp_path), "up", "per_x")))[-1] == f"t{i:012d}.parquet"
        _dag_run(down, f"d{i}", per_step=True)
    per_x = oracle.view_counter(up, "per_x")
    expected = Counter({row: w for row, w in per_x.items() if row[1] >= 2})
    assert oracle.view_counter(down, "many") == expected and expected
    assert timestep.plan(down, "d-again")["empty"]  # every feed file was consumed once
