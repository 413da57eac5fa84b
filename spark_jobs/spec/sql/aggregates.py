"""GROUP BY / aggregates / HAVING: a pre-projection, the aggregate, a post-projection.

The pre-projection computes exactly the group keys and aggregate arguments as columns (so the
aggregate's state holds nothing else); the aggregate is the IR's (count, sum, avg, min, max;
count, sum and avg also with DISTINCT: recomputed for the groups a change touches); the SELECT
list and HAVING are then expressions over group keys and aggregate results. A SELECT expression may use a GROUP BY expression as a whole (``GROUP BY a + b`` lets
``SELECT (a + b) * 2``), as SQL does; any other column outside an aggregate is refused.
GROUP BY without aggregates is a DISTINCT of the keys.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from . import plan as P
from .errors import SqlError, describe, position_of
from .exprs import (AGGREGATES, aggregates_of, check_row_expression, column_sql, function_name,
                    is_literal_int, is_star, quoted, render, star_fields, subqueries_of, walk)
from .scope import Field, Scope, fresh
from .time_windows import STRUCT, group_by_window, spelled

if TYPE_CHECKING:
    from .binder import Binder, Relation

_UNSUPPORTED_HINT = ("supported aggregates: count(*), count(x), sum, avg, min, max; count, sum and avg also "
                     "with DISTINCT")


def bind_aggregate(binder: "Binder", sel: exp.Select, rel: "Relation", ctes: dict, names_needed: bool,
                   corr=None) -> "Relation":
    """``corr``: the subquery is bound on a domain (``decorrelate.py``): its columns are more group
    keys (and outputs); with a pad, every aggregate skips the pad's rows."""
    from .binder import Relation, unalias

    scope = rel.scope
    items = list(sel.expressions)
    star_items = [i for i in items if is_star(i)]
    having = sel.args.get("having")
    group = sel.args.get("group")
    group_items = list(group.expressions) if group is not None else []
    if group is not None:
        for key in ("rollup", "cube", "grouping_sets"):
            if group.args.get(key):
                raise SqlError(f"GROUP BY {key.upper().replace('_', ' ')} is not supported", group)
        for g in group_items:
            if isinstance(g, (exp.Rollup, exp.Cube, exp.GroupingSets)):
                raise SqlError(f"GROUP BY {type(g).__name__.upper().replace('SETS', ' SETS')} is not supported: "
                               f"write one query per grouping and UNION ALL them", g)
    group_text = "GROUP BY " + ", ".join(spelled(g, 30) for g in group_items) if group_items else "(one group)"
    rel, group_items = group_by_window(binder, rel, group_items, items)
    scope = rel.scope
    aliases = {unalias(i)[1].lower(): unalias(i)[0] for i in items if unalias(i)[1]}
    taken: set[str] = set()
    pre: list[tuple[str, str]] = []  # pre-projection (name, expr)
    keys: dict[str, str] = {}  # canonical bound SQL -> key column
    for g in group_items:
        e = g
        n = is_literal_int(g)
        if n is not None:
            if not 1 <= n <= len(items):
                raise SqlError(f"GROUP BY {n}: the SELECT list has {len(items)} item(s)", g)
            e, _ = unalias(items[n - 1])
        elif isinstance(g, exp.Column) and not g.table and not scope.find(g) and g.name.lower() in aliases:
            e = aliases[g.name.lower()]  # GROUP BY an output alias (Spark allows it)
        if aggregates_of(e):
            raise SqlError(f"aggregate '{describe(aggregates_of(e)[0])}' in GROUP BY", g)
        sql = binder.bind_expr(e, scope, "GROUP BY")
        canon = binder.canonical(e, scope)
        if canon in keys:
            continue
        base = _key_name(scope.resolve(e)) if isinstance(e, exp.Column) else _alias_for(e, items) or f"group{len(keys)}"
        name = fresh(base, taken)
        taken.add(name)
        keys[canon] = name
        pre.append((name, sql))
    stars = {id(item): _star_keys(scope, item, keys) for item in star_items}
    domain_keys: list[tuple[int, str]] = []
    marker = None
    if corr is not None:
        from .decorrelate import domain_columns

        for i, col in domain_columns(rel, corr):
            name = fresh(f"__d{i}", taken)
            taken.add(name)
            pre.append((name, column_sql(col)))
            domain_keys.append((i, name))
        if corr.pad:
            marker = fresh("__m", taken)
            taken.add(marker)
            pre.append((marker, column_sql(corr.marker)))

    # aggregates of SELECT and HAVING, each computed once
    aggs: dict[tuple, str] = {}  # (func, distinct, arg sql) -> output column
    agg_rows: list[tuple[str, str, str | None, bool]] = []
    args: dict[str, str] = {}  # arg sql -> pre column
    by_order = [] if corr is not None else _sort_keys_of_groups(binder.order_keys.get(id(sel), []), items)
    if by_order and sel.args.get("distinct"):
        raise SqlError("ORDER BY an aggregate with SELECT DISTINCT: select the aggregate and order by its "
                       "name", by_order[0])
    sources = items + ([having.this] if having is not None else []) + by_order
    for source in sources:
        for call in aggregates_of(source):
            func, distinct, arg = _aggregate_call(call, binder.text)
            arg_sql = None
            if arg is not None:
                nested = aggregates_of(arg)
                if nested:
                    raise SqlError(f"aggregate '{describe(nested[0])}' inside aggregate '{describe(call)}'", nested[0])
                arg_sql = binder.bind_expr(arg, scope, f"the argument of {func}")
                if marker is not None:  # the pad's rows count for nothing
                    arg_sql = f"CASE WHEN {column_sql(marker)} IS NOT NULL THEN ({arg_sql}) END"
            canon = binder.canonical(arg, scope) if arg is not None else None
            sig = (func, distinct, canon)
            if sig in aggs:
                continue
            col = None
            if arg_sql is not None and canon is not None:
                if canon not in args:
                    base = scope.resolve(arg).name if isinstance(arg, exp.Column) else f"{func}_arg"
                    args[canon] = fresh(base, taken)
                    taken.add(args[canon])
                    pre.append((args[canon], arg_sql))
                col = args[canon]
            out = fresh(_alias_for(call, items) or f"{func}{'_distinct' if distinct else ''}", taken)
            taken.add(out)
            aggs[sig] = out
            agg_rows.append((out, func, column_sql(col) if col else (column_sql(marker) if marker else None),
                             distinct))

    key_cols = tuple(keys.values()) + tuple(n for _, n in domain_keys)
    pre_plan = P.Map(tuple(n for n, _ in pre), "(group keys and aggregate arguments)", rel.plan, tuple(pre))
    if agg_rows:
        agg_text = group_text + ": " + ", ".join(f"{f}({'DISTINCT ' if d else ''}{a or '*'})"
                                                 for _, f, a, d in agg_rows)
        agg_plan: P.Rel = P.Aggregate(key_cols + tuple(r[0] for r in agg_rows), agg_text, pre_plan, key_cols,
                                      tuple(agg_rows))
    else:
        agg_plan = P.Distinct(key_cols, group_text + " (no aggregates: distinct keys)", pre_plan)
    out = Relation(agg_plan, [Field(None, c, c) for c in agg_plan.columns])

    def post(node: exp.Expression, what: str) -> str:
        """``node`` over the aggregate's output: aggregates and group expressions by their columns."""
        for w in walk(node):
            if isinstance(w, exp.Window):
                raise SqlError("window functions over a grouped query are not supported", w)
        check_row_expression(node, what, binder.text,
                             skip=lambda n: isinstance(n, exp.AggFunc) or id(n) in binder.scalars)

        def replace(sub: exp.Expression) -> str | None:
            if id(sub) in binder.scalars:
                return column_sql(binder.scalars[id(sub)])
            if isinstance(sub, exp.AggFunc):
                func, distinct, arg = _aggregate_call(sub, binder.text)
                canon = binder.canonical(arg, scope) if arg is not None else None
                return column_sql(aggs[(func, distinct, canon)])
            if isinstance(sub, (exp.Literal, exp.Null, exp.Boolean)):
                return None
            try:
                canon = binder.canonical(sub, scope) if not aggregates_of(sub) else None
            except SqlError:
                canon = None
            if canon is not None and canon in keys:
                return column_sql(keys[canon])
            if isinstance(sub, exp.Column):
                raise SqlError(f"column '{sub.sql(dialect='spark')}' in {what} is neither in GROUP BY nor inside "
                               f"an aggregate", sub)
            return None

        return binder.source.splice(node, replace)

    if having is not None or any(subqueries_of(i) for i in items):
        out = grouped_names(binder, rel, out, keys, domain_keys, corr)
    if having is not None:
        hrel = _attach(binder, out, [having.this], ctes, rel, "HAVING")
        cond = post(having.this, "HAVING")
        out = Relation(P.Filter(hrel.plan.columns, f"HAVING {describe(having.this)}", hrel.plan, cond), hrel.fields)
    out = _attach(binder, out, items, ctes, rel, "the SELECT list of a grouped query")
    result = binder.projection(out, items, names_needed, post, names=scope, stars=stars)
    if by_order:
        result = _with_sort_keys(binder, result, by_order, post)
    if corr is not None:
        from .decorrelate import append_domain

        result = append_domain(result, domain_keys, corr)
    return result


