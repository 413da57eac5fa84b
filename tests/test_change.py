"""Changing a circuit without replaying its history (runtime/change.py, `dbsp step --apply-change`).

A circuit steps on random streams of inserts and deletes, is edited (a view over a join added, a
filter changed, an aggregate changed, an input column added, a view removed), and steps on with
the change applied: after the change and at every later step, every view must equal a
from-scratch evaluation of the new circuit over all the inputs so far (a fresh circuit's first
step over the integrated bags, as ``test_recompute`` does), with and without retention having
pruned the consumed input files. The state of nodes the edit did not touch is kept, not rewritten.
"""
from __future__ import annotations

import os
import random
import shutil
from collections import Counter

import pytest

from spark_jobs.runtime.change import bootstrap_nodes, plan_change
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from spark_jobs.state.store import FingerprintMismatch
from tests.engines import KEYS, Bag, output_delta, write_change
from tests.policies import config
from tests.test_paths import CIRCUIT, INPUTS, _traces
from tests.test_recompute import _recomputed, _view

RETAIN = """settings:
  retention: {inputs: "1 timesteps"}
"""

# edit -> (new circuit text, what the plan must say of the views)
EDITS = {
    "add_view_over_join": (
        CIRCUIT.replace("outputs:", "  big: {op: filter, input: enriched, where: \"amount > 2\"}\noutputs:\n  big: {}"),
        {"big": "new", "by_region": "kept", "tops": "kept", "regions_seen": "kept"}),
    "add_view_over_an_input": (  # its aggregate looks the input's integral up by other keys
        CIRCUIT.replace("outputs:", "  widest: {op: aggregate, input: orders, group_by: [status], "
                                    "aggregates: {top: \"max(amount)\"}}\noutputs:\n  widest: {}"),
        {"widest": "new", "by_region": "kept", "tops": "kept", "regions_seen": "kept"}),
    "change_filter": (
        CIRCUIT.replace("status <> 'x'", "status <> 'y'"),
        {"by_region": "rebuilt", "tops": "rebuilt", "regions_seen": "rebuilt"}),
    "change_aggregate": (
        CIRCUIT.replace('{top: "max(amount)"}', '{top: "max(amount)", low: "min(amount)"}'),
        {"tops": "reshaped", "by_region": "kept", "regions_seen": "kept"}),
    "add_column": (
        CIRCUIT.replace("schema: {cust: long, region: string}", "schema: {cust: long, region: string, tier: long}"),
        {"by_region": "rebuilt", "tops": "rebuilt", "regions_seen": "rebuilt"}),
    "remove_view": (
        CIRCUIT.replace("  tops: {op: aggregate, input: enriched, group_by: [region], aggregates: {top: \"max(amount)\"}}\n",
                        "").replace("  tops: {}\n", ""),
        {"tops": "removed", "by_region": "kept", "regions_seen": "kept"}),
}


def _write(roots, bags, t: int, deletes: int) -> None:
    for name, bag in bags.items():
        change = bag.change(10, deletes)
        for root in roots:
            write_change(str(root), name, t, bag.columns, change)


@pytest.mark.parametrize("retention", [False, True], ids=["all_files", "pruned"])
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edit_applied_equals_the_new_circuit_from_scratch(tmp_path, edit, retention):
    _edit_and_compare(tmp_path, edit, retention, "arrow")


@pytest.mark.parametrize("edit", ["add_column", "add_view_over_join", "add_view_over_an_input"])
def test_an_edit_applied_on_spark(spark, tmp_path, edit):
    """The step applying the edit on the Spark engine (its integrals and bag check padded with
    NULL, its gate's old views; a kept join's integral read as the new view's input); the other
    steps in-process."""
    _edit_and_compare(tmp_path, edit, False, "spark")


