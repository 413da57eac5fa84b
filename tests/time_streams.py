"""Long event-time streams for tests: Nexmark batches through real committed timesteps, with the
truth a test compares against.

``NexmarkRun`` writes one generator batch per timestep under ``inbox/nexmark/<stream>`` and runs
``run_step`` (in-process on Arrow, or on Spark on the steps ``spark_every`` picks). Beside the
engine it keeps what the answer must be, computed without the engine:

- per timed input, the watermark rule of ``runtime/event_time.py`` applied in Python: a row of
  step t is late when its event time is below (largest time seen up to t-1) - lateness; the
  rows that were not late (``accepted``, each with the step it arrived in, ``_step``) and the
  late rows counted (``late``);
- each view integrated from the committed view deltas (``views``);
- the rows of every state trace after each step (``state_rows``).

``duckdb_view(sql)`` evaluates a view from scratch over the accepted rows in DuckDB (one table
per input, named as the circuit's inputs, with an ``_step`` column: a stream join's "joined on
arrival" is ``r._step <= s._step``).
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import duckdb
import pyarrow as pa
import yaml

from spark_jobs.config import Config
from spark_jobs.examples.nexmark import SCHEMAS, NexmarkGenerator
from spark_jobs.runtime.circuit import CircuitRuntime, open_circuit
from spark_jobs.runtime.event_time import micros
from spark_jobs.runtime.step import run_step
from spark_jobs.runtime.step_types import StepReport
from spark_jobs.state.store import VIEW_TRACE_PREFIX
from tests.engines import output_delta
from tests.policies import config, make_input_folders

FOLDER = "inbox/nexmark"


def comparable(value: Any) -> Any:
    """Event times as naive UTC datetimes (engines and DuckDB differ in how they carry the zone);
    floats rounded."""
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).replace(tzinfo=None) if value.tzinfo else value
    if isinstance(value, float):
        return round(value, 6)
    return value


def _config(root: str, engine: str, publish: bool) -> Config:
    """The test profile on ``root``; views published as Delta tables only when asked (the views
    are read from the committed deltas here; publishing is tested elsewhere and costs a step)."""
    cfg = config(root, engine=engine)
    return cfg if publish else replace(cfg, views=replace(cfg.views, enabled=False))


@dataclass
class TimedTruth:
    """One timed input's truth: its watermark by the engine's rule, accepted and late rows."""

    stream: str
    column: str
    lateness_us: int
    max_us: int | None = None
    watermark_us: int | None = None
    late: int = 0
    accepted: list[dict[str, Any]] = field(default_factory=list)

    def take(self, rows: list[dict[str, Any]], step: int) -> None:
        for row in rows:
            us = micros(row[self.column])
            if self.watermark_us is not None and us < self.watermark_us:
                self.late += 1
            else:
                self.accepted.append({**row, "_step": step})
        if rows:
            top = max(micros(r[self.column]) for r in rows)
            self.max_us = top if self.max_us is None else max(self.max_us, top)
            mark = self.max_us - self.lateness_us
            self.watermark_us = mark if self.watermark_us is None else max(self.watermark_us, mark)


def combined_circuit(paths: list[str], name: str = "nexmark_all") -> str:
    """One circuit with the inputs, nodes and outputs of several (YAML text): a timestep of it
    serves every view at once, so a long stream costs one step per batch, not one per circuit.
    Inputs of the same name must be declared alike; node and view names must not clash."""
    merged: dict[str, Any] = {"name": name, "inputs": {}, "nodes": {}, "outputs": {}}
    # outputs without their expectations: the harness checks the views against DuckDB
    for path in paths:
        with open(path) as fh:
            doc = yaml.safe_load(fh)
        for section in ("inputs", "nodes", "outputs"):
            part = doc.get(section) or {}
            if isinstance(part, list):
                part = {view: {} for view in part}
            for key, value in part.items():
                known = merged[section].get(key)
                assert known is None or (section == "inputs" and known == value), f"{path}: {section}.{key} clashes"
                merged[section][key] = {} if section == "outputs" else value
    return yaml.safe_dump(merged, sort_keys=False)


class NexmarkRun:
    """A circuit over ``inbox/nexmark/<stream>`` driven by a ``NexmarkGenerator``, step by step."""

    def __init__(self, tmp_path: Any, circuit_path: str, gen: NexmarkGenerator, spark_every: int = 0,
                 publish: bool = False) -> None:
        self.root = str(tmp_path / "data")
        self.gen = gen
        self.spark_every = spark_every
        self.rts = {engine: open_circuit(circuit_path, _config(self.root, engine, publish)) for engine in ("arrow", "spark")}
        make_input_folders(self.rts["arrow"])
        self.rt: CircuitRuntime = self.rts["arrow"]
        self.truth: dict[str, TimedTruth] = {}
        for name, inp in self.rt.compiled.spec.inputs.items():
            stream = os.path.basename(inp.source.path.rstrip("/"))
            assert inp.time is not None and stream in SCHEMAS, f"input {name}: a timed Nexmark stream"
            self.truth[name] = TimedTruth(stream, inp.time.column, inp.time.lateness_us)
        self.views: dict[str, Counter] = {v: Counter() for v in self.rt.compiled.spec.outputs}
        self.state_rows: list[dict[str, int]] = []
        self.events = 0
        self.t = 0

    def engine(self, t: int) -> str:
        return "spark" if self.spark_every and t % self.spark_every == 0 else "arrow"

    def step(self) -> StepReport:
        """Write the next batch, run and commit its timestep, and update the truth."""
        batch = self.gen.write_batch(self.root, FOLDER)
        self.t += 1
        self.events += batch.events
        engine = self.engine(self.t)
        report = run_step(self.rts[engine])
        assert report.timestep == self.t and report.engine == engine, (report.timestep, report.engine,
                                                                       report.engine_reason)
        for truth in self.truth.values():
            truth.take(batch.rows[truth.stream], self.t)
        for view in self.views:  # Spark writes naive times, Arrow UTC ones: compared as naive UTC
            self.views[view].update(Counter({tuple(comparable(v) for v in row): w
                                             for row, w in output_delta(self.rt, view)[0].items()}))
        traces = self.rt.store.manifest().traces
        self.state_rows.append({tid: e.rows for tid, e in traces.items() if not tid.startswith(VIEW_TRACE_PREFIX)})
        return report

    def view(self, name: str) -> Counter:
        """The view as integrated from its committed deltas (rows with their multiplicity)."""
        return Counter({row: w for row, w in self.views[name].items() if w})

    def late_totals(self) -> dict[str, int]:
        """Late rows per input as the last manifest records them (``event_time.late_total``)."""
        inputs = self.rt.store.manifest().inputs or {}
        return {name: int(((inputs.get(name) or {}).get("event_time") or {}).get("late_total", 0))
                for name in self.truth}

    def duckdb_view(self, sql: str) -> Counter:
        """``sql`` from scratch in DuckDB over the accepted rows (tables named as the inputs)."""
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        for name, truth in self.truth.items():
            schema = SCHEMAS[truth.stream].append(pa.field("_step", pa.int64()))
            con.register(name, pa.Table.from_pylist(truth.accepted, schema=schema))
        return Counter(tuple(comparable(v) for v in row) for row in con.execute(sql).fetchall())


__all__ = ["NexmarkRun", "TimedTruth", "combined_circuit", "comparable"]
