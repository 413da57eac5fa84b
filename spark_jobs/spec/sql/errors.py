"""Problems in a SQL query, with the position inside the query they are about.

The binder raises ``SqlError`` on the first problem it cannot get past (a query is small; one
precise message beats a cascade). The position is a (line, column) inside the query text, both
1-based; the spec layer turns it into the YAML line of that query line when it can.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from spark_jobs.errors import DbspError


@dataclass(frozen=True)
class Position:
    line: int  # 1-based line inside the query
    col: int  # 1-based column inside that line


class SqlError(DbspError, ValueError):
    """A query that cannot be compiled: what is wrong, and where in the query."""

    def __init__(self, message: str, where: "exp.Expression | Position | None" = None) -> None:
        super().__init__(message)
        self.message = message
        self.position = where if isinstance(where, Position) or where is None else position_of(where)


def position_of(node: exp.Expression) -> Position | None:
    """Where ``node`` starts in the query: its own token position, else its first descendant's.

    sqlglot records positions on identifiers, functions and literals; for a larger construct
    (a join, a subquery) the first positioned token inside it is where a reader looks.
    """
    best: tuple[int, Position] | None = None
    while node.parent is not None and not any("line" in (getattr(s, "_meta", None) or {}) for s in node.walk()):
        node = node.parent  # a node sqlglot made up (e.g. a rewritten function): where its parent is
    for sub in node.walk():
        meta = getattr(sub, "_meta", None) or {}
        if "line" in meta and "start" in meta:
            width = max(0, meta.get("end", meta["start"]) - meta["start"])
            pos = Position(meta["line"], max(1, meta["col"] - width))  # sqlglot's col is the token's end
            if best is None or meta["start"] < best[0]:
                best = (meta["start"], pos)
    return best[1] if best else None


def describe(node: exp.Expression, limit: int = 60) -> str:
    """A short Spark SQL rendering of ``node`` for messages."""
    text = " ".join(node.sql(dialect="spark").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
