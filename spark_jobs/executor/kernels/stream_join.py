"""The kernel of the stream join's sum (``ir/ops/stream_join.py``), for both engines.

Why consolidated: Δs⋈Δr holds negative rows when a matched relation row is deleted in the step
its stream row arrives, cancelled by the Δs⋈z⁻¹(I r) term. The sum is Δs⋈I(r), which is never
negative; readers that rely on the join's output only inserting (``aggregate_insert_only``) must
see it consolidated, with the cancelled rows gone. Its cost is the step's output, not the state.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_jobs.executor.evaluate import Step
    from spark_jobs.ir.graph import Node


def consolidated_sum(s: "Step", node: "Node") -> Any:
    """The terms added and consolidated (one row per tuple, zero weights dropped)."""
    return s.engine.consolidate(s.engine.plus(*s.args(node)))
