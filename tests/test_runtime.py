"""Timesteps for real: files in, Parquet state and manifests out, across processes and crashes."""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.examples.generators import PaperExampleGenerator, RevenueGenerator
from spark_jobs.executor.sources import InputRefused
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from spark_jobs.state import FingerprintMismatch, failpoints
from tests import oracle
from tests.policies import make_input_folders

pytestmark = pytest.mark.slow
PAPER = str(PROJECT_ROOT / "circuits" / "paper_example.yaml")
REVENUE = str(PROJECT_ROOT / "circuits" / "revenue_by_region.yaml")


def _rt(path: str, data_root) -> object:
    return open_circuit(path, load_config(data_root=str(data_root)))


def _views(rt) -> dict[str, Counter]:
    return {v: oracle.view_counter(rt, v) for v in rt.compiled.spec.outputs}


def test_revenue_steps_match_duckdb_recompute(spark, tmp_path):
    """The demo's own generator (its seed and batch sizes) for 30 batches in a row, one committed
    step each (issue 19: step 5 used to fail the quality gate for good, its sums rebuilt in
    another order of addition than the view's row), the views equal to DuckDB's recompute."""
    gen = RevenueGenerator(str(tmp_path))
    rt = _rt(REVENUE, tmp_path)
    for t in range(1, 31):
        gen.write_batch()
        report = run_step(rt)  # raises if the quality gate fails
        assert report.timestep == t
        if t in (1, 5, 30):
            oracle.assert_views_close(_views(rt), oracle.revenue_by_region(str(tmp_path)), f"timestep {t}")
    assert rt.store.last_committed() == 30
    empty = run_step(rt)  # no new files: a timestep with no changes
    assert all(not i.files for i in empty.inputs) and all(v == (0, 0) for v in empty.views.values())
    oracle.assert_views_close(_views(rt), oracle.revenue_by_region(str(tmp_path)), "after an empty step")


def _cli(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "spark_jobs.cli.main", *args], capture_output=True,
                          text=True, env=env, cwd=PROJECT_ROOT, timeout=600)


def test_two_processes_equal_one_process_and_recompute(spark, tmp_path):
    """Step 1 in one process, step 2 in a new one == both steps in this process == DuckDB."""
    split, joint = tmp_path / "split", tmp_path / "joint"
    gen_split, gen_joint = PaperExampleGenerator(str(split)), PaperExampleGenerator(str(joint))
    rt_joint = _rt(PAPER, joint)
    for _ in range(2):
        gen_split.write_batch(inserts=30, deletes=8)
        done = _cli("step", PAPER, "--data-root", str(split))
        assert done.returncode == 0, done.stderr[-3000:]
        gen_joint.write_batch(inserts=30, deletes=8)
        run_step(rt_joint)
    rt_split = _rt(PAPER, split)
    assert rt_split.store.last_committed() == 2
    assert _views(rt_split) == _views(rt_joint) == oracle.paper_example(str(split))
    shown = _cli("show", PAPER, "v", "--format", "csv", "--data-root", str(split))
    assert shown.returncode == 0, shown.stderr[-2000:]
    lines = shown.stdout.strip().splitlines()
    assert lines[0] == "x,y,_weight"
    assert Counter(tuple(l.split(",")[:2]) for l in lines[1:]) == oracle.paper_example(str(split))["v"]
    assert all(l.endswith(",1") for l in lines[1:])


def _write_t_rows(folder, name: str, n: int, start: int = 0, weight: int = 1) -> None:
    os.makedirs(folder, exist_ok=True)
    table = pa.table({"id": pa.array([i % 1000 for i in range(start, start + n)], pa.int64()),
                      "a": pa.array([3 + i % 3 for i in range(start, start + n)], pa.int64()),
                      "x": pa.array([f"x{i}" for i in range(start, start + n)], pa.string()),
                      "_weight": pa.array([weight] * n, pa.int64())})
    pq.write_table(table, os.path.join(folder, name))


def _bytes_written_at(rt, t: int) -> int:
    m = rt.store.manifest(t)
    total = 0
    for entry in m.traces.values():
        for rel, stat in entry.files.items():
            if f"/t{t:012d}-" in f"/{rel}":
                total += stat.bytes
    return total


