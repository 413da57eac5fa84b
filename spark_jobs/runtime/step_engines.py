"""The two engines a timestep's phases 1-5 run on (``recipe.StepEngine``).

- ``SparkSteps``: values are Spark DataFrames (a local session, a cluster's driver, or a Spark
  Connect client). Small changes are brought to the driver once (``count``) so that lookups need
  no broadcast job, and the session runs with the small-change settings (no AQE, few shuffle
  partitions) from the evaluation to the writes.
- ``ArrowSteps``: values are pyarrow tables in this process; no Spark job, no JVM. Whatever it
  cannot do (an operator without an Arrow kernel, a late row under ``on_late: refuse``, a bag
  check that fails) raises ``NotLocal`` before anything is written, and the caller runs the step
  (or the stage) on Spark, which refuses naming the files or quarantines.

Everything else of a timestep, in particular all of its commit, is the recipe's (``recipe.py``).
"""
from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from spark_jobs.executor.kernels import NotLocal
from spark_jobs.executor.sources import InputFile
from spark_jobs.runtime.bag import Quarantined
from spark_jobs.runtime.event_time import StepClock
from spark_jobs.runtime.inputs import InputChange

if TYPE_CHECKING:
    from spark_jobs.quality import GateReport
    from spark_jobs.runtime.circuit import CircuitRuntime


class SparkSteps:
    """Phases 1-5 on Spark DataFrames (see the module docstring)."""

    name = "spark"

    def __init__(self, rt: "CircuitRuntime", *, full: bool = False, small: bool | None = None,
                 persist: bool = True) -> None:
        self.rt = rt
        self.full = full
        self.small = bool(small) if small is not None else False  # set by ``count`` unless given
        self._small_given = small is not None
        self.persist = persist
        self.cached: list[Any] = []
        self.results: list[Any] = []
        self.local = False  # the changes were brought to the driver (``count``)
        self._stack = ExitStack()
        self._conf_set = False

    @property
    def spark(self):
        return self.rt.spark

    def read_input(self, name: str, files: Sequence[InputFile], state: Any) -> InputChange:
        from spark_jobs.runtime.inputs import read_input

        change = read_input(self.spark, self.rt.compiled.spec.inputs[name], list(files), state,
                            self.rt.config.policy)
        if change.delta is not None and change.trace is not None:  # also appended to the input's own trace
            change.delta = change.delta.cache()
            self.cached.append(change.delta)
        return change

    def count(self, clock: StepClock, deltas: dict[str, Any], files: Mapping[str, Sequence[InputFile]]
              ) -> dict[str, tuple[int, int]]:
        from spark_jobs.runtime.step import count_inputs, ins_del

        if not deltas:
            return {}
        policy = self.rt.config.policy
        counts, local = count_inputs(self.spark, clock, deltas, files, policy)  # late rows counted, then left out
        if local is not None:
            deltas.update(local)
            self.local = True
        out = {name: ins_del(row) for name, row in counts.items()}
        if not self._small_given:
            self.small = not self.full and policy.small_change(sum(sum(c) for c in out.values()))
        return out

    def check_bags(self, timestep: int, deltas: dict[str, Any], deleted: Mapping[str, int],
                   files: Mapping[str, Sequence[InputFile]], state: Any) -> list[Quarantined]:
        from spark_jobs.runtime.bag import check_deltas

        return check_deltas(self.rt, timestep, deltas, deleted, files, state)

    def _conf(self) -> None:
        if not self._conf_set:
            from spark_jobs.executor.session import step_conf

            self._stack.enter_context(step_conf(self.spark, self.small))
            self._conf_set = True

    def evaluate(self, deltas: Mapping[str, Any], state: Any, *, first_step: bool, full: bool,
                 only: Any = None, external: Any = None) -> Any:
        from spark_jobs.executor.evaluate import evaluate_step
        from spark_jobs.executor.sources import spark_schema

        self._conf()
        deltas = dict(deltas)
        if not self.local and only is None:  # too large for the driver: each change computed once
            for name, df in deltas.items():
                if not any(df is c for c in self.cached):
                    deltas[name] = df.cache()
                    self.cached.append(deltas[name])
        schemas = {name: spark_schema(inp) for name, inp in self.rt.compiled.spec.inputs.items()}
        result = evaluate_step(self.rt.compiled.incremental, deltas, state, first_step=first_step,
                               input_schemas=schemas, broadcast_deltas=self.small if only is None else True,
                               persist=self.persist and only is None, policy=self.rt.config.policy,
                               spark=self.spark, only=only, external=external)
        self.results.append(result)
        return result

    def view_delta(self, view: str, new: Any) -> Any:
        from spark_jobs.runtime import refresh

        return refresh.view_delta(self.rt.store, view, new)

    def settle_outputs(self, outputs: dict[str, Any]) -> dict[str, Any]:
        """Small view deltas computed once, to the driver (with the jobs they need): the gate then
        looks the previous view up by them without a broadcast job; larger ones are cached."""
        from spark_jobs.executor.local import collect_local

        if self.small and outputs:
            local = collect_local(self.spark, outputs, self.rt.config.policy.local_change_rows)[0]
            if local is not None:
                return local
        settled = {view: df.cache() for view, df in outputs.items()}
        self.cached.extend(settled.values())
        return settled

    def gate(self, timestep: int, outputs: Mapping[str, Any], deltas: Mapping[str, Any], full: bool,
             late: Sequence[Any], state: Any) -> "GateReport":
        from spark_jobs.runtime import refresh
        from spark_jobs.runtime.quality_gate import check_timestep

        previous = {v: refresh.old_view(self.rt.store, v, df) for v, df in outputs.items()} if full else None
        return check_timestep(self.rt, timestep, dict(outputs), dict(deltas), previous, late=late)

    def schema_json(self, value: Any) -> str:
        return value.schema.json()

    def release(self) -> None:
        for result in self.results:
            result.release()
        for df in self.cached:
            df.unpersist()
        self.results.clear()
        self.cached.clear()
        self._stack.close()
        self._conf_set = False


