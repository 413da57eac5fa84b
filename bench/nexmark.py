"""Benchmark: Nexmark events per second through a windowed circuit's step, and its state over time
(not a test).

    flock /tmp/dbsp-bench.lock python -m bench.nexmark          # 120 steps of 1,000 events
    flock /work/bench.lock python -m bench.nexmark --steps 20 --events 1000,10000,100000   # one run, three sizes
    python -m bench.nexmark --smoke                             # 8 steps of 60 events, in-process

The generator (``spark_jobs/examples/nexmark.py``) writes one batch per timestep: one minute of
event time, events out of order by up to two minutes (inside the inputs' five-minute lateness)
and 1% of them ten minutes or more late (dropped and counted). Each batch is one real
``run_step`` (engine chosen by the default policy unless ``--engine``; Parquet state, compaction, the manifest) of
``circuits/nexmark_hot_items.yaml`` (q5: bids per auction in sliding windows of 10 minutes every
2 minutes, the auctions with the most bids per window) and of
``circuits/nexmark_highest_bid.yaml`` (q7: the bids at the highest price per tumbling window).
Per step: the seconds of ``run_step``, the events of the batch (all three streams; the circuits
read the bids), and the rows of every state trace in the committed manifest (view histories
excluded). A windowed circuit's state must stay flat while the events add up: the plot
(``nexmark_state.png``) shows both.

Results: bench/results/nexmark.{json,md,png}, with the load average before and after; with several
``--events`` sizes, one run of each circuit per size, in ``nexmark-sizes.{json,md}`` (the load
before and after each size too).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.examples.nexmark import NexmarkGenerator
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from spark_jobs.state.store import VIEW_TRACE_PREFIX

CIRCUITS = ("nexmark_hot_items", "nexmark_highest_bid")


def run(circuit: str, root: Path, steps: int, events: int, engine: str = "auto") -> list[dict]:
    """``steps`` generated batches through ``circuit``, one committed timestep each."""
    config = load_config(data_root=str(root))
    config = replace(config, views=replace(config.views, enabled=False))  # the step, not the Delta publish
    config = config.with_policy(replace(config.policy, engine=engine))
    rt = open_circuit(str(PROJECT_ROOT / "circuits" / f"{circuit}.yaml"), config)
    gen = NexmarkGenerator(seed=1, events_per_batch=events, batch_seconds=60, disorder_seconds=120,
                           late_fraction=0.01, late_seconds=600)
    rows, total = [], 0
    for t in range(1, steps + 1):
        batch = gen.write_batch(str(root))
        total += batch.events
        start = time.perf_counter()
        report = run_step(rt)
        seconds = time.perf_counter() - start
        manifest = rt.store.manifest()
        traces = {tid: tr.rows for tid, tr in manifest.traces.items() if not tid.startswith(VIEW_TRACE_PREFIX)}
        late = ((manifest.inputs or {}).get("bids") or {}).get("event_time") or {}
        rows.append({"step": t, "seconds": round(seconds, 4), "engine": report.engine, "events": batch.events,
                     "bids": len(batch.rows["bids"]), "events_total": total, "events_per_s": round(batch.events / seconds),
                     "state_rows": sum(traces.values()), "traces": traces, "late_total": late.get("late_total", 0)})
    return rows


def summary(rows: list[dict]) -> dict:
    """Medians over the steps after the first (the first creates every trace)."""
    warm = rows[1:] or rows
    state = [r["state_rows"] for r in rows]
    half = len(state) // 2
    return {"step_median_s": statistics.median(r["seconds"] for r in warm),
            "events_per_s_median": statistics.median(r["events_per_s"] for r in warm),
            "events_per_s_overall": round(sum(r["events"] for r in warm) / sum(r["seconds"] for r in warm)),
            "engines": sorted({r["engine"] for r in rows}),
            "state_rows_max_first_half": max(state[:half] or state), "state_rows_max_second_half": max(state[half:]),
            "events_total": rows[-1]["events_total"], "late_total": rows[-1]["late_total"]}


def ascii_plot(rows: list[dict], width: int = 60, height: int = 12) -> list[str]:
    """State rows per step as text (for the .md, next to the PNG)."""
    values = [r["state_rows"] for r in rows]
    top = max(values) or 1
    n = min(width, len(values))  # one column per bucket of steps: its largest value
    cols = [max(values[i * len(values) // n:(i + 1) * len(values) // n]) for i in range(n)]
    lines = []
    for level in range(height, 0, -1):
        lines.append(f"{round(top * level / height):>7} |" + "".join("#" if v >= top * level / height else " "
                                                                   for v in cols))
    return lines + ["        +" + "-" * len(cols), f"         step 1 .. {len(values)}"]


def plot(results: dict[str, list[dict]], path: Path) -> None:
    """State rows and events so far per step, one panel per circuit (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, (circuit, rows) in zip(axes[0], results.items()):
        steps = [r["step"] for r in rows]
        ax.plot(steps, [r["state_rows"] for r in rows], label="state rows (all traces)")
        ax.set_xlabel("timestep (one minute of events)")
        ax.set_ylabel("state rows")
        ax.set_title(circuit)
        twin = ax.twinx()
        twin.plot(steps, [r["events_total"] for r in rows], color="grey", linestyle="--", label="events so far")
        twin.set_ylabel("events so far")
        ax.legend(loc="upper left")
        twin.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--events", default="1000",
                        help="events per batch (one minute of event time); several, comma-separated: one run each")
    parser.add_argument("--engine", default="auto", help="the execution policy's engine: auto, arrow or spark")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default=str(PROJECT_ROOT / "bench" / "results"))
    args = parser.parse_args(argv)
    if args.smoke:  # in-process only: no JVM to start
        args.steps, args.events, args.engine = 8, "60", "arrow"
    sizes = [int(e) for e in str(args.events).split(",")]
    if len(sizes) > 1:
        return sweep(args, sizes)
    args.events = sizes[0]
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        results = {c: run(c, Path(tmp) / c, args.steps, args.events, args.engine) for c in CIRCUITS}
    load_after = os.getloadavg()
    name = "nexmark" + ("-smoke" if args.smoke else "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sums = {c: summary(rows) for c, rows in results.items()}
    report = {"steps": args.steps, "events_per_batch": args.events, "loadavg_before": load_before,
              "loadavg_after": load_after, "cores": os.cpu_count(), "summary": sums, "runs": results}
    (out / f"{name}.json").write_text(json.dumps(report, indent=1))
    plot(results, out / f"{name}.png")
    lines = [f"Nexmark through windowed circuits: {args.steps} steps of ~{args.events} events (one minute of "
             f"event time each, out of order up to 2 minutes, 1% late); load average {load_before[0]:.1f} "
             f"before, {load_after[0]:.1f} after, {os.cpu_count()} cores. Plot: {name}.png.", "",
             "| circuit | engines | step median s | events/s (median step) | events/s (all steps) | "
             "state rows max, 1st half | state rows max, 2nd half | events | late rows dropped |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for c, s in sums.items():
        lines.append(f"| {c} | {', '.join(s['engines'])} | {s['step_median_s']:.3f} | {s['events_per_s_median']} | "
                     f"{s['events_per_s_overall']} | {s['state_rows_max_first_half']} | "
                     f"{s['state_rows_max_second_half']} | {s['events_total']} | {s['late_total']} |")
    for c, rows in results.items():
        lines += ["", f"State rows per step, {c}:", "", "```", *ascii_plot(rows), "```"]
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def sweep(args: argparse.Namespace, sizes: list[int]) -> None:
    """Each circuit at each batch size, one after the other in this process (one run): the
    events per second of the median step and of all steps, with the load around each size."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    loads, sums, runs = {}, {}, {}
    for events in sizes:
        before = os.getloadavg()
        with tempfile.TemporaryDirectory() as tmp:
            results = {c: run(c, Path(tmp) / c, args.steps, events, args.engine) for c in CIRCUITS}
        loads[events] = (before, os.getloadavg())
        sums[events] = {c: summary(rows) for c, rows in results.items()}
        runs[events] = results
    report = {"steps": args.steps, "sizes": sizes, "cores": os.cpu_count(), "loadavg": loads, "summary": sums,
              "runs": runs}
    (out / "nexmark-sizes.json").write_text(json.dumps(report, indent=1))
    lines = [f"Nexmark through windowed circuits, one run: {args.steps} steps per batch size (one minute of event "
             f"time each, out of order up to 2 minutes, 1% late), engine {args.engine}, {os.cpu_count()} cores.", "",
             "| events per step | circuit | engines | step median s | events/s (median step) | events/s (all steps) "
             "| state rows max, 2nd half | load avg before / after |",
             "|---:|---|---|---:|---:|---:|---:|---|"]
    for events in sizes:
        (before, after) = loads[events]
        for c, s in sums[events].items():
            lines.append(f"| {events} | {c} | {', '.join(s['engines'])} | {s['step_median_s']:.3f} | "
                         f"{s['events_per_s_median']} | {s['events_per_s_overall']} | "
                         f"{s['state_rows_max_second_half']} | {before[0]:.1f} / {after[0]:.1f} |")
    (out / "nexmark-sizes.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
