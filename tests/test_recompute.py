"""Recompute mode (runtime/recompute.py) and the cost model that picks it (runtime/cost.py).

A recomputed step evaluates the query over the integrated inputs the state keeps, from no state,
and commits the new view minus the old one: on a random stream of inserts and deletes, steps that
alternate between incremental and recompute must commit the same view deltas and the same state
as an always-incremental run, and every view must equal a recompute of the integrated inputs
from scratch (a fresh circuit's first step over the bag as it stands).
"""
from __future__ import annotations

import random
from collections import Counter

import pytest

from spark_jobs.policy import CostPolicy, ExecutionPolicy, policy_from_profile
from spark_jobs.runtime import cost
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.recompute import CannotRecompute, integral_traces, why_not
from spark_jobs.runtime.step import choose_path, pending_inputs, run_step
from spark_jobs.state.arrow_read import read_view
from tests.engines import Bag, output_delta, write_change
from tests.policies import config
from tests.test_paths import CIRCUIT, INPUTS, _traces

CDC_CIRCUIT = """
name: cdcsnap
inputs:
  orders:
    schema: {id: long, cust: long, amount: long}
    key: [id]
    source: {kind: cdc, path: inbox/orders, format: jsonl}
  customers:
    schema: {cust: long, region: string}
    source: {kind: snapshots, path: snapshots/customers, format: parquet}
nodes:
  enriched: {op: join, left: orders, right: customers, on: [cust]}
  by_region: {op: aggregate, input: enriched, group_by: [region], aggregates: {revenue: "sum(amount)"}}
outputs:
  by_region: {}
"""


def cdc_records(rng: random.Random, rows: dict[int, dict], n: int) -> list[dict]:
    """``n`` random cdc records (creates, updates, deletes) of CDC_CIRCUIT's orders; ``rows``
    (id -> row) is kept as the table after them."""
    records = []
    for _ in range(n):
        i = rng.randrange(12)
        if i in rows and rng.random() < 0.4:
            records.append({"op": "d", "id": i, "cust": rows.pop(i)["cust"], "amount": 0})
        else:
            op = "u" if i in rows else "c"
            rows[i] = {"id": i, "cust": rng.randrange(4), "amount": rng.randrange(100)}
            records.append({"op": op, **rows[i]})
    return records


# ---- the cost model ----------------------------------------------------------------------------
def test_fit_recovers_a_linear_rate_and_falls_back_to_defaults():
    default = cost.default_rate("incremental", "arrow")
    assert cost.fit([], default) == default
    samples = [cost.Sample("incremental", "arrow", n, 10**6, 0.1 + 2e-5 * n) for n in (100, 1_000, 10_000, 100_000)]
    r = cost.fit(samples, default)
    assert r.samples == 4 and abs(r.fixed - 0.1) < 1e-6 and abs(r.per_row - 2e-5) < 1e-9
    one = cost.fit([cost.Sample("incremental", "arrow", 1_000, 0, 2 * default.seconds(1_000))], default)
    assert abs(one.seconds(1_000) - 2 * default.seconds(1_000)) < 1e-9  # the default's shape, scaled
    falling = [cost.Sample("recompute", "arrow", 0, n, s) for n, s in ((10**5, 3.0), (10**6, 1.0))]
    assert cost.fit(falling, cost.default_rate("recompute", "arrow")).per_row > 0  # never a negative rate
    # noise on tiny steps (a loaded machine) does not make a steep rate: held within 4x of the default's
    tiny = [cost.Sample("incremental", "arrow", n, 0, s) for n, s in ((17, 0.05), (80, 0.2), (60, 0.1))]
    assert cost.fit(tiny, default).per_row <= 4 * default.per_row * 0.5 * 1.0001


def test_a_mode_without_history_is_scaled_by_the_measured_speed():
    slow = [cost.Sample("incremental", "arrow", n, 0, 3 * cost.default_rate("incremental", "arrow").seconds(n))
            for n in (10, 1_000)]
    assert abs(cost.speed(slow) - 3) < 1e-9
    rec = cost.rate(slow, "recompute", "arrow")
    assert rec.samples == 0 and abs(rec.seconds(10**6) - 3 * cost.default_rate("recompute", "arrow").seconds(10**6)) < 1e-9


