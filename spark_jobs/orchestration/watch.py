"""A trigger that watches input folders: an Asset event when new files land (event-driven runs).

Airflow's triggerer runs ``InputFilesTrigger.run``: every ``poll_seconds`` it lists the
circuit's watched input folders (pyarrow, no Spark) and compares them with the files its last
manifest consumed. Files it has not announced yet (a new path, or a replaced file: another size
or mtime) fire one ``TriggerEvent`` once the listing has stayed the same for one poll (a batch
that lands in several folders, file after file, is one event, so one run), which Airflow records
as an event of the circuit's ``<circuit>.inputs`` Asset, which starts a run of the DAG. Files
are announced once while they wait for a run; after the triggerer restarts, files still pending
are announced again (the run that follows consumes them, or finds them consumed and skips: an
empty run commits nothing).

Built at DAG-parse time: the constructor only stores its arguments (no pyspark import).
"""
from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

CLASSPATH = "spark_jobs.orchestration.watch.InputFilesTrigger"
MAX_LISTED = 20  # file names in one event's payload


class InputFilesTrigger(BaseEventTrigger):
    """Fires when files the circuit has not consumed land in the folders of its inputs."""

    def __init__(self, *, circuit_path: str, input_names: list[str], config_path: str, data_root: str,
                 poll_seconds: float = 3.0) -> None:
        super().__init__()
        self.circuit_path = circuit_path
        self.input_names = list(input_names)
        self.config_path = config_path
        self.data_root = data_root
        self.poll_seconds = float(poll_seconds)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return CLASSPATH, {"circuit_path": self.circuit_path, "input_names": self.input_names,
                           "config_path": self.config_path, "data_root": self.data_root,
                           "poll_seconds": self.poll_seconds}

    def pending(self) -> set[tuple[str, str, int, float]]:
        """(input, path, size, mtime) of the watched inputs' files no committed timestep consumed."""
        from spark_jobs.config import load_config
        from spark_jobs.runtime.circuit import state_root
        from spark_jobs.runtime.inputs import pending_inputs
        from spark_jobs.spec import load_circuit
        from spark_jobs.state import StateStore

        spec = load_circuit(self.circuit_path)
        config = load_config(self.config_path or None, data_root=self.data_root)
        manifest = StateStore(None, state_root(config, spec.name), spec.name, "").manifest()
        watched = {name: spec.inputs[name] for name in self.input_names}
        pending = pending_inputs(watched, config.data_root, manifest, config.allowed_input_roots)
        return {(name, f.path, f.size, f.mtime) for name, files in pending.items() for f in files}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        announced: set = set()
        previous: set | None = None
        while True:
            try:
                pending = await asyncio.to_thread(self.pending)
            except Exception as exc:  # noqa: BLE001 - a broken circuit or folder: keep watching
                self.log.warning("cannot list the inputs of %s: %s", self.circuit_path, exc)
                pending = previous if previous is not None else announced
            new = pending - announced
            if new and pending == previous:  # settled: nothing landed since the last poll
                files = sorted(f"{name}: {path}" for name, path, _, _ in new)
                yield TriggerEvent({"new_files": len(files), "files": files[:MAX_LISTED]})
                announced = set(pending)
            elif not new:
                announced &= pending  # consumed files leave; a replaced file is new again
            previous = pending
            await asyncio.sleep(self.poll_seconds)