def _star_keys(scope: Scope, item: exp.Expression, keys: dict[str, str]) -> list[tuple[str, str]]:
    """``*`` (or ``t.*``) of a grouped query: the columns it expands to, each of which must be a
    GROUP BY column (``SELECT * FROM t GROUP BY a, b, c`` over ``t(a, b, c)``, as Spark allows),
    as (output name, key column SQL)."""
    out = []
    for f in star_fields(scope, item):
        key = keys.get(render(quoted(f.column)))
        if key is None:
            shown = f"{f.qualifier}.{f.name}" if f.qualifier else f.name
            raise SqlError(f"SELECT {item.sql(dialect='spark')} in a grouped query: column '{shown}' is neither in "
                           f"GROUP BY nor inside an aggregate (list the GROUP BY columns and aggregates)", item)
        out.append((f.name, column_sql(key)))
    return out


def _sort_keys_of_groups(order: list[exp.Expression], items: list[exp.Expression]) -> list[exp.Expression]:
    """The ORDER BY (with LIMIT) expressions the grouped query computes: aggregates, and columns
    that are not output names (``ORDER BY a.k``, ``ORDER BY k`` with ``k`` not selected)."""
    from .binder import unalias

    shown = {(unalias(i)[1] or (i.name if isinstance(i, exp.Column) else "")).lower() for i in items}
    return [e for e in order if aggregates_of(e) or
            (isinstance(e, exp.Column) and (e.table or e.name.lower() not in shown))]


