"""Window assignment: each row, once per time window it falls in (``aggregate.window``).

Why an operator of its own: a windowed aggregate is this linear operator followed by the
ordinary aggregate grouped by ``(window_start, window_end, group_by...)``, so every incremental
form of the aggregate (running totals, touched groups, insert-only extrema) applies unchanged.

Params: ``column`` (a timestamp), ``size_us``, ``slide_us`` (microseconds; tumbling: slide =
size). Output: ``window_start``, ``window_end`` (timestamps), then the input's columns. The
semantics are Spark's ``window()``: a row with time t is in every window ``[start, start +
size)`` with ``start`` a multiple of ``slide`` from 1970-01-01 00:00 UTC and ``start <= t <
start + size``; a row whose time is NULL is in no window. Linear (each row maps to rows of the
same weight), so it is its own incremental version (Theorem 3.3) and keeps no state.

Floors (``ir/bounds.py``): a window ends after every row it holds, so ``window_end`` of a future
change is above the floor of the time column (+1 µs), and ``window_start`` above it minus the
size: an aggregate grouped by window drops a window's state once the watermark passes its end.
"""
from __future__ import annotations

from spark_jobs.ir.bounds import Floor, Floors
from spark_jobs.ir.graph import Circuit, Node, make_node
from spark_jobs.ir.operator import INPUTS, LINEAR, Operator, register
from spark_jobs.ir.ops.linear import rule_linear, same_on_the_change
from spark_jobs.spec.time import WINDOW_COLUMNS, WindowSpec

KERNELS = "spark_jobs.executor.kernels.window"


def spec_of(node: Node) -> WindowSpec:
    return WindowSpec(node.param("column"), int(node.param("size_us")), int(node.param("slide_us")))


def _floor(circuit: Circuit, node: Node, column: str, floors: Floors) -> Floor | None:
    window = spec_of(node)
    if column in WINDOW_COLUMNS:
        time = floors.of(node.inputs[0], window.column)
        if time is None:
            return None
        return time.shifted(1 if column == "window_end" else 1 - window.size_us, window.slide_us)
    return floors.of(node.inputs[0], column)


WINDOW = register(Operator(
    "window_assign", arity=1, linearity=LINEAR, symbol="window", positive=INPUTS, insert_only=INPUTS,
    summary="each row once per time window [start, end) holding its time (Spark's window())",
    incremental=rule_linear, delta_form=same_on_the_change, floor=_floor,
    kernels={"spark": f"{KERNELS}:spark_window", "arrow": f"{KERNELS}:arrow_window"}))


def add_window_assign(circuit: Circuit, node_id: str, source: str, window: WindowSpec, origin: str,
                      **params: object) -> str:
    """Add the window assignment of ``source`` (the one lowering of a YAML ``aggregate.window``
    and of SQL's ``GROUP BY window(...)``); its id. ``params``: extra ones (a SQL node's ``sql``)."""
    node = make_node(node_id, "window_assign", [source], WINDOW_COLUMNS + circuit[source].columns, origin=origin,
                     column=window.column, size_us=window.size_us, slide_us=window.slide_us, **params)
    return circuit.add(node).id
