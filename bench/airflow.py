"""Airflow row of ``make bench``: a timestep as a DAG run, with the default ``make airflow`` set-up.

    python -m bench.airflow [--runs 5] [--scheduled 3] [--out bench/results] [--name airflow]

Starts Airflow exactly as ``make airflow`` does (``scripts/airflow_local.sh``: standalone,
SQLite, LocalExecutor, a Spark Connect server, the preloaded task runtime) on free ports, with
the example circuit of the README's tour (``circuits/examples/my_view.yaml``: orders filtered, joined with a
customers snapshot, aggregated per region, three expectations) in two copies, one with
``orchestration.tasks: per_stage`` and one with ``per_step``. Then, for each of 1 warm-up and
``--runs`` measured batches (60 new orders, 10 deleted, a new customers snapshot), it triggers
both DAGs one after the other and measures, per run:

- trigger -> success: from the REST call that creates the run to the run's success as the
  client sees it (polled every ``POLL_SECONDS``, 0.05 s);
- per task: queue delay (queued -> started) and duration, and the task's own split (its XCom
  ``timing``): imports of the runtime, opening the circuit and Spark, and the step's work;
  **overhead** = duration - work (what a task costs beyond its Spark work: the task process,
  parsing the DAG, Airflow's API calls, opening the session).

Then ``--runs`` empty runs of each DAG (triggered, no new file: ``plan`` skips the rest) and
``--scheduled`` empty *scheduled* runs of a third copy on a ``* * * * *`` cron whose input
folders stay empty (measured from the run's queued time to its end). Last, ``--runs`` runs of a
baseline DAG with one task that does nothing (``BASELINE_DAG``, no dbsp code): what any Airflow
task costs on this machine at this load, the floor under a dbsp task's overhead. Results:
``<out>/<name>.json`` and ``<out>/<name>.md`` (with the load average before and after).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from spark_jobs.config import PROJECT_ROOT
from spark_jobs.examples.generators import RevenueGenerator
from spark_jobs.orchestration.airflow_env import free_port
from spark_jobs.orchestration.rest import AirflowAPI, LocalAirflow

RESULTS = Path(__file__).resolve().parent / "results"
EXAMPLE = PROJECT_ROOT / "circuits" / "examples" / "my_view.yaml"
MODES = ("per_stage", "per_step")
BASELINE = "baseline_noop"
BASELINE_DAG = f'''"""Baseline of bench.airflow: one Airflow task that does nothing (no dbsp code)."""
from airflow.sdk import dag, task


@dag(dag_id="{BASELINE}", schedule=None, catchup=False)
def {BASELINE}():
    @task
    def noop() -> None:
        return None

    noop()


{BASELINE}()
'''


def write_dags_folder(folder: Path) -> None:
    """The project's DAG files (linked) plus the baseline DAG."""
    folder.mkdir()
    for dag_file in (PROJECT_ROOT / "dags").glob("*.py"):
        (folder / dag_file.name).symlink_to(dag_file)
    (folder / f"{BASELINE}.py").write_text(BASELINE_DAG)
# the client asks for the run's state this often: the resolution of "trigger -> success" (0.2 s
# until the empty runs' target of 1 s made 0.1 s on average of it the poll's)
POLL_SECONDS = 0.05
# seconds: per_step and empty from issue #25 (a DAG run in a few seconds), the others from #16
TARGETS = {"per_stage": 20.0, "per_step": 4.0, "empty": 1.0, "overhead": 1.0}