def _with_sort_keys(binder: "Binder", result: "Relation", by_order: list[exp.Expression],
                    post) -> "Relation":
    """The SELECT list's Map with the ORDER BY aggregates as hidden columns, for the top-k above
    (``topk.order_limit`` sorts on them and drops them)."""
    from .binder import Relation

    plan = result.plan
    assert isinstance(plan, P.Map)
    taken = set(plan.columns)
    extra: list[tuple[str, str]] = []
    for i, node in enumerate(by_order):
        name = fresh(f"__order_agg{i}", taken)
        taken.add(name)
        extra.append((name, post(node, "ORDER BY")))
        binder.order_columns[id(node)] = name
    mapped = P.Map(plan.columns + tuple(n for n, _ in extra), plan.sql, plan.input, plan.exprs + tuple(extra))
    return Relation(mapped, result.fields + [Field(None, n, n, hidden=True, star=False) for n, _ in extra])


def grouped_names(binder: "Binder", rel: "Relation", out: "Relation", keys: dict[str, str],
                  domain_keys: list[tuple[int, str]], corr) -> "Relation":
    """The aggregate's output named as the query before grouping names it, for its subqueries:
    a column that is a GROUP BY key by its own names (``t1.b`` is the key column ``b``), an
    enclosing domain's copy by its key (``__dN``); every other column hidden. A subquery of the
    SELECT list or HAVING then correlates on group keys exactly as one of WHERE on columns: it is
    decorrelated on the domain of the groups' keys (``decorrelate.py``)."""
    from dataclasses import replace

    from .binder import Relation

    by_domain = dict(domain_keys)
    fields = []
    for f in rel.fields:
        if f.hidden:
            continue
        if corr is not None and f.fallback is not None and f.fallback[0] == corr.token:
            if f.fallback[1] in by_domain:
                fields.append(replace(f, column=by_domain[f.fallback[1]]))
            continue
        one = Scope([replace(f, unqualified=True, qualifier=None)])
        canon = binder.canonical(exp.Column(this=exp.Identifier(this=f.name)), one)
        if canon in keys:
            fields.append(replace(f, column=keys[canon]))
    return Relation(out.plan, fields + [replace(f, hidden=True) for f in out.fields])


