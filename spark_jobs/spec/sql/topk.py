"""Top-k: ``ORDER BY ... LIMIT k`` and ``ROW_NUMBER()/RANK()/DENSE_RANK() OVER (PARTITION BY ... ORDER
BY ...)`` filtered by ``<= k`` in the enclosing query."""
from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from .errors import SqlError

if TYPE_CHECKING:
    from .binder import Binder, Relation


def bind_order_limit(binder: "Binder", rel: "Relation", order: exp.Order, limit: exp.Expression) -> "Relation":
    raise SqlError("ORDER BY ... LIMIT k (top-k) is not supported yet", limit)


def bind_ranked(binder: "Binder", sel: exp.Select, rel: "Relation", windows: list[exp.Window],
                names_needed: bool) -> "Relation":
    raise SqlError("window functions (top-k) are not supported yet", windows[0])