def test_choose_picks_the_cheaper_with_a_margin_and_honours_the_settings():
    est = cost.estimate([], 1_000, 10_000_000, "arrow", "spark")
    assert est.incremental < est.recompute and cost.choose(CostPolicy(), est, None).mode == "incremental"
    big = cost.estimate([], 2_000_000, 1_000_000, "spark", "arrow")
    picked = cost.choose(CostPolicy(), big, None)
    assert picked.mode == "recompute" and "recompute is cheaper" in picked.reason and "from defaults" in picked.reason
    assert cost.choose(CostPolicy(recompute="never"), big, None).mode == "incremental"
    assert cost.choose(CostPolicy(), big, "input x keeps no integral").mode == "incremental"
    assert cost.choose(CostPolicy(recompute="always"), est, None).mode == "recompute"
    big_inprocess = cost.Estimate(2_000_000, 1_000_000, "arrow", 30.0, "arrow", 2.0, 0)
    assert cost.choose(CostPolicy(), big_inprocess, None).mode == "recompute"
    assert cost.choose(CostPolicy(min_change_rows=3_000_000), big_inprocess, None).mode == "incremental"
    # min_change_rows holds on Spark too (a small step's time is noise); min_change_fraction only in-process
    assert cost.choose(CostPolicy(min_change_rows=3_000_000), big, None).mode == "incremental"
    small_on_spark = cost.Estimate(5_000, 10_000, "spark", 9.0, "spark", 1.0, 0)
    assert cost.choose(CostPolicy(), small_on_spark, None).mode == "incremental"
    on_spark = cost.Estimate(1_000_000, 76_000_000, "spark", 62.0, "spark", 13.4, 0)  # W1 SF10 past the threshold
    assert cost.choose(CostPolicy(), on_spark, None).mode == "recompute"
    assert cost.choose(CostPolicy(), cost.Estimate(1_000_000, 76_000_000, "arrow", 15.2, "spark", 13.4, 0),
                       None).mode == "incremental"  # 1.3% of the inputs, in-process: min_change_fraction
    small_part = cost.Estimate(100_000, 1_500_000, "arrow", 5.0, "arrow", 1.0, 0)  # 6.7% of the inputs
    picked = cost.choose(CostPolicy(), small_part, None)
    assert picked.mode == "incremental" and "min_change_fraction" in picked.reason
    assert cost.choose(CostPolicy(min_change_fraction=0.05), small_part, None).mode == "recompute"
    close = cost.Estimate(10**6, 1, "arrow", 1.1, "arrow", 1.0, 0)
    assert cost.choose(CostPolicy(margin=1.2), close, None).mode == "incremental"
    assert cost.choose(CostPolicy(margin=1.0), close, None).mode == "recompute"
    assert cost.choose(CostPolicy(), None, None).mode == "incremental"  # size unknown


def test_a_recompute_on_spark_is_estimated_at_a_loads_rate():
    """A recomputed step on Spark rewrites every trace, as a load does (W1 SF10: 1,160 s for the
    load, not the 11.6 s of the query alone): with no history, a change just past the in-process
    memory bound stays incremental on Spark; half the inputs changed is recomputed."""
    past_memory = cost.estimate([], 2_200_000, 76_500_000, "spark", "spark")
    assert past_memory.recompute > 5 * past_memory.incremental
    assert cost.choose(CostPolicy(), past_memory, None).mode == "incremental"
    half = cost.estimate([], 40_000_000, 76_500_000, "spark", "spark")
    assert cost.choose(CostPolicy(), half, None).mode == "recompute"


def test_on_the_cluster_a_100k_row_change_stays_incremental_as_measured():
    """bench.cluster (W1 SF 0.2 on a standalone cluster, 2 workers, 2026-11-29 20:37 UTC): the
    99,851-row change ran 59.7 s incremental on the cluster, and the same change recomputed as a
    step (every trace rewritten, the view's delta committed) 71.3 s, though the query alone over
    the integrated inputs took 5.3 s. With that run's history (the load on Spark, small steps
    in-process, two ~1,000-row steps forced onto the cluster) the model keeps it incremental, as
    it did there (estimated 56.6 s against 121.5 s)."""
    S = cost.Sample
    history = ([S("incremental", "spark", 1_529_902, 0, 116.3)]
               + [S("incremental", "arrow", 1_000, 1_530_000, 0.4)] * 5
               + [S("incremental", "spark", 998, 1_530_000, 14.84), S("incremental", "spark", 997, 1_531_000, 8.93)])
    est = cost.estimate(history, 99_851, 1_540_000, "spark", "spark")
    assert est.incremental < est.recompute
    assert cost.choose(CostPolicy(), est, None).mode == "incremental"
    assert cost.choose(CostPolicy(), cost.estimate([], 99_851, 1_540_000, "spark", "spark"), None).mode == "incremental"


