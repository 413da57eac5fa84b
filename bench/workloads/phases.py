"""Where one engine step spends its time: wall time and Spark jobs per phase of ``run_step``.

The phases are the functions ``run_step`` calls, on either engine (input discovery, the choice
of engine, input read, the input change counts, the bag check, evaluation or planning, the
quality gate, state writes, view-delta writes, the commit). For one
profiled step they are wrapped with timers that also note which Spark jobs of the step's job
group ran inside them; everything is restored afterwards, and no engine code is edited. Spark
runs lazily, so a phase is charged for the work its first action forces: the gate's check of a
cached view delta is where that delta (and most of the circuit) is computed.
"""
from __future__ import annotations

import time
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

from spark_jobs.executor import evaluate as evaluate_module
from spark_jobs.executor.spark import local_relations as local_module
from spark_jobs.executor.arrow import inputs as arrow_inputs
from spark_jobs.runtime import bag as bag_module
from spark_jobs.runtime import inputs as inputs_module
from spark_jobs.runtime import quality_gate as gate_module
from spark_jobs.runtime import step as step_module
from spark_jobs.runtime.circuit import CircuitRuntime
from spark_jobs.state.store import StateStore, Transaction

from bench.workloads.harness import busy_ms, job_details, job_group

# (label, owner, attribute): functions run_step calls, in the order it calls them (the engines of
# ``runtime/step_engines.py`` import them when called, so a patched attribute is what they call)
PHASES: list[tuple[str, Any, str]] = [
    ("begin (recover leftovers)", StateStore, "begin"),
    ("discover input files", step_module, "pending_inputs"),
    ("choose the engine (footers)", step_module, "choose_engine"),
    ("read + validate inputs", arrow_inputs, "read_input"),
    ("bag check (deletes vs input integrals)", bag_module, "check_tables"),
    ("evaluate circuit", evaluate_module, "evaluate_step"),
    ("quality gate", gate_module, "check_timestep_tables"),
    ("write state traces", Transaction, "append_table"),
    ("write state traces", Transaction, "replace_table"),
    ("write view deltas", Transaction, "write_output_table"),
    ("read + validate inputs", inputs_module, "read_input"),
    ("count input changes", step_module, "count_all_changes"),
    ("bag check (deletes vs input integrals)", bag_module, "check_deltas"),
    ("compute view deltas (to the driver)", local_module, "collect_local"),
    ("quality gate", gate_module, "check_timestep"),
    ("write state traces", Transaction, "append"),
    ("write state traces", Transaction, "append_many"),
    ("write state traces", Transaction, "replace"),
    ("write view deltas", Transaction, "write_output"),
    ("commit (compact, fsync, manifest, GC)", Transaction, "commit"),
]
OTHER = "other (driver: unpersist, bookkeeping)"


@dataclass
class Phase:
    name: str
    seconds: float = 0.0
    calls: int = 0
    job_ids: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"phase": self.name, "seconds": round(self.seconds, 3), "calls": self.calls,
                "jobs": len(self.job_ids)}


class _Recorder:
    def __init__(self, tracker, group: str) -> None:
        self.tracker = tracker
        self.group = group
        self.depth = 0
        self.seen: set[int] = set()
        self.phases: dict[str, Phase] = {}

    def _new_jobs(self) -> list[int]:
        ids = set(self.tracker.getJobIdsForGroup(self.group)) - self.seen
        self.seen |= ids
        return sorted(ids)

    def wrap(self, name: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            if self.depth:  # nested in another phase: charged to the outer one
                return fn(*args, **kwargs)
            self.depth += 1
            self._new_jobs()
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                phase = self.phases.setdefault(name, Phase(name))
                phase.seconds += time.perf_counter() - started
                phase.calls += 1
                phase.job_ids += self._new_jobs()
                self.depth -= 1
        return timed


@contextmanager
def _patched(recorder: _Recorder) -> Iterator[None]:
    with ExitStack() as stack:
        for name, owner, attr in PHASES:
            original = getattr(owner, attr)
            setattr(owner, attr, recorder.wrap(name, original))
            stack.callback(setattr, owner, attr, original)
        yield


def profile_step(rt: CircuitRuntime, write_change: Callable[[], int], top: int = 12) -> dict[str, Any]:
    """Run one more step with phase timers; returns phases, jobs and the slowest jobs."""
    rows = write_change()
    spark = rt.spark
    with job_group(spark, "profile") as jobs:
        recorder = _Recorder(spark.sparkContext.statusTracker(), jobs.group)
        with _patched(recorder):
            started = time.perf_counter()
            step_module.run_step(rt)
            total = time.perf_counter() - started
    phases = list(recorder.phases.values())
    accounted = sum(p.seconds for p in phases)
    other_jobs = sorted(set(jobs.ids) - {j for p in phases for j in p.job_ids})
    phases.append(Phase(OTHER, max(0.0, total - accounted), 1, other_jobs))
    details = job_details(spark, jobs.ids)
    phase_of = {j: p.name for p in phases for j in p.job_ids}
    by_ms = sorted(details, key=lambda d: -d.ms)
    busy = {p.name: busy_ms([d for d in details if d.job_id in set(p.job_ids)]) for p in phases}
    return {
        "change_rows": rows,
        "seconds": round(total, 3),
        "jobs": jobs.count,
        "jobs_busy_s": round(busy_ms(details) / 1000, 3),
        "single_task_jobs": sum(1 for d in details if d.tasks == 1),
        "tasks": sum(d.tasks for d in details),
        "phases": [dict(p.to_dict(), jobs_busy_s=round(busy[p.name] / 1000, 3)) for p in phases],
        "slowest_jobs": [dict(asdict(d), phase=phase_of.get(d.job_id, OTHER)) for d in by_ms[:top]],
        "call_sites": _call_sites(details),
        "call_tree": call_tree(rt, write_change),
    }


def call_tree(rt: CircuitRuntime, write_change: Callable[[], int], lines: int = 70) -> str | None:
    """One more step under pyinstrument (a sampling profiler; None when it is not installed): the
    top of its call tree, where the step's wall time goes below the phases."""
    try:
        from pyinstrument import Profiler
    except ImportError:
        return None
    write_change()
    profiler = Profiler(interval=0.002)
    profiler.start()
    try:
        step_module.run_step(rt)
    finally:
        profiler.stop()
    text = profiler.output_text(unicode=False, color=False, show_all=False)
    return "\n".join(text.splitlines()[:lines])


def _call_sites(details) -> list[dict[str, Any]]:
    """Jobs grouped by the line that triggered them (Spark's call site), most time first."""
    sites: dict[str, dict[str, Any]] = {}
    for d in details:
        s = sites.setdefault(d.name, {"call_site": d.name, "jobs": 0, "ms": 0})
        s["jobs"] += 1
        s["ms"] += d.ms
    return sorted(sites.values(), key=lambda s: -s["ms"])