def _log(msg: str) -> None:
    print(f"[bench.airflow {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _parse(ts: str | None) -> float | None:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() if ts else None


class QuarterAmounts(RevenueGenerator):
    """The README example's batches with amounts in multiples of 0.25: sums of such doubles are
    exact in any order. (A `sum` over doubles is re-added in another order when its running
    totals are read back, so a retracted row can miss the row it retracts by one ulp and the
    quality gate refuses the commit, after a few steps: exact running totals are issue #19's.
    The work a run does does not depend on the amounts.)"""

    def _new_order(self) -> dict:
        order = super()._new_order()
        return dict(order, amount=round(order["amount"] * 4) / 4)


W1 = PROJECT_ROOT / "bench" / "circuits" / "w1_tpch.yaml"
W1_DAG = "w1_step"


def write_w1_circuit(folder: Path) -> str:
    """W1 (TPC-H Q3) as a per_step DAG reading ``w1/inbox/...`` of the data root."""
    text = W1.read_text().replace("name: bench_w1_tpch", f"name: {W1_DAG}").replace("path: inbox/", "path: w1/inbox/")
    (folder / f"{W1_DAG}.yaml").write_text(text + "\nschedule: none\n")
    return W1_DAG


def write_circuits(folder: Path) -> dict[str, str]:
    """The README example as DAGs: one per orchestration mode, plus an empty one on a cron."""
    text = EXAMPLE.read_text()
    dags = {}
    for mode in MODES:
        dag = f"readme_{mode}"
        body = text.replace("name: my_view", f"name: {dag}").replace("schedule: on_inputs", "schedule: none")
        (folder / f"{dag}.yaml").write_text(body + f"\norchestration: {{tasks: {mode}}}\n")
        dags[mode] = dag
    empty = text.replace("name: my_view", "name: readme_scheduled").replace(
        "schedule: on_inputs", 'schedule: "* * * * *"').replace("path: my_view/", "path: empty/")
    (folder / "readme_scheduled.yaml").write_text(empty)
    dags["scheduled"] = "readme_scheduled"
    return dags


def make_empty_inputs(data: Path) -> None:
    """The scheduled DAG's input folders, created empty: an empty folder is "no changes" (the run
    it is measured for), a missing one refuses the step (``runtime/input_folders.py``), so every
    scheduled run failed and none was measured."""
    for rel in ("empty/inbox/orders", "empty/snapshots/customers"):
        (data / rel).mkdir(parents=True, exist_ok=True)


class Bench:
    def __init__(self, base: Path, data: Path | None = None) -> None:
        self.base = base
        self.circuits, self.data = base / "circuits", (data or base / "data")
        self.circuits.mkdir()
        self.data.mkdir(parents=True, exist_ok=True)  # --w1-work: a data root kept between runs
        self.dags = write_circuits(self.circuits)
        make_empty_inputs(self.data)
        write_dags_folder(base / "dags")
        inherited = {k: v for k, v in os.environ.items()
                     if not k.startswith(("AIRFLOW", "DBSP_", "SPARK_CONNECT_", "SPARK_CLUSTER_"))}
        env = {**inherited, "DBSP_DATA_ROOT": str(self.data), "DBSP_CIRCUITS_DIR": str(self.circuits),
               "DBSP_SPARK_REMOTE": f"sc://127.0.0.1:{free_port()}", "SPARK_CONNECT_UI_PORT": "off",
               "SPARK_CONNECT_RUN_DIR": str(base / "spark-connect"),
               "AIRFLOW__CORE__DAGS_FOLDER": str(base / "dags")}
        self.airflow = LocalAirflow(base / "airflow_home", env)
        self.api: AirflowAPI | None = None

    def run(self, dag_id: str, timeout: float = 900) -> dict[str, Any]:
        """Trigger, wait (polling 0.2 s), and collect the run's and its tasks' times."""
        started = time.monotonic()
        run_id = self.api.trigger(dag_id)
        wall = self.api.wait_for_run(dag_id, run_id, self.airflow.home, timeout, poll=POLL_SECONDS, since=started)
        return self.describe(dag_id, run_id, wall)

    def describe(self, dag_id: str, run_id: str, wall: float | None) -> dict[str, Any]:
        api = self.api
        run = api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
        tasks = []
        for ti in api.task_instances(dag_id, run_id):
            timing, stages, value = {}, [], None
            if ti["state"] == "success":
                try:
                    value = api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/"
                                            f"{ti['task_id']}/xcomEntries/return_value")["value"]
                except AssertionError:
                    value = None
                if isinstance(value, dict):
                    timing = value.get("timing") or {}
                    staged = value.get("stages")
                    if isinstance(staged, dict):  # per_step's one task: every phase's summary
                        staged = staged.get("stages")
                    one = [value] if "spark_seconds" in value else staged or []
                    stages = [{"stage": st.get("stage"), "seconds": st.get("seconds"),
                               "spark_seconds": st.get("spark_seconds")} for st in one if isinstance(st, dict)]
            queued, start = _parse(ti.get("queued_when")), _parse(ti.get("start_date"))
            work = timing.get("work")
            tasks.append({"task": ti["task_id"], "state": ti["state"], "duration": ti.get("duration"),
                          "queue_delay": round(start - queued, 3) if start and queued else None,
                          "timing": timing, "stages": stages,
                          "spark_opened": value.get("spark_opened") if isinstance(value, dict) else None,
                          "phases": _phases(value),
                          "overhead": round(ti["duration"] - work, 3) if ti.get("duration") and work is not None else None})
        return {"dag_id": dag_id, "run_id": run_id, "wall": round(wall, 2) if wall is not None else None,
                "airflow_seconds": round(_parse(run["end_date"]) - _parse(run["start_date"]), 2),
                "queued_to_end": round(_parse(run["end_date"]) - _parse(run["queued_at"]), 2),
                # a cron run's due time (its run_after) -> end: what a scheduled run costs, as the
                # trigger -> success of a triggered one (queued_at comes after the scheduler made it)
                "due_to_end": (round(_parse(run["end_date"]) - _parse(run["run_after"]), 2)
                               if run.get("run_after") else None),
                "run_type": run["run_type"], "note": run.get("note"), "tasks": tasks}


