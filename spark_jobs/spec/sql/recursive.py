"""WITH RECURSIVE: a recursive CTE as the least fixed point of its base UNION its step."""
from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from .errors import SqlError

if TYPE_CHECKING:
    from .binder import Binder, Relation
    from .scope import Scope


def bind_recursive_ctes(binder: "Binder", with_: exp.With, outer: "Scope | None", ctes: dict) -> dict:
    raise SqlError("WITH RECURSIVE is not supported yet", with_)