def test_an_in_process_load_does_not_stand_for_an_in_process_recompute():
    """An in-process load writes every trace; an in-process recompute appends to the integrals of
    the inputs' linear operators (recompute_arrow): W1 SF10 the load ~100 s, a recompute 37 s. The
    estimate follows the default (scaled by the history's speed) until a recompute is
    measured, then the measured one; on Spark a load still stands for a recompute."""
    S = cost.Sample
    rows = 76_500_000
    load = S("recompute", "arrow", rows, 0, 100.0)
    steps = [S("incremental", "arrow", n, rows, cost.default_rate("incremental", "arrow").seconds(n)) for n in (1_000, 10_000)]
    assert cost.is_load(load) and not cost.is_load(S("recompute", "arrow", 10, rows, 30.0))
    est = cost.estimate([load, *steps], 10_000, rows, "arrow", "arrow")
    assert abs(est.recompute - cost.default_rate("recompute", "arrow").seconds(rows + 10_000)) < 1e-6
    assert est.recompute < 0.5 * 100.0
    measured = cost.estimate([load, *steps, S("recompute", "arrow", 100, rows, 30.0)], 10_000, rows, "arrow", "arrow")
    assert abs(measured.recompute - 30.0) < 1.0
    on_spark = cost.estimate([S("recompute", "spark", rows, 0, 1_160.0)], 2_000_000, rows, "spark", "spark")
    assert on_spark.recompute > 1_000


def test_history_is_carried_forward_and_bounded():
    meta: dict = {}
    for i in range(5):
        meta = {"cost": cost.record(meta, cost.Sample("incremental", "arrow", i, 10, 0.5), keep=3)}
    history = cost.history_of(meta)
    assert [s.change_rows for s in history] == [2, 3, 4] and meta["cost"]["change_rows"] == 4
    assert cost.history_of({"cost": {"history": [["bogus"], ["recompute", "spark", 1, 2, 3.0]]}}) == [
        cost.Sample("recompute", "spark", 1, 2, 3.0)]


def test_profile_settings():
    p = policy_from_profile({"execution": {"cost": {"recompute": "always", "margin": 2}}})
    assert p.cost == CostPolicy(recompute="always", margin=2.0)
    with pytest.raises(ValueError, match="execution.cost.recompute"):
        ExecutionPolicy(cost=CostPolicy(recompute="sometimes"))
    with pytest.raises(ValueError, match="execution.cost: unknown key"):
        policy_from_profile({"execution": {"cost": {"recompute_when": 1}}})


# ---- recompute mode ----------------------------------------------------------------------------
def _view(rt, view: str) -> Counter:
    table = read_view(rt.committed, view)
    if table is None:
        return Counter()
    cols = [c for c in table.column_names if c != "_weight"]
    return Counter({tuple(r[c] for c in cols): r["_weight"] for r in table.to_pylist() if r["_weight"]})


def _recomputed(tmp_path, circuit, bags: dict[str, Bag], t: int) -> dict[str, Counter]:
    """Every view of a fresh circuit whose one step reads the integrated inputs (the reference)."""
    root = tmp_path / f"scratch{t}"
    for name, bag in bags.items():
        write_change(str(root), name, 1, bag.columns, bag.rows)
    rt = open_circuit(str(circuit), config(root, engine="arrow"))
    run_step(rt)
    return {view: _view(rt, view) for view in rt.compiled.spec.outputs}


@pytest.mark.parametrize("seed", [5])
def test_alternating_incremental_and_recompute_equals_a_recompute(tmp_path, seed):
    circuit = tmp_path / "paths.yaml"
    circuit.write_text(CIRCUIT)
    plain = open_circuit(str(circuit), config(tmp_path / "incremental", engine="arrow",
                                              cost={"recompute": "never"}))
    rng = random.Random(seed)
    bags = {name: Bag(cols, domain, rng) for name, (cols, domain) in INPUTS.items()}
    modes = []
    for t in range(1, 8):
        for name, bag in bags.items():
            change = bag.change(12, 6 if t % 3 else 20)  # every third step deletes a lot
            for root in ("incremental", "mixed"):
                write_change(str(tmp_path / root), name, t, bag.columns, change)
        mode = "recompute" if t % 2 == 0 else "never"
        mixed = open_circuit(str(circuit), config(tmp_path / "mixed", engine="arrow",
                                                  cost={"recompute": "always" if mode == "recompute" else "never"}))
        before = mixed.committed.manifest()
        want, got = run_step(plain), run_step(mixed)
        if got.mode == "recompute":  # the inputs' integrals got the change appended, not rewritten whole
            after = mixed.committed.manifest()
            for trace in integral_traces(mixed).values():
                kept = set(before.traces[trace].dirs) & set(after.traces[trace].dirs)
                assert kept or not before.traces[trace].dirs, (t, trace, before.traces[trace].dirs)
        assert want.mode == "incremental" and got.mode == ("recompute" if t > 1 and mode == "recompute"
                                                            else "incremental"), (t, got.mode, got.mode_reason)
        assert got.engine == "arrow", got.engine_reason
        modes.append(got.mode)
        meta = mixed.committed.manifest().meta
        assert meta["mode"] == got.mode and meta["cost"]["mode"] == got.mode and meta["cost"]["seconds"] >= 0
        for view in plain.compiled.spec.outputs:
            assert output_delta(mixed, view) == output_delta(plain, view), f"timestep {t}, view {view}"
        assert _traces(mixed) == _traces(plain), f"timestep {t}: the state differs"
        if t in (2, 5, 7):
            reference = _recomputed(tmp_path, circuit, bags, t)
            for view, rows in reference.items():
                assert _view(mixed, view) == rows, f"timestep {t}, view {view}"
    assert modes.count("recompute") == 3
    assert len(cost.history_of(mixed.committed.manifest().meta)) == 7