def _attach(binder: "Binder", out: "Relation", items: list[exp.Expression], ctes: dict, rel: "Relation",
            what: str) -> "Relation":
    """``binder.attach_scalars`` on the grouped output; a subquery reading a column that is no
    group key is refused by name (SQL allows only group keys there)."""
    try:
        out, _ = binder.attach_scalars(out, items, ctes, None, what)
    except SqlError as e:
        for item in items:
            for sub in subqueries_of(item):
                for col in sub.find_all(exp.Column):
                    if e.position is not None and position_of(col) == e.position and rel.scope.find(col) \
                            and not out.scope.find(col):
                        raise SqlError(f"column '{col.sql(dialect='spark')}' is read by a subquery in {what} but is "
                                       f"not a GROUP BY column: a grouped query's subqueries may read its group "
                                       f"keys only", col) from None
        raise
    return out


def _aggregate_call(call: exp.AggFunc, text: str | None = None) -> tuple[str, bool, exp.Expression | None]:
    """(function, DISTINCT?, argument or None for count(*)) of a supported aggregate call."""
    func = next((name for cls, name in AGGREGATES.items() if type(call) is cls), None)
    if func is None:
        name = function_name(call, text)
        raise SqlError(f"aggregate function '{name}' is not supported ({_UNSUPPORTED_HINT})", call)
    if isinstance(call.parent, exp.Filter):
        raise SqlError(f"{func}(...) FILTER (WHERE ...) is not supported: aggregate a CASE WHEN instead", call)
    if call.args.get("expressions"):
        raise SqlError(f"{func} takes one argument", call)
    arg = call.this
    distinct = False
    if isinstance(arg, exp.Distinct):
        values = arg.expressions
        if len(values) != 1:
            raise SqlError(f"{func}(DISTINCT ...) of several columns is not supported", call)
        distinct, arg = True, values[0]
        if func in ("min", "max"):
            distinct = False  # the same value
    if isinstance(arg, exp.Star):
        if func != "count" or distinct:
            raise SqlError(f"{func}(*) is not an aggregate; only count(*) is", call)
        return func, False, None
    if arg is None:
        raise SqlError(f"{func}() needs an argument", call)
    return func, distinct, arg


def _key_name(f: Field) -> str:
    """A group key column's name: the column's own, or window_start / window_end for a time
    window's (as a YAML windowed aggregate names them: explain and state bounds read alike)."""
    return f.column if f.qualifier == STRUCT else f.name


def _alias_for(node: exp.Expression, items: list[exp.Expression]) -> str | None:
    """The alias of the SELECT item that is exactly ``node`` (for readable column names)."""
    for item in items:
        if isinstance(item, exp.Alias) and item.this == node:
            return item.alias
    return None
