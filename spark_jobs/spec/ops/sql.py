"""``sql``: one Spark SQL query over the circuit's inputs and nodes, ``{query: "SELECT ..."}``.
Parsed when loaded (``spec/sql``), bound once (``sql.node.bind_node``: the plan is kept on the
node), lowered to IR operators by ``ir/from_sql.py``."""
from __future__ import annotations

import re
from typing import Any, Iterator

from ..columns import Issue, Lookup, reserved
from ..errors import Problem
from ..model import CircuitSpec, NodeSpec
from ..node_ops import Loading, NodeOp, register
from ..sites import ExpressionSite
from ..sql.node import sql_node_columns

_COLUMN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def load(raw: dict, loading: Loading) -> dict[str, Any]:
    """The query parsed (within the file's query budget), and the YAML line of each query line."""
    from ..loader import limited_parse

    query = raw.get("query")
    if not isinstance(query, str):
        return {}
    parsed = limited_parse(query, loading.budget)
    loading.lines.update(query_lines(query, loading.doc.scalars.get(loading.path + ("query",))))
    return {"sql": parsed, "tables": parsed.tables}


def query_lines(query: str, mark: tuple[int, str | None] | None) -> dict[str, int]:
    """YAML line of each line of a query (``query.<n>``), where the YAML style keeps lines apart:
    a literal block (``|``) line by line, a one-line value on its own line; a folded or a quoted
    multi-line value only its first line (YAML joined the rest)."""
    if mark is None:
        return {}
    line, style = mark
    count = query.count("\n") + (0 if query.endswith("\n") else 1)
    if style == "|":
        return {f"query.{i}": line + i for i in range(1, count + 1)}
    if style == ">":
        return {"query.1": line + 1}
    return {"query.1": line}


def columns(node: NodeSpec, lookup: Lookup, known: tuple[str, ...]) -> tuple[tuple[str, ...] | None, list[Issue]]:
    """The SELECT list's names (``known``: the relations a query may name); they obey the rules
    of every other column name (the schema checks those of inputs, ``select`` and ``aggregate``)."""
    cols, found = sql_node_columns(node.sql, node.tables, lookup, known)
    issues = [Issue(key, message) for key, message in found]
    issues += [Issue("query", f"result column '{n}': expected an identifier (letters, digits and _, not starting "
                              f"with a digit; at most 128 characters): rename it with AS")
               for n in cols or () if not _COLUMN_NAME.match(n)]
    return cols, issues + reserved(cols or (), "query")


def types(typer: Any, label: str, node: NodeSpec, scope: dict) -> dict | None:
    return typer.sql_types(label, node, scope)


def sites(label: str, node: NodeSpec, lookup: Lookup | None = None,
          known: tuple[str, ...] = ()) -> Iterator[ExpressionSite]:
    """The texts the query hands to Spark (``sites.sql_sites``); top-level nodes only."""
    from ..sites import sql_sites

    if lookup is not None:
        yield from sql_sites(label, node, lookup, known)


def time_checks(spec: CircuitSpec, name: str, node: NodeSpec, res: Any) -> list[Problem]:
    from ..time_checks import sql_window_columns

    return sql_window_columns(spec, name, node, res)


SQL = register(NodeOp(
    "sql", 180, "One Spark SQL query over the circuit's inputs and nodes: {query: \"SELECT ...\"}.",
    {"query": {"type": "string", "minLength": 1,
               "title": "one Spark SQL query (a string; use a YAML block `|` for several lines)"}},
    columns, "spark_jobs.ir.from_sql:from_yaml", required=("query",), load=load, types=types, sites=sites,
    time_checks=time_checks, in_body=False,
    body_refusal="an sql node cannot be inside a recursive body: write the recursion in the query (WITH RECURSIVE)"))