@pytest.mark.parametrize("seed", [6])
def test_past_the_row_threshold_every_decision_commits_the_same_timestep(tmp_path, seed):
    """Past execution.arrow.max_change_rows (5 here) a local profile's steps stay in-process
    while their memory fits (no cliff), incremental, recomputed, or as the cost model picks: on a
    random stream of inserts and deletes each commits the same view deltas and state as a plain
    in-process incremental run, and its views equal a recompute from scratch."""
    circuit = tmp_path / "paths.yaml"
    circuit.write_text(CIRCUIT)
    past = {"arrow": {"max_change_rows": 5}}
    cfgs = {"plain": config(tmp_path / "plain", engine="arrow", cost={"recompute": "never"}),
            "incremental": config(tmp_path / "incremental", **past, cost={"recompute": "never"}),
            "recompute": config(tmp_path / "recompute", **past, cost={"recompute": "always"}),
            "auto": config(tmp_path / "auto", **past, cost={"min_change_rows": 0, "min_change_fraction": 0.0})}
    rts = {k: open_circuit(str(circuit), c) for k, c in cfgs.items()}
    rng = random.Random(seed)
    bags = {name: Bag(cols, domain, rng) for name, (cols, domain) in INPUTS.items()}
    for t in range(1, 7):
        for name, bag in bags.items():
            change = bag.change(10 if t % 2 else 30, 4 if t % 3 else 25)
            for root in rts:
                write_change(str(tmp_path / root), name, t, bag.columns, change)
        reports = {k: run_step(rt) for k, rt in rts.items()}
        for k in ("incremental", "recompute", "auto"):
            assert reports[k].engine == "arrow", (t, k, reports[k].engine_reason)
            if reports[k].mode == "incremental":
                assert "in-process: Spark runs on this machine" in reports[k].engine_reason, reports[k].engine_reason
            for view in rts["plain"].compiled.spec.outputs:
                assert output_delta(rts[k], view) == output_delta(rts["plain"], view), (t, k, view)
            assert _traces(rts[k]) == _traces(rts["plain"]), (t, k)
        assert reports["recompute"].mode == ("recompute" if t > 1 else "incremental")
        if t in (3, 6):
            for view, rows in _recomputed(tmp_path, circuit, bags, t).items():
                for k in rts:
                    assert _view(rts[k], view) == rows, (t, k, view)


def test_a_step_past_the_memory_bound_goes_to_spark_with_the_reason(tmp_path):
    """The engine past the row threshold: in-process while the estimated memory fits, Spark past
    it (the reason names both bounds), and Spark when past steps measured Spark cheaper by the
    margin (read without running a step on Spark)."""
    circuit = tmp_path / "paths.yaml"
    circuit.write_text(CIRCUIT)
    rng = random.Random(3)
    bags = {name: Bag(cols, domain, rng) for name, (cols, domain) in INPUTS.items()}
    root = tmp_path / "r"
    rt = open_circuit(str(circuit), config(root, arrow={"max_change_rows": 5}))
    for t in (1, 2):
        for name, bag in bags.items():
            write_change(str(root), name, t, bag.columns, bag.change(10, 3))
        if t == 1:
            assert run_step(rt).engine == "arrow"
    pending = pending_inputs(rt)
    path = choose_path(rt, pending)
    assert path.engine == "arrow" and "estimated memory" in path.engine_reason, path.engine_reason
    tight = open_circuit(str(circuit), config(root, arrow={"max_change_rows": 5, "bytes_per_change_row": 10**9}))
    path = choose_path(tight, pending)
    assert path.engine == "spark" and "> execution.arrow.max_memory_bytes" in path.engine_reason, path.engine_reason
    # past steps measured an incremental step on Spark far cheaper than in-process: Spark
    history = [cost.Sample("incremental", "spark", 50, 100, 0.01), cost.Sample("incremental", "arrow", 50, 100, 5.0)]
    engine, why = cost.incremental_engine(history, rt.config.policy, 40, 100, "arrow", "past it", "arrow")
    assert engine == "spark" and "on Spark" in why
    assert cost.incremental_engine([], rt.config.policy, 40, 100, "arrow", "past it", "arrow")[0] == "arrow"
    assert cost.incremental_engine(history, rt.config.policy, 4, 100, "arrow", "under it", "arrow") == ("arrow", "under it")


