"""Open a circuit for running: find its YAML, compile it, and attach its state store.

This sits above the four layers (spec, IR, executor, state) and below the CLI and the DAGs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

from spark_jobs.config import Config
from spark_jobs.ir.compile import CompiledCircuit, compile_spec
from spark_jobs.spec import load_circuit, output_columns



def find_circuit_file(ref: str, config: Config) -> str:
    """``ref`` is a YAML path, or a circuit name looked up in the profile's circuits folder."""
    if os.path.exists(ref):
        return ref
    for suffix in (".yaml", ".yml"):
        candidate = Path(config.circuits_dir) / f"{ref}{suffix}"
        if candidate.exists():
            return str(candidate)
    raise FileNotFoundError(f"no circuit file {ref!r} and no circuit named {ref!r} in {config.circuits_dir}")


def compile_file(path: str, allowed_roots: Sequence[str] = ()) -> CompiledCircuit:
    """Load, validate and compile; ``allowed_roots``: the profile's ``inputs.allowed_roots``.

    Remembered per process for the file as it is (its path, size, mtime and text): an Airflow
    task process parses the DAG file, which compiles the circuit, then runs the task, which
    opens it again."""
    try:
        with open(path, "rb") as fh:
            text = fh.read()
    except OSError:
        text = b""
    key = (os.path.abspath(path), tuple(allowed_roots), text)
    found = _COMPILED.get(key)
    if found is None:
        spec = load_circuit(path, allowed_roots)
        found = compile_spec(spec, output_columns(spec))
        if len(_COMPILED) >= 16:
            _COMPILED.pop(next(iter(_COMPILED)))  # the oldest
        _COMPILED[key] = found
    return found


_COMPILED: dict[tuple, CompiledCircuit] = {}


def state_root(config: Config, circuit_name: str) -> str:
    return config.resolved_state_root + "/" + circuit_name


@dataclass
class CircuitRuntime:
    """Everything a timestep needs: the compiled circuit, Spark, and the circuit's state store."""

    config: Config
    compiled: CompiledCircuit
    path: str
    lease: Any = None  # the writer's lease while this process holds it (runtime/writer.py)
    spark_log_level: str | None = None  # set on the session when (if) a step starts it (the CLI's)
    # how this process starts its session when (if) a step needs one: ``opener(start)`` calls
    # ``start()`` and returns the session (an Airflow task logs a local JVM's start-up output)
    spark_opener: Any = None

    def attach_lease(self, lease) -> None:
        """Hold ``lease`` (None: none): the store checks it before cleaning up or committing."""
        self.lease = lease
        for opened in ("store", "committed"):
            if opened in self.__dict__:
                self.__dict__[opened].lease = lease

    @property
    def name(self) -> str:
        return self.compiled.spec.name

    @cached_property
    def spark(self):
        """The session, once Spark's own parser has read the circuit's expressions as the
        validator did (``executor/spark/parse_check.py``): nothing runs before that check."""
        from spark_jobs.executor.spark.session import get_spark
        from spark_jobs.executor.spark.parse_check import check_circuit

        spark = self.spark_opener(lambda: get_spark(self.config)) if self.spark_opener else get_spark(self.config)
        if self.spark_log_level and self.config.spark.mode != "connect":
            spark.sparkContext.setLogLevel(self.spark_log_level)
        check_circuit(spark, self.compiled.spec)
        return spark

    def quiet_spark(self, level: str = "FATAL") -> None:
        """Spark's log level, set when the session starts: a step that runs in-process must not
        start a JVM (4 s of `dbsp step`) only to set its log level."""
        self.spark_log_level = level
        if "spark" in self.__dict__ and self.config.spark.mode != "connect":
            self.__dict__["spark"].sparkContext.setLogLevel(level)

    @cached_property
    def store(self):
        """The state store, for running timesteps (starts Spark when a step or a rewrite needs it;
        an in-process step commits without it)."""
        return self._store(lambda: self.spark)

    @cached_property
    def committed(self):
        """The same store without a Spark session: manifests, files and staging, and what is
        committed read with pyarrow (``state.arrow_read``). Commands that only read, ``dbsp gc``
        and a DAG's plan task start no JVM and no Spark Connect session."""
        return self._store(None)

    def _store(self, spark):
        from spark_jobs.runtime.retention import effective, longest_age_us
        from spark_jobs.state import StateStore

        retention = effective(self.config, self.compiled.spec)
        store = StateStore(spark, state_root(self.config, self.name), self.name,
                           self.compiled.fingerprint, policy=self.config.policy.state,
                           manifest_retention=retention.manifests, track_commit_times_us=longest_age_us(retention))
        store.lease = self.lease
        return store


def open_circuit(ref: str, config: Config) -> CircuitRuntime:
    from spark_jobs.connections import use_profile

    use_profile(config.connections)  # the profile's connections: the last place a connection is looked up
    path = find_circuit_file(ref, config)
    return CircuitRuntime(config, compile_file(path, config.allowed_input_roots), path)
