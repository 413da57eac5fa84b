"""IN / EXISTS / NOT IN / NOT EXISTS conjuncts of WHERE, as semi- and antijoins.

- ``EXISTS (q)`` / ``NOT EXISTS (q)``: a semi/antijoin with q. A correlated q (its WHERE reads the
  query around it) is decorrelated: its equalities between an outer and an inner expression are
  the join keys, its other correlated conjuncts a residual condition of the match; its own
  conjuncts filter it first.
- ``x IN (q)``: a semijoin on x = q's column (several columns for ``(a, b) IN (q)``); NULL never
  matches, which is all a WHERE needs (an IN that is NULL drops the row like FALSE). A correlated q
  is an EXISTS with one more equality.
- ``x NOT IN (q)``: unlike NOT EXISTS, NULLs matter: the row is kept when q is empty; otherwise
  only if x is not NULL, no value of q equals x, and q holds no NULL (``plan.NotIn``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from . import plan as P
from .errors import SqlError, describe
from .exprs import aggregates_of, columns_of, walk
from .joins import Pair, semi
from .scope import Scope

if TYPE_CHECKING:
    from .binder import Binder, Frame, Relation


def bind_predicate(binder: "Binder", rel: "Relation", cond: exp.Expression, outer: Scope | None,
                   ctes: dict) -> "Relation":
    from .binder import subquery_predicate

    found = subquery_predicate(cond)
    assert found is not None
    negated, node = found
    if isinstance(node, exp.Exists):
        return _exists(binder, rel, node, negated, outer, ctes)
    return _in(binder, rel, node, negated, outer, ctes)


def _unwrap(q: exp.Expression) -> exp.Expression:
    while isinstance(q, exp.Subquery) and not q.args.get("limit") and not q.args.get("order"):
        q = q.this
    return q


def _frame(binder: "Binder", q: exp.Expression, rel: "Relation", outer: Scope | None, ctes: dict
           ) -> "Frame | None":
    """The subquery's FROM + WHERE with correlated conjuncts set apart (a plain SELECT only)."""
    if isinstance(q, exp.Select) and q.args.get("with_") is None:
        return binder.frame(q, Scope(rel.fields, outer), ctes, correlate=True)
    return None


def _require_plain(q: exp.Select, what: str) -> None:
    bad = None
    if q.args.get("group") is not None or q.args.get("having") is not None:
        bad = "GROUP BY/HAVING"
    elif any(aggregates_of(e) for e in q.expressions):
        bad = "aggregates"
    elif q.args.get("limit") is not None:
        bad = "LIMIT"
    elif any(isinstance(w, exp.Window) for e in q.expressions for w in walk(e)):
        bad = "window functions"
    if bad:
        raise SqlError(f"a correlated {what} subquery with {bad} is not supported: only its WHERE may read the "
                       f"outer query (equalities become join keys)", q)


def _exists(binder: "Binder", rel: "Relation", node: exp.Exists, anti: bool, outer: Scope | None,
            ctes: dict) -> "Relation":
    q = _unwrap(node.this)
    text = ("NOT EXISTS " if anti else "EXISTS ") + describe(node.this, 50)
    frame = _frame(binder, q, rel, outer, ctes)
    if frame is not None and frame.correlated:
        _require_plain(q, "EXISTS")
        return _correlated(binder, rel, frame, [], anti, text)
    if frame is not None:
        sub = binder.finish_select(q, frame.rel, ctes, names_needed=False)
    else:
        sub = binder.query(q, Scope(rel.fields, outer), ctes, names_needed=False)
    return semi(binder, rel, sub, [], [], anti, text)


def _in(binder: "Binder", rel: "Relation", node: exp.In, negated: bool, outer: Scope | None,
        ctes: dict) -> "Relation":
    probe = node.this
    probes = list(probe.expressions) if isinstance(probe, exp.Tuple) else [probe]
    q = _unwrap(node.args["query"])
    text = ("NOT IN " if negated else "IN ") + describe(node.args["query"], 50)
    frame = _frame(binder, q, rel, outer, ctes)
    if frame is not None and frame.correlated:
        if negated:
            raise SqlError("NOT IN with a correlated subquery is not supported: write NOT EXISTS (which, "
                           "unlike NOT IN, ignores NULLs)", node)
        _require_plain(q, "IN")
        items = list(q.expressions)
        if any(isinstance(i, exp.Star) or (isinstance(i, exp.Column) and isinstance(i.this, exp.Star))
               for i in items):
            raise SqlError("an IN subquery selects the columns to compare, not *", q)
        if len(items) != len(probes):
            raise SqlError(f"IN compares {len(probes)} value(s) with a subquery of {len(items)} column(s)", q)
        from .binder import unalias

        pairs = [(p, unalias(i)[0]) for p, i in zip(probes, items)]
        return _correlated(binder, rel, frame, pairs, False, text)
    if frame is not None:
        sub = binder.finish_select(q, frame.rel, ctes, names_needed=False)
    else:
        sub = binder.query(q, Scope(rel.fields, outer), ctes, names_needed=False)
    columns = sub.plan.columns
    if len(columns) != len(probes):
        raise SqlError(f"IN compares {len(probes)} value(s) with a subquery of {len(columns)} column(s)",
                       node.args["query"])
    if negated:
        if len(probes) > 1:
            raise SqlError("NOT IN with several columns is not supported (its NULL rules compare column by "
                           "column): write NOT EXISTS with equalities, deciding how NULLs should behave", node)
        from .binder import Relation

        rel, key = binder.key_column(rel, probes[0], "probe")
        plan = P.NotIn(rel.plan.columns, text, rel.plan, sub.plan, key, columns[0])
        return Relation(plan, rel.fields)
    pairs = [(p, exp.Column(this=exp.Identifier(this=c, quoted=True))) for p, c in zip(probes, columns)]
    return semi(binder, rel, sub, pairs, [], False, text)


def _correlated(binder: "Binder", rel: "Relation", frame: "Frame", pairs: list[Pair], anti: bool,
                text: str) -> "Relation":
    """A semi/antijoin of ``rel`` with a correlated subquery's frame: outer = inner equalities are
    keys; other correlated conjuncts are the residual. Names resolve inner first, as in SQL."""
    inner = Scope(frame.rel.fields)
    here = Scope(rel.fields)

    def side(col: exp.Column) -> str:
        if inner.find(col):
            return "S"
        if here.find(col):
            return "L"
        raise SqlError(f"'{col.sql(dialect='spark')}' reads a query two levels out: only the query right around "
                       f"a subquery may be referenced", col)

    keys = list(pairs)
    residual: list[exp.Expression] = []
    for c in frame.correlated:
        node = c
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.EQ):
            a = {side(x) for x in columns_of(node.this)}
            b = {side(x) for x in columns_of(node.expression)}
            if a == {"L"} and b == {"S"}:
                keys.append((node.this, node.expression))
                continue
            if a == {"S"} and b == {"L"}:
                keys.append((node.expression, node.this))
                continue
        for x in columns_of(c):
            side(x)
        residual.append(c)

    return semi(binder, rel, frame.rel, keys, residual, anti, text, inner_first=True)