def test_past_the_row_threshold_no_spark_record_keeps_a_step_in_process():
    """Without a measured incremental step on Spark, a change past max_change_rows whose memory
    fits stays in-process, whatever the in-process history says. W1 SF10's history after the load
    and one 1,000-row step (bench.recompute, 2026-11-29) estimated a 1M-row change 22.8 s
    in-process against 20.6 s on Spark (kept in-process by the 1.2 margin alone); had that small
    step taken 2 s instead of 0.96 s (a loaded machine), 47.4 s against 20.6 s: Spark, where such
    steps took 46-78 s against 6-8 s in-process. The small step's fixed part scales the in-process
    per-row rate up; the load scales Spark's default down."""
    policy = ExecutionPolicy()
    limit = policy.arrow.max_change_rows
    load = [cost.Sample("recompute", "arrow", 16_500_000, 0, 11.1491),
            cost.Sample("incremental", "arrow", 60_006_136, 16_500_000, 82.0588)]
    for small in (0.9599, 2.0):
        history = load + [cost.Sample("incremental", "arrow", 1_002, 76_506_136, small)]
        for rows in (limit + 1, 1_050_000, 1_400_000, 2_000_000, 4_000_000):
            engine, why = cost.incremental_engine(history, policy, rows, 76_506_136, "arrow", "past it", "arrow")
            assert engine == "arrow" and "no incremental step on Spark measured yet" in why, (rows, why)
            # ...and that step's mode: incremental (min_change_fraction holds an in-process step)
            est = cost.estimate(history, rows, 76_506_136, engine, "spark")
            assert cost.choose(policy.cost, est, None).mode == "incremental"
    # measured Spark steps decide by the estimates: slower ones keep in-process, faster ones win
    slow = history + [cost.Sample("incremental", "spark", 1_000_871, 76_506_136, 60.0)]
    assert cost.incremental_engine(slow, policy, 1_400_000, 76_506_136, "arrow", "past it", "arrow")[0] == "arrow"
    fast = history + [cost.Sample("incremental", "arrow", 1_000_000, 76_506_136, 60.0),
                      cost.Sample("incremental", "spark", 1_000_000, 76_506_136, 5.0)]
    engine, why = cost.incremental_engine(fast, policy, 1_400_000, 76_506_136, "arrow", "past it", "arrow")
    assert engine == "spark" and "from 1 past Spark steps" in why


def test_w1_sf10_changes_past_two_million_rows_stay_in_process_while_their_memory_fits():
    """The decisions for W1 at SF10 (76.5M integrated rows) past 2M changed rows, on a local
    profile with the default policy and the history a run has after its load: in-process while
    base_memory_bytes + rows x bytes_per_change_row fits max_memory_bytes (2.5M rows: 3.79 GiB;
    the measured peaks were 2.2-2.9 GiB at 2M), else on Spark, incremental: the recompute there
    rewrites the 76.5M rows' traces, estimated far above the incremental step, and an in-process
    recompute needs execution.cost.arrow_rows (5M) to hold the inputs."""
    policy = ExecutionPolicy()
    inputs = 76_506_136
    fits = (policy.arrow.max_memory_bytes - policy.arrow.base_memory_bytes) // policy.arrow.bytes_per_change_row
    assert 2_500_000 < fits < 3_000_000
    history = [cost.Sample("recompute", "arrow", 16_500_000, 0, 11.1491),
               cost.Sample("incremental", "arrow", 60_006_136, 16_500_000, 82.0588),
               cost.Sample("incremental", "arrow", 1_002, inputs, 0.9599)]
    for rows, want in ((2_000_000, "arrow"), (2_500_000, "arrow"), (fits, "arrow"), (fits + 1, "spark"),
                       (3_000_000, "spark"), (4_000_000, "spark")):
        engine, why = policy.engine_for(rows, first_step=False, local_spark=True)
        engine, why = cost.incremental_engine(history, policy, rows, inputs, engine, why, "spark")
        assert engine == want, (rows, why)
        assert ("<= execution.arrow.max_memory_bytes" if want == "arrow" else
                "> execution.arrow.max_memory_bytes") in why, (rows, why)
        rengine = "arrow" if inputs + rows <= policy.cost.arrow_rows else "spark"
        est = cost.estimate(history, rows, inputs, engine, rengine)
        choice = cost.choose(policy.cost, est, None)
        assert choice.mode == "incremental" and est.recompute > 2 * est.incremental, (rows, choice.reason)
    # a cluster or Connect profile: Spark past max_change_rows whatever the memory
    assert policy.engine_for(2_000_000, first_step=False, local_spark=False)[0] == "spark"


