"""What an engine is: the kernels of a timestep, one implementation per engine, behind one interface.

``Engine`` is what the interpreter (``executor/evaluate.py``) needs of an engine besides the
operators' own kernels: the Z-set algebra on its values (sum, negation, consolidation, a typed
zero), and settling a node's value (caching one read several times). Two implementations:

- ``spark/kernels.SparkEngine``: values are lazy Spark DataFrames; a step is a handful of Spark jobs;
- ``arrow/kernels.ArrowEngine``: values are pyarrow Tables in this process (state-sized values
  are ``arrow/kernels.Integral`` views over trace files, looked up by key); a step runs no Spark job.

An operator's kernel for an engine is ``kernel(step, node) -> value`` (``Operator.kernels``;
the built-in ones are the functions of ``spark/kernels.py`` and ``arrow/kernels.py`` named after
the operator).
A kernel that cannot serve a step on Arrow raises ``NotLocal`` (the step then runs on Spark, and
its summary says why).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from spark_jobs.errors import DbspError


class NotLocal(DbspError):
    """This step cannot run in-process on Arrow (an operator, expression, input or size the Arrow
    kernels do not take): the caller runs it on Spark and reports ``str(exc)`` as the reason."""


class Engine(Protocol):
    """The engine-level kernels the interpreter calls (see the module docstring)."""

    name: str

    def plus(self, *values: Any) -> Any:
        """Z-set addition (rows concatenated, not consolidated)."""

    def negate(self, value: Any) -> Any: ...

    def consolidate(self, value: Any) -> Any:
        """One row per tuple with the summed weight, zero weights dropped."""

    def empty_like(self, value: Any) -> Any:
        """The zero Z-set with ``value``'s columns."""

    def columns(self, value: Any) -> list[str]:
        """The data columns (all but the weight)."""

    def settle(self, node: Any, value: Any, *, reused: bool) -> Any:
        """``node``'s value as later nodes read it. ``reused``: it is read more than once this
        step, so compute it once (Spark caches it). Spark also materializes a value whose plan
        grew too large (``ExecutionPolicy.max_plan_operators``)."""

    def release(self) -> None:
        """Drop what ``settle`` cached (after the step's writes)."""


@dataclass(frozen=True)
class StateUpdate:
    """What a stateful node commits: ``append`` a delta to its trace, or ``replace`` the value.

    ``df`` is the engine's value (a DataFrame or a Table). ``keys`` are the columns the state is
    looked up by; ``sort_by`` asks the store to keep the trace's compacted files sorted on these
    columns (lookups then read few row groups). The trace's kind ("zset" or "sum") comes from
    the operator's definition (``evaluate.trace_kind``). ``row_group_bytes`` (0: the store's
    ``sorted_row_group_bytes``) is this trace's own row-group size, kept with the trace: a trace
    looked up by a few keys at a time (a while loop's per-iteration state) reads less with
    smaller groups.
    """

    kind: Literal["append", "replace"]
    df: Any
    keys: tuple[str, ...] = ()
    sort_by: tuple[str, ...] = ()
    row_group_bytes: int = 0
