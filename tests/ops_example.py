"""A new stateful operator in ONE module (a test fixture, not shipped): the largest value per group.

It shows what an operator declares (docs/contributing/adding-an-operator.md) and that nothing
outside it needs an edit, on every surface: its YAML form (``op: top1`` in a circuit file: schema
fragment, loading, output columns and types, translation to IR), its IR facts and incremental
rule, and its kernels for both engines. A shipped operator splits the same parts over its modules
by layer: ``spec/ops/top1.py`` (the YAML form), ``ir/ops/top1.py`` (the IR operator and the
translation), ``executor/kernels/top1.py`` (the kernels).

- ``top1`` (query circuit): per group of ``group_by``, the row with the largest ``value`` column
  (ties: the largest row). Params: group_by, value.
- ``top1_touched`` (incremental circuit; inputs: the delta, the integral of the input): recompute
  only the groups the delta touches from the integral; its state is its previous output per
  group, so the old row of a touched group is retracted without recomputing it.
"""
from __future__ import annotations

from typing import Any

from spark_jobs.executor.engine import StateUpdate
from spark_jobs.ir.builder import Builder
from spark_jobs.ir.graph import Circuit, Node
from spark_jobs.ir.graph import make_node
from spark_jobs.ir.operator import ALWAYS, NONLINEAR, Operator, State, register, unregister
from spark_jobs.spec import node_ops
from spark_jobs.spec.columns import Issue, missing
from spark_jobs.spec.model import NodeSpec
from spark_jobs.spec.node_ops import REF, Loading, NodeOp, column_list


def rule_top1(b: Builder, node: Node, deltas: list[str]) -> str:
    """Δtop1: the touched groups recomputed from the integral (I x, this step's included)."""
    (dx,) = deltas
    return b.add(node.with_(op="top1_touched", inputs=(dx, b.integral(dx))))


def _groups(circuit: Circuit, node: Node) -> tuple[str, ...]:
    return tuple(node.param("group_by"))


# ---- kernels (engine libraries imported inside, as a shipped operator's kernels would) ------------

