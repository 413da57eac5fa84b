"""Apply the circuit's state bounds (``ir/bounds.py``) with the watermarks a timestep commits.

Why at commit: the watermark after a timestep is the floor of every later on-time row, so the
rows a bound names can be dropped from the state this timestep writes; the store drops them
when it rewrites the trace (``Transaction.bound``). Views are not traces of the circuit: they
keep their history.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from spark_jobs.ir.bounds import state_bounds

if TYPE_CHECKING:
    from spark_jobs.ir.graph import Circuit
    from spark_jobs.runtime.event_time import StepClock
    from spark_jobs.state.store import Transaction


def bound_state(txn: "Transaction", incremental: "Circuit", clock: "StepClock") -> None:
    """Tell the store, per bounded trace, which rows are dead after this timestep."""
    marks = clock.marks()
    if not marks:
        return
    for trace, bound in state_bounds(incremental).items():
        below = bound.thresholds(marks)
        if below:
            txn.bound(trace, below, bound.every_us)
