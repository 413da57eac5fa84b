"""Every path a timestep can take commits the same timestep: one recipe (runtime/recipe.py).

The same random change files (inserts and deletes) go to one circuit along each path, each with
its own data root:

- ``cli-arrow``: `dbsp step` in-process (pyarrow, no Spark job);
- ``cli-spark``: `dbsp step` on Spark whose small results come back to this process and are
  written by pyarrow (the lean Spark path);
- ``cli-spark-remote``: `dbsp step` on Spark with ``execution.driver_access: never`` (Spark writes
  everything, as where only the cluster sees the files);
- ``dag-per_step``: a DAG run's one task (``timestep``: plan, stages, check, commit) as Airflow
  runs it, on the engine the plan picks (in-process here, and no Spark session is opened);
- ``airflow-per_step``: the same one task through the Airflow callable
  (``orchestration.tasks.run_step``, as a DAG's PythonOperator calls it: the profile by file, the
  circuit opened by the task itself), in-process;
- ``dag-per_stage-spark``: one task per stage, every stage on Spark;
- ``cli-recompute``: `dbsp step` recomputing every step after the first from the integrated inputs
  (``execution.cost.recompute: always``, runtime/recompute.py), in-process;
- ``dag-recompute``: a DAG run's one task doing the same (the plan chooses the recompute, the
  commit task computes and commits it).

After every timestep the committed view deltas (rows, weights, column types) and every trace's
integrated value must be the same on every path, and the manifest records the same keys.
"""
from __future__ import annotations

import os
import random
from collections import Counter

import pytest

from spark_jobs.config import PROJECT_ROOT
from spark_jobs.orchestration import tasks
from spark_jobs.runtime import timestep
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from spark_jobs.state.arrow_read import consolidate, read_rels
from spark_jobs.state.arrow_read import arrow_schema
from tests.dag_tasks import run_stage_tasks
from tests.engines import KEYS, STRINGS, Bag, output_delta, write_change
from tests.policies import config

CIRCUIT = """
name: paths
inputs:
  orders:
    schema: {id: long, cust: long, amount: long, status: string}
    source: {kind: changes, path: inbox/orders, format: parquet}
  customers:
    schema: {cust: long, region: string}
    source: {kind: changes, path: inbox/customers, format: parquet}
nodes:
  paid: {op: filter, input: orders, where: "status <> 'x'"}
  enriched: {op: join, left: paid, right: customers, on: [cust]}
  by_region: {op: aggregate, input: enriched, group_by: [region],
              aggregates: {revenue: "sum(amount)", n: "count(*)"}}
  tops: {op: aggregate, input: enriched, group_by: [region], aggregates: {top: "max(amount)"}}
  region_of: {op: select, input: enriched, columns: [region]}
  regions_seen: {op: distinct, input: region_of}
outputs:
  by_region: {}
  tops: {}
  regions_seen: {}
"""

INPUTS = {
    "orders": ({"id": "long", "cust": "long", "amount": "long", "status": "string"},
               {"id": KEYS, "cust": KEYS, "amount": KEYS, "status": STRINGS}),
    "customers": ({"cust": "long", "region": "string"}, {"cust": KEYS, "region": STRINGS}),
}
PATHS = ("cli-arrow", "cli-spark", "cli-spark-remote", "dag-per_step", "airflow-per_step", "dag-per_stage-spark",
         "cli-recompute", "dag-recompute")


def _config(path: str, root):
    if path == "cli-spark":
        return config(root, engine="spark")
    if path in ("cli-spark-remote", "dag-per_stage-spark"):
        return config(root, engine="spark", driver_access="never")
    if path.endswith("recompute"):
        return config(root, cost={"recompute": "always"})
    return config(root)