def test_bytes_written_by_a_small_step_do_not_grow_with_the_state(spark, tmp_path):
    written = {}
    for size in (1_000, 100_000):
        root = tmp_path / f"s{size}"
        _write_t_rows(root / "inbox" / "t", "load.parquet", size)
        rt = _rt(PAPER, root)
        make_input_folders(rt)  # r receives nothing: an empty folder
        run_step(rt)
        _write_t_rows(root / "inbox" / "t", "change.parquet", 10, start=size)
        run_step(rt)
        written[size] = _bytes_written_at(rt, 2)
        assert rt.store.status()["traces"]["I(t1)"]["rows"] >= size
    assert written[100_000] <= written[1_000] * 1.2 + 4096, written


POINTS = ["begin", "after_state_write", "mid_step", "before_manifest", "after_manifest"]


@pytest.mark.parametrize("point", POINTS)
def test_a_crash_anywhere_in_a_step_loses_nothing_and_applies_nothing_twice(spark, tmp_path, monkeypatch, point):
    reference, crashed = tmp_path / "ref", tmp_path / "crash"
    gens = {root: PaperExampleGenerator(str(root)) for root in (reference, crashed)}
    rts = {root: _rt(PAPER, root) for root in (reference, crashed)}
    for root in (reference, crashed):
        gens[root].write_batch()
        run_step(rts[root])
        gens[root].write_batch()
    run_step(rts[reference])
    from spark_jobs.state.store import Transaction

    with monkeypatch.context() as m:  # a killed process cleans nothing up: no abort
        m.setattr(Transaction, "abort", lambda self: None)
        with failpoints.armed(point), pytest.raises(failpoints.InjectedFailure):
            run_step(rts[crashed])
    expected_last = 2 if point == "after_manifest" else 1
    fresh = _rt(PAPER, crashed)  # a new process would open the store anew
    assert fresh.store.last_committed() == expected_last
    if expected_last == 1:
        run_step(fresh)
    assert fresh.store.last_committed() == 2
    assert _views(fresh) == _views(rts[reference]) == oracle.paper_example(str(crashed))
    run_step(fresh)  # nothing pending: nothing applied twice
    assert _views(fresh) == _views(rts[reference])


def test_killed_process_then_rerun(spark, tmp_path):
    """A real kill (os._exit at a failpoint inside a subprocess), then a normal run."""
    gen = PaperExampleGenerator(str(tmp_path))
    gen.write_batch()
    killed = _cli("step", PAPER, "--data-root", str(tmp_path),
                  env_extra={"DBSP_FAILPOINT": "mid_step", "DBSP_FAILPOINT_KILL": "1"})
    assert killed.returncode == 137, killed.stderr[-2000:]
    rt = _rt(PAPER, tmp_path)
    assert rt.store.last_committed() == 0
    run_step(rt)
    assert _views(rt) == oracle.paper_example(str(tmp_path))


def test_refused_input_commits_nothing_and_keeps_the_file(spark, tmp_path):
    gen = PaperExampleGenerator(str(tmp_path))
    gen.write_batch()
    rt = _rt(PAPER, tmp_path)
    run_step(rt)
    before = _views(rt)
    gen.write_batch()
    bad = tmp_path / "inbox" / "r" / "zz-bad.parquet"
    pq.write_table(pa.table({"id": ["not a number"], "s": [1], "y": ["u"]}), bad)
    bad_t = tmp_path / "inbox" / "t" / "zz-bad.csv"
    bad_t.write_text("id,a,x\n1,oops,p\n")
    with pytest.raises(InputRefused) as err:
        run_step(rt)
    paths = [p for p, _ in err.value.problems]
    assert str(bad) in paths and str(bad_t) in paths
    assert any("id" in reason for _, reason in err.value.problems)
    assert bad.exists() and bad_t.exists()
    assert rt.store.last_committed() == 1 and _views(rt) == before
    bad.unlink()
    bad_t.unlink()
    run_step(rt)
    assert _views(rt) == oracle.paper_example(str(tmp_path))


def test_changed_circuit_is_refused_against_old_state(spark, tmp_path):
    gen = PaperExampleGenerator(str(tmp_path))
    gen.write_batch()
    run_step(_rt(PAPER, tmp_path))
    changed = tmp_path / "paper_example.yaml"
    changed.write_text(open(PAPER).read().replace("a > 2", "a > 3"))
    with pytest.raises(FingerprintMismatch, match="reset"):
        run_step(_rt(str(changed), tmp_path))
