"""Run one workload at its sizes: load, warm up, measure steps, recompute, DuckDB, sweep, profile.

Every figure of a size comes from the same Spark session and the same data: the median of
several steps after warm-up, against the median of several full recomputes of the state those
steps left (a change inserts about as many rows as it deletes, so the state stays put).
"""
from __future__ import annotations

import dataclasses
import math
import os
import shutil
import time
from dataclasses import dataclass
from typing import Any, Callable

from spark_jobs.config import Config
from spark_jobs.policy import ExecutionPolicy
from spark_jobs.runtime.circuit import open_circuit

from bench.workloads.base import Size, Workload
from bench.workloads.harness import Reference, StepSample, measure_step, median, recompute, view_matches
from bench.workloads.phases import profile_step

Log = Callable[[str], None]


@dataclass(frozen=True)
class Plan:
    """How much to measure (``--smoke`` shrinks it)."""

    change_rows: int = 1_000
    warmup: int = 1
    steps: int = 5
    recompute_runs: int = 2
    recompute_warmup: bool = True  # one unmeasured recompute first (plan and file caches)
    sweep_changes: tuple[int, ...] = (10_000, 100_000)  # besides change_rows
    sweep_steps: int = 1
    profile: bool = True
    duckdb: bool = True
    only: tuple[str, ...] = ("identity", "w1", "w2")  # workloads that get the sweep, profile, A/B
    # settings to A/B against the base: an execution policy field ("engine", "narrow.enabled", ...)
    # or a runtime Spark SQL conf ("spark.sql..."); by default every step on Spark, against the
    # policy's own choice (small steps in-process on Arrow)
    ab_conf: tuple[tuple[str, str], ...] = (("engine", "spark"),)
    ab_rounds: int = 2  # alternating (base, variant) step pairs
    # policy fields for a second step at each sweep point, after the policy's own (e.g.
    # cost.recompute=always: the path the policy did not take, measured on the same state size)
    sweep_alt: tuple[tuple[str, str], ...] = ()

    def extras_for(self, workload: str) -> bool:
        return not self.only or workload in self.only


def _summary(samples: list[StepSample]) -> dict[str, Any]:
    pick = lambda attr: [getattr(s, attr) for s in samples]  # noqa: E731
    return {
        "n": len(samples),
        "step_median_s": round(median(pick("seconds")), 3),
        "step_mean_s": round(sum(pick("seconds")) / len(samples), 3),
        "step_min_s": round(min(pick("seconds")), 3),
        "step_max_s": round(max(pick("seconds")), 3),
        "change_rows_median": int(median(pick("change_rows"))),
        "jobs_median": int(median(pick("jobs"))),
        "compiled_median": int(median(pick("compiled"))),
        "jobs_min": min(pick("jobs")),
        "jobs_max": max(pick("jobs")),
        "bytes_written_median": int(median(pick("bytes_written"))),
        "bytes_read_median": int(median(pick("bytes_read"))),  # state the step could read (upper bound)
        "bytes_actually_read_median": int(median(pick("bytes_actually_read"))),
        "engines": _engines(samples),
        "modes": _modes(samples),
        "view_bytes_read_median": int(median(pick("view_bytes_read"))),
        "compactions": sum(pick("compactions")),
        **_reference_summary(samples),
    }


def _engines(samples: list[StepSample]) -> dict[str, Any]:
    """How many steps each engine ran, and the reasons given (most common first)."""
    from collections import Counter

    return {"steps": dict(Counter(s.engine for s in samples)),
            "reasons": [r for r, _ in Counter(s.engine_reason for s in samples).most_common(3)]}


def _modes(samples: list[StepSample]) -> dict[str, Any]:
    """How many steps each mode (incremental, recompute) ran, and the cost model's reasons."""
    from collections import Counter

    return {"steps": dict(Counter(s.mode for s in samples if s.mode)),
            "reasons": [r for r, _ in Counter(s.mode_reason for s in samples if s.mode_reason).most_common(2)]}


def _reference_summary(samples: list[StepSample]) -> dict[str, Any]:
    """Medians of the hand-written step measured beside the engine's (if the workload has one)."""
    ref = [s for s in samples if s.reference_s is not None]
    if not ref:
        return {}
    ref_s = median([s.reference_s for s in ref])  # type: ignore[misc]
    return {"reference_median_s": round(ref_s, 3),
            "reference_jobs_median": int(median([s.reference_jobs for s in ref])),  # type: ignore[misc]
            "step_over_reference": round(median([s.seconds for s in ref]) / ref_s, 2)}