def _step(path: str, rt, t: int) -> str:
    """One timestep along ``path``; returns the engine its manifest records."""
    if path.startswith("cli"):
        return run_step(rt).engine
    run_id = f"run-{t}"
    if path == "airflow-per_step":  # what the DAG's PythonOperator calls, with the context it gets
        profile = os.path.join(str(rt.config.data_root), "profile.yaml")
        if not os.path.exists(profile):
            text = (PROJECT_ROOT / "config" / "local.yaml").read_text()
            with open(profile, "w", encoding="utf-8") as fh:
                fh.write(text.replace("data_root: data\n", f"data_root: {rt.config.data_root}\n", 1))
        done = tasks.run_step("timestep", rt.path, config=profile, run_id=run_id, params={})
        assert done["commit"]["timestep"] == t and set(done["timing"]) == {"imports", "open", "work"}, done
        assert done["spark_opened"] is (done["commit"]["engine"] == "spark"), done
        return done["commit"]["engine"]
    if path in ("dag-per_step", "dag-recompute"):
        phases = []
        done = timestep.run_task(rt, "timestep", run_id, on_phase=lambda name, _s: phases.append(name))
        stages = ["stage"] * len(done["stages"].get("stages", []))  # each stage said as it ends, then the phase
        assert phases == ["plan", *stages, "stages", "check", "commit"] and not done.get("skipped"), (phases, done)
        assert timestep.run_task(rt, "timestep", run_id)["commit"]["note"]  # a retry changes nothing
        return rt.committed.manifest().meta["engine"]
    plan = timestep.run_task(rt, "plan", run_id)
    assert not plan.get("empty")
    run_stage_tasks(rt, run_id, "per_stage")
    timestep.run_task(rt, "check", run_id)
    timestep.run_task(rt, "commit", run_id)
    return rt.committed.manifest().meta["engine"]


def _traces(rt) -> dict[str, Counter]:
    """Every trace's integrated value (rows -> weight, or summed totals), read with pyarrow."""
    store, m = rt.committed, rt.committed.manifest()
    out = {}
    for trace_id, entry in sorted(m.traces.items()):
        table = read_rels(store, list(entry.dirs), arrow_schema(entry.schema))
        if table is None or entry.kind != "zset":  # running totals: compared through the views
            continue
        cols = sorted(c for c in table.column_names if c != "_weight")
        found = Counter()
        for row in consolidate(table.select([*cols, "_weight"])).to_pylist():
            found[tuple(row[c] for c in cols)] += row["_weight"]
        out[trace_id] = Counter({k: v for k, v in found.items() if v})
    return out


@pytest.mark.parametrize("seed", [3])
def test_every_path_commits_the_same_timestep(spark, tmp_path, seed):
    path = tmp_path / "paths.yaml"
    path.write_text(CIRCUIT)
    rts = {p: open_circuit(str(path), _config(p, tmp_path / p)) for p in PATHS}
    rng = random.Random(seed)
    bags = {name: Bag(cols, domain, rng) for name, (cols, domain) in INPUTS.items()}
    for t in range(1, 7):
        for name, bag in bags.items():
            change = bag.change(10, 4)
            for p in PATHS:
                write_change(str(tmp_path / p), name, t, bag.columns, change)
        engines = {p: _step(p, rt, t) for p, rt in rts.items()}
        assert engines["cli-arrow"] == engines["dag-per_step"] == engines["airflow-per_step"] == "arrow", engines
        assert engines["cli-spark"] == engines["cli-spark-remote"] == engines["dag-per_stage-spark"] == "spark"
        assert "spark" not in rts["dag-per_step"].__dict__, "an in-process DAG run opened a Spark session"
        for p in ("cli-recompute", "dag-recompute"):
            meta = rts[p].committed.manifest().meta
            assert engines[p] == "arrow" and meta["mode"] == ("recompute" if t > 1 else "incremental"), (p, meta)
            assert meta["cost"]["mode"] == meta["mode"] and (t == 1 or "always" in meta["cost"]["reason"]), meta
        assert "spark" not in rts["dag-recompute"].__dict__, "an in-process DAG recompute opened a Spark session"
        want = rts["cli-spark-remote"]
        for view in want.compiled.spec.outputs:
            expected = output_delta(want, view)
            for p, rt in rts.items():
                assert output_delta(rt, view) == expected, f"timestep {t}, view {view}: {p} differs"
        expected_state = _traces(want)
        expected_keys = set(want.committed.manifest().meta)
        for p, rt in rts.items():
            assert _traces(rt) == expected_state, f"timestep {t}: the state of {p} differs"
            keys = set(rt.committed.manifest().meta)
            assert {"mode", "engine", "engine_reason"} <= keys, (p, keys)
            assert keys - {"run_id", "bytes_read"} == expected_keys - {"run_id", "bytes_read"}, (p, keys)
    empty = timestep.run_task(rts["dag-per_step"], "timestep", "run-empty")  # no new file: nothing staged
    assert empty["skipped"] and rts["dag-per_step"].committed.last_committed() == 6
