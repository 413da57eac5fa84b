"""The example circuit (circuits/shop_cdc.yaml) as the DAG runs it: Debezium feeds in, Delta
tables out, compared with a from-scratch evaluation over the tables the feeds add up to.

Also: a crash in the commit task after the manifest (before the quality report is marked
committed; before the tables) is repaired by the task's retry; a full refresh rebuilds the keyed inputs from every retained file; the published
tables equal `dbsp show` after each run, and `dbsp show`/`status` import neither pyspark nor pandas.
"""
from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest
from deltalake import DeltaTable

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.examples.shop_cdc import ShopCdcGenerator
from spark_jobs.publish import targets
from spark_jobs.quality.report import load_report
from spark_jobs.runtime import timestep
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.stages import stage_graph
from spark_jobs.state import failpoints
from spark_jobs.state.arrow_read import read_view

pytestmark = pytest.mark.slow
SHOP = str(PROJECT_ROOT / "circuits" / "shop_cdc.yaml")


def _round(row) -> tuple:
    return tuple(round(v, 6) if isinstance(v, float) else v for v in row)


def from_scratch(tables: dict[str, dict[str, dict]]) -> dict[str, Counter]:
    """The views, computed from the source tables the feeds describe."""
    customers = {int(k): c for k, c in tables["customers"].items()}
    by_region: dict = {}
    per_customer: dict = {}
    for o in tables["orders"].values():
        c = customers.get(o["customer_id"])
        if o["status"] != "paid" or c is None:
            continue
        s, n = by_region.get(c["region"], (0.0, 0))
        by_region[c["region"]] = (s + o["amount"], n + 1)
        n, s = per_customer.get((c["customer_id"], c["name"], c["region"]), (0, 0.0))
        per_customer[(c["customer_id"], c["name"], c["region"])] = (n + 1, s + o["amount"])
    return {
        "revenue_by_region": Counter({_round((r, s, n)): 1 for r, (s, n) in by_region.items()}),
        "customer_totals": Counter({_round(k + v): 1 for k, v in per_customer.items()}),
        "current_orders": Counter({_round((o["order_id"], o["customer_id"], o["amount"], o["status"])): 1
                                   for o in tables["orders"].values()}),
    }


def _shown(rt) -> dict[str, Counter]:
    out = {}
    for view in rt.compiled.spec.outputs:
        table = read_view(rt.committed, view)
        cols = [c for c in table.column_names if c != "_weight"]
        out[view] = Counter({_round(r[:-1]): r[-1] for r in zip(*[table.column(c).to_pylist() for c in cols + ["_weight"]])})
    return out


def _published(rt) -> dict[str, Counter]:
    out = {}
    for target in targets(rt.config, rt.compiled.spec):
        table = DeltaTable(target.uri).to_pyarrow_table()
        out[target.view] = Counter(_round(r) for r in zip(*[table.column(c).to_pylist() for c in table.column_names]))
    return out


def _run(rt, run_id: str, mode: str = "incremental", crash_at: str | None = None, check: bool = False) -> dict:
    """One DAG run, task by task. The quality gate (``check``) is run when asked: it does not
    change what is committed, and each run of it is several Spark jobs (CI time)."""
    timestep.plan(rt, run_id, mode=mode)
    for stage in stage_graph(rt.compiled):
        timestep.run_stage(rt, run_id, stage.name)
    if check:
        assert timestep.check(rt, run_id)["failed"] == 0
    if crash_at:  # a failpoint after the manifest: the retry only does what follows it
        with failpoints.armed(crash_at), pytest.raises(failpoints.InjectedFailure):
            timestep.commit(rt, run_id)
    return timestep.commit(rt, run_id)


def test_shop_feeds_through_the_dag_tasks(spark, tmp_path):
    gen = ShopCdcGenerator(str(tmp_path))
    rt = open_circuit(SHOP, load_config(data_root=str(tmp_path)))
    for i in range(1, 3):
        gen.write_batch()
        result = _run(rt, f"run-{i}", crash_at={1: "after_manifest", 2: "before_publish"}[i], check=i == 1)
        assert "already committed" in result["note"]
        want = from_scratch(gen.keyed_tables())
        assert _shown(rt) == want, f"run {i}"
        assert _published(rt) == want, f"run {i}: {result.get('published')}"
    assert "published timestep(s) 2..2" in result["published"]
    assert load_report(timestep.quality_report_path(rt, 1)).committed  # marked by run 1's retry
    gen.write_batch()
    _run(rt, "refresh", mode="full_refresh")
    assert rt.committed.last_committed() == 3
    assert _shown(rt) == _published(rt) == from_scratch(gen.keyed_tables())

    # reading committed state needs no Spark (and no pandas): a fresh process, module check
    code = ("import sys\nfrom spark_jobs.cli.main import main\n"
            f"assert main(['show', {SHOP!r}, 'revenue_by_region', '--data-root', {str(tmp_path)!r}]) == 0\n"
            f"assert main(['show', {SHOP!r}, 'current_orders', '--delta', '--at', '2', '--data-root', {str(tmp_path)!r}]) == 0\n"
            f"assert main(['status', {SHOP!r}, '--data-root', {str(tmp_path)!r}]) == 0\n"
            "assert 'pyspark' not in sys.modules and 'pandas' not in sys.modules, 'imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "keyed:orders" in done.stdout and "revenue_by_region" in done.stdout