class ArrowSteps:
    """Phases 1-5 on pyarrow tables in this process (see the module docstring)."""

    name = "arrow"

    def __init__(self, rt: "CircuitRuntime") -> None:
        self.rt = rt
        self._engine = None

    @property
    def engine(self):
        if self._engine is None:
            from spark_jobs.executor.kernels.arrow import ArrowEngine

            self._engine = ArrowEngine(self.rt.config.policy, self.rt.config.session_timezone)
        return self._engine

    def read_input(self, name: str, files: Sequence[InputFile], state: Any) -> InputChange:
        from spark_jobs.executor.arrow import inputs as arrow_inputs

        spec = self.rt.compiled.spec.inputs[name]
        why = arrow_inputs.unsupported(spec)
        if why:
            raise NotLocal(why)
        table, nbytes = arrow_inputs.read_changes(spec, files)
        return InputChange(table, bytes_read=nbytes)

    def count(self, clock: StepClock, deltas: dict[str, Any], files: Mapping[str, Sequence[InputFile]]
              ) -> dict[str, tuple[int, int]]:
        from spark_jobs.executor.arrow import lateness as arrow_late
        from spark_jobs.state.arrow_trace import weight_totals

        counts = {}
        for name, table in list(deltas.items()):
            if clock.timed(name):
                column, mark = clock.column(name), clock.watermark(name)
                clock.record(name, arrow_late.change_totals(table, column, mark))
                deltas[name] = arrow_late.on_time(table, column, mark)
            counts[name] = weight_totals(deltas[name])
        if clock.refused():
            raise NotLocal("late rows under on_late: refuse (the refusal names their files)")
        return counts

    def check_bags(self, timestep: int, deltas: dict[str, Any], deleted: Mapping[str, int],
                   files: Mapping[str, Sequence[InputFile]], state: Any) -> list[Quarantined]:
        from spark_jobs.runtime.bag import check_tables

        check_tables(self.rt, deltas, deleted, state)  # NotLocal when a delete goes below zero
        return []

    def evaluate(self, deltas: Mapping[str, Any], state: Any, *, first_step: bool, full: bool,
                 only: Any = None, external: Any = None) -> Any:
        from spark_jobs.executor.arrow import inputs as arrow_inputs
        from spark_jobs.executor.evaluate import evaluate_step

        if full:
            raise NotLocal("a full refresh rebuilds every state from all retained files: a load, on Spark")
        schemas = {name: arrow_inputs.schema(inp) for name, inp in self.rt.compiled.spec.inputs.items()}
        return evaluate_step(self.rt.compiled.incremental, deltas, state, first_step=first_step,
                             input_schemas=schemas, engine=self.engine, only=only, external=external)

    def view_delta(self, view: str, new: Any) -> Any:
        raise NotLocal("a full refresh runs on Spark")

    def settle_outputs(self, outputs: dict[str, Any]) -> dict[str, Any]:
        return outputs

    def gate(self, timestep: int, outputs: Mapping[str, Any], deltas: Mapping[str, Any], full: bool,
             late: Sequence[Any], state: Any) -> "GateReport":
        from spark_jobs.runtime.quality_gate import check_timestep_tables

        return check_timestep_tables(self.rt, timestep, dict(outputs), dict(deltas), state.trace_files, late=late)

    def schema_json(self, value: Any) -> str:
        from spark_jobs.state.arrow_trace import spark_schema_json

        return spark_schema_json(value.schema)

    def release(self) -> None:
        return None


def unsupported(rt: "CircuitRuntime", pending: Mapping[str, Sequence[InputFile]]) -> str | None:
    """Why a step cannot run in-process at all (None: it may try)."""
    from spark_jobs.executor.arrow import inputs as arrow_inputs
    from spark_jobs.ir.operator import operator

    for name, files in pending.items():
        if files:
            why = arrow_inputs.unsupported(rt.compiled.spec.inputs[name])
            if why:
                return why
    for node in rt.compiled.incremental:
        if operator(node.op).kernel("arrow") is None:
            return f"operator {node.op!r} (node {node.id!r}) has no Arrow kernel"
    return None


def change_rows(pending: Mapping[str, Sequence[InputFile]]) -> int | None:
    """Rows of the step's input changes, from the Parquet footers (None: unknown)."""
    from spark_jobs.executor.arrow import inputs as arrow_inputs

    total = 0
    for files in pending.values():
        rows = arrow_inputs.footer_rows(files)
        if rows is None:
            return None
        total += rows
    return total


__all__ = ["ArrowSteps", "SparkSteps", "change_rows", "unsupported"]