def _edit_and_compare(tmp_path, edit: str, retention: bool, engine: str) -> None:
    text, views = EDITS[edit]
    suffix = RETAIN if retention else ""
    path, old_path = tmp_path / "paths.yaml", tmp_path / "old" / "paths.yaml"
    old_path.parent.mkdir()
    path.write_text(CIRCUIT + suffix)
    old_path.write_text(CIRCUIT + suffix)
    cfg = config(tmp_path / "data", engine="arrow", cost={"recompute": "never"})
    roots = [tmp_path / "data", tmp_path / "twin"]  # the twin never changes: what kept nodes must match
    twin = open_circuit(str(old_path), config(roots[1], engine="arrow", cost={"recompute": "never"}))
    rng = random.Random(sorted(EDITS).index(edit))
    bags = {name: Bag(dict(cols), dict(domain), rng) for name, (cols, domain) in INPUTS.items()}
    rt = open_circuit(str(path), cfg)
    for t in range(1, 4):
        _write(roots, bags, t, 3 if t % 2 else 8)
        run_step(rt)
        run_step(twin)
    if retention:
        assert sorted(os.listdir(tmp_path / "data" / "inbox" / "orders")) == ["t0003.parquet"]

    path.write_text(text + suffix)
    rt = open_circuit(str(path), cfg)
    if edit == "add_column":  # old rows of the input read NULL in the new column
        bag = bags["customers"]
        bag.columns["tier"] = "long"
        bag.domain["tier"] = KEYS
        bag.rows = type(bag.rows)({row + (None,): w for row, w in bag.rows.items()})
    plan = plan_change(rt)
    assert plan is not None and plan.recorded and not plan.cannot, plan
    assert {v: plan.views.get(v) for v in views} == views
    _write(roots[:1], bags, 4, 5)
    if edit != "add_column":  # the twin's circuit cannot read the new column
        for name in bags:
            shutil.copy(tmp_path / "data" / "inbox" / name / "t0004.parquet", roots[1] / "inbox" / name)
        run_step(twin)
    with pytest.raises(FingerprintMismatch, match="--apply-change"):
        run_step(rt)  # refused by default, naming the change
    report = run_step(open_circuit(str(path), config(tmp_path / "data", engine=engine)), apply_change=True)
    assert report.mode == "apply_change" and report.engine == engine, (report.mode, report.engine_reason)
    after = rt.committed.manifest()
    if edit != "add_column":
        mine, theirs = _traces(rt), _traces(twin)
        for trace in plan.ids("kept"):  # a kept node's state goes on as if nothing changed
            if trace in theirs:
                assert mine[trace] == theirs[trace], trace
        for view, status in views.items():
            if status == "kept":  # its delta is the incremental one
                assert output_delta(rt, view) == output_delta(twin, view), view
    for view, status in views.items():
        assert (f"view:{view}" in after.traces) == (status != "removed"), view
    for t in (4, 5, 6):
        if t > 4:
            _write(roots[:1], bags, t, 4 if t % 2 else 9)
            assert run_step(rt).mode == "incremental"
        reference = _recomputed(tmp_path, path, bags, t)
        assert set(reference) == set(rt.compiled.spec.outputs)
        for view, rows in reference.items():
            assert _view(rt, view) == rows, f"{edit}: timestep {t}, view {view}"


def plan_rows(rt, trace: str) -> int:
    return rt.committed.manifest().traces[trace].rows


def test_plan_change_names_what_is_kept_and_what_each_rebuild_reads(tmp_path):
    path = tmp_path / "paths.yaml"
    path.write_text(CIRCUIT)
    cfg = config(tmp_path / "data", engine="arrow")
    rng = random.Random(1)
    bags = {name: Bag(dict(cols), dict(domain), rng) for name, (cols, domain) in INPUTS.items()}
    rt = open_circuit(str(path), cfg)
    _write([tmp_path / "data"], bags, 1, 0)
    run_step(rt)
    assert plan_change(rt) is None  # not edited
    path.write_text(EDITS["add_view_over_join"][0])
    rt = open_circuit(str(path), cfg)
    plan = plan_change(rt)
    origins = {n.id: n.origin for n in rt.compiled.incremental}
    text = "\n".join(plan.lines(origins))
    assert "  new: big" in text and "removed: -" in text
    assert "kept: by_region, customers, enriched, orders, paid, region_of, regions_seen, tops" in text
    # the kept join keeps its integral (for tops): big reads it, nothing above it (no input)
    assert "big reads: kept enriched: its integral I(enriched) (" in text and "input" not in text.split("big reads:")[1]
    assert plan.cuts == {"enriched": "I(enriched)"} and plan.read_rows == plan_rows(rt, "I(enriched)")
    assert not {n for n in bootstrap_nodes(rt.compiled.incremental, {"big"}, plan.cuts)} - {"big"}
    # a changed aggregate over the kept join: the same integral, read once
    path.write_text(EDITS["change_aggregate"][0])
    plan = plan_change(open_circuit(str(path), cfg))
    assert plan.cuts == {"enriched": "I(enriched)"} and "tops reads: kept enriched: its integral" in "\n".join(plan.lines({}))
    # a new reader of an input's integral looking it up by other keys: that trace is re-sorted
    path.write_text(EDITS["add_view_over_an_input"][0])
    plan = plan_change(open_circuit(str(path), cfg))
    assert "note: kept I(orders) is looked up by other columns now (status): rewritten whole (" in "\n".join(
        plan.lines({})), plan.lines({})
    # a changed filter under the join: rebuilt from the inputs' integrals
    path.write_text(EDITS["change_filter"][0])
    plan = plan_change(open_circuit(str(path), cfg))
    assert plan.cuts == {} and plan.read_rows == plan_rows(rt, "I(orders)") + plan_rows(rt, "I(customers)")
    # a NOT NULL column added to an input: its committed rows have no value for it
    path.write_text(EDITS["add_column"][0].replace("tier: long}", "tier: {type: long, nullable: false}}"))
    plan = plan_change(open_circuit(str(path), cfg))
    assert any("input customers gained NOT NULL column(s) tier" in why for why in plan.cannot), plan.cannot


