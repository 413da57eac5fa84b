"""Top-k in SQL: ``ORDER BY ... LIMIT k``, and a ranking window filtered by ``<= k``.

Why its own module: the two query shapes that mean "the first k rows of an order" are bound to
one plan node (``plan.TopK``, lowered to the ``topk`` operator) and everything else that uses
a window is refused with the construct named:

- ``SELECT ... ORDER BY <keys> LIMIT k``: a global top-k, ``row_number() <= k`` over the
  output. A view is a set of rows: the order itself is not kept.
- ``SELECT ..., row_number() | rank() | dense_rank() OVER (PARTITION BY ... ORDER BY ...) AS rn``
  in a subquery or CTE is a *ranking* (``TopK`` with ``k`` None); the query reading it must filter
  ``rn <= k``, ``rn < k``, ``k >= rn``, ``k > rn`` or ``rn = 1`` in its WHERE, which gives ``k``.
  Other conjuncts on ``rn`` stay ordinary filters. A ranking left without such a filter is refused.

Ties of ``row_number()`` (rows equal on ORDER BY) are broken by the remaining columns, ascending,
NULLS FIRST (see ``ir/ops/topk.py``), so the kept rows are reproducible where Spark would pick any.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from . import plan as P
from .errors import SqlError, describe
from .exprs import column_sql, is_literal_int
from .scope import Field, fresh

if TYPE_CHECKING:
    from .binder import Binder, Relation

RANKS = {exp.RowNumber: "row_number", exp.Rank: "rank", exp.DenseRank: "dense_rank"}
_LIMIT_FORMS = "'rn <= k', 'rn < k', 'k >= rn', 'k > rn' or 'rn = 1'"


def _ordered(item: exp.Expression) -> tuple[exp.Expression, bool, bool]:
    """(expression, desc, nulls_first) of an ORDER BY item; the parser fills in Spark's NULLs
    default (first in ascending order, last in descending order)."""
    if not isinstance(item, exp.Ordered):
        return item, False, True
    desc = bool(item.args.get("desc"))
    nulls_first = item.args.get("nulls_first")
    return item.this, desc, (not desc) if nulls_first is None else bool(nulls_first)


def sort_expressions(order: exp.Order) -> list[exp.Expression]:
    """The ORDER BY expressions. Over a grouped query, those holding an aggregate (``ORDER BY
    count(*) DESC LIMIT k``) or naming an input column the SELECT list does not show are computed
    by the grouped query as hidden columns (``aggregates.bind_aggregate``); the top-k sorts on
    them and drops them: aggregate, then top-k."""
    return [_ordered(item)[0] for item in order.expressions]


def _sort_keys(binder: "Binder", rel: "Relation", ordered: list[exp.Expression], what: str,
               taken: set[str]) -> tuple[list[tuple[str, str]], list[tuple[str, bool, bool]]]:
    """The ORDER BY items as (hidden computed columns, (column, desc, nulls_first)): a plain
    column or an ordinal names a column of ``rel``; any other expression becomes a column."""
    computed: list[tuple[str, str]] = []
    keys: list[tuple[str, bool, bool]] = []
    visible = [f for f in rel.fields if not f.hidden and f.star]
    for item in ordered:
        node, desc, nulls_first = _ordered(item)
        ordinal = is_literal_int(node)
        if id(node) in binder.order_columns:  # an aggregate the grouped query computed
            column = binder.order_columns[id(node)]
        elif ordinal is not None:
            if not 1 <= ordinal <= len(visible):
                raise SqlError(f"ORDER BY position {ordinal} is not in the SELECT list (1 to {len(visible)})", node)
            column = visible[ordinal - 1].column
        elif isinstance(node, exp.Column):
            column = rel.scope.resolve(node).column
        else:
            column = fresh(f"__order{len(computed)}", taken)
            taken.add(column)
            computed.append((column, binder.bind_expr(node, rel.scope, what)))
        keys.append((column, desc, nulls_first))
    return computed, keys


def order_limit(binder: "Binder", q: exp.Expression, rel: "Relation", limit: exp.Expression) -> "Relation":
    """``ORDER BY ... LIMIT k`` on ``rel``: the first k rows of the order (a global top-k)."""
    from .binder import Relation

    k = is_literal_int(limit.expression) if isinstance(limit, exp.Limit) else None
    if k is None or k < 0:
        raise SqlError("LIMIT takes a non-negative integer literal (the k of a top-k)", limit)
    order = q.args["order"]
    cols = list(rel.plan.columns)
    computed, keys = _sort_keys(binder, rel, order.expressions, "ORDER BY", set(cols))
    source = rel.plan
    if computed:
        source = P.Map(tuple(cols) + tuple(c for c, _ in computed), "ORDER BY (sort keys)", source,
                       tuple((c, column_sql(c)) for c in cols) + tuple(computed))
    text = f"ORDER BY {describe(order, 40)[9:]} LIMIT {k}"
    top: P.Rel = P.TopK(source.columns, text, source, (), tuple(keys), k, "row_number", None)
    sort_only = set(binder.order_columns.values())  # aggregates computed for the order only
    shown = [c for c in cols if c not in sort_only]
    if computed or len(shown) < len(cols):
        top = P.Map(tuple(shown), text, top, tuple((c, column_sql(c)) for c in shown))
    return Relation(top, [f for f in rel.fields if f.column not in sort_only])


def ranking(binder: "Binder", sel: exp.Select, rel: "Relation", items: list[exp.Expression],
            window: exp.Window, names_needed: bool) -> "Relation":
    """A SELECT whose list holds one ranking window: the other items, then ``TopK`` with k None
    (``limit_rankings`` sets k from the enclosing WHERE), then the items in their order."""
    from .binder import Relation, unalias

    func = RANKS.get(type(window.this))
    if func is None:
        raise SqlError(f"window function '{describe(window)}': only row_number(), rank() and dense_rank() "
                       f"filtered by <= k (a top-k) are supported", window)
    if window.args.get("spec") is not None:
        raise SqlError(f"a window frame in '{describe(window)}' is not supported (a ranking has none)",
                       window.args["spec"])
    order = window.args.get("order")
    if order is None or not order.expressions:
        raise SqlError(f"'{describe(window)}' needs ORDER BY inside OVER (...): it is what ranks the rows", window)
    if sel.args.get("distinct"):
        raise SqlError("SELECT DISTINCT with a window function is not supported", sel.args["distinct"])
    at = next(i for i, item in enumerate(items) if unalias(item)[0] is window)
    rank_name = unalias(items[at])[1]
    if rank_name is None:
        if names_needed:
            raise SqlError(f"give '{describe(window)}' a name ('... AS rn'): the enclosing query filters it with "
                           f"<= k", items[at])
        rank_name = f"_c{at}"
    bind = lambda e, what: binder.bind_expr(e, rel.scope, what)  # noqa: E731
    before, after = (binder.projection(rel, part, names_needed, bind).plan for part in (items[:at], items[at + 1:]))
    names = list(before.columns) + list(after.columns)
    binder.unique_names(names + [rank_name], items[at])
    taken = set(names) | {rank_name}
    computed: list[tuple[str, str]] = []  # partition and order keys as columns of the top-k's input

    selected = {sql: name for name, sql in before.exprs + after.exprs}  # type: ignore[attr-defined]

    def column(node: exp.Expression, base_name: str, what: str) -> str:
        """A key as a column of the top-k's input: a selected item computing it, else a new one."""
        sql = binder.bind_expr(node, rel.scope, what)
        if sql in selected:
            return selected[sql]
        name = fresh(f"{base_name}{len(computed)}", taken)
        taken.add(name)
        computed.append((name, sql))
        selected[sql] = name
        return name

    partition = tuple(column(node, "__part", "PARTITION BY") for node in window.args.get("partition_by") or [])
    keys = []
    for item in order.expressions:
        node, desc, nulls_first = _ordered(item)
        keys.append((column(node, "__order", "the window's ORDER BY"), desc, nulls_first))
    exprs = before.exprs + after.exprs + tuple(computed)  # type: ignore[attr-defined]
    source = P.Map(tuple(n for n, _ in exprs), f"{describe(window, 50)} (inputs)", rel.plan, exprs)
    top = P.TopK(source.columns + (rank_name,), describe(window, 60), source, partition, tuple(keys), None, func,
                 rank_name)
    binder.rankings[id(top)] = window
    at = len(before.columns)
    out = names[:at] + [rank_name] + names[at:]
    final = P.Map(tuple(out), f"SELECT ... {describe(window, 40)} AS {rank_name}", top,
                  tuple((c, column_sql(c)) for c in out))
    return Relation(final, [Field(None, n, n) for n in out])