def _best_spark(df: Any, group_by: tuple[str, ...], value: str) -> Any:
    """The top row per group of a Z-set DataFrame (positive rows only), weight 1."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from spark_jobs.executor.spark.zset import WEIGHT, col, consolidate

    rows = consolidate(df).where(col(WEIGHT) > 0)
    cols = [c for c in rows.columns if c != WEIGHT]
    order = Window.partitionBy(*[col(g) for g in group_by]).orderBy(*[col(c).desc() for c in [value, *cols]])
    return rows.withColumn("__r", F.row_number().over(order)).where("__r = 1").select(
        *[col(c) for c in cols], F.lit(1).cast("long").alias(WEIGHT))


def spark_top1(s: Any, node: Node) -> Any:
    return _best_spark(s.value(node.inputs[0]), tuple(node.param("group_by")), node.param("value"))


def spark_top1_touched(s: Any, node: Node) -> Any:
    from spark_jobs.executor.spark.zset import WEIGHT, col, consolidate, restrict

    delta, integral = s.args(node)
    group_by = tuple(node.param("group_by"))
    new = _best_spark(restrict(integral, delta, group_by, group_by, False), group_by, node.param("value"))
    prev = s.state.read(node.id)
    parts = [new]
    if prev is not None:
        old = restrict(prev, delta, group_by, group_by, False)
        parts.append(old.select(*[col(c) for c in new.columns if c != WEIGHT], (-col(WEIGHT)).alias(WEIGHT)))
    out = consolidate(parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1]))
    s.update(node.id, StateUpdate("append", out, group_by, sort_by=group_by))
    return out


def _best_arrow(table: Any, group_by: tuple[str, ...], value: str) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_jobs.executor.arrow.zsets import consolidate

    rows = consolidate(table)
    rows = rows.filter(pc.greater(rows.column("_weight"), 0))
    cols = [c for c in rows.column_names if c != "_weight"]
    ordered = rows.sort_by([(c, "descending", "at_end") for c in [value, *cols]]).to_pylist()
    seen, best = set(), []
    for r in ordered:
        key = tuple(r[g] for g in group_by)
        if key not in seen:
            seen.add(key)
            best.append({**r, "_weight": 1})
    return pa.Table.from_pylist(best, schema=rows.schema)


def arrow_top1(s: Any, node: Node) -> Any:
    return _best_arrow(s.engine.table(s.value(node.inputs[0])), tuple(node.param("group_by")), node.param("value"))


def arrow_top1_touched(s: Any, node: Node) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_jobs.executor.arrow.zsets import consolidate, negate, semi

    delta, integral = s.args(node)
    delta = s.engine.table(delta)
    group_by = tuple(node.param("group_by"))
    keys = pc.unique(delta.column(group_by[0])).to_pylist()
    touched = semi(integral.rows_for(group_by[0], keys), delta, group_by, group_by)
    parts = [_best_arrow(touched, group_by, node.param("value"))]
    trace = s.engine.trace(node.id)
    if trace is not None:
        old = semi(trace.lookup(group_by[0], keys).select(parts[0].column_names), delta, group_by, group_by)
        parts.append(negate(old.cast(parts[0].schema)))
    out = consolidate(pa.concat_tables(parts))
    s.update(node.id, StateUpdate("append", out, group_by, sort_by=group_by))
    return out


TOP1 = Operator(
    "top1", arity=1, linearity=NONLINEAR, symbol="top1", positive=ALWAYS, consolidated=True,
    summary="the row with the largest value per group", incremental=rule_top1,
    kernels={"spark": spark_top1, "arrow": arrow_top1})

TOP1_TOUCHED = Operator(
    "top1_touched", arity=2, linearity=NONLINEAR, symbol="top1(touched)", consolidated=True,
    summary="recompute the top row of the groups the delta touches",
    state=State("previous top row per group", keys=_groups, update_reads="output"),
    lookup=lambda node, position: tuple(node.param("group_by")) if position == 1 else None,
    uses=lambda c, n, p: f"integrated input of top1 {n.origin!r}",
    kernels={"spark": spark_top1_touched, "arrow": arrow_top1_touched})


# ---- its YAML form: `op: top1` with `input`, `group_by` and `value` -------------------------------

def load_top1(raw: dict, loading: Loading) -> dict[str, Any]:
    """``value`` is a field of its own: kept in ``extra`` (``input`` and ``group_by`` are common)."""
    value = raw.get("value")
    return {"extra": {"value": value if isinstance(value, str) else ""}}


def top1_columns(node: NodeSpec, lookup: Any, known: tuple[str, ...]) -> tuple[tuple[str, ...] | None, list[Issue]]:
    """The input's columns; the groups and the value must be input columns."""
    src = lookup(node.input or "")
    if src is None:
        return None, []
    issues = missing(node.group_by, src, "group_by", f"input '{node.input}'")
    issues += missing((node.extra["value"],), src, "value", f"input '{node.input}'")
    return src, issues


def top1_from_yaml(c: Circuit, n: NodeSpec, cols: dict, ctx: Any) -> Node:
    """The translation to IR (a shipped op keeps it in its IR module)."""
    return c.add(make_node(n.name, "top1", [n.input], cols[n.name], is_set=True, group_by=n.group_by,
                           value=n.extra["value"]))


YAML_TOP1 = NodeOp(
    "top1", 190, "The row with the largest value per group: {input, group_by: [cols], value: col}.",
    {"input": REF, "group_by": column_list("a list of column names (the groups)"),
     "value": {"type": "string", "minLength": 1, "title": "the column whose largest value is kept"}},
    top1_columns, "tests.ops_example:top1_from_yaml", required=("input", "group_by", "value"), load=load_top1,
    types=lambda typer, label, node, scope: scope.get(node.input))


def install() -> None:
    """Register the operators (a shipped module does this at import, found by ``ir/ops`` and
    ``spec/ops``)."""
    register(TOP1)
    register(TOP1_TOUCHED)
    node_ops.register(YAML_TOP1)


def uninstall() -> None:
    unregister("top1")
    unregister("top1_touched")
    node_ops.unregister("top1")