def test_the_cli_plans_refuses_and_applies_and_the_setting_applies_by_itself(tmp_path, capsys):
    from spark_jobs.cli.main import main

    path = tmp_path / "paths.yaml"
    path.write_text(CIRCUIT)
    data = tmp_path / "data"
    common = [str(path), "--data-root", str(data)]
    rng = random.Random(2)
    bags = {name: Bag(dict(cols), dict(domain), rng) for name, (cols, domain) in INPUTS.items()}
    _write([data], bags, 1, 0)
    assert main(["step", *common]) == 0
    assert main(["plan-change", *common]) == 0
    assert "unchanged since timestep 1" in capsys.readouterr().out
    path.write_text(EDITS["remove_view"][0])
    assert main(["plan-change", *common]) == 0
    out = capsys.readouterr().out
    assert "removed: I(enriched), tops" in out and "views: by_region kept, regions_seen kept, tops removed" in out
    _write([data], bags, 2, 3)
    assert main(["step", *common]) == 1
    err = capsys.readouterr().err
    assert "removed view(s) tops" in err and "dbsp step --apply-change" in err and "settings.on_change" in err
    assert main(["step", *common, "--apply-change"]) == 0
    assert "view tops is no longer in the circuit" in capsys.readouterr().out
    # settings.on_change: bootstrap applies the next edit without the flag
    path.write_text(EDITS["remove_view"][0].replace("status <> 'x'", "status <> 'y'")
                    + "settings:\n  on_change: bootstrap\n")
    _write([data], bags, 3, 3)
    assert main(["step", *common]) == 0
    rt = open_circuit(str(path), config(data))
    assert rt.committed.manifest().meta["mode"] == "apply_change"
    reference = _recomputed(tmp_path, path, bags, 3)
    for view, rows in reference.items():
        assert _view(rt, view) == rows, view
    # `dbsp run`: refused like `dbsp step`; with --apply-change its first step applies the edit
    path.write_text(EDITS["remove_view"][0].replace("status <> 'x'", "status <> 'z'"))
    _write([data], bags, 4, 3)
    assert main(["run", *common, "--steps", "3"]) == 1
    assert "dbsp step --apply-change" in capsys.readouterr().err
    assert main(["run", *common, "--steps", "3", "--apply-change"]) == 0
    assert "stopping after 1 step(s)" in capsys.readouterr().err
    _write([data], bags, 5, 3)  # the circuit is unchanged now: the flag changes nothing
    assert main(["run", *common, "--steps", "3", "--apply-change"]) == 0
    store = open_circuit(str(path), config(data)).committed
    assert [store.manifest(t).meta["mode"] for t in (4, 5)] == ["apply_change", "incremental"]
    for view, rows in _recomputed(tmp_path, path, bags, 5).items():
        assert _view(open_circuit(str(path), config(data)), view) == rows, view


def test_a_dag_run_applies_the_change_when_its_param_or_the_setting_asks(tmp_path):
    from spark_jobs.runtime import timestep
    from tests.dag_tasks import run_stage_tasks

    path = tmp_path / "paths.yaml"
    path.write_text(CIRCUIT)
    cfg = config(tmp_path / "data", engine="arrow")
    rng = random.Random(4)
    bags = {name: Bag(dict(cols), dict(domain), rng) for name, (cols, domain) in INPUTS.items()}
    _write([tmp_path / "data"], bags, 1, 0)
    run_step(open_circuit(str(path), cfg))
    for t, (text, how) in enumerate([(EDITS["add_view_over_join"][0], "param"),
                                     (EDITS["add_view_over_join"][0].replace("amount > 2", "amount > 3")
                                      + "settings:\n  on_change: bootstrap\n", "setting")], start=2):
        path.write_text(text)
        rt = open_circuit(str(path), cfg)
        _write([tmp_path / "data"], bags, t, 4)
        if how == "param":
            with pytest.raises(FingerprintMismatch, match="apply-change"):
                timestep.plan(rt, f"inc__{t}")
        run = f"run__{t}"
        planned = timestep.plan(rt, run, mode="apply_change" if how == "param" else "incremental")
        assert planned["path"]["mode"] == "apply_change" and not planned["empty"]
        run_stage_tasks(rt, run, "per_stage")
        timestep.check(rt, run)
        done = timestep.commit(rt, run)
        assert done["timestep"] == t and any("view big" in n for n in done["notes"]), done["notes"]
        rt = open_circuit(str(path), cfg)
        assert rt.committed.manifest().meta["mode"] == "apply_change"
        for view, rows in _recomputed(tmp_path, path, bags, t).items():
            assert _view(rt, view) == rows, (how, view)


