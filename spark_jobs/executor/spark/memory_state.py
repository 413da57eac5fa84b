"""An in-memory state store for tests and interactive runs (same protocol as the Parquet store).

Each committed state is materialized with ``localCheckpoint``: the next step's plans then start
from the stored rows instead of replaying every earlier step, so lineage stays flat over many
timesteps.
"""
from __future__ import annotations

from typing import Mapping

from pyspark.sql import DataFrame

from spark_jobs.executor.evaluate import StateUpdate
from spark_jobs.executor.spark.zset import WEIGHT, consolidate


class MemoryState:
    """``StateReader`` over a dict of checkpointed DataFrames; ``apply`` commits a step's updates.

    With ``compact=True`` an appended Z-set trace (it has a weight column) is consolidated on
    commit, like a store's compaction; accumulator traces (no weight) are only appended.
    ``eager=False`` leaves storing the rows to the first job that reads the state (one job less
    per stateful node and step; Spark still runs the shuffle stages of the update at ``apply``).
    """

    def __init__(self, compact: bool = False, partitions: int = 2, eager: bool = True) -> None:
        self._state: dict[str, DataFrame] = {}
        self.compact = compact
        self.partitions = partitions
        self.eager = eager

    def read(self, node_id: str) -> DataFrame | None:
        return self._state.get(node_id)

    def apply(self, updates: Mapping[str, StateUpdate]) -> None:
        """Materialize every new state first, then swap them in (all or nothing)."""
        new: dict[str, DataFrame] = {}
        for node_id, update in updates.items():
            new[node_id] = self._materialize(self._combine(node_id, update))
        self._state.update(new)

    def _combine(self, node_id: str, update: StateUpdate) -> DataFrame:
        if update.kind not in ("append", "replace"):
            raise ValueError(f"unknown state update kind {update.kind!r} for {node_id!r}")
        prev = self._state.get(node_id)
        if update.kind == "replace" or prev is None:
            return update.df
        combined = prev.unionByName(update.df)
        if self.compact and WEIGHT in combined.columns:
            return consolidate(combined)
        # a union has the partitions of both sides: without this, every step adds tasks to every job
        return combined.coalesce(max(1, self.partitions))

    def _materialize(self, df: DataFrame) -> DataFrame:
        return df.localCheckpoint(eager=self.eager)
