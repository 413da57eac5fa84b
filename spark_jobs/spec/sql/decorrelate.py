"""Subqueries anywhere an expression may stand: scalar subqueries, EXISTS and IN under OR, NOT,
CASE and in the SELECT list, correlated or not, as joins on a *domain* (the classic decorrelation).

A subquery ``S`` reading columns ``K`` of the query around it (relation ``R``) is evaluated once
per distinct value of ``K``, not once per row:

- the domain ``D = distinct(π_K R)``, its columns renamed ``d``;
- ``S`` is bound with ``D`` as one more member of its FROM (a fallback: a name the subquery's own
  tables have shadows ``D``'s, as in SQL), so its correlated conditions become join keys with
  ``D`` (equalities) or filters after the product (the rest), and ``d`` is an extra output
  column, and an extra GROUP BY key of an aggregate;
- an aggregate without GROUP BY (one row per ``d``, even when no row matches): ``D``'s rows are
  added to its input once more, every other column NULL and a marker column NULL; ``count(*)``
  counts the marker, every other aggregate's argument is ``CASE WHEN marker IS NOT NULL THEN arg
  END`` -- so an empty group is ``count`` 0 and NULL for the others, and expressions over them
  (``coalesce(max(x), 0)``) see exactly those values;
- ``S``'s result is joined back to ``R`` on ``K = d``, NULL matching NULL.

Uses: a scalar subquery (one aggregate, no GROUP BY) is that join, one value per row of ``R``;
``EXISTS (S)`` is a flag: ``R`` rows whose ``K`` is in ``distinct(π_d S)`` TRUE, the others FALSE
(a semijoin and its antijoin); ``x IN (S)`` is three flags -- a non-NULL match of ``x``, ``S``
non-empty, ``S`` holding a NULL -- combined as SQL's three-valued IN: TRUE on a match; FALSE when
``S`` is empty; NULL when ``x`` is NULL or ``S`` has a NULL; FALSE otherwise. ``NOT IN`` is its NOT.
An uncorrelated subquery is the same with no ``K`` (the domain is one row). Everything becomes the
circuit's maps, joins, distincts, aggregates and sums: incremental like the rest.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from sqlglot import exp

from . import plan as P
from .errors import SqlError, describe
from .exprs import aggregates_of, column_sql
from .scope import RECORDERS, Field, Scope, fresh

if TYPE_CHECKING:
    from .binder import Binder, Relation

FLAG = "__flag__"  # qualifier of the hidden columns holding EXISTS / IN values
_TOKENS = itertools.count(1)


@dataclass
class Correlation:
    """A subquery SELECT being bound against a domain."""

    token: int
    domain: "Relation"  # D: one column per outer column the subquery reads
    pad: bool  # an aggregate without GROUP BY: every domain row yields a row
    marker: str | None = None  # the pad's marker column (set by the frame)
    out: list[str] = field(default_factory=list)  # the output columns holding d, by domain index


def _unwrap(q: exp.Expression) -> exp.Expression:
    while isinstance(q, exp.Subquery) and not q.args.get("limit") and not q.args.get("order"):
        q = q.this
    return q


def is_grouped(q: exp.Select) -> bool:
    having = q.args.get("having")
    return q.args.get("group") is not None or any(
        aggregates_of(e) for e in list(q.expressions) + ([having.this] if having is not None else []))


def domain_fields(rel: "Relation", token: int, used: set[int] | None) -> tuple["Relation", list[str]]:
    """D over the visible columns of ``rel`` (only the indexes ``used``, when given): its relation
    (fields: fallback copies of ``rel``'s) and the ``rel`` columns it reads, by index."""
    from .binder import Relation

    columns: list[str] = []
    for f in rel.fields:
        if not f.hidden and f.column not in columns:
            columns.append(f.column)
    keep = [i for i in range(len(columns)) if used is None or i in used]
    taken: set[str] = set()
    names = {}
    for i in keep:
        names[i] = fresh(f"__d{i}", taken)
        taken.add(names[i])
    fields = [replace(f, column=names[columns.index(f.column)], fallback=(token, columns.index(f.column)),
                      star=False) for f in rel.fields if not f.hidden and columns.index(f.column) in keep]
    exprs = tuple((names[i], column_sql(columns[i])) for i in keep)
    cols = tuple(names[i] for i in keep)
    plan = P.Distinct(cols, "(the outer values a subquery reads)", P.Map(cols, "(the outer values a subquery reads)",
                                                                        rel.plan, exprs))
    return Relation(plan, fields), [columns[i] for i in keep]


@dataclass
class Dependent:
    rel: "Relation"  # the subquery's result, plus the domain columns ``d``
    values: list[str]  # its own output columns
    d: list[str]  # its domain columns (in the order of ``k``)
    k: list[str]  # the outer relation's columns they equal


def dependent(binder: "Binder", q: exp.Expression, rel: "Relation", outer: Scope | None, ctes: dict,
              what: str, allow: bool = True) -> Dependent:
    """``q`` bound for every row of ``rel``: decorrelated on a domain when it reads ``rel``."""
    inner = _unwrap(q)
    if isinstance(inner, exp.Select) and inner.args.get("with_") is None:
        token = next(_TOKENS)
        domain, _ = domain_fields(rel, token, None)
        recorder: set[tuple[int, int]] = set()
        RECORDERS.append(recorder)
        try:
            binder.correlations[id(inner)] = Correlation(token, domain, pad=not inner.args.get("group") and
                                                         is_grouped(inner))
            binder.query(inner, outer, ctes, names_needed=False)
        finally:
            # by identity: list.remove compares sets by value, and an enclosing subquery's
            # recorder may hold the same names (it then removed the wrong one: a crash)
            del RECORDERS[next(i for i, r in enumerate(RECORDERS) if r is recorder)]
            binder.correlations.pop(id(inner), None)
        used = {i for t, i in recorder if t == token}
        _pass_on(rel, used)
        if used:
            if not allow:
                raise SqlError(f"a correlated subquery in {what} is not supported (in a grouped query, correlate "
                               f"subqueries of WHERE, or group in a subquery first)", q)
            if inner.args.get("limit") is not None or inner.args.get("offset") is not None:
                raise SqlError(f"a correlated subquery with LIMIT in {what} is not supported", q)
            domain, k = domain_fields(rel, token, used)
            corr = Correlation(token, domain, pad=not inner.args.get("group") and is_grouped(inner))
            binder.correlations[id(inner)] = corr
            try:
                sub = binder.query(inner, outer, ctes, names_needed=False)
            finally:
                binder.correlations.pop(id(inner), None)
            values = [c for c in sub.plan.columns if c not in corr.out]
            return Dependent(sub, values, list(corr.out), k)
    elif _reads_outer(binder, inner, rel, outer, ctes):
        raise SqlError(f"a correlated subquery with a set operation or WITH in {what} is not supported", q)
    sub = binder.query(q if not isinstance(q, exp.Subquery) else q.this, outer, ctes, names_needed=False)
    if isinstance(q, exp.Subquery):
        sub = binder.order_limit(q, sub)
    return Dependent(sub, list(sub.plan.columns), [], [])


def _pass_on(rel: "Relation", used: set[int]) -> None:
    """Columns of ``rel`` a subquery reads that are themselves an enclosing domain's copies (a
    reference two levels out): that domain reads them too."""
    columns: list[str] = []
    for f in rel.fields:
        if not f.hidden and f.column not in columns:
            columns.append(f.column)
    for f in rel.fields:
        if f.fallback is not None and not f.hidden and columns.index(f.column) in used:
            for recorder in RECORDERS:
                recorder.add(f.fallback)


def _reads_outer(binder: "Binder", q: exp.Expression, rel: "Relation", outer: Scope | None, ctes: dict) -> bool:
    try:
        binder.query(q, outer, ctes, names_needed=False)
    except SqlError:
        try:
            binder.query(q, Scope(rel.fields, outer), ctes, names_needed=False)
        except SqlError:
            return False
        return True
    return False


# ---- the pieces a frame and a SELECT add for a correlation ------------------------------------

def pad(rel: "Relation", corr: Correlation) -> "Relation":
    """``rel`` plus one row per domain row (every other column NULL, the marker NULL)."""
    from .binder import Relation

    marker = fresh("__m", set(rel.plan.columns))
    corr.marker = marker
    cols = rel.plan.columns + (marker,)
    real = P.Map(cols, "(rows of the subquery, marked)", rel.plan,
                 tuple((c, column_sql(c)) for c in rel.plan.columns) + ((marker, "1"),))
    dcol = {f.fallback[1]: f.column for f in corr.domain.fields if f.fallback}
    here = {f.column: f.fallback[1] for f in rel.fields if f.fallback and f.fallback[0] == corr.token}
    exprs = tuple((c, column_sql(dcol[here[c]]) if c in here else "NULL") for c in rel.plan.columns)
    padding = P.Map(cols, "(one empty group per outer value)", corr.domain.plan, exprs + ((marker, "NULL"),))
    plan = P.SetOp(cols, "(the subquery's rows, and an empty group per outer value)", "union", True, real, padding)
    return Relation(plan, rel.fields + [Field(FLAG, marker, marker, hidden=True)])


def domain_columns(rel: "Relation", corr: Correlation) -> list[tuple[int, str]]:
    """(domain index, column of ``rel``) of the domain's columns, by index."""
    found: dict[int, str] = {}
    for f in rel.fields:
        if f.fallback and f.fallback[0] == corr.token:
            found.setdefault(f.fallback[1], f.column)
    return sorted(found.items())


def append_domain(out: "Relation", sources: list[tuple[int, str]], corr: Correlation) -> "Relation":
    """The SELECT's projection with the domain columns appended (``sources``: the projection
    input's columns holding them)."""
    from .binder import Relation

    m = out.plan
    assert isinstance(m, P.Map)
    taken = set(m.columns)
    extra = []
    for i, src in sources:
        name = fresh(f"__d{i}", taken)
        taken.add(name)
        extra.append((name, column_sql(src)))
    corr.out = [n for n, _ in extra]
    plan = P.Map(m.columns + tuple(corr.out), m.sql, m.input, m.exprs + tuple(extra))
    return Relation(plan, out.fields + [Field(FLAG, n, n, hidden=True) for n in corr.out])


# ---- uses ----------------------------------------------------------------------------------------

def _join_back(rel: "Relation", dep: Dependent, value: str, text: str) -> tuple["Relation", str]:
    from .binder import Relation, SCALAR

    name = fresh("scalar", set(rel.plan.columns))
    plan = P.Join(rel.plan.columns + (name,), text, "inner", rel.plan, dep.rel.plan, tuple(dep.k), tuple(dep.d),
                  tuple((c, c) for c in rel.plan.columns), ((value, name),), null_safe=True)
    return Relation(plan, rel.fields + [Field(SCALAR, name, name, hidden=True)]), name


def scalar(binder: "Binder", rel: "Relation", sub: exp.Subquery, outer: Scope | None, ctes: dict, what: str,
           allow: bool) -> tuple["Relation", str]:
    q = _unwrap(sub)
    if not (isinstance(q, exp.Select) and q.args.get("group") is None and q.args.get("having") is None
            and q.args.get("limit") is None and len(q.expressions) == 1
            and (aggregates_of(q.expressions[0].this if isinstance(q.expressions[0], exp.Alias) else q.expressions[0])
                 or _one_row(q))):
        raise SqlError("a scalar subquery must be one aggregate without GROUP BY, HAVING or LIMIT (so it is "
                       "exactly one row), e.g. (SELECT avg(x) FROM t WHERE ...); one that may return no row or "
                       "several (a plain column) is not supported", sub)
    dep = dependent(binder, sub, rel, outer, ctes, what, allow)
    (value,) = dep.values
    return _join_back(rel, dep, value, f"(scalar subquery) {describe(sub, 40)}")


def _one_row(q: exp.Select) -> bool:
    """A SELECT without FROM, WHERE or DISTINCT: exactly one row (per outer row, when correlated)."""
    return q.args.get("from_") is None and q.args.get("where") is None and not q.args.get("distinct") \
        and not q.args.get("joins")


def mark(rel: "Relation", keys: "Relation", lkeys: list[str], rkeys: list[str], text: str
         ) -> tuple["Relation", str]:
    """``rel`` plus a boolean column: does the row's ``lkeys`` equal some ``rkeys`` of ``keys``
    (NULL matching NULL)? A semijoin (TRUE) plus its antijoin (FALSE)."""
    from .binder import Relation

    name = fresh("flag", set(rel.plan.columns))
    exprs = tuple((c, column_sql(c)) for c in rkeys) or (("__one", "1"),)  # no keys: "keys is not empty"
    cols = tuple(c for c, _ in exprs)
    distinct = P.Distinct(cols, f"(keys) {text}", P.Map(cols, f"(keys) {text}", keys.plan, exprs))
    cols = rel.plan.columns + (name,)
    parts = []
    for anti in (False, True):
        semi = P.Semi(rel.plan.columns, f"({'no ' if anti else ''}match) {text}", rel.plan, distinct, tuple(lkeys),
                      tuple(rkeys), anti, null_safe=True)
        parts.append(P.Map(cols, f"({'FALSE' if anti else 'TRUE'}) {text}", semi,
                           tuple((c, column_sql(c)) for c in rel.plan.columns) + ((name, "false" if anti else "true"),)))
    plan = P.SetOp(cols, text, "union", True, parts[0], parts[1])
    return Relation(plan, rel.fields + [Field(FLAG, name, name, hidden=True)]), name


def exists(binder: "Binder", rel: "Relation", node: exp.Exists, outer: Scope | None, ctes: dict, what: str,
           allow: bool) -> tuple["Relation", str]:
    dep = dependent(binder, node.this, rel, outer, ctes, what, allow)
    return mark(rel, dep.rel, dep.k, dep.d, "EXISTS " + describe(node.this, 50))


def in_value(binder: "Binder", rel: "Relation", node: exp.In, outer: Scope | None, ctes: dict, what: str,
             allow: bool) -> tuple["Relation", str]:
    """``x IN (q)`` as a three-valued column (see the module docstring)."""
    from .binder import Relation

    probe = node.this
    if isinstance(probe, exp.Tuple):
        raise SqlError(f"(a, b) IN (subquery) in {what} is not supported: its NULL rules compare column by column; "
                       f"write EXISTS with equalities", node)
    dep = dependent(binder, node.args["query"], rel, outer, ctes, what, allow)
    if len(dep.values) != 1:
        raise SqlError(f"IN compares 1 value with a subquery of {len(dep.values)} columns", node.args["query"])
    (y,) = dep.values
    text = "IN " + describe(node.args["query"], 50)
    rel, x = binder.key_column(rel, probe, "probe")
    q = dep.rel
    nonnull = Relation(P.Filter(q.plan.columns, f"(non-NULL values) {text}", q.plan, f"{column_sql(y)} IS NOT NULL"),
                       q.fields)
    nulls = Relation(P.Filter(q.plan.columns, f"(NULL values) {text}", q.plan, f"{column_sql(y)} IS NULL"), q.fields)
    rel, match = mark(rel, nonnull, [x] + dep.k, [y] + dep.d, f"(a value equal) {text}")
    rel, some = mark(rel, q, dep.k, dep.d, f"(a value) {text}")
    rel, null = mark(rel, nulls, dep.k, dep.d, f"(a NULL value) {text}")
    name = fresh("in", set(rel.plan.columns))
    m, s, n, xx = (column_sql(c) for c in (match, some, null, x))
    value = (f"CASE WHEN {m} THEN true WHEN NOT {s} THEN false WHEN {xx} IS NULL OR {n} THEN CAST(NULL AS BOOLEAN) "
             f"ELSE false END")
    plan = P.Map(rel.plan.columns + (name,), text, rel.plan,
                 tuple((c, column_sql(c)) for c in rel.plan.columns) + ((name, value),))
    return Relation(plan, rel.fields + [Field(FLAG, name, name, hidden=True)]), name


def negated(rel: "Relation", col: str) -> tuple["Relation", str]:
    """``rel`` plus ``NOT col`` (x NOT IN (...), whose text has no IN of its own to replace)."""
    from .binder import Relation

    name = fresh("not_in", set(rel.plan.columns))
    plan = P.Map(rel.plan.columns + (name,), "NOT IN", rel.plan,
                 tuple((c, column_sql(c)) for c in rel.plan.columns) + ((name, f"NOT {column_sql(col)}"),))
    return Relation(plan, rel.fields + [Field(FLAG, name, name, hidden=True)]), name


def lateral(binder: "Binder", left: "Relation", node: exp.Lateral, outer: Scope | None, ctes: dict) -> "Relation":
    """``left, LATERAL (S) AS s``: S once per distinct value of the ``left`` columns it reads (on a
    domain, as any correlated subquery), joined back on them; an aggregate without GROUP BY is one
    row per ``left`` row (``count`` 0 on no match), any other S drops the rows it has none for."""
    from .binder import Relation

    sub = node.this
    alias = node.args.get("alias")
    dep = dependent(binder, sub, left, outer, ctes, "a LATERAL subquery")
    visible = [f for f in dep.rel.fields if not f.hidden and f.star and f.fallback is None]
    names = [c.name for c in alias.columns] if alias is not None and alias.columns else [f.name for f in visible]
    if len(names) != len(visible):
        raise SqlError(f"the LATERAL subquery lists {len(names)} column names for {len(visible)} columns", alias)
    binder.unique_names(names, alias)
    qualifier = alias.name.lower() if alias is not None and alias.name else None
    taken = set(left.plan.columns)
    right_out, fields = [], []
    for f, name in zip(visible, names):
        col = fresh(name, taken, qualifier)
        taken.add(col)
        right_out.append((f.column, col))
        fields.append(Field(qualifier, name, col))
    plan = P.Join(left.plan.columns + tuple(c for _, c in right_out), f"LATERAL {describe(sub, 40)}", "inner",
                  left.plan, dep.rel.plan, tuple(dep.k), tuple(dep.d), tuple((c, c) for c in left.plan.columns),
                  tuple(right_out), null_safe=True)
    return Relation(plan, left.fields + fields)