def test_small_steps_do_not_scale_the_per_row_rate_of_a_large_one():
    """W1 SF10's history in bench.recompute piece g (2026-11-30, load ~12): the load's two records
    and one 1,000-row warm-up step of 3.07 s. Scaling the in-process per-row rate by that small
    step's ratio to the default estimated the next 2.5M-row step at 177 s against a recompute's
    135 s (kept incremental by min_change_fraction alone); it took 14.86 s. Small steps measure
    the fixed part: the estimate now stays within 2x of what the step took, and the choice is
    incremental on the estimates alone."""
    inputs = 76_507_138
    history = [cost.Sample("recompute", "arrow", 16_500_000, 0, 28.6135),
               cost.Sample("incremental", "arrow", 60_006_136, 16_500_000, 231.6434),
               cost.Sample("incremental", "arrow", 1_002, inputs, 3.0682)]
    est = cost.estimate(history, 2_499_364, inputs, "arrow", "arrow")
    assert 14.86 / 2 <= est.incremental <= 14.86 * 2, est
    unheld = CostPolicy(min_change_rows=0, min_change_fraction=0.0)
    assert cost.choose(unheld, est, None).mode == "incremental", est
    # a small step's own estimate still follows what small steps took (the fixed part)
    assert abs(cost.estimate(history, 1_002, inputs, "arrow", "arrow").incremental - 3.07) < 0.5


def test_recompute_on_spark_commits_the_same_timestep(spark, tmp_path):
    circuit = tmp_path / "paths.yaml"
    circuit.write_text(CIRCUIT)
    rng = random.Random(11)
    bags = {name: Bag(cols, domain, rng) for name, (cols, domain) in INPUTS.items()}
    rts = {"plain": open_circuit(str(circuit), config(tmp_path / "plain", engine="arrow", cost={"recompute": "never"})),
           "spark": open_circuit(str(circuit), config(tmp_path / "spark", engine="spark",
                                                     cost={"recompute": "always"}))}
    for t in range(1, 5):  # deletes each step: the integrals' committed deltas hold negative rows
        for name, bag in bags.items():
            change = bag.change(10, 5 if t % 2 else 12)
            for root in rts:
                write_change(str(tmp_path / root), name, t, bag.columns, change)
        before = rts["spark"].committed.manifest()
        reports = {k: run_step(rt) for k, rt in rts.items()}
        assert reports["spark"].engine == "spark"
        assert reports["spark"].mode == ("recompute" if t > 1 else "incremental")
        if t == 2:  # as in-process: the inputs' integrals got the change appended, not rewritten whole
            # (later steps may compact them by the store's usual rules)
            after = rts["spark"].committed.manifest()
            for trace in integral_traces(rts["spark"]).values():
                assert set(before.traces[trace].dirs) & set(after.traces[trace].dirs), (t, trace)
        for view in rts["plain"].compiled.spec.outputs:
            assert output_delta(rts["spark"], view)[0] == output_delta(rts["plain"], view)[0], (t, view)
        assert _traces(rts["spark"]) == _traces(rts["plain"]), f"timestep {t}"


