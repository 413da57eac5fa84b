"""Narrow operator state to the rows a small change can touch, on the driver, before Spark sees it.

Why: a small step looks state up by the keys of its change. Handed to Spark, that lookup is a scan
of the whole trace inside the step's job (a filter on the keys skips little there: an ``IN`` list
of random keys reaches Parquet as one min-max range, and as a list of equalities it made a 30M-row
sorted scan slower, 3.2 s against 1.6 s), so the step grew with the state. Yet the keys a change
can carry are often known on the driver without running anything: the input changes are held
there, a filter or a renaming keeps a column's values, a plus unites them, and a join term's output
column comes from one of its sides (``Narrowing.candidate_keys``). With those keys, ``Narrowing``
reads only the Parquet row groups of the trace files whose statistics admit them (``state.lookup``;
traces are written sorted on their lookup key) and gives Spark a local relation of the rows found,
which it joins with a shuffle inside the step's job: no scan, and no broadcast (broadcasting even a
local relation is a Spark job of its own).

Whenever something is unknown (a computed column, a change not on the driver, too many keys, a
key type whose statistics are not trusted here, an unsorted trace whose row groups would all be
read) the state is left as it was: narrowing only ever replaces a superset filter.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession

from spark_jobs.executor.arrow.zsets import plain_column
from spark_jobs.executor.engine import NotLocal
from spark_jobs.executor.spark.local_relations import from_arrow
from spark_jobs.executor.spark.zset import is_local, local_values
from spark_jobs.ir.graph import Circuit, Node
from spark_jobs.ir.operator import NARROW, operator
from spark_jobs.policy import NarrowPolicy
from spark_jobs.state.lookup import TraceFiles

# Spark types whose Parquet min/max statistics order like their Python values
KEY_TYPES = frozenset({"tinyint", "smallint", "int", "bigint", "string", "date"})

Keys = frozenset


def table_values(table: pa.Table, column: str, limit: int) -> Keys | None:
    """``zset.local_values`` of a pyarrow Table: None if there are more than ``limit``."""
    values = frozenset(pc.unique(table.column(column)).to_pylist())
    return values if len(values) <= limit else None


@dataclass
class Narrowing:
    """One step's driver-side lookups of state by the keys its changes can hold.

    ``value(node_id)`` is the step's (lazy) value of a node of ``circuit``; ``files_of(trace)``
    the trace's committed Parquet files. Footers are read once per trace and step. ``policy``
    bounds it: at most ``max_keys`` candidate keys (more: narrowing would cost more than it
    saves), ``max_decoded_rows`` trace rows decoded, ``max_found_rows`` found (a local relation
    is planned row by row on the driver: a hot key's big group costs more than Spark's scan).
    """

    spark: SparkSession
    circuit: Circuit
    value: Callable[[str], DataFrame]
    files_of: Callable[[str], "TraceFiles | None"]
    policy: NarrowPolicy = field(default_factory=NarrowPolicy)
    lookups: int = 0  # how many lookups were narrowed this step (for tests and profiles)
    _files: dict[str, "TraceFiles | None"] = field(default_factory=dict)
    _sides: dict[tuple[str, int], pa.Table] = field(default_factory=dict)  # (join, side) -> rows used
    _keys: dict[tuple[str, str], Keys | None] = field(default_factory=dict)

    def narrow(self, trace: str, state: DataFrame, column: str, probe: str, probe_column: str,
               null_matches: bool, side: tuple[str, int] | None = None) -> DataFrame | None:
        """``state`` (trace ``trace``'s value) cut to the rows whose ``column`` is a value that
        ``probe_column`` of node ``probe`` can hold this step (with NULL if ``null_matches``), as
        a local relation; None when those values are unknown or the lookup too big. ``side``
        records the rows as that side of a join term, for ``candidate_keys`` downstream."""
        dtype = key_type(state, column)
        if dtype is None or dtype != key_type(self.value(probe), probe_column):
            return None
        values = self.candidate_keys(probe, probe_column)
        if values is None:
            return None
        found = self._lookup(trace, state, column, values if null_matches else values - {None})
        if found is None:
            return None
        df, table = found
        if side is not None:
            self._sides[side] = table
        return df

    def candidate_keys(self, node_id: str, column: str) -> Keys | None:
        """A superset of the values ``column`` of node ``node_id`` holds this step, found on the
        driver without a Spark job (None: unknown). Input changes are held on the driver; a
        filter, a negation or a renaming keeps a column's values, a plus unites them, and a join
        term's column comes from one of its sides (a delta, or state narrowed already)."""
        memo = (node_id, column)
        if memo not in self._keys:
            self._keys[memo] = None  # (a cycle cannot happen in a DAG; this only guards)
            self._keys[memo] = self._derive(self.circuit[node_id], column)
        return self._keys[memo]

    def _derive(self, node: Node, column: str) -> Keys | None:
        """The operator's ``narrow`` kernel (below, named by its IR operator); none: unknown."""
        derive = operator(node.op).kernel(NARROW)
        return derive(self, node, column) if derive is not None else None

    def _lookup(self, trace_id: str, state: DataFrame, column: str, values: Keys
                ) -> tuple[DataFrame, pa.Table] | None:
        """The rows of trace ``trace_id`` (read by Spark as ``state``) whose ``column`` is one of
        ``values`` (NULL matches NULL): a local relation with ``state``'s schema, and the same rows
        as a Table. None when the lookup would decode more than ``max_decoded_rows`` rows, finds
        more than ``max_found_rows``, or the trace has no files."""
        if trace_id not in self._files:
            self._files[trace_id] = self.files_of(trace_id)
        files = self._files[trace_id]
        if files is None or column not in files.schema.names:
            return None
        if files.admitted_rows(column, list(values)) > self.policy.max_decoded_rows:
            return None
        table = files.lookup(column, list(values)).select(state.columns)
        if table.num_rows > self.policy.max_found_rows:
            return None
        self.lookups += 1
        # (an empty lookup too: ``state`` may be a read not made yet, ``lazy.LazyFrame``)
        return from_arrow(self.spark, table, state.schema), table


def key_type(df: DataFrame, column: str) -> str | None:
    """``column``'s Spark type name if narrowing may look it up, else None."""
    dtype = dict(df.dtypes).get(column)
    return dtype if dtype in KEY_TYPES else None


# ---- how each operator's column values follow from its inputs' (``Operator.kernels["narrow"]``) --

def input_keys(n: Narrowing, node: Node, column: str) -> Keys | None:
    """An input's change is held on the driver: its values."""
    value = n.value(node.id)
    return local_values(value, column, n.policy.max_keys) if is_local(value) else None


def same_keys(n: Narrowing, node: Node, column: str) -> Keys | None:
    """A filter or a negation keeps its input's values."""
    return n.candidate_keys(node.inputs[0], column)


def plus_keys(n: Narrowing, node: Node, column: str) -> Keys | None:
    """A plus unites its inputs' values."""
    parts = [n.candidate_keys(i, column) for i in node.inputs]
    return None if any(p is None for p in parts) else frozenset().union(*parts)  # type: ignore[arg-type]


def map_keys(n: Narrowing, node: Node, column: str) -> Keys | None:
    """A selected plain column keeps its source column's values; a computed one is unknown."""
    expr = dict(node.param("columns", ())).get(column)
    try:
        source = plain_column(expr, n.value(node.inputs[0]).columns) if expr is not None else None
    except NotLocal:
        return None
    return n.candidate_keys(node.inputs[0], source) if source is not None else None


def join_keys(n: Narrowing, node: Node, column: str) -> Keys | None:
    """A join term's column comes from one of its sides: a delta, or state narrowed already."""
    for pos, outs in enumerate((node.param("left_out", ()), node.param("right_out", ()))):
        source = next((src for src, out in outs if out == column), None)
        if source is not None:
            table = n._sides.get((node.id, pos))
            return table_values(table, source, n.policy.max_keys) if table is not None else \
                n.candidate_keys(node.inputs[pos], source)
    return None
