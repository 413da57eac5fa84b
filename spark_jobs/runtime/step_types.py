"""What a timestep reports, and how it reads committed state (shared by both engines' step runners)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class InputReport:
    name: str
    files: list[str] = field(default_factory=list)
    inserted: int = 0
    deleted: int = 0
    unknown_keys: int = 0  # cdc records of keys the input did not hold, ignored (unknown_key: count)
    late: str = ""  # timed inputs: late rows dropped and the watermark (event_time.describe)

    @property
    def note(self) -> str:
        if not self.files:
            return "no new files: no changes"
        unknown = f"; {self.unknown_keys} change(s) to unknown keys ignored" if self.unknown_keys else ""
        late = f"; {self.late}" if self.late else ""
        return f"{_what_was_read(self.files)}{unknown}{late}"


def _what_was_read(files: list[str]) -> str:
    """"3 file(s)", or for a table source the version or log position read up to."""
    last = files[-1] if files else ""
    if len(files) == 1 and "/_delta_log/" in last and last.endswith(".json"):
        return f"Delta table up to version {int(last.rsplit('/', 1)[1][:-5])}"
    if len(files) == 1 and last.startswith("postgresql:"):
        return f"PostgreSQL table {last.split('/', 1)[-1].split('@')[0]} up to log position {last.rsplit('@', 1)[1]}"
    return f"{len(files)} file(s)"


@dataclass
class StepReport:
    circuit: str
    timestep: int
    inputs: list[InputReport]
    views: dict[str, tuple[int, int]]  # view -> (rows inserted, rows deleted)
    seconds: float
    quality: str = ""  # gate summary
    notes: list[str] = field(default_factory=list)  # moved data root, quarantined rows, refreshed views, retention
    engine: str = "spark"  # which engine ran the step: "spark" | "arrow"
    engine_reason: str = ""  # why (the policy's choice, or why Arrow could not run it)
    published: Any = None  # what publishing the views did (``publish.PublishReport``, failures included)
    mode: str = "incremental"  # incremental | recompute | full_refresh
    mode_reason: str = ""  # why (the cost model's choice: runtime/cost.py)
    bytes_read: int | None = None  # bytes the step read itself (in-process: input files and row groups; Spark: the driver's lookups)


class StoreReader:
    """The executor's StateReader over the committed state of a store (None = no state)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._read: dict[str, Any] = {}  # an integrator is read by itself and its delay
        self._files: dict[str, Any] = {}

    def read(self, node_id: str) -> Any:
        """The node's committed state as a Spark DataFrame (lazily read)."""
        if node_id not in self._read:
            self._read[node_id] = self._read_later(node_id) if self.store is not None else None
        return self._read[node_id]

    def _read_later(self, node_id: str) -> Any:
        """``store.read_trace(node_id)``, made when Spark first needs its plan (``executor.spark.
        lazy``: most of a small step's state reads are narrowed on the driver and only asked
        their columns). Eager where the schema is not in the manifest, and on Spark Connect."""
        import json

        manifest = self.store.manifest()
        entry = manifest.traces.get(node_id) if manifest is not None else None
        spark = self.store.spark
        if entry is None or not entry.dirs or not entry.schema or type(spark).__module__.startswith("pyspark.sql.connect"):
            return self.store.read_trace(node_id)
        from pyspark.sql.types import StructType

        from spark_jobs.executor.spark.lazy import LazyFrame, as_read

        schema = as_read(StructType.fromJson(json.loads(entry.schema)))
        t = manifest.timestep  # (pinned: the same read whenever Spark asks for it)
        return LazyFrame(spark, lambda: self.store.read_trace(node_id, t)._jdf, schema)

    def read_by_spark(self) -> bool:
        """Has Spark been given a plan that scans a trace this step (a read made eagerly, or a
        lazy read that Spark was asked for)? False: every read so far was narrowed on the driver
        or never used, so the step's values are made of local relations only."""
        from spark_jobs.executor.spark.lazy import pending

        return any(df is not None and not pending(df) for df in self._read.values())

    def trace_files(self, node_id: str) -> Any:
        """The node's committed trace files for pyarrow lookups (``StateStore.trace_files``),
        footers read once per step."""
        if node_id not in self._files:
            self._files[node_id] = self.store.trace_files(node_id) if self.store is not None else None
        return self._files[node_id]

    def bytes_read(self) -> int:
        """Bytes of Parquet row groups the pyarrow lookups read this step."""
        return sum(f.bytes_read for f in self._files.values() if f is not None)