def _phases(value: Any) -> dict | None:
    """The commit's seconds per phase, from a commit task or per_step's one task."""
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("commit"), dict):
        value = value["commit"]
    return value.get("phases")


def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 2) if values else None


def summarize(results: dict) -> dict:
    out: dict[str, Any] = {}
    for mode in MODES:
        runs = results["runs"][mode]
        per_task: dict[str, list[dict]] = {}
        for r in runs:
            for t in r["tasks"]:
                key = t["task"]
                per_task.setdefault(key, []).append(t)
        out[mode] = {
            "trigger_to_success_median": median([r["wall"] for r in runs]),
            "trigger_to_success_all": [r["wall"] for r in runs],
            "airflow_run_seconds_median": median([r["airflow_seconds"] for r in runs]),
            "empty_trigger_to_success_median": median([r["wall"] for r in results["empty"][mode]]),
            "empty_all": [r["wall"] for r in results["empty"][mode]],
            "tasks": {task: {"duration": median([t["duration"] for t in ts]),
                             "work": median([t["timing"].get("work") for t in ts]),
                             "imports": median([t["timing"].get("imports") for t in ts]),
                             "open": median([t["timing"].get("open") for t in ts]),
                             "overhead": median([t["overhead"] for t in ts]),
                             "queue_delay": median([t["queue_delay"] for t in ts]),
                             "runs_that_opened_spark": sum(1 for t in ts if t.get("spark_opened")),
                             "phases": {k: median([(t.get("phases") or {}).get(k) for t in ts])
                                        for k in (ts[-1].get("phases") or {})}}
                      for task, ts in per_task.items()},
        }
        out[mode]["max_task_overhead"] = max(((v["overhead"] or 0) for v in out[mode]["tasks"].values()), default=None)
        per_stage: dict[str, list[dict]] = {}
        for r in runs:
            for t in r["tasks"]:
                for st in t.get("stages") or []:
                    per_stage.setdefault(st["stage"], []).append(st)
        out[mode]["stages"] = {name: {"seconds": median([x["seconds"] for x in xs]),
                                      "spark_seconds": median([x["spark_seconds"] for x in xs])}
                               for name, xs in per_stage.items()}
    if results.get("w1"):
        out["w1"] = {"trigger_to_success_median": median([r["wall"] for r in results["w1"]]),
                     "trigger_to_success_all": [r["wall"] for r in results["w1"]],
                     "empty_median": median([r["wall"] for r in results["w1_empty"]]),
                     "empty_all": [r["wall"] for r in results["w1_empty"]],
                     "task_duration_median": median([t["duration"] for r in results["w1"] for t in r["tasks"]]),
                     "work_median": median([t["timing"].get("work") for r in results["w1"] for t in r["tasks"]]),
                     "load_wall": (results.get("w1_load") or {}).get("wall"),
                     "load_separate": (results.get("w1_load") or {}).get("separate_run", False),
                     "load_at": (results.get("w1_load") or {}).get("at")}
    sched = results["scheduled"]
    base = results.get("baseline") or []
    out["baseline"] = {"trigger_to_success_median": median([r["wall"] for r in base]),
                       "task_duration_median": median([t["duration"] for r in base for t in r["tasks"]]),
                       "queue_delay_median": median([t["queue_delay"] for r in base for t in r["tasks"]]),
                       "task_durations": [t["duration"] for r in base for t in r["tasks"]]}
    out["scheduled_empty"] = {"queued_to_end_median": median([r["queued_to_end"] for r in sched]),
                              "due_to_end_median": median([r.get("due_to_end") for r in sched]),
                              "due_to_end_all": [r.get("due_to_end") for r in sched],
                              "start_to_end_median": median([r["airflow_seconds"] for r in sched]),
                              "all": [r["queued_to_end"] for r in sched]}
    return out


