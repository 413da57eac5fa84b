"""Every row expression of a circuit with the Arrow schema of the rows it sees, for the tests.

Input schemas come from the circuit's declared types; a node's output schema follows its op
(a select's computed column takes the type the compiler gives it, which the random tests check
against Spark; aggregates take Spark's result types; joins take ``columns.join_layout``). An
``op: sql`` node's expressions are the ones its plan hands to Spark (``spec.sites``); they read
input columns, join columns renamed with a prefix (``l3_l_suppkey``) and aggregate results
(``sum``, ``sum_2``: doubles here, as every summed column of the example circuits is).
"""
from __future__ import annotations

import re

import pyarrow as pa

from spark_jobs.executor.arrow.compiler import compile_expression
from spark_jobs.executor.arrow.compiler.sql_types import SparkType, decimal, to_arrow
from spark_jobs.executor.sources.spark_types import parse_type
from spark_jobs.spec import sql_check
from spark_jobs.spec.columns import join_layout
from spark_jobs.spec.model import CircuitSpec, NodeSpec
from spark_jobs.spec.sites import expression_sites as spec_sites

PASS_THROUGH = ("filter", "distinct", "delay", "integrate", "differentiate", "antijoin")
SET_OPS = ("union", "union_all", "difference", "intersect")


def _arrow(type_text: str) -> pa.DataType:
    dt = parse_type(type_text)
    name = dt.simpleString()
    if name.startswith("decimal"):
        return to_arrow(decimal(dt.precision, dt.scale))
    return to_arrow(SparkType(name))


def _aggregate_type(func: str, arg: pa.DataType | None) -> pa.DataType:
    """Spark's result type of ``func`` over ``arg`` (count: bigint; sum/avg widen)."""
    if func == "count":
        return pa.int64()
    assert arg is not None
    if func in ("min", "max"):
        return arg
    if pa.types.is_decimal(arg):
        extra = 10 if func == "sum" else 4
        return pa.decimal128(min(38, arg.precision + extra), min(38, arg.scale + (4 if func == "avg" else 0)))
    if func == "sum" and pa.types.is_integer(arg):
        return pa.int64()
    return pa.float64()


def node_schemas(spec: CircuitSpec) -> dict[str, pa.Schema]:
    """Output schema of every input and node (recursive bodies included, by name)."""
    schemas: dict[str, pa.Schema] = {
        name: pa.schema([(c.name, _arrow(c.type)) for c in inp.columns]) for name, inp in spec.inputs.items()}
    pending: dict[str, NodeSpec] = {}
    outputs: dict[str, str] = {}
    for name, node in spec.nodes.items():
        pending[name] = node
        for body_name, body_node in node.body.items():
            pending[body_name] = body_node
        if node.body:
            outputs[name] = node.outputs[0]
    while pending:
        progress = False
        for name in list(pending):
            schema = _schema_of(pending[name], schemas, outputs.get(name))
            if schema is not None:
                schemas[name] = schema
                del pending[name]
                progress = True
        if not progress:
            raise AssertionError(f"cannot type nodes {sorted(pending)}")
    return schemas


def _schema_of(node: NodeSpec, schemas: dict[str, pa.Schema], output: str | None) -> pa.Schema | None:
    if node.body:  # an iterate node's loop variable is typed as its init (its body reads it)
        return schemas.get(node.input) if node.input else schemas.get(output or "")
    if node.op == "sql":
        return pa.schema([])  # its expressions are typed by ``_sql_sites``
    refs = node.references
    if any(r not in schemas for r in refs[:1 if node.op in SET_OPS else None]):
        return None
    first = schemas[refs[0]]
    if node.op in PASS_THROUGH or node.op in SET_OPS:
        return first
    if node.op in ("select", "map"):
        return pa.schema([(out, compile_expression(text, first).arrow_type) for out, text in node.columns])
    if node.op in ("join", "product"):
        right = schemas[refs[1]]
        layout = join_layout(tuple(first.names), tuple(right.names), node.right or "", node.on, node.left_on,
                             node.right_on)
        return pa.schema([(out, first.field(src).type) for src, out in layout.left_out] +
                         [(out, right.field(src).type) for src, out in layout.right_out])
    if node.op == "topk":  # the input's rows, and the rank (Spark's int) when it is emitted
        topk = node.extra.get("topk")
        rank = topk.rank_column if topk is not None else None
        return pa.schema(list(first) + ([pa.field(rank, pa.int32())] if rank else []))
    if node.op == "aggregate":
        window = [(c, first.field(node.window.column).type) for c in ("window_start", "window_end")] \
            if node.window is not None else []
        fields = window + [(g, first.field(g).type) for g in node.group_by]
        for agg in node.aggregates:
            arg = compile_expression(agg.arg, first).arrow_type if agg.arg else None
            fields.append((agg.name, _aggregate_type(agg.func, arg)))
        return pa.schema(fields)
    raise AssertionError(f"op {node.op} is not typed here")


def expression_sites(spec: CircuitSpec) -> list[tuple[str, str, pa.Schema]]:
    """(node and field, expression text, schema of the rows it sees) of every row expression."""
    schemas = node_schemas(spec)
    nodes = dict(spec.nodes)
    for node in spec.nodes.values():
        nodes.update(node.body)
    sites = []
    for name, node in nodes.items():
        source = schemas.get(node.input or "")
        if node.op == "filter" and node.where:
            sites.append((f"{name}.where", node.where, source))
        if node.op in ("select", "map"):
            sites += [(f"{name}.columns.{out}", text, source) for out, text in node.columns]
        if node.op == "aggregate":
            sites += [(f"{name}.aggregates.{a.name}", a.arg, source) for a in node.aggregates if a.arg]
    return sites + _sql_sites(spec)


def _sql_sites(spec: CircuitSpec) -> list[tuple[str, str, pa.Schema]]:
    inputs: dict[str, pa.DataType] = {}
    for inp in spec.inputs.values():
        for c in inp.columns:
            inputs.setdefault(c.name, _arrow(c.type))

    def typed(name: str) -> pa.DataType:
        base = name
        while base not in inputs and re.match(r"^[a-z]+\d*_", base):
            base = re.sub(r"^[a-z]+\d*_", "", base, count=1)
        if base in inputs:
            return inputs[base]
        if re.fullmatch(r"(sum|avg)(_\d+)?", name):
            return pa.float64()
        if re.fullmatch(r"count(_\d+)?", name):
            return pa.int64()
        raise AssertionError(f"cannot type column {name!r} of an sql node")

    sites = []
    for site in spec_sites(spec):
        if site.what == "query expression":
            names = dict.fromkeys(sql_check.check(site.text).columns)
            schema = pa.schema([(n, typed(n)) for n in names])
            sites.append((f"{site.label}.query", site.text, schema))
    return sites
