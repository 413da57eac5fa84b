"""Every place a circuit holds Spark SQL text, with the line and the relation the text reads.

Both checks of expressions walk this one list: the validator on sqlglot's parse
(``validate.py``) and the check on Spark's own parse before a step (``executor/spark/parse_check.py``),
so a new kind of SQL text in the spec has to be declared once to be checked twice: a node's texts
by its op's ``sites`` hook (``spec/ops/<op>.py``). The places:

- ``filter``: ``where``; ``select``/``map``: each column's expression; ``aggregate``: each
  aggregate's argument (all of these also inside recursive bodies);
- ``sql``: every expression of the query's plan that Spark receives (the author's text with
  column references replaced, ``spec/sql/text.py``): computed columns, WHERE/ON/HAVING
  conditions, join residuals; at the query's line;
- expectations (on inputs and outputs): ``row_condition`` with ``condition_parser: spark``,
  which Great Expectations hands to Spark as a filter.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from .model import CircuitSpec, Expectation, NodeSpec
from .node_ops import node_op

ROW_CONDITION = "row_condition"
CONDITION_PARSER = "condition_parser"


@dataclass(frozen=True)
class ExpressionSite:
    """One SQL text: where it is (``label``, ``line``), what it is (``what``), and ``reads``, the
    input or node whose columns it sees (``kind`` "node": the node's input; "expectation": the
    input or view the expectation is declared on)."""

    label: str
    line: int
    what: str
    text: str
    reads: str
    kind: str  # "node" | "expectation"


def node_sites(label: str, node: NodeSpec, lookup: Callable[[str], tuple[str, ...] | None] | None = None,
               known: tuple[str, ...] = ()) -> Iterator[ExpressionSite]:
    """The SQL texts of one node (not of its body), by its op's ``sites`` hook (``spec/ops/<op>.py``);
    ``lookup``: the columns of the circuit's relations (None inside a recursive body)."""
    op = node_op(node.op)
    if op is not None and op.sites is not None:
        yield from op.sites(label, node, lookup, known)


def sql_sites(label: str, node: NodeSpec, lookup: Callable[[str], tuple[str, ...] | None],
              known: tuple[str, ...]) -> Iterator[ExpressionSite]:
    """The texts an sql node hands to Spark (none when the query does not bind: validation says why)."""
    from .sql import SqlError, plan as P
    from .sql.node import bind_node

    try:
        rel = bind_node(node.sql, lookup, known)
    except SqlError:
        return
    line, texts = node.line_of("query"), []
    for r in P.walk(rel):
        if isinstance(r, P.Map):
            texts += [e for _, e in r.exprs if not _is_column(e)]
        elif isinstance(r, P.Filter):
            texts.append(r.where)
        elif isinstance(r, P.Join):
            texts += [t for t in (r.left_only, r.right_only, r.mixed) if t]
        elif isinstance(r, P.Semi) and r.residual:
            texts.append(r.residual)
    for text in dict.fromkeys(texts):
        yield ExpressionSite(label, line, "query expression", text, "", "node")


def _is_column(text: str) -> bool:
    return text.startswith("`") and text.endswith("`") and text.count("`") == 2


def expectation_sites(owner: str, expectations: tuple[Expectation, ...]) -> Iterator[ExpressionSite]:
    """Row conditions of expectations (the ones ``condition_problem`` accepts the form of)."""
    for exp in expectations:
        text = exp.kwargs.get(ROW_CONDITION)
        if isinstance(text, str) and condition_problem(exp) is None:
            yield ExpressionSite(owner, exp.line, f"{exp.name}: {ROW_CONDITION}", text, owner, "expectation")


def condition_problem(exp: Expectation) -> str | None:
    """Why an expectation's row condition cannot be checked (None when it has none or is fine)."""
    if ROW_CONDITION not in exp.kwargs:
        return None
    if not isinstance(exp.kwargs.get(ROW_CONDITION), str):
        return f"{exp.name}: {ROW_CONDITION} must be a Spark SQL expression (a string)"
    if exp.kwargs.get(CONDITION_PARSER) != "spark":
        return (f"{exp.name}: a {ROW_CONDITION} needs '{CONDITION_PARSER}: spark' (the condition is a "
                f"Spark SQL expression, checked like every expression of the circuit)")
    return None


def expression_sites(spec: CircuitSpec, skip: frozenset[str] = frozenset()) -> Iterator[ExpressionSite]:
    """Every SQL text of ``spec``; nodes (labels) in ``skip`` and their bodies are left out."""
    columns: list = []  # resolved once, when an sql node needs its relations' columns

    def lookup(name: str) -> tuple[str, ...] | None:
        if not columns:
            from .columns import resolve

            columns.append(resolve(spec, skip)[0].columns)
        return columns[0].get(name)

    def visit(nodes: dict[str, NodeSpec], prefix: str) -> Iterator[ExpressionSite]:
        for name, node in nodes.items():
            label = prefix + name
            if label in skip:
                continue
            yield from node_sites(label, node, None if prefix else lookup, tuple(spec.inputs) + tuple(spec.nodes))
            yield from visit(node.body, label + ".")

    yield from visit(spec.nodes, "")
    for inp in spec.inputs.values():
        yield from expectation_sites(inp.name, inp.expectations)
    for out in spec.outputs.values():
        yield from expectation_sites(out.name, out.expectations)
