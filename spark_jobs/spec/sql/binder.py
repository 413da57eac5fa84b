"""SQL query -> relational plan (``plan.py``), resolving every name, without Spark.

The binder walks the parsed query the way SQL evaluates it: FROM (joins), WHERE, GROUP BY,
HAVING, SELECT, DISTINCT, set operations, ORDER BY/LIMIT. Choices that shape the incremental
circuit are made here:

- inner joins and comma joins are one *join group*: every ON and WHERE conjunct is placed where
  it can first be evaluated: one-table conjuncts filter that table before any join (less state),
  equalities between the joined part and the next table become equi-join keys, the rest filter
  right after the join that makes them computable; a table no key reaches is joined as a product;
- outer joins split their ON condition the same way; conjuncts on the null-supplying side filter
  that side first (it is only matched against), the others stay in the join;
- IN / EXISTS / NOT EXISTS / NOT IN conjuncts of WHERE become semi- and antijoins; correlated
  subqueries are decorrelated on their equalities (other correlated conjuncts stay a residual);
- an uncorrelated scalar subquery must be an aggregate without GROUP BY: it is one row, joined in;
- an aggregate query is a pre-projection (group keys and aggregate arguments as columns), the
  aggregate, and a post-projection; HAVING filters the aggregate's output.

Anything else raises ``SqlError`` naming the construct and where it is.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from sqlglot import exp

from ..errors import did_you_mean, listing
from ..model import WEIGHT
from . import plan as P
from . import topk
from .errors import SqlError, describe
from .exprs import (aggregates_of, and_all, check_row_expression, column_sql, columns_of, conjuncts, is_star,
                    quoted, render, rewrite, star_fields, subqueries_of, walk)
from .scope import Field, Scope, fresh, requalify
from .recursive import bind_recursive, reads
from .text import Source

Lookup = Callable[[str], "tuple[str, tuple[str, ...]] | None"]  # name as written -> (circuit name, columns)

SCALAR = "__scalar__"  # qualifier of the hidden columns that carry scalar subquery values
KEY = "__key__"  # qualifier of hidden computed join keys

_SET_OPS = {exp.Union: "union", exp.Except: "except", exp.Intersect: "intersect"}
_SELECT_REFUSED = {
    "laterals": "LATERAL VIEW", "sort": "SORT BY", "cluster": "CLUSTER BY", "distribute": "DISTRIBUTE BY",
    "windows": "a WINDOW clause", "qualify": "QUALIFY", "into": "INTO", "pivots": "PIVOT",
    "prewhere": "PREWHERE", "connect": "CONNECT BY", "match": "MATCH_RECOGNIZE", "sample": "TABLESAMPLE",
    "settings": "SETTINGS", "format": "FORMAT", "exclude": "SELECT * EXCEPT", "locks": "FOR UPDATE",
}


@dataclass
class Relation:
    """A relation being built: its plan and the names it may be referred to by."""

    plan: P.Rel
    fields: list[Field]

    @property
    def scope(self) -> Scope:
        return Scope(self.fields)


@dataclass
class Frame:
    """A SELECT's FROM and WHERE, before grouping and projection; ``correlated`` are the WHERE
    conjuncts that read the enclosing query (left for an EXISTS/IN to join on)."""

    rel: Relation
    correlated: list[exp.Expression] = field(default_factory=list)


def bind_query(tree: exp.Query, lookup: Lookup, known: Sequence[str], text: str,
               one_row: str | None = None) -> P.Rel:
    """The plan of a whole node query (``text``: as written, for names in messages); its columns
    are the node's output columns. ``one_row``: the input a SELECT without FROM reads its one row
    from (``parse.ParsedQuery.one_row``)."""
    binder = Binder(lookup, known, text, one_row)
    rel = binder.query(tree, None, {}, names_needed=True)
    topk.unlimited(binder, rel.plan)
    for name in rel.plan.columns:
        if name == WEIGHT:
            raise SqlError(f"output column name '{WEIGHT}' is reserved for the Z-set weight: choose another "
                           f"name", tree)
    return rel.plan


class Binder:
    def __init__(self, lookup: Lookup, known: Sequence[str], text: str, one_row: str | None = None) -> None:
        self.lookup = lookup
        self.one_row = one_row
        self.known = list(known)
        self.text = text
        self.source = Source(text)
        self.scalars: dict[int, str] = {}  # id(scalar subquery node) -> the column holding its value
        self.rankings: dict[int, exp.Window] = {}  # id(TopK awaiting its <= k) -> its window (messages)
        self.correlations: dict = {}  # id(SELECT) -> decorrelate.Correlation while it is bound on a domain
        # ORDER BY ... LIMIT k of a SELECT: a grouped query computes the sort keys that are aggregates
        # or input columns as hidden columns (id(SELECT) -> ORDER BY expressions; id(expression) -> column)
        self.order_keys: dict[int, list[exp.Expression]] = {}
        self.order_columns: dict[int, str] = {}

    # ---- queries ---------------------------------------------------------------------------

    def query(self, q: exp.Expression, outer: Scope | None, ctes: dict[str, Relation],
              names_needed: bool) -> Relation:
        """Any query form: parenthesized, WITH, set operation, SELECT; ORDER BY / LIMIT on top."""
        if isinstance(q, exp.Subquery):
            inner = self.query(q.this, outer, ctes, names_needed)
            return self.order_limit(q, inner)
        with_ = q.args.get("with_")
        if with_ is not None:
            ctes = self.ctes(with_, outer, ctes)
        if isinstance(q, exp.SetOperation):
            rel = self.set_operation(q, outer, ctes, names_needed)
        elif isinstance(q, exp.Select):
            if q.args.get("limit") is not None and q.args.get("order") is not None:
                self.order_keys[id(q)] = topk.sort_expressions(q.args["order"])
            rel = self.select(q, outer, ctes, names_needed)
        else:
            raise SqlError(f"{type(q).__name__.upper()} is not supported here: expected a SELECT query", q)
        return self.order_limit(q, rel)

    def ctes(self, with_: exp.With, outer: Scope | None, ctes: dict[str, Relation]) -> dict[str, Relation]:
        new = dict(ctes)
        defined: set[str] = set()
        for cte in with_.expressions:
            name = cte.alias_or_name
            if name.lower() in defined:
                raise SqlError(f"CTE '{name}' is defined twice in one WITH", cte.args.get("alias") or cte)
            defined.add(name.lower())
            if with_.args.get("recursive") and reads(cte.this, name):
                new[name.lower()] = bind_recursive(self, cte, outer, new)
                continue
            listed = bool(cte.args.get("alias") is not None and cte.args["alias"].columns)
            rel = self.query(cte.this, outer, new, names_needed=not listed)
            rel = self.rename_columns(rel, cte.args.get("alias"), f"CTE '{name}'")
            new[name.lower()] = rel
        return new

    def rename_columns(self, rel: Relation, alias: exp.TableAlias | None, what: str) -> Relation:
        """Apply a column list ``name(a, b, ...)`` to a relation's visible columns, by position."""
        names = [c.name for c in alias.columns] if alias is not None and alias.columns else []
        if not names:
            return rel
        visible = [f for f in rel.fields if not f.hidden and f.star]
        if len(names) != len(visible):
            raise SqlError(f"{what} lists {len(names)} column names for {len(visible)} columns", alias)
        self.unique_names(names, alias)
        exprs = tuple((n, column_sql(f.column)) for n, f in zip(names, visible))
        mapped = P.Map(tuple(names), f"{what} ({', '.join(names)})", rel.plan, exprs)
        return Relation(mapped, [Field(None, n, n) for n in names])

    def set_operation(self, q: exp.SetOperation, outer: Scope | None, ctes: dict[str, Relation],
                      names_needed: bool) -> Relation:
        kind = next((k for t, k in _SET_OPS.items() if isinstance(q, t)), None)
        if kind is None:
            raise SqlError(f"set operation {type(q).__name__.upper()} is not supported", q)
        if q.args.get("by_name"):
            raise SqlError(f"{kind.upper()} BY NAME is not supported: match columns by position", q)
        left = self.query(q.this, outer, ctes, names_needed)
        right = self.query(q.expression, outer, ctes, names_needed=False)
        lcols = [f.name for f in left.fields]
        rcols = [f.column for f in right.fields]
        if len(lcols) != len(rcols):
            raise SqlError(f"{kind.upper()} needs the same number of columns on both sides: the left has "
                           f"{len(lcols)} ({listing(lcols)}), the right {len(rcols)}", q.expression)
        right_plan = right.plan
        if tuple(rcols) != tuple(left.plan.columns) or right.plan.columns != tuple(rcols):
            right_plan = P.Map(tuple(lcols), "(columns by position)", right.plan,
                               tuple((n, column_sql(c)) for n, c in zip(lcols, rcols)))
        distinct = bool(q.args.get("distinct"))
        word = {"union": "UNION", "except": "EXCEPT", "intersect": "INTERSECT"}[kind] + ("" if distinct else " ALL")
        plan = P.SetOp(tuple(lcols), word, kind, not distinct, left.plan, right_plan)
        return Relation(plan, [Field(None, n, n) for n in lcols])

    def order_limit(self, q: exp.Expression, rel: Relation) -> Relation:
        """ORDER BY without LIMIT is ignored (a view has no order); LIMIT needs ORDER BY."""
        if q.args.get("offset") is not None:
            raise SqlError("OFFSET is not supported: a view keeps the first k rows of an order "
                           "(ORDER BY ... LIMIT k) or all rows", q.args["offset"])
        limit = q.args.get("limit")
        if limit is None:
            return rel
        order = q.args.get("order")
        if order is None:
            raise SqlError("LIMIT without ORDER BY picks arbitrary rows, so the view would not be a "
                           "function of its inputs: add ORDER BY (with a tie-breaking column)", limit)
        return topk.order_limit(self, q, rel, limit)

    # ---- SELECT ----------------------------------------------------------------------------

    def select(self, sel: exp.Select, outer: Scope | None, ctes: dict[str, Relation],
               names_needed: bool) -> Relation:
        frame = self.frame(sel, outer, ctes, correlate=False)
        return self.finish_select(sel, frame.rel, ctes, names_needed)

    def refuse_unsupported(self, sel: exp.Select) -> None:
        for key, name in _SELECT_REFUSED.items():
            value = sel.args.get(key)
            if value:
                node = value[0] if isinstance(value, list) else value
                raise SqlError(f"{name} is not supported", node if isinstance(node, exp.Expression) else sel)
        if sel.args.get("kind"):
            raise SqlError(f"SELECT {sel.args['kind']} is not supported", sel)
        if isinstance(sel.args.get("distinct"), exp.Distinct) and sel.args["distinct"].args.get("on"):
            raise SqlError("DISTINCT ON is not supported: use GROUP BY or a top-k (ROW_NUMBER() <= 1)",
                           sel.args["distinct"])

    def frame(self, sel: exp.Select, outer: Scope | None, ctes: dict[str, Relation], correlate: bool) -> Frame:
        """FROM + WHERE. With ``correlate``, WHERE conjuncts reading ``outer`` are returned apart."""
        self.refuse_unsupported(sel)
        from_ = sel.args.get("from_")
        group = JoinGroup(self, outer)
        where = sel.args.get("where")
        conds = conjuncts(where.this if where is not None else None)
        if from_ is None:
            group.add(self.constant_row(sel))
        else:
            item, inner_joins = _parenthesized_join(from_.this)
            first, conds = topk.limit_rankings(self, self.table_expr(item, outer, ctes), conds)
            group.add(first)
            for join in inner_joins:
                self.join(group, join, outer, ctes)
        for join in sel.args.get("joins") or []:
            self.join(group, join, outer, ctes)
        corr = self.correlations.get(id(sel))
        if corr is not None:  # a decorrelated subquery: the outer values it reads are one more member
            group.add(corr.domain)
        plain: list[exp.Expression] = []
        scalar: list[exp.Expression] = []
        predicates: list[exp.Expression] = []
        correlated: list[exp.Expression] = []
        for c in conds:
            if subquery_predicate(c) is not None:
                predicates.append(c)
            elif subqueries_of(c):
                scalar.append(c)
            elif correlate and outer is not None and group.reads_outer(c):
                correlated.append(c)
            else:
                plain.append(c)
        rel = group.materialize(plain)
        for c in scalar:
            rel = self.scalar_filter(rel, c, outer, ctes)
        for c in predicates:
            from .subqueries import bind_predicate

            try:
                rel = bind_predicate(self, rel, c, outer, ctes)
            except SqlError as refused:  # beyond a semi/antijoin: computed as a value (decorrelate.py)
                try:
                    rel = self.scalar_filter(rel, c, outer, ctes)
                except SqlError:
                    raise refused from None
        if corr is not None and corr.pad:
            from .decorrelate import pad

            rel = pad(rel, corr)
        return Frame(rel, correlated)

    def finish_select(self, sel: exp.Select, rel: Relation, ctes: dict[str, Relation], names_needed: bool) -> Relation:
        """GROUP BY / HAVING / window top-k / SELECT list / DISTINCT on a bound FROM+WHERE."""
        items = list(sel.expressions)
        having = sel.args.get("having")
        is_aggregate = sel.args.get("group") is not None or any(
            aggregates_of(e) for e in items + ([having.this] if having is not None else [])) or any(
            aggregates_of(e) for e in self.order_keys.get(id(sel), []))
        windows = [w for e in items for w in walk(e) if isinstance(w, exp.Window)]
        corr = self.correlations.get(id(sel))
        if windows and corr is not None:
            raise SqlError("a window function in a correlated subquery is not supported", windows[0])
        if windows:
            if is_aggregate:
                raise SqlError(f"window function '{describe(windows[0])}' over a grouped query is not supported: "
                               f"rank the rows of a subquery that groups", windows[0])
            if len(windows) > 1:
                raise SqlError(f"window function '{describe(windows[1])}': one ranking window per SELECT is "
                               f"supported (a top-k)", windows[1])
            if not any(unalias(item)[0] is windows[0] for item in items):
                raise SqlError(f"window function '{describe(windows[0])}' inside an expression is not supported: "
                               f"a ranking is a column of its own ('... AS rn'), filtered by <= k", windows[0])
            return topk.ranking(self, sel, rel, items, windows[0], names_needed)
        if is_aggregate:
            from .aggregates import bind_aggregate

            out = bind_aggregate(self, sel, rel, ctes, names_needed, corr)
        else:
            if having is not None:
                raise SqlError("HAVING without GROUP BY or aggregates: use WHERE", having)
            rel, items = self.attach_scalars(rel, items, ctes, what="the SELECT list")
            out = self.projection(rel, items, names_needed, lambda e, what: self.bind_expr(e, rel.scope, what))
            if corr is not None:
                from .decorrelate import append_domain, domain_columns

                out = append_domain(out, domain_columns(rel, corr), corr)
        if sel.args.get("distinct"):
            out = Relation(P.Distinct(out.plan.columns, "SELECT DISTINCT", out.plan), out.fields)
        return out

    def projection(self, rel: Relation, items: list[exp.Expression], names_needed: bool,
                   bind: Callable[[exp.Expression, str], str], names: Scope | None = None,
                   stars: dict[int, list[tuple[str, str]]] | None = None) -> Relation:
        """The SELECT list as a Map: output names unique, ``*`` expanded. An unaliased column is
        named as its field in ``names`` (default: ``rel``'s scope). ``stars``: a ``*`` item's
        (name, bound SQL) columns when the caller expanded it (a grouped query's ``*``)."""
        outs: list[tuple[str, str]] = []
        sources: list[exp.Expression] = []
        for i, item in enumerate(items):
            if stars and id(item) in stars:
                for name, sql in stars[id(item)]:
                    outs.append((name, sql))
                    sources.append(item)
                continue
            if is_star(item):
                for f in star_fields(rel.scope, item):
                    outs.append((f.name, column_sql(f.column)))
                    sources.append(item)
                continue
            expr, name = unalias(item)
            if name is None and isinstance(expr, exp.Column):
                name = (names or rel.scope).resolve(expr).name
            if name is None:
                if names_needed:
                    raise SqlError(f"give the expression '{describe(expr)}' a name ('... AS name'): it becomes a "
                                   f"column of the view", item)
                name = f"_c{i}"
            outs.append((name, bind(expr, "the SELECT list")))
            sources.append(item)
        out_names = [n for n, _ in outs]
        columns = list(out_names)
        if names_needed:
            self.unique_names(out_names, None, sources)
        else:  # names nobody reads by name (a derived table's column list renames them): kept apart
            taken: set[str] = set()
            for i, n in enumerate(out_names):
                columns[i] = fresh(n, taken)
                taken.add(columns[i])
        text = "SELECT " + ", ".join(describe(s, 30) for s in dict.fromkeys(sources))
        plan = P.Map(tuple(columns), text, rel.plan, tuple((c, e) for c, (_, e) in zip(columns, outs)))
        return Relation(plan, [Field(None, n, c) for n, c in zip(out_names, columns)])

    def unique_names(self, names: Sequence[str], node: exp.Expression | None,
                     sources: Sequence[exp.Expression] | None = None) -> None:
        seen: dict[str, int] = {}
        for i, n in enumerate(names):
            if n.lower() in seen:
                first = seen[n.lower()]
                where = sources[i] if sources else node
                raise SqlError(f"output column '{n}' appears twice"
                               + (f" (from '{describe(sources[first], 30)}' and '{describe(sources[i], 30)}')"
                                  if sources else "")
                               + ": column names of a view must be unique; rename one with AS", where)
            seen[n.lower()] = i

    # ---- FROM ------------------------------------------------------------------------------

    def table_expr(self, node: exp.Expression, outer: Scope | None, ctes: dict[str, Relation]) -> Relation:
        """One FROM item: a circuit relation, a CTE, or a derived table (subquery)."""
        alias = node.args.get("alias")
        alias_name = alias.name if isinstance(alias, exp.TableAlias) and alias.name else None
        if isinstance(node, exp.Table):
            if not isinstance(node.this, exp.Identifier):
                raise SqlError(f"table function '{describe(node)}' is not supported: FROM reads inputs, nodes "
                               f"and CTEs", node)
            for key, what in (("sample", "TABLESAMPLE"), ("pivots", "PIVOT"), ("joins", "a nested join"),
                              ("laterals", "LATERAL VIEW"), ("version", "time travel (AS OF)")):
                if node.args.get(key):
                    raise SqlError(f"{what} is not supported", node)
            if node.args.get("db") is not None or node.args.get("catalog") is not None:
                raise SqlError(f"'{describe(node)}': a qualified table name reads outside the circuit; FROM "
                               f"names inputs and nodes of this circuit (and CTEs)", node)
            name = node.name
            qualifier = (alias_name or name).lower()
            if name.lower() in ctes:
                rel = ctes[name.lower()]
                fields = requalify(rel.fields, qualifier)
                return self.rename_columns(Relation(rel.plan, fields), alias, f"'{name}'") if alias is not None \
                    and alias.columns else Relation(rel.plan, fields)
            found = self.lookup(name)
            if found is None:
                known = sorted(set(self.known) | set(ctes))
                raise SqlError(f"unknown table '{name}': FROM names an input or node of the circuit or a CTE "
                               f"(known: {listing(known)}){did_you_mean(name, known)}", node)
            circuit_name, columns = found
            plan = P.Table(tuple(columns), circuit_name, circuit_name)
            rel = Relation(plan, [Field(qualifier, c, c) for c in columns])
            if alias is not None and alias.columns:
                rel = self.rename_columns(rel, alias, f"'{name}'")
                rel = Relation(rel.plan, requalify(rel.fields, qualifier))
            return rel
        if isinstance(node, exp.Subquery):
            if node.args.get("lateral"):
                raise SqlError("LATERAL subqueries are not supported", node)
            rel = self.query(node.this, outer, ctes, names_needed=not (alias is not None and alias.columns))
            rel = self.order_limit(node, rel)
            rel = self.rename_columns(rel, alias, "derived table")
            return Relation(rel.plan, requalify(rel.fields, alias_name))
        if isinstance(node, exp.Values):
            raise SqlError("VALUES is not supported: a view reads inputs and nodes of the circuit (constants "
                           "do not change, so they belong in an input)", node)
        if isinstance(node, exp.Lateral):
            raise SqlError("LATERAL VIEW / LATERAL is not supported", node)
        raise SqlError(f"'{describe(node)}' is not supported in FROM: expected an input, node, CTE or subquery",
                       node)

    def constant_row(self, sel: exp.Select) -> Relation:
        """The one row a SELECT without FROM reads (SQL's constant relation; its select list holds
        at every step). It is a global ``count(*)`` over one input of the circuit: exactly one row
        whatever that input holds, so its change is that row at the first step and nothing after
        (the count's own changes project to the same row and cancel). Its one column is hidden:
        no name reaches it and ``*`` shows nothing."""
        found = self.lookup(self.one_row) if self.one_row is not None else None
        if found is None:
            raise SqlError("a query without FROM reads one constant row, taken from an input of the "
                           "circuit: this circuit has none here (a recursive body, or no inputs)", sel)
        name, columns = found
        table = P.Table(tuple(columns), name, name)
        narrow = P.Map((), "(one row: a SELECT without FROM)", table, ())
        one = "_one_row"
        plan = P.Aggregate((one,), "(one row: a SELECT without FROM) count(*)", narrow, (),
                           ((one, "count", None, False),))
        return Relation(plan, [Field(None, one, one, hidden=True, star=False, unqualified=False)])

    def join(self, group: "JoinGroup", join: exp.Join, outer: Scope | None, ctes: dict[str, Relation]) -> None:
        if join.args.get("method"):
            raise SqlError(f"{join.args['method']} JOIN is not supported: name the join columns with ON or "
                           f"USING", join)
        side = (join.side or "").upper()
        kind = (join.kind or "").upper()
        if isinstance(join.this, exp.Lateral) and isinstance(join.this.this, exp.Subquery) \
                and not join.this.args.get("view"):
            if side or kind not in ("", "INNER", "CROSS") or join.this.args.get("outer"):
                raise SqlError(f"{side or kind} JOIN LATERAL is not supported: only an inner LATERAL subquery "
                               f"(FROM t, LATERAL (...) or JOIN LATERAL (...) ON ...)", join)
            from .decorrelate import lateral

            left = group.materialize([])
            group.reset(lateral(self, left, join.this, outer, ctes))
            group.conds.extend(conjuncts(join.args.get("on")))
            return
        right = self.table_expr(join.this, outer, ctes)
        on = join.args.get("on")
        using = join.args.get("using") or []
        if kind in ("SEMI", "ANTI"):
            from .joins import semi_join

            left = group.materialize([])
            group.reset(semi_join(self, left, right, join, kind == "ANTI"))
            return
        if side in ("LEFT", "RIGHT", "FULL"):
            from .joins import outer_join

            left = group.materialize([])
            group.reset(outer_join(self, left, right, join, side.lower()))
            return
        if kind not in ("", "INNER", "CROSS"):
            raise SqlError(f"{kind} JOIN is not supported", join)
        if kind == "CROSS" and (on is not None or using):
            raise SqlError("CROSS JOIN takes no ON or USING", join)
        if using:
            from .joins import using_equalities

            group.add_using(right, using_equalities(group.fields(), right, using, join))
            return
        group.add(right, conjuncts(on))

    # ---- expressions -----------------------------------------------------------------------

    def bind_expr(self, node: exp.Expression, scope: Scope, what: str,
                  resolve: Callable[[exp.Column], str] | None = None) -> str:
        """A row expression as Spark SQL over the scope's columns (no aggregates, no subqueries
        other than scalar ones already joined in): the author's text with columns replaced.
        ``resolve`` overrides which column a name means."""
        if id(node) in self.scalars:  # the whole expression is a subquery computed as a column
            return column_sql(self.scalars[id(node)])
        aggs = aggregates_of(node)
        if aggs:
            raise SqlError(f"aggregate function '{describe(aggs[0])}' in {what}: aggregates belong in the "
                           f"SELECT list or HAVING of a grouped query", aggs[0])
        check_row_expression(node, what, self.text, skip=lambda n: id(n) in self.scalars)
        subs = [s for s in subqueries_of(node) if id(s) not in self.scalars and id(s.parent) not in self.scalars]
        if subs:
            raise SqlError(f"a subquery in {what} is not supported here: IN/EXISTS subqueries are "
                           f"supported as AND-ed conditions of WHERE, scalar ones in WHERE, SELECT and HAVING",
                           subs[0])

        def replace(sub: exp.Expression) -> str | None:
            if id(sub) in self.scalars:
                return column_sql(self.scalars[id(sub)])
            if isinstance(sub, exp.Column) and not isinstance(sub.this, exp.Star):
                return column_sql(resolve(sub) if resolve else scope.resolve(sub).column)
            return None

        return self.source.splice(node, replace)

    def canonical(self, node: exp.Expression, scope: Scope) -> str:
        """A spelling of a bound expression for comparing (GROUP BY x % 3 matches SELECT x%3):
        sqlglot's printing of the tree, never what runs."""
        def column(sub: exp.Expression) -> exp.Expression | None:
            if isinstance(sub, exp.Column) and not isinstance(sub.this, exp.Star):
                return quoted(scope.resolve(sub).column)
            return None

        return render(rewrite(node, column))

    def filter(self, rel: Relation, cond: exp.Expression | Sequence[exp.Expression], what: str) -> Relation:
        """``rel`` where every condition holds (one filter operator for them all)."""
        conds = [cond] if isinstance(cond, exp.Expression) else list(cond)
        if not conds:
            return rel
        where = and_all([self.bind_expr(c, rel.scope, what) for c in conds])
        text = f"{what} " + " AND ".join(describe(c, 60 // len(conds) + 10) for c in conds)
        return Relation(P.Filter(rel.plan.columns, text, rel.plan, where), rel.fields)

    def add_columns(self, rel: Relation, named: Sequence[tuple[str, exp.Expression]], qualifier: str,
                    scope: Scope | None = None) -> tuple[Relation, list[str]]:
        """``rel`` with computed hidden columns (join keys); returns their column names."""
        taken = set(rel.plan.columns)
        new: list[tuple[str, str]] = []
        for base, e in named:
            name = fresh(base, taken)
            taken.add(name)
            new.append((name, self.bind_expr(e, scope or rel.scope, "a join condition")))
        exprs = tuple((c, column_sql(c)) for c in rel.plan.columns) + tuple(new)
        text = "compute " + ", ".join(describe(e, 30) for _, e in named)
        plan = P.Map(tuple(c for c, _ in exprs), text, rel.plan, exprs)
        fields = rel.fields + [Field(qualifier, n, n, hidden=True) for n, _ in new]
        return Relation(plan, fields), [n for n, _ in new]

    def key_column(self, rel: Relation, node: exp.Expression, base: str) -> tuple[Relation, str]:
        """The column holding ``node`` in ``rel``: itself when it is a column, else a computed one."""
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            return rel, rel.scope.resolve(node).column
        rel, (name,) = self.add_columns(rel, [(base, node)], KEY)
        return rel, name

    # ---- scalar subqueries -----------------------------------------------------------------

    def scalar_filter(self, rel: Relation, cond: exp.Expression, outer: Scope | None,
                      ctes: dict[str, Relation]) -> Relation:
        rel, _ = self.attach_scalars(rel, [cond], ctes, outer, "WHERE")
        where = self.bind_expr(cond, rel.scope, "WHERE")
        return Relation(P.Filter(rel.plan.columns, f"WHERE {describe(cond)}", rel.plan, where), rel.fields)

    def attach_scalars(self, rel: Relation, items: list[exp.Expression], ctes: dict[str, Relation],
                       outer: Scope | None = None, what: str = "an expression", correlate: bool = True
                       ) -> tuple[Relation, list[exp.Expression]]:
        """Compute every subquery in ``items`` as a column of ``rel`` (``decorrelate.py``): a scalar
        subquery's value, an EXISTS's or IN's truth value; expressions then read that column
        (``self.scalars``). ``correlate=False``: a subquery reading ``rel`` is refused."""
        from . import decorrelate

        for item in items:
            found = [item] if isinstance(item, exp.Subquery) else []
            for n in walk(item):
                found.append(n)
                if not isinstance(n, (exp.In, exp.Exists)):
                    found += [c for c in n.iter_expressions() if isinstance(c, exp.Subquery)]
            for node in found:
                if id(node) in self.scalars and self.scalars[id(node)] in rel.plan.columns:
                    continue
                if isinstance(node, exp.Exists):
                    rel, self.scalars[id(node)] = decorrelate.exists(self, rel, node, outer, ctes, what, correlate)
                elif isinstance(node, exp.In) and node.args.get("query") is not None:
                    rel, self.scalars[id(node)] = decorrelate.in_value(self, rel, node, outer, ctes, what, correlate)
                    if isinstance(node.parent, exp.Not):  # x NOT IN (...): the text holds no 'x IN (...)'
                        rel, self.scalars[id(node.parent)] = decorrelate.negated(rel, self.scalars[id(node)])
                elif isinstance(node, exp.Subquery) and not isinstance(node.parent, (exp.In, exp.Exists)):
                    rel, self.scalars[id(node)] = decorrelate.scalar(self, rel, node, outer, ctes, what, correlate)
        return rel, items


def unalias(item: exp.Expression) -> tuple[exp.Expression, str | None]:
    if isinstance(item, exp.Alias):
        return item.this, item.alias
    return item, None


def subquery_predicate(cond: exp.Expression) -> tuple[bool, exp.Expression] | None:
    """(negated, IN/EXISTS node) when ``cond`` is [NOT] EXISTS (...) or x [NOT] IN (subquery)."""
    negated = False
    node = cond
    while isinstance(node, (exp.Not, exp.Paren)):
        if isinstance(node, exp.Not):
            negated = not negated
        node = node.this
    if isinstance(node, exp.Exists) or (isinstance(node, exp.In) and node.args.get("query") is not None):
        return negated, node
    return None


class JoinGroup:
    """Relations joined by inner/cross/comma joins, and the conjuncts that may join them."""

    def __init__(self, binder: Binder, outer: Scope | None) -> None:
        self.binder = binder
        self.outer = outer
        self.members: list[Relation] = []
        self.conds: list[exp.Expression] = []
        self.usings: list[tuple[Field, Field]] = []

    def add(self, rel: Relation, conds: Sequence[exp.Expression] = ()) -> None:
        self.members.append(rel)
        self.conds.extend(conds)

    def add_using(self, rel: Relation, pairs: list[tuple[Field, Field, exp.Expression]]) -> None:
        self.members.append(rel)
        for left, right, cond in pairs:
            self.conds.append(cond)
            self.usings.append((left, right))

    def reset(self, rel: Relation) -> None:
        self.members, self.conds, self.usings = [rel], [], []

    def fields(self) -> list[Field]:
        return [f for m in self.members for f in m.fields]

    def scope(self) -> Scope:
        return Scope(self.fields(), self.outer)

    def reads_outer(self, cond: exp.Expression) -> bool:
        """Does ``cond`` name a column found only in the enclosing query?"""
        scope = Scope(self.fields())
        return any(not scope.find(c) and self.outer is not None and _outer_has(self.outer, c)
                   for c in columns_of(cond))

    def materialize(self, where: Sequence[exp.Expression]) -> Relation:
        """Join the members (greedy, FROM order, key-connected first), placing each conjunct of
        ON and ``where`` where it is first computable."""
        binder = self.binder
        conds = list(self.conds) + list(where)
        member_of: dict[int, int] = {}
        for i, m in enumerate(self.members):
            for f in m.fields:
                member_of[id(f)] = i
        scope = self.scope()

        seen: dict[int, tuple[exp.Expression, frozenset[int]]] = {}

        def members(node: exp.Expression) -> frozenset[int]:
            # memoized: the greedy join order asks it of each condition's sides for every pick
            # (a 64-table join: ~10^6 resolutions otherwise); the node is kept with its answer so
            # that its id is never reused while the cache lives
            hit = seen.get(id(node))
            if hit is None:
                hit = seen[id(node)] = (node, frozenset(member_of[id(scope.resolve(c))]
                                                        for c in columns_of(node)))
            return hit[1]

        members_ = list(self.members)
        pending: list[tuple[exp.Expression, frozenset[int]]] = []
        constant: list[exp.Expression] = []
        local: dict[int, list[exp.Expression]] = {}
        for c in conds:
            ms = members(c)
            if not ms:
                constant.append(c)
            elif len(ms) == 1:
                local.setdefault(next(iter(ms)), []).append(c)
            else:
                pending.append((c, ms))
        for m, cs in local.items():
            members_[m] = binder.filter(members_[m], cs, "WHERE")
        rel = members_[0]
        joined = {0}
        remaining = list(range(1, len(members_)))
        while remaining:
            pick, keys = remaining[0], []
            for m in remaining:
                keys = [(c, sides) for c, ms in pending if (sides := _equi_sides(c, joined, m, members))]
                if keys:
                    pick = m
                    break
            from .joins import inner_join

            rel = inner_join(binder, rel, members_[pick], [sides for _, sides in keys],
                             [c for c, _ in keys])
            used = {id(c) for c, _ in keys}
            pending = [(c, ms) for c, ms in pending if id(c) not in used]
            joined.add(pick)
            remaining.remove(pick)
            ready = [c for c, ms in pending if ms <= joined]
            pending = [(c, ms) for c, ms in pending if not ms <= joined]
            rel = binder.filter(rel, ready, "WHERE")
        rel = binder.filter(rel, constant, "WHERE")
        if self.usings:
            from .joins import merge_using

            rel = merge_using(rel, self.usings)
        return rel


def _outer_has(scope: Scope, column: exp.Column) -> bool:
    while scope is not None:
        if scope.find(column):
            return True
        scope = scope.outer  # type: ignore[assignment]
    return False


def _equi_sides(cond: exp.Expression, joined: set[int], m: int,
                members: Callable[[exp.Expression], frozenset[int]]
                ) -> tuple[exp.Expression, exp.Expression] | None:
    """(side over the joined members, side over member ``m``) when ``cond`` is such an equality."""
    while isinstance(cond, exp.Paren):
        cond = cond.this
    if not isinstance(cond, exp.EQ):
        return None
    a, b = cond.this, cond.expression
    ma, mb = members(a), members(b)
    if ma and mb and ma <= joined and mb == {m}:
        return a, b
    if ma and mb and mb <= joined and ma == {m}:
        return b, a
    return None


def _parenthesized_join(item: exp.Expression) -> tuple[exp.Expression, list[exp.Join]]:
    """``FROM (a JOIN b ON ...) JOIN c``: the first FROM item as ``a`` and its joins ``[b]``.
    Joins run left to right, so a parenthesized join as the first FROM item is the same join
    without parentheses, whatever its kinds (one in a later position would not be: refused as a
    TABLE). Anything else: the item as it is, no joins."""
    if isinstance(item, exp.Subquery) and isinstance(item.this, exp.Table) and item.this.args.get("joins") \
            and not any(v for k, v in item.args.items() if k != "this"):
        table = item.this.copy()
        joins = list(table.args.get("joins") or [])
        table.set("joins", None)
        return table, joins
    return item, []