def markdown(results: dict) -> str:
    s, meta = results["summary"], results["meta"]
    ok = lambda v, target: "met" if v is not None and v <= target else "MISSED"  # noqa: E731
    lines = [
        "# Airflow: a timestep as a DAG run (`python -m bench.airflow`)",
        "",
        f"{meta['started']} UTC, commit {meta['commit']}, {meta['cpus']} cores, load average "
        f"{meta['loadavg_start'][0]:.1f} at start, {meta['loadavg_end'][0]:.1f} at the end; "
        f"Airflow up in {meta['airflow_start_s']:.0f} s. " + (
            "The README example (`circuits/examples/my_view.yaml`), default `make airflow` set-up (Spark "
            f"Connect, preloaded runtime); {meta['runs']} measured runs per mode after 1 warm-up; batches of "
            "60 new and 10 deleted orders (amounts in multiples of 0.25: see `QuarterAmounts`) plus a "
            "customers snapshot." if not meta.get("w1_only") else
            f"W1 only (`--w1-only`): TPC-H Q3 (`bench/circuits/w1_tpch.yaml`) at SF{meta['w1_sf']:g} as a "
            "`per_step` DAG, default `make airflow` set-up (Spark Connect, preloaded runtime); "
            f"{meta['runs']} measured runs of a {meta['w1_rows']:,}-row change after 1 warm-up, then "
            f"{meta['runs']} empty runs."),
        "",
        "| measure (median) | per_stage | per_step | target | |",
        "|---|---:|---:|---:|---|",
    ]
    readme = not meta.get("w1_only")
    for label, key, target in () if not readme else (("trigger -> success, s", "trigger_to_success_median", None),
                               ("empty run (triggered), trigger -> success, s", "empty_trigger_to_success_median", TARGETS["empty"]),
                               ("largest task overhead beyond its work, s", "max_task_overhead", TARGETS["overhead"])):
        a, b = s["per_stage"][key], s["per_step"][key]
        if target is None:
            lines.append(f"| {label} | {a} | {b} | {TARGETS['per_stage']} / {TARGETS['per_step']} | "
                         f"{ok(a, TARGETS['per_stage'])} / {ok(b, TARGETS['per_step'])} |")
        else:
            lines.append(f"| {label} | {a} | {b} | {target} | {ok(a, target)} / {ok(b, target)} |")
    sched = s["scheduled_empty"]["queued_to_end_median"]
    if readme:
        lines.append(f"| empty **scheduled** run (cron), queued -> end, s | | {sched} | {TARGETS['empty']} | "
                     f"{ok(sched, TARGETS['empty'])} |")
        due = s["scheduled_empty"].get("due_to_end_median")
        if due is not None:
            lines.append(f"| empty **scheduled** run (cron), due time -> end, s | | {due} | {TARGETS['empty']} | "
                         f"{ok(due, TARGETS['empty'])} |")
    if s.get("w1"):
        w = s["w1"]
        lines.append(f"| W1 (TPC-H Q3) SF{meta['w1_sf']:g}, {meta['w1_rows']}-row change, per_step, trigger -> "
                     f"success, s | | {w['trigger_to_success_median']} | {TARGETS['per_step']} | "
                     f"{ok(w['trigger_to_success_median'], TARGETS['per_step'])} |")
        lines.append(f"| W1 empty run, trigger -> success, s | | {w['empty_median']} | {TARGETS['empty']} | "
                     f"{ok(w['empty_median'], TARGETS['empty'])} |")
    lines.append("")
    if readme:
        lines += [f"All runs, trigger -> success (s): per_stage {s['per_stage']['trigger_to_success_all']}, "
                  f"per_step {s['per_step']['trigger_to_success_all']}; empty: per_stage "
                  f"{s['per_stage']['empty_all']}, per_step {s['per_step']['empty_all']}; scheduled empty "
                  f"(queued -> end): {s['scheduled_empty']['all']}.", ""]
    if s.get("w1"):
        w = s["w1"]
        lines += [f"W1: runs {w['trigger_to_success_all']} s, empty {w['empty_all']} s; the one task's "
                  f"duration median {w['task_duration_median']} s, of which work {w['work_median']} s; the "
                  f"load ({'an earlier invocation on the same data root, ' + str(w['load_at']) if w.get('load_separate') else 'first run'}, "
                  f"not measured) took {w['load_wall']} s.", ""]
    b = s.get("baseline") or {}
    if b.get("task_duration_median") is not None:
        lines += [f"Baseline, a DAG with one task that does nothing (no dbsp code) in the same Airflow: "
                  f"task duration median {b['task_duration_median']} s (all: {b['task_durations']}), queue "
                  f"delay {b['queue_delay_median']} s, trigger -> success {b['trigger_to_success_median']} s. "
                  "That duration is the floor of any task's overhead on this machine at this load.", ""]
    for mode in MODES if readme else ():
        lines += [f"## {mode}: per task (medians, seconds)", "",
                  "| task | queue delay | duration | work | overhead | of which imports | opening (compile, Spark) |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for task, v in s[mode]["tasks"].items():
            lines.append(f"| `{task}` | {v['queue_delay']} | {v['duration']} | {v['work']} | {v['overhead']} | "
                         f"{v['imports']} | {v['open']} |")
        lines.append("")
        phases = {task: v["phases"] for task, v in s[mode]["tasks"].items() if v.get("phases")}
        if phases:
            lines += ["Work by phase (medians, seconds): " + "; ".join(
                f"`{task}` " + ", ".join(f"{k} {x}" for k, x in ph.items()) for task, ph in phases.items()) + ".", ""]
        if s[mode].get("stages"):
            lines += ["Operator stages (medians, seconds): " + ", ".join(
                f"`{name}` {v['seconds']} (its Spark job {v['spark_seconds']})" for name, v in s[mode]["stages"].items()) + ".",
                ""]
    lines += ["Overhead = the task's duration in Airflow minus its work (the step's own code and Spark "
              "jobs); it includes opening the Spark Connect session and compiling the circuit (the "
              "`opening` column), the task process and DAG parse, and Airflow's API calls. Queue delay "
              "= queued -> started (the LocalExecutor's worker and the process fork).", ""]
    return "\n".join(lines)


W1_LOADED = "w1-load.json"  # in a kept data root (--w1-work): the load is done, and what it took


def replay_initial(gen) -> None:
    """The generator's tables as its load made them, without writing the load's files again (it is
    seeded: the same calls give the same rows), so that its changes delete rows that exist."""
    from bench.generators import Written

    def skip(changes):  # noqa: ANN001 - the generator's own signature
        gen.batch += 1
        return Written({})

    gen._write_change = skip
    try:
        gen.initial()
    finally:
        del gen._write_change


def w1_runs(bench: "Bench", dag: str, args: argparse.Namespace, results: dict) -> None:
    """W1 at ``--w1-sf``: the load (one run, not measured), then ``--runs`` runs of
    ``--w1-rows`` changed rows after a warm-up, then ``--runs`` empty runs. With ``--w1-work``
    the data root is kept: a first invocation with ``--w1-load-only`` loads it, a second one
    (a fresh Airflow on the same state) times the runs."""
    from bench.generators import TpchGenerator

    bench.api.wait_for_dag(dag)
    bench.api.unpause(dag)
    gen = TpchGenerator(str(bench.data / "w1"), args.w1_sf)
    marker = bench.data / W1_LOADED
    if marker.exists():
        loaded = json.loads(marker.read_text())
        if loaded.get("sf") != args.w1_sf:
            raise SystemExit(f"{marker}: loaded at SF{loaded.get('sf')}, not SF{args.w1_sf:g}")
        replay_initial(gen)
        results["w1_load"] = {**loaded, "separate_run": True}
        _log(f"W1 SF{args.w1_sf:g}: loaded by an earlier run ({loaded.get('wall')} s at {loaded.get('at')})")
    else:
        gen.initial()
        t0 = time.time()
        load = bench.run(dag, timeout=3600)
        _log(f"W1 SF{args.w1_sf:g} load: {load['wall']} s ({time.time() - t0:.0f} s)")
        results["w1_load"] = load
        if args.w1_work:
            marker.write_text(json.dumps({"sf": args.w1_sf, "wall": load["wall"], "load_avg": os.getloadavg(),
                                          "at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}))
        if args.w1_load_only:
            return
    for i in range(args.runs + 1):
        gen.change(args.w1_rows)
        r = bench.run(dag)
        _log(f"W1 run {i}{' (warm-up)' if i == 0 else ''}: {r['wall']} s")
        if i:
            results["w1"].append(r)
    for _ in range(args.runs):
        r = bench.run(dag)
        _log(f"W1 empty run: {r['wall']} s")
        results["w1_empty"].append(r)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.airflow", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5, help="measured runs per mode (and empty runs per mode)")
    p.add_argument("--scheduled", type=int, default=3, help="empty scheduled (cron) runs to wait for")
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--name", default="airflow")
    p.add_argument("--w1-sf", type=float, default=3.0,
                   help="also time W1 (TPC-H Q3) runs of --w1-rows changed rows at this scale factor (0: skip)")
    p.add_argument("--w1-rows", type=int, default=1000)
    p.add_argument("--w1-work", help="keep W1's data root (and the state) in this folder: a later run with "
                                      "the same folder starts from its loaded state")
    p.add_argument("--w1-load-only", action="store_true",
                   help="with --w1-work: only the W1 load, timed runs left to the next invocation")
    p.add_argument("--w1-only", action="store_true",
                   help="only W1 (and the baseline): no README example runs, no scheduled runs; the W1 "
                        "load is long, so the two fit separate benchmark-lock holds")
    args = p.parse_args(argv)
    if args.w1_only and not args.w1_sf:
        p.error("--w1-only needs --w1-sf > 0")
    if args.w1_load_only and not (args.w1_work and args.w1_only):
        p.error("--w1-load-only needs --w1-work and --w1-only")
    # `timeout 12m` (the benchmark lock's rule) sends SIGTERM: stop the Airflow and Spark Connect
    # server this run started (the `finally` below) instead of dying with them left running
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT_ROOT, capture_output=True,
                            text=True).stdout.strip()
    meta = {"started": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"), "commit": commit,
            "cpus": os.cpu_count(), "python": platform.python_version(), "runs": args.runs,
            "loadavg_start": list(os.getloadavg())}
    results: dict[str, Any] = {"meta": meta, "runs": {m: [] for m in MODES}, "empty": {m: [] for m in MODES},
                               "scheduled": [], "w1": [], "w1_empty": []}
    meta.update(w1_sf=args.w1_sf, w1_rows=args.w1_rows, w1_only=args.w1_only, poll_s=POLL_SECONDS)
    with tempfile.TemporaryDirectory(prefix="dbsp-bench-airflow-") as tmp:
        bench = Bench(Path(tmp), Path(args.w1_work).resolve() if args.w1_work else None)
        w1 = write_w1_circuit(bench.circuits) if args.w1_sf else None
        t0 = time.time()
        bench.api = bench.airflow.start()
        meta["airflow_start_s"] = round(time.time() - t0, 1)
        _log(f"airflow up in {meta['airflow_start_s']} s")
        try:
            for dag in bench.dags.values():
                bench.api.wait_for_dag(dag)
            for mode in MODES:
                bench.api.unpause(bench.dags[mode])
            gen = QuarterAmounts(str(bench.data / "my_view"))  # the folders the example reads
            for i in range(0 if args.w1_only else args.runs + 1):
                gen.write_batch()
                for mode in MODES:
                    r = bench.run(bench.dags[mode])
                    _log(f"{mode} run {i}{' (warm-up)' if i == 0 else ''}: {r['wall']} s")
                    if i:
                        results["runs"][mode].append(r)
            for _ in range(0 if args.w1_only else args.runs):
                for mode in MODES:
                    r = bench.run(bench.dags[mode])
                    _log(f"{mode} empty run: {r['wall']} s")
                    results["empty"][mode].append(r)
            if args.scheduled and not args.w1_only:
                dag = bench.dags["scheduled"]
                bench.api.unpause(dag)
                deadline = time.time() + 90 * (args.scheduled + 1)
                done: list[dict] = []
                while time.time() < deadline:
                    runs = bench.api.call("GET", f"/api/v2/dags/{dag}/dagRuns?limit=100")["dag_runs"]
                    ended = [r for r in runs if r["state"] in ("success", "failed") and r["run_type"] == "scheduled"]
                    done = [r for r in ended if r["state"] == "success"]
                    failed = [r for r in ended if r["state"] == "failed"]
                    if failed:  # a scheduled run that fails is a finding, not a run to wait past
                        _log("a scheduled run failed: " + bench.api.describe(dag, failed[0]["dag_run_id"], bench.airflow.home))
                        results["scheduled_failed"] = [r["dag_run_id"] for r in failed]
                        break
                    if len(done) >= args.scheduled:
                        break
                    time.sleep(2)
                bench.api.call("PATCH", f"/api/v2/dags/{dag}", {"is_paused": True})
                for r in sorted(done, key=lambda r: r["queued_at"])[:args.scheduled]:
                    results["scheduled"].append(bench.describe(dag, r["dag_run_id"], None))
                _log(f"scheduled empty runs: {[r['queued_to_end'] for r in results['scheduled']]}")
            if w1:
                w1_runs(bench, w1, args, results)
            if args.w1_load_only:
                return 0
            bench.api.wait_for_dag(BASELINE)
            bench.api.unpause(BASELINE)
            for _ in range(args.runs):
                r = bench.run(BASELINE)
                _log(f"baseline no-op run: {r['wall']} s, task {[t['duration'] for t in r['tasks']]} s")
                results.setdefault("baseline", []).append(r)
        finally:
            _log(bench.airflow.stop().strip().splitlines()[-1])
    meta["loadavg_end"] = list(os.getloadavg())
    results["summary"] = summarize(results)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / f"{args.name}.md").write_text(markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