def limit_rankings(binder: "Binder", rel: "Relation", conds: list[exp.Expression]
                   ) -> tuple["Relation", list[exp.Expression]]:
    """``rel`` with its ranking limited by the WHERE conjuncts ``conds`` that bound its rank
    column (``rn <= k`` and the like: k is the smallest bound), and the conjuncts left."""
    from .binder import Relation

    plan = rel.plan
    top = plan.input if isinstance(plan, P.Map) else None
    if not isinstance(top, P.TopK) or top.k is not None or id(top) not in binder.rankings:
        return rel, conds
    bounds, rest = [], []
    for cond in conds:
        k = _bound(cond, rel, top.rank_column)
        (bounds if k is not None else rest).append(cond if k is None else k)
    if not bounds:
        return rel, conds
    k = max(0, min(bounds))
    limited = P.TopK(top.columns, f"{top.sql} <= {k}", top.input, top.partition_by, top.order_by, k, top.rank,
                     top.rank_column)
    return Relation(P.Map(plan.columns, plan.sql, limited, plan.exprs), rel.fields), rest


def _bound(cond: exp.Expression, rel: "Relation", rank_column: str | None) -> int | None:
    """k when ``cond`` says rank <= k (in one of the forms of ``_LIMIT_FORMS``), else None."""
    while isinstance(cond, exp.Paren):
        cond = cond.this
    forms = {exp.LTE: 0, exp.LT: -1, exp.GTE: 0, exp.GT: -1, exp.EQ: 0}
    if type(cond) not in forms:
        return None
    left, right = cond.this, cond.expression
    if isinstance(cond, (exp.GTE, exp.GT)):
        left, right = right, left  # k >= rn
    k = is_literal_int(right)
    if k is None or not isinstance(left, exp.Column) or (isinstance(cond, exp.EQ) and k != 1):
        return None
    found = rel.scope.find(left)
    if len(found) != 1 or found[0].column != rank_column:
        return None
    return k + forms[type(cond)]


def unlimited(binder: "Binder", plan: P.Rel) -> None:
    """Refuse a plan holding a ranking no WHERE limited (a window used for something else)."""
    if isinstance(plan, P.TopK) and plan.k is None:
        window = binder.rankings[id(plan)]
        raise SqlError(f"window function '{describe(window)}': a ranking is supported as a top-k only: the query "
                       f"that reads it must filter it with {_LIMIT_FORMS.replace('rn', plan.rank_column or 'rn')} "
                       f"in its WHERE; other uses of window functions are not supported", window)
    for child in P.inputs_of(plan):
        unlimited(binder, child)