def _steps(rt, gen, rows: int, n: int, label: str, log: Log, reference: Reference | None = None) -> list[StepSample]:
    out = []
    for i in range(n):
        s = measure_step(rt, lambda: gen.change(rows).total, label, reference)
        log(f"    {label} {i + 1}/{n}: {s.change_rows} rows, {s.seconds:.2f} s, {s.jobs} jobs"
            + (f", {s.compactions} compaction(s)" if s.compactions else "")
            + (f"; hand-written {s.reference_s:.2f} s, {s.reference_jobs} jobs" if s.reference_s is not None else ""))
        out.append(s)
    return out


def check_reference(rt, wl: Workload, sample: StepSample) -> dict[str, Any]:
    """Does the hand-written step's view delta equal the engine's, for a measured step? Both are
    consolidated; float columns are compared rounded to 6 decimals. (Not timed.)"""
    from pyspark.sql import functions as F

    from spark_jobs.executor.spark.zset import consolidate, to_counter

    engine = rt.store.read_output_delta(wl.view, sample.timestep)
    hand = rt.spark.read.parquet(sample.reference_view)

    def norm(df):
        if df is None:
            return {}
        df = df.select(*[F.round(c, 6).alias(c) if c in wl.float_cols else F.col(c) for c in df.columns])
        return dict(to_counter(consolidate(df)))

    a, b = norm(engine), norm(hand)
    return {"ok": a == b, "engine_rows": len(a), "handwritten_rows": len(b),
            "differing_rows": len(set(a.items()) ^ set(b.items()))}


