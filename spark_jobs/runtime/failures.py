"""One clear message for the failures of a step that a user must act on (not a Java trace).

- a value refused inside a Spark job (``raise_sql``: an aggregate argument or total out of the
  range its exact sum supports) becomes ``ValueRefused`` with that message alone;
- a write that ran out of space becomes ``StorageFull``, naming the path and saying what was
  committed: nothing, since the manifest is written last (the circuit is still at the timestep
  it was at; the step's own files are deleted as the transaction aborts).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from spark_jobs.executor.refusal import ValueRefused, refusals_from_spark
from spark_jobs.runtime.circuit import CircuitRuntime
from spark_jobs.state.space import StorageFull, no_space_left


@contextmanager
def step_failures(rt: CircuitRuntime) -> Iterator[None]:
    """Run one step (or one task of a DAG run) with its refusals and full disks made readable."""
    before = rt.committed.last_committed()
    try:
        with refusals_from_spark():
            yield
    except (ValueRefused, StorageFull):
        raise
    except Exception as exc:
        path = no_space_left(exc)
        if path is None:
            raise
        now = rt.committed.last_committed()
        committed = (f"nothing was committed: {rt.name} is still at timestep {now}" if now == before else
                     f"timestep {now} was committed before the write failed")
        raise StorageFull(f"no space left on the device while writing {path or rt.committed.root}; {committed}. "
                          f"Free some space (or move the data root) and run the step again.") from None
