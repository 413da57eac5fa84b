"""A trigger that watches an input folder: an Asset event when new files land (event-driven runs).

Airflow's triggerer runs ``InputFilesTrigger.run``: every ``poll_seconds`` it lists the folder
(pyarrow, no Spark) and compares it with the files the circuit's last manifest consumed; files
it has not announced yet (a new path, or a replaced file: another size or mtime) fire one
``TriggerEvent``, which Airflow records as an event of the input's Asset, which starts a run of
every DAG scheduled on it. Files keep being announced once, while they wait for a run; after the
triggerer restarts, files still pending are announced again (the run that follows consumes them,
or finds them consumed and skips: an empty run commits nothing).

Built at DAG-parse time: the constructor only stores its arguments (no pyspark import).
"""
from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

CLASSPATH = "spark_jobs.orchestration.watch.InputFilesTrigger"
MAX_LISTED = 20  # file names in one event's payload


class InputFilesTrigger(BaseEventTrigger):
    """Fires when files the circuit has not consumed land in one input's folder."""

    def __init__(self, *, circuit_path: str, input_name: str, config_path: str, data_root: str,
                 poll_seconds: float = 5.0) -> None:
        super().__init__()
        self.circuit_path = circuit_path
        self.input_name = input_name
        self.config_path = config_path
        self.data_root = data_root
        self.poll_seconds = float(poll_seconds)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return CLASSPATH, {"circuit_path": self.circuit_path, "input_name": self.input_name,
                           "config_path": self.config_path, "data_root": self.data_root,
                           "poll_seconds": self.poll_seconds}

    def pending(self) -> set[tuple[str, int, float]]:
        """(path, size, mtime) of the input's files that no committed timestep consumed."""
        from spark_jobs.config import load_config
        from spark_jobs.runtime.circuit import state_root
        from spark_jobs.runtime.inputs import consumed_files
        from spark_jobs.executor.sources import pending_files
        from spark_jobs.spec import load_circuit
        from spark_jobs.state import StateStore

        spec = load_circuit(self.circuit_path)
        config = load_config(self.config_path, data_root=self.data_root)
        store = StateStore(None, state_root(config, spec.name), spec.name, "")
        consumed = {f["path"] for f in consumed_files(store.manifest(), self.input_name)}
        files = pending_files(spec.inputs[self.input_name], config.data_root, consumed, config.allowed_input_roots)
        return {(f.path, f.size, f.mtime) for f in files}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        announced: set[tuple[str, int, float]] = set()
        while True:
            try:
                pending = await asyncio.to_thread(self.pending)
            except Exception as exc:  # noqa: BLE001 - a broken circuit or folder: keep watching
                self.log.warning("cannot list input %s of %s: %s", self.input_name, self.circuit_path, exc)
                pending = announced
            new = pending - announced
            announced = pending  # consumed files leave; a replaced file is new again
            if new:
                paths = sorted(p for p, _, _ in new)
                yield TriggerEvent({"input": self.input_name, "new_files": len(paths),
                                    "files": paths[:MAX_LISTED]})
            await asyncio.sleep(self.poll_seconds)