def _duckdb(wl: Workload, tables: dict[str, str], out_dir: str, spark_out: str, runs: int) -> dict[str, Any]:
    """DuckDB's full recompute of the same query over the same Parquet tables (1 warm-up)."""
    import duckdb

    sql = wl.duckdb_sql(tables)  # type: ignore[misc]
    target = os.path.join(out_dir, "duckdb.parquet")
    con = duckdb.connect()
    times = []
    for i in range(runs + 1):
        started = time.perf_counter()
        con.execute(f"COPY ({sql}) TO '{target}' (FORMAT PARQUET)")
        if i:
            times.append(time.perf_counter() - started)
    rows = con.execute(f"SELECT count(*) FROM read_parquet('{target}')").fetchone()[0]
    keys = [c for c in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{target}')").fetchall()]
    names = [k[0] for k in keys if k[0] not in wl.float_cols]
    on = " AND ".join(f"d.{c} IS NOT DISTINCT FROM s.{c}" for c in names)
    bad = " OR ".join([f"d.{names[0]} IS NULL", f"s.{names[0]} IS NULL"]
                      + [f"abs(d.{c} - s.{c}) > 1e-9 * greatest(abs(d.{c}), abs(s.{c}), 1)"
                         for c in wl.float_cols])
    differing = con.execute(
        f"SELECT count(*) FROM read_parquet('{target}') d FULL OUTER JOIN "
        f"read_parquet('{spark_out}/*.parquet') s ON {on} WHERE {bad}").fetchone()[0]
    threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
    con.close()
    return {"runs_s": [round(t, 3) for t in times], "median_s": round(median(times), 3), "rows": rows,
            "matches_spark": differing == 0, "differing_rows": differing, "threads": threads,
            "version": duckdb.__version__}


def with_fields(policy: ExecutionPolicy, changes: dict[str, str]) -> ExecutionPolicy:
    """``policy`` with fields set from text: ``{"engine": "spark", "narrow.enabled": "false"}``."""
    for key, text in changes.items():
        *path, name = key.split(".")
        owners = [policy]
        for part in path:
            owners.append(getattr(owners[-1], part))
        current = getattr(owners[-1], name)
        value: Any = (text.lower() == "true") if isinstance(current, bool) else type(current)(text)
        for owner, part in zip(reversed(owners), reversed([*path, name])):
            value = dataclasses.replace(owner, **{part: value})
        policy = value
    return policy


def ab_test(rt, gen, plan: Plan, log: Log) -> dict[str, Any]:
    """Alternate steps with the base settings and with ``plan.ab_conf`` (same session, same
    data); medians of each side. Rounds go base-variant, variant-base, ... (ABBA), so load
    drifts and periodic work (a trace compacting every other step) hit both sides alike. A key
    starting with "spark." is a runtime Spark SQL conf; any other is an execution policy field
    (``engine``, ``narrow.enabled``, ``recursion.driver_loop``, ...)."""
    conf = rt.spark.conf
    spark_keys = {k: v for k, v in plan.ab_conf if k.startswith("spark.")}
    base = {k: conf.get(k, None) for k in spark_keys}
    base_config = rt.config
    variant_config = rt.config.with_policy(with_fields(rt.config.policy, {k: v for k, v in plan.ab_conf
                                                                          if not k.startswith("spark.")}))
    sides: dict[str, list[StepSample]] = {"base": [], "variant": []}
    try:
        for r in range(plan.ab_rounds):
            for side in (("base", "variant") if r % 2 == 0 else ("variant", "base")):
                for k, v in (base.items() if side == "base" else spark_keys.items()):
                    if v is None:
                        conf.unset(k)
                    else:
                        conf.set(k, v)
                rt.config = base_config if side == "base" else variant_config
                sides[side] += _steps(rt, gen, plan.change_rows, 1, f"A/B {side} (round {r + 1} of {plan.ab_rounds}) step", log)
    finally:
        rt.config = base_config
        for k, v in base.items():
            conf.unset(k) if v is None else conf.set(k, v)
    out: dict[str, Any] = {"conf": dict(plan.ab_conf), "base_conf": base}
    for side, samples in sides.items():
        out[side] = _summary(samples)
    out["speedup"] = round(out["base"]["step_median_s"] / out["variant"]["step_median_s"], 3)
    return out


def break_even(points: list[tuple[int, float]], recompute_s: float) -> dict[str, Any]:
    """The change size at which a step costs as much as a full recompute.

    Interpolated on log(change rows) between the two sweep points around the crossing; when
    every step is faster (or slower) than the recompute, says so with the bound that is known.
    """
    pts = sorted(points)
    if not pts or not math.isfinite(recompute_s):
        return {"rows": None, "note": "not measured"}
    if pts[0][1] >= recompute_s:
        return {"rows": None, "note": f"step >= recompute already at {pts[0][0]:,} rows: the step's "
                                      f"fixed cost exceeds the recompute at this state size"}
    for (c0, t0), (c1, t1) in zip(pts, pts[1:]):
        if t0 < recompute_s <= t1:
            frac = (recompute_s - t0) / (t1 - t0)
            rows = math.exp(math.log(c0) + frac * (math.log(c1) - math.log(c0)))
            return {"rows": int(round(rows)), "note": f"between {c0:,} and {c1:,} rows (log-interpolated)"}
    return {"rows": None, "note": f"step < recompute up to the largest change measured ({pts[-1][0]:,} rows)"}


def run_size(wl: Workload, size: Size, cfg: Config, plan: Plan, work_dir: str, log: Log, *,
             last: bool, keep: bool = False) -> dict[str, Any]:
    """Every measurement of one workload at one state size, in the current Spark session.
    ``last``: the largest size, which also gets the profile, the A/B and the sweep."""
    root = os.path.join(work_dir, f"{wl.key}-{size.label}")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    try:
        return _measure(wl, size, cfg, plan, root, log, last)
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def _measure(wl: Workload, size: Size, cfg: Config, plan: Plan, root: str, log: Log, last: bool) -> dict[str, Any]:
    gen = wl.make_generator(root, size.param)
    rt = open_circuit(wl.circuit_path, cfg.with_data_root(root))
    log(f"  {wl.key} {size.label}: initial load")
    load = measure_step(rt, lambda: gen.initial().total, "load")
    log(f"    load: {load.change_rows:,} rows, {load.seconds:.2f} s, {load.jobs} jobs")
    warm = _steps(rt, gen, plan.change_rows, plan.warmup, "warm-up", log)
    steps = _steps(rt, gen, plan.change_rows, plan.steps, "step", log, wl.reference)
    reference_check = check_reference(rt, wl, steps[-1]) if wl.reference is not None else None
    if reference_check is not None:
        log(f"    hand-written view delta == engine's: {reference_check['ok']}")
    input_rows = gen.state_rows()

    tables = gen.snapshot(os.path.join(root, "snapshot"))
    out_dir = os.path.join(root, "recompute")
    runs, jobs, rows = [], 0, {}
    first = 0 if plan.recompute_warmup else 1
    for i in range(first, plan.recompute_runs + 1):  # run 0 warms the plan and file cache
        seconds, jobs, rows = recompute(rt, tables, out_dir)
        log(f"    recompute{' (warm-up)' if i == 0 else ''}: {seconds:.2f} s, {jobs} jobs")
        if i:
            runs.append(seconds)
    full = {"runs_s": [round(t, 3) for t in runs], "median_s": round(median(runs), 3), "jobs": jobs,
            "view_rows": rows}
    check = view_matches(rt, out_dir, wl.view, wl.float_cols)
    log(f"    engine view == recompute: {check['ok']} ({check.get('differing_rows', 0)} differing rows)")
    result: dict[str, Any] = {
        "workload": wl.key, "size": size.label, "size_param": size.param,
        "input_rows": input_rows, "input_rows_total": sum(input_rows.values()),
        "load": load.to_dict(),
        "warmup": [s.to_dict() for s in warm], "steps": [s.to_dict() for s in steps],
        **_summary(steps),
        "state_bytes": steps[-1].state_bytes, "state_rows": steps[-1].state_rows,
        "recompute": full, "correct": check,
    }
    if reference_check is not None:
        result["reference_correct"] = reference_check
    result["ratio_step_over_recompute"] = round(result["step_median_s"] / full["median_s"], 3)
    result["speedup_recompute_over_step"] = round(full["median_s"] / result["step_median_s"], 3)
    if plan.duckdb and wl.duckdb_sql is not None:
        result["duckdb"] = _duckdb(wl, tables, root, os.path.join(out_dir, wl.view), plan.recompute_runs)
        log(f"    duckdb: {result['duckdb']['median_s']:.3f} s (same result: {result['duckdb']['matches_spark']})")
    extras = last and plan.extras_for(wl.key)
    try:  # the 1k-row extras first; the sweep's big changes are the likeliest to fail
        if extras and plan.profile:
            log("    profiling one more step (phases, jobs)")
            result["profile"] = profile_step(rt, lambda: gen.change(plan.change_rows).total)
        if extras and plan.ab_conf:
            result["ab"] = ab_test(rt, gen, plan, log)
            log(f"    A/B {dict(plan.ab_conf)}: base {result['ab']['base']['step_median_s']:.2f} s, "
                f"variant {result['ab']['variant']['step_median_s']:.2f} s")
        if extras and plan.sweep_changes:
            _sweep(result, rt, gen, plan, steps, log, wl, root)
    except Exception as exc:  # a failing step is a finding: keep what was measured, say what broke
        result["error"] = describe(exc)
        log(f"    FAILED (rest of this size skipped): {result['error']}")
    return result


def sweep_check(rt, gen, wl: Workload, root: str) -> dict[str, Any]:
    """The committed view against DuckDB's recompute of the workload's query over the
    generator's current tables (the integrated inputs), right after a sweep point's steps: each
    size is checked after it is applied, not only the steps measured before the sweep. Rows are
    matched as multisets (the engine's weights against DuckDB's row counts) on every column but
    ``wl.float_cols``, which agree within 1e-9 relative. None of it is timed. A workload without
    DuckDB SQL is checked against Spark's recompute instead."""
    import duckdb

    from spark_jobs.state.arrow_read import read_view

    tables = gen.snapshot(os.path.join(root, "sweep-snapshot"))
    if wl.duckdb_sql is None:  # no DuckDB query (identity): Spark's recompute of the same tables
        out_dir = os.path.join(root, "sweep-recompute")
        try:
            recompute(rt, tables, out_dir)
            return {**view_matches(rt, out_dir, wl.view, wl.float_cols), "against": "spark recompute"}
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
            shutil.rmtree(os.path.join(root, "sweep-snapshot"), ignore_errors=True)
    con = duckdb.connect(config={"threads": 2, "memory_limit": "3GB"})
    try:
        con.execute(f"CREATE TEMP TABLE want AS {wl.duckdb_sql(tables)}")  # type: ignore[misc]
        names = [r[0] for r in con.execute("DESCRIBE want").fetchall()]
        got = read_view(rt.committed, wl.view)
        keys = [c for c in names if c not in wl.float_cols]
        cols = ", ".join(names)
        con.execute(f"CREATE TEMP TABLE w AS SELECT {cols}, count(*) AS n FROM want GROUP BY ALL")
        if got is None or got.num_rows == 0:
            missing = con.execute("SELECT count(*) FROM w").fetchone()[0]
            return {"ok": missing == 0, "engine_rows": 0, "differing_rows": int(missing)}
        con.register("got_raw", got)
        con.execute(f"CREATE TEMP TABLE g AS SELECT {cols}, sum(_weight) AS n FROM got_raw GROUP BY ALL")
        on = " AND ".join(f"g.{c} IS NOT DISTINCT FROM w.{c}" for c in keys)
        bad = " OR ".join(["g.n IS NULL", "w.n IS NULL", "g.n <> w.n"]
                          + [f"abs(g.{c} - w.{c}) > 1e-9 * greatest(abs(g.{c}), abs(w.{c}), 1)" for c in wl.float_cols])
        differing = con.execute(f"SELECT count(*) FROM g FULL OUTER JOIN w ON {on} WHERE {bad}").fetchone()[0]
        return {"ok": differing == 0, "engine_rows": int(got.num_rows), "differing_rows": int(differing),
                "against": "duckdb"}
    finally:
        con.close()
        shutil.rmtree(os.path.join(root, "sweep-snapshot"), ignore_errors=True)


def _sweep(result: dict[str, Any], rt, gen, plan: Plan, steps: list[StepSample], log: Log,
           wl: Workload | None = None, root: str | None = None) -> None:
    """Step time at growing change sizes (same state); fills sweep, break_even, changes/s; the
    view is checked after every sweep point (``sweep_check``), not only before the sweep.
    A sweep point whose step fails is recorded, and the error raised to stop this size."""
    base = {"change_rows_target": plan.change_rows, **_summary(steps)}
    base["changes_per_s"] = round(base["change_rows_median"] / base["step_median_s"], 1)
    result["sweep"] = [base]
    recompute_s = result["recompute"]["median_s"]
    result["break_even"] = break_even([(base["change_rows_median"], base["step_median_s"])], recompute_s)
    result["changes_per_s_largest"] = base["changes_per_s"]
    for rows_wanted in plan.sweep_changes:
        try:
            samples = _steps(rt, gen, rows_wanted, plan.sweep_steps, f"sweep {rows_wanted:,}", log)
        except Exception as exc:
            result["sweep"].append({"change_rows_target": rows_wanted, "error": describe(exc)})
            raise
        s = _summary(samples)
        s["changes_per_s"] = round(s["change_rows_median"] / s["step_median_s"], 1)
        if wl is not None and root is not None:
            s["correct"] = sweep_check(rt, gen, wl, root)
            log(f"    sweep {rows_wanted:,}: view == DuckDB's recompute: {s['correct'].get('ok')} "
                f"({s['correct'].get('differing_rows', 0)} differing rows)")
        if plan.sweep_alt:
            s["alt"] = _sweep_alt(rt, gen, plan, rows_wanted, log, wl, root)
        result["sweep"].append({"change_rows_target": rows_wanted, **s})
        points = [(p["change_rows_median"], p["step_median_s"]) for p in result["sweep"] if "error" not in p]
        result["break_even"] = break_even(points, recompute_s)
        result["changes_per_s_largest"] = s["changes_per_s"]


def _sweep_alt(rt, gen, plan: Plan, rows: int, log: Log, wl: Workload | None, root: str | None) -> dict[str, Any]:
    """``plan.sweep_steps`` steps of ``rows`` changed rows with ``plan.sweep_alt``'s policy fields,
    right after the policy's own at this sweep point (the state one change larger): what the
    other path costs, e.g. a recomputed step where the policy kept the step incremental. The
    view is checked after them as after the policy's."""
    base_config = rt.config
    rt.config = rt.config.with_policy(with_fields(rt.config.policy, dict(plan.sweep_alt)))
    try:
        samples = _steps(rt, gen, rows, plan.sweep_steps, f"sweep {rows:,} {dict(plan.sweep_alt)}", log)
    finally:
        rt.config = base_config
    out = {"conf": dict(plan.sweep_alt), **_summary(samples)}
    if wl is not None and root is not None:
        out["correct"] = sweep_check(rt, gen, wl, root)
    return out


def describe(exc: BaseException) -> str:
    """The first line of an exception (Spark's messages carry a JVM stack trace after it)."""
    text = str(exc).strip().splitlines()
    first = next((line for line in text if line.strip() and not line.startswith(":")), "")
    spark_line = next((line.lstrip(": ") for line in text if "Exception:" in line), "")
    return f"{type(exc).__name__}: {spark_line or first}"[:500]


def slope(sizes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Step time as the state grows (fixed change): least-squares seconds per 1M input rows,
    next to the recompute's, and the growth of each from the smallest to the largest size."""
    if len(sizes) < 2:
        return None
    xs = [s["input_rows_total"] / 1e6 for s in sizes]

    def fit(ys: list[float]) -> float:
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        var = sum((x - mx) ** 2 for x in xs)
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else float("nan")

    steps = [s["step_median_s"] for s in sizes]
    full = [s["recompute"]["median_s"] for s in sizes]
    return {
        "step_s_per_million_rows": round(fit(steps), 3),
        "recompute_s_per_million_rows": round(fit(full), 3),
        "state_growth": round(xs[-1] / xs[0], 2),
        "step_growth": round(steps[-1] / steps[0], 2),
        "recompute_growth": round(full[-1] / full[0], 2),
    }