@pytest.mark.parametrize("engine", ["arrow", "spark"])
def test_cdc_and_snapshot_inputs_recompute_from_their_own_traces(tmp_path, request, engine):
    """On either engine, a recompute over a cdc input's keyed rows and a snapshot input's last
    snapshot commits the same views and state as the incremental steps (Arrow)."""
    import json
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    circuit = tmp_path / "cdc.yaml"
    circuit.write_text(CDC_CIRCUIT)
    rng = random.Random(3)
    if engine == "spark":
        request.getfixturevalue("spark")
    rts = {mode: open_circuit(str(circuit), config(tmp_path / mode, engine="arrow" if mode == "never" else engine,
                                                   cost={"recompute": mode}))
           for mode in ("never", "always")}
    assert set(integral_traces(rts["always"]).values()) == {"keyed:orders", "snapshot:customers"}
    rows: dict[int, dict] = {}
    for t in range(1, 6):
        records = cdc_records(rng, rows, 8)
        customers = pa.table({"cust": pa.array(range(4), pa.int64()),
                              "region": pa.array([rng.choice("ab") for _ in range(4)])})
        for mode in rts:
            inbox = tmp_path / mode / "inbox" / "orders"
            snaps = tmp_path / mode / "snapshots" / "customers"
            os.makedirs(inbox, exist_ok=True), os.makedirs(snaps, exist_ok=True)
            (inbox / f"t{t:04d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
            if t % 2:
                pq.write_table(customers, str(snaps / f"s{t:04d}.parquet"))
        reports = {mode: run_step(rt) for mode, rt in rts.items()}
        assert reports["always"].mode == ("recompute" if t > 1 else "incremental"), reports["always"].mode_reason
        assert reports["always"].engine == engine, reports["always"].engine_reason
        assert output_delta(rts["always"], "by_region") == output_delta(rts["never"], "by_region"), t
        assert _traces(rts["always"]) == _traces(rts["never"]), t


def test_append_only_inputs_cannot_be_recomputed(tmp_path):
    circuit = tmp_path / "ao.yaml"
    circuit.write_text(CIRCUIT.replace("kind: changes, path: inbox/customers", "kind: append_only, path: inbox/customers"))
    rt = open_circuit(str(circuit), config(tmp_path / "ao", engine="arrow", cost={"recompute": "always"}))
    with pytest.raises(CannotRecompute, match="customers"):
        integral_traces(rt)
    assert "customers" in why_not(rt)
    rng = random.Random(1)
    bags = {name: Bag(cols, domain, rng) for name, (cols, domain) in INPUTS.items()}
    for t in (1, 2):
        for name, bag in bags.items():
            write_change(str(tmp_path / "ao"), name, t, bag.columns, bag.change(5, 2 if name == "orders" else 0))
        path = choose_path(rt, pending_inputs(rt))
        report = run_step(rt)
    assert path.mode == report.mode == "incremental" and "not possible" in report.mode_reason
    assert "keeps no integral" in rt.committed.manifest().meta["cost"]["reason"]


def test_a_circuit_with_stream_operators_is_never_recomputed(tmp_path):
    """A view over integrate/delay/differentiate depends on past timesteps: Q over the integrated
    inputs would commit a wrong delta (an integrate view's came out empty), so even an asked-for
    recompute stays incremental, and its deltas equal a never-recomputing run's."""
    text = CIRCUIT.replace("outputs:", "  running: {op: integrate, input: orders}\n"
                           "  before: {op: delay, input: orders}\noutputs:", 1) + "  running: {}\n  before: {}\n"
    circuit = tmp_path / "stream.yaml"
    circuit.write_text(text)
    rts = {mode: open_circuit(str(circuit), config(tmp_path / mode, engine="arrow", cost={"recompute": mode}))
           for mode in ("always", "never")}
    with pytest.raises(CannotRecompute, match="'running' is a stream operator"):
        integral_traces(rts["always"])
    rng = random.Random(4)
    bags = {name: Bag(cols, domain, rng) for name, (cols, domain) in INPUTS.items()}
    for t in (1, 2, 3):
        for name, bag in bags.items():
            change = bag.change(6, 2)
            for mode in rts:
                write_change(str(tmp_path / mode), name, t, bag.columns, change)
        reports = {mode: run_step(rt, recompute=(mode == "always" and t > 1)) for mode, rt in rts.items()}
        assert reports["always"].mode == "incremental", reports["always"].mode_reason
        for view in ("running", "before", "by_region"):
            assert output_delta(rts["always"], view) == output_delta(rts["never"], view), (t, view)


def test_the_policy_recomputes_a_change_larger_than_the_state(tmp_path):
    """A change far larger than everything held is cheaper recomputed; a small one stays
    incremental (the rates: the defaults scaled to the two steps measured before). The step
    summary says which and why."""
    from spark_jobs.cli.render import step_report

    circuit = tmp_path / "paths.yaml"
    circuit.write_text(CIRCUIT)
    rt = open_circuit(str(circuit), config(tmp_path / "auto", engine="arrow"))
    rng = random.Random(2)
    bags = {name: Bag(cols, domain, rng) for name, (cols, domain) in INPUTS.items()}
    modes = {}
    for t, n in {1: 30, 2: 3, 3: 0}.items():
        for name, bag in bags.items():
            write_change(str(tmp_path / "auto"), name, t, bag.columns, bag.change(n, n // 3))
        if t == 3:  # 60,000 new orders, every one distinct
            orders = Counter({(10_000 + i, i % 7, i % 100, "a"): 1 for i in range(60_000)})
            write_change(str(tmp_path / "auto"), "orders", 4, bags["orders"].columns, orders)
        report = run_step(rt)
        modes[t] = (report.mode, report.mode_reason)
        assert f"mode: {report.mode}: " in step_report(report), step_report(report)
    assert {t: m for t, (m, _) in modes.items()} == {1: "incremental", 2: "incremental", 3: "recompute"}, modes
    # fitted to the incremental step; the load (in-process) does not stand for a recompute (cost.is_load)
    assert "recompute is cheaper" in modes[3][1] and "from 1 past steps" in modes[3][1], modes[3]


def test_asked_for_recompute_on_the_cli_and_as_a_dag_runs_mode(tmp_path):
    """`dbsp step --recompute` (``run_step(recompute=True)``) and a DAG run triggered with mode
    ``recompute`` recompute whatever the cost model would say, and commit the same timestep as
    an incremental step; the DAG plan records an incremental run whose path is a recompute."""
    from spark_jobs.runtime import timestep

    circuit = tmp_path / "paths.yaml"
    circuit.write_text(CIRCUIT)
    rts = {k: open_circuit(str(circuit), config(tmp_path / k)) for k in ("plain", "cli", "dag")}
    rng = random.Random(9)
    bags = {name: Bag(cols, domain, rng) for name, (cols, domain) in INPUTS.items()}
    for t in (1, 2, 3):
        for name, bag in bags.items():
            change = bag.change(10, 4)
            for root in rts:
                write_change(str(tmp_path / root), name, t, bag.columns, change)
        run_step(rts["plain"])
        report = run_step(rts["cli"], recompute=t > 1)
        run = timestep.run_task(rts["dag"], "timestep", f"run-{t}", mode="recompute" if t > 1 else "incremental")
        if t > 1:
            assert report.mode == "recompute" and report.mode_reason == "asked for (--recompute)"
            assert run["plan"]["mode"] == "incremental" and run["plan"]["path"]["mode"] == "recompute", run["plan"]
            assert run["stages"].get("skipped") and run["commit"]["mode"] == "recompute", run
            assert timestep.run_task(rts["dag"], "timestep", f"run-{t}", mode="recompute")["commit"]["note"]
        for view in rts["plain"].compiled.spec.outputs:
            for k in ("cli", "dag"):
                assert output_delta(rts[k], view) == output_delta(rts["plain"], view), (t, k, view)
        for k in ("cli", "dag"):
            assert _traces(rts[k]) == _traces(rts["plain"]), (t, k)


def test_the_benchmark_runs_and_checks_every_step(tmp_path):
    """`python -m bench.recompute --smoke`: three sizes on three roots, every view right."""
    import json

    from bench import recompute as bench

    bench.main(["--smoke", "--out", str(tmp_path), "--work-dir", str(tmp_path)])
    result = json.loads((tmp_path / "recompute-smoke.json").read_text())
    assert [p["requested"] for p in result["points"]] == list(bench.SMOKE_SIZES)
    for point in result["points"]:
        assert point["views_right"], point["view_ok"]
        assert point["recompute"]["mode"] == "recompute" and point["incremental"]["mode"] == "incremental"
        assert point["policy_over_best"] is not None
    assert "under load" in (tmp_path / "recompute-smoke.md").read_text().lower()


def test_the_benchmark_runs_in_pieces_from_a_kept_load(tmp_path):
    """`bench.recompute --lean --keep DIR --load-only`, then two `--reuse DIR` pieces: each piece
    starts every root from the kept load (the same changes drawn again), and every view is right."""
    import json
    import os

    from bench import recompute as bench

    work, out = tmp_path / "work", tmp_path / "out"
    common = ["--lean", "--sf", "0.002", "--no-inprocess", "--recompute-inprocess", "--out", str(out),
              "--warmup", "0", "--max-rss-gib", "0", "--min-available-gib", "0"]
    bench.main([*common, "--keep", str(work), "--load-only"])
    assert (work / bench.LOADED / "inbox").is_dir()
    changes = []
    for name, sizes in (("one", "300*2"), ("two", "300,1000")):
        bench.main([*common, "--reuse", str(work), "--sizes", sizes, "--reps", "1", "--recompute-sizes", "300",
                    "--name", name])
        result = json.loads((out / f"{name}.json").read_text())
        for point in result["points"]:
            assert point["views_right"], point["view_ok"]
        changes.append([s["change_rows"] for p in result["points"] for s in p["steps"]])
        assert result["points"][0]["recompute"]["mode"] == "recompute"
    assert changes[0][0] == changes[1][0]  # the second piece started from the load again: the same first change
    # piece two measured the recompute at 300 rows only: the target at 1000 is inferred from it, and says so
    assert "against the lowest recompute measured in this run" in (out / "two.md").read_text()
    point = lambda inc, rec, pol: {"incremental": {"seconds": inc}, "recompute": {"seconds": rec},  # noqa: E731
                                   "policy": {"seconds": pol}, "policy_over_best": round(pol / min(inc, rec or inc), 2)}
    assert bench.inferred_worst([point(1.0, 50.0, 1.1), point(20.0, None, 22.0)]) == (1.1, 50.0)
    assert bench.inferred_worst([point(1.0, 10.0, 1.1), point(20.0, None, 22.0)]) == (2.2, 10.0)  # recompute cheaper there
    assert bench.inferred_worst([point(1.0, 10.0, 1.1)]) is None and bench.inferred_worst([point(1.0, None, 1.0)]) is None
    # the kept load never stepped (its files are hard-linked into the roots, never modified)
    assert not any(n.startswith("b000002") for t in (work / bench.LOADED / "inbox").iterdir() for n in os.listdir(t))
