"""An ``sql`` node as the spec layer sees it: its output columns and its problems, as issues of
the ``query`` field (``query.<line>``: the YAML line of the query line at fault)."""
from __future__ import annotations

from typing import Callable, Sequence

from .binder import bind_query
from .errors import SqlError
from .parse import ParsedQuery
from .plan import Rel

Cols = tuple[str, ...]


def bind_node(parsed: ParsedQuery, lookup: Callable[[str], Cols | None], known: Sequence[str]) -> Rel:
    """The node's plan; ``lookup`` gives the columns of an input or node (exact circuit name).

    Bound once: the plan (or the binder's refusal) is kept on ``parsed.plans`` with the columns
    of the relations the binder looked up, and every later reader (the type, expression and time
    checks, the IR's lowering) gets that same plan back while those columns are the same."""
    if parsed.error is not None:
        raise parsed.error
    for asked, found in parsed.plans.values():
        if all(lookup(name) == cols for name, cols in asked):
            break
    else:
        seen: dict[str, Cols | None] = {}

        def recording(name: str) -> Cols | None:
            seen[name] = lookup(name)
            return seen[name]

        try:
            found = _bind(parsed, recording, known)
        except SqlError as exc:
            found = exc
        parsed.plans[len(parsed.plans)] = (tuple(seen.items()), found)
    if isinstance(found, SqlError):
        raise found
    return found


def _bind(parsed: ParsedQuery, lookup: Callable[[str], Cols | None], known: Sequence[str]) -> Rel:
    by_lower = {k.lower(): k for k in known}

    def find(name: str) -> tuple[str, Cols] | None:
        canonical = name if name in known else by_lower.get(name.lower())
        cols = lookup(canonical) if canonical is not None else None
        return (canonical, cols) if canonical is not None and cols is not None else None

    assert parsed.tree is not None
    return bind_query(parsed.tree, find, known, parsed.text, parsed.one_row)


def where(error: SqlError) -> tuple[str, str]:
    """(field key for the line, message prefix) of a query problem."""
    if error.position is None:
        return "query", "query: "
    p = error.position
    return f"query.{p.line}", f"query line {p.line}, column {p.col}: "


def sql_node_columns(parsed: ParsedQuery | None, tables: Sequence[str], lookup: Callable[[str], Cols | None],
                     known: Sequence[str]) -> tuple[Cols | None, list[tuple[str, str]]]:
    """The node's columns (None when unknown) and its problems as (field key, message).

    A query reading a relation whose columns are unknown (itself broken) is not checked: its
    problems would only echo that relation's.
    """
    if parsed is None:
        return None, []
    if parsed.error is None and any(t in known and lookup(t) is None for t in tables):
        return None, []
    try:
        plan = bind_node(parsed, lookup, known)
    except SqlError as exc:
        key, prefix = where(exc)
        return None, [(key, prefix + exc.message)]
    return plan.columns, []