APPEND = """
name: clicks
inputs:
  a:
    schema: {k: long, v: long}
    source: {kind: append_only, path: inbox/a, format: parquet}
nodes:
  tot: {op: aggregate, input: a, group_by: [k], aggregates: {s: "sum(v)"}}
outputs: [tot]
"""


@pytest.mark.parametrize("retention", [False, True], ids=["all_files", "pruned"])
def test_a_node_no_kept_state_can_feed_falls_back_to_a_full_refresh_or_is_refused(spark, tmp_path, retention):
    from spark_jobs.runtime.inputs import CannotRebuild

    suffix = RETAIN if retention else ""
    path = tmp_path / "clicks.yaml"
    path.write_text(APPEND + suffix)
    cfg = config(tmp_path / "data", engine="arrow")
    bags = {"a": Bag({"k": "long", "v": "long"}, {"k": KEYS, "v": KEYS}, random.Random(6))}
    rt = open_circuit(str(path), cfg)
    for t in (1, 2):
        _write([tmp_path / "data"], bags, t, 0)
        run_step(rt)
    path.write_text(APPEND.replace("outputs: [tot]", "  big: {op: filter, input: a, where: \"v > 2\"}\n"
                                   "outputs: [tot, big]") + suffix)
    rt = open_circuit(str(path), cfg)
    plan = plan_change(rt)
    assert plan.cannot == ["input a (append_only) keeps no integral of its rows: big cannot be bootstrapped from state"]
    _write([tmp_path / "data"], bags, 3, 0)
    if retention:
        with pytest.raises(CannotRebuild, match=r"the change cannot be applied: input a \(append_only\)"):
            run_step(rt, apply_change=True)
        return
    assert run_step(rt, apply_change=True).mode == "full_refresh"
    for view, rows in _recomputed(tmp_path, path, bags, 3).items():
        assert _view(rt, view) == rows, view


def test_published_tables_of_new_and_reshaped_views_get_their_whole_value_and_removed_ones_stay(tmp_path):
    from deltalake import DeltaTable

    from spark_jobs.publish import targets

    path = tmp_path / "paths.yaml"
    path.write_text(CIRCUIT)
    cfg = config(tmp_path / "data", engine="arrow")
    rng = random.Random(8)
    bags = {name: Bag(dict(cols), dict(domain), rng) for name, (cols, domain) in INPUTS.items()}
    for t in (1, 2):
        _write([tmp_path / "data"], bags, t, 4)
        run_step(open_circuit(str(path), cfg))
    old_uris = {tg.view: tg.uri for tg in targets(cfg, open_circuit(str(path), cfg).compiled.spec)}
    edited = EDITS["change_aggregate"][0].replace("outputs:", "  big: {op: filter, input: enriched, where: \"amount > 2\"}"
                                                  "\noutputs:\n  big: {}").replace("  regions_seen: {}\n", "")
    path.write_text(edited)
    rt = open_circuit(str(path), cfg)
    _write([tmp_path / "data"], bags, 3, 4)
    before = {tg.view: len(DeltaTable(tg.uri).history()) for tg in targets(cfg, rt.compiled.spec)
              if os.path.exists(tg.uri)}
    report = run_step(rt, apply_change=True)
    assert not report.published.failed, report.published.summary()
    uris = {tg.view: tg.uri for tg in targets(cfg, rt.compiled.spec)}
    # the new view's table: created with its whole value in ONE commit (timestep 3); every other
    # table (the reshaped view's too) one commit more
    assert [h["dbsp.timestep"] for h in DeltaTable(uris["big"]).history()] == ["3"]
    assert "big" not in before and before["tops"] == before["by_region"] == 3
    for view in ("tops", "by_region"):
        history = DeltaTable(uris[view]).history()
        assert len(history) == 4 and history[0]["dbsp.timestep"] == "3", (view, history[0])
    for t in (3, 4):
        if t == 4:
            _write([tmp_path / "data"], bags, 4, 4)
            assert not run_step(rt).published.failed
        for tg in targets(cfg, rt.compiled.spec):
            table = DeltaTable(tg.uri).to_pyarrow_table()
            cols = [c for c in table.column_names if c != "_weight"]
            got = Counter()
            for row in table.to_pylist():
                got[tuple(row[c] for c in cols)] += row.get("_weight", 1) if tg.key == () and "_weight" in row else 1
            want = _view(rt, tg.view)
            assert +got == +want, (t, tg.view)
    assert os.path.exists(old_uris["regions_seen"])  # a removed view's table is left in place
