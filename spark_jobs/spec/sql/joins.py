"""Joins of the binder: inner (within a join group), outer, and semi/anti joins.

Every join outputs the left relation's columns, then the right's renamed apart from them
(``fresh``: ``alias_col``, then ``col_2``...); the fields keep the names the query uses. An ON
condition is split into key equalities and the rest, by which side each conjunct reads
(``split_on``); the plan then knows which conjuncts can filter a side before the join.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

from sqlglot import exp

from . import plan as P
from .errors import SqlError, describe
from .exprs import and_all, check_row_expression, column_sql, columns_of, conjuncts
from .scope import Field, Scope, fresh

if TYPE_CHECKING:
    from .binder import Binder, Relation

Pair = tuple[exp.Expression, exp.Expression]


@dataclass
class SplitOn:
    """An ON condition by what each conjunct reads."""

    keys: list[Pair]  # (left side, right side) of equalities across the two relations
    key_conds: list[exp.Expression]
    left_only: list[exp.Expression]  # reads only the left (or nothing)
    right_only: list[exp.Expression]
    mixed: list[exp.Expression]


def split_on(left: "Relation", right: "Relation", conds: Sequence[exp.Expression], text: str | None = None) -> SplitOn:
    side: dict[int, str] = {id(f): "L" for f in left.fields} | {id(f): "R" for f in right.fields}
    scope = Scope(left.fields + right.fields)

    def sides(node: exp.Expression) -> set[str]:
        return {side[id(scope.resolve(c))] for c in columns_of(node)}

    out = SplitOn([], [], [], [], [])
    for c in conds:
        check_row_expression(c, "an ON condition", text)
        s = sides(c)
        inner = c
        while isinstance(inner, exp.Paren):
            inner = inner.this
        if isinstance(inner, exp.EQ) and s == {"L", "R"}:
            a, b = sides(inner.this), sides(inner.expression)
            if a == {"L"} and b == {"R"}:
                out.keys.append((inner.this, inner.expression))
                out.key_conds.append(c)
                continue
            if a == {"R"} and b == {"L"}:
                out.keys.append((inner.expression, inner.this))
                out.key_conds.append(c)
                continue
        if not s:  # a constant: decides whether anything matches, like a condition on the right
            out.right_only.append(c)
        elif s == {"L"}:
            out.left_only.append(c)
        elif s == {"R"}:
            out.right_only.append(c)
        else:
            out.mixed.append(c)
    return out


def _keys(binder: "Binder", left: "Relation", right: "Relation", pairs: Sequence[Pair]
          ) -> tuple["Relation", "Relation", tuple[str, ...], tuple[str, ...]]:
    lkeys: list[str] = []
    rkeys: list[str] = []
    for i, (a, b) in enumerate(pairs):
        left, lk = binder.key_column(left, a, f"key{i}")
        right, rk = binder.key_column(right, b, f"key{i}")
        lkeys.append(lk)
        rkeys.append(rk)
    return left, right, tuple(lkeys), tuple(rkeys)


def _renamed_right(left: "Relation", right: "Relation") -> tuple[tuple[tuple[str, str], ...], list[Field]]:
    """Right columns renamed apart from the left's: the join's right_out and the right fields."""
    taken = set(left.plan.columns)
    rename: dict[str, str] = {}
    for c in right.plan.columns:
        qualifier = next((f.qualifier for f in right.fields if f.column == c and f.qualifier and not f.hidden), None)
        rename[c] = fresh(c, taken, qualifier)
        taken.add(rename[c])
    fields = [replace(f, column=rename[f.column]) for f in right.fields]
    return tuple(rename.items()), fields


def _join_text(kind: str, right: "Relation", conds: Sequence[exp.Expression]) -> str:
    qualifier = next((f.qualifier for f in right.fields if f.qualifier and not f.hidden), None)
    table = right.plan.name if isinstance(right.plan, P.Table) else None
    name = f"{table} {qualifier}" if table and qualifier and qualifier != table.lower() else \
        (table or qualifier or "(subquery)")
    on = " AND ".join(describe(c, 40) for c in conds)
    return f"{kind} JOIN {name}" + (f" ON {on}" if on else "")


def inner_join(binder: "Binder", left: "Relation", right: "Relation", pairs: Sequence[Pair],
               conds: Sequence[exp.Expression]) -> "Relation":
    """An equi-join on ``pairs`` (no pairs: a product)."""
    from .binder import Relation

    left, right, lkeys, rkeys = _keys(binder, left, right, pairs)
    right_out, rfields = _renamed_right(left, right)
    columns = left.plan.columns + tuple(o for _, o in right_out)
    plan = P.Join(columns, _join_text("INNER" if pairs else "CROSS", right, conds), "inner", left.plan, right.plan,
                  lkeys, rkeys, tuple((c, c) for c in left.plan.columns), right_out)
    return Relation(plan, left.fields + rfields)


def _distinct_keys(binder: "Binder", left: "Relation", right: "Relation", pairs: Sequence[Pair]
                   ) -> tuple["Relation", "Relation", tuple[str, ...], tuple[str, ...], list[Pair]]:
    """``_keys`` for the joins that build a key set of one side (outer joins, semi-joins), which
    needs each key column once: the equalities repeating a key column (``l.x = r.a AND l.x = r.b``)
    are returned apart, for the caller to keep as conditions beyond the keys."""
    left2, right2, lkeys, rkeys = _keys(binder, left, right, pairs)
    repeated = {i for i in range(len(lkeys)) if lkeys[i] in lkeys[:i] or rkeys[i] in rkeys[:i]}
    if not repeated:
        return left2, right2, lkeys, rkeys, []
    kept = [p for i, p in enumerate(pairs) if i not in repeated]
    return (*_keys(binder, left, right, kept), [p for i, p in enumerate(pairs) if i in repeated])


def _equality(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    """The query's own ``a = b`` (or ``b = a``) a key pair came from: its text is what Spark runs."""
    parent = a.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    if isinstance(parent, exp.EQ) and {id(parent.this), id(parent.expression)} == {id(a), id(b)}:
        return parent
    raise SqlError(f"'{describe(a)}' is matched against two columns ('{describe(b)}' and another): "
                   "write the second match as a condition of its own", a)


def _outer_keys(binder: "Binder", left: "Relation", right: "Relation", split: SplitOn
                ) -> tuple["Relation", "Relation", tuple[str, ...], tuple[str, ...]]:
    """``_distinct_keys`` for an outer join: a repeated equality stays in the ON condition as a
    mixed conjunct."""
    left, right, lkeys, rkeys, repeated = _distinct_keys(binder, left, right, split.keys)
    if repeated:
        ids = [id(p) for p in repeated]
        split.mixed += [c for p, c in zip(split.keys, split.key_conds) if id(p) in ids]
        split.key_conds = [c for p, c in zip(split.keys, split.key_conds) if id(p) not in ids]
        split.keys = [p for p in split.keys if id(p) not in ids]
    return left, right, lkeys, rkeys


def outer_join(binder: "Binder", left: "Relation", right: "Relation", join: exp.Join, side: str) -> "Relation":
    """LEFT / RIGHT / FULL OUTER JOIN. Conjuncts on the side that is only matched against (the
    right of a LEFT JOIN) filter it first; the others stay in the join (they decide matches)."""
    from .binder import Relation

    using = join.args.get("using") or []
    pairs_using = using_equalities(left.fields, right, using, join) if using else []
    conds = [c for _, _, c in pairs_using] if using else conjuncts(join.args.get("on"))
    split = split_on(left, right, conds, binder.text)
    if side == "left":
        right = binder.filter(right, split.right_only, "ON")
        split.right_only = []
    elif side == "right":
        left = binder.filter(left, split.left_only, "ON")
        split.left_only = []
    left, right, lkeys, rkeys = _outer_keys(binder, left, right, split)
    right_out, rfields = _renamed_right(left, right)
    out_scope = Scope(left.fields + rfields)

    def bound(parts: list[exp.Expression], scope: Scope = out_scope) -> str | None:
        return and_all([binder.bind_expr(p, scope, "an ON condition") for p in parts])

    mixed_refs = tuple(dict.fromkeys(out_scope.resolve(c).column for p in split.mixed for c in columns_of(p)))
    columns = left.plan.columns + tuple(o for _, o in right_out)
    plan = P.Join(columns, _join_text(f"{side.upper()} OUTER", right, conds), side, left.plan, right.plan, lkeys,
                  rkeys, tuple((c, c) for c in left.plan.columns), right_out, bound(split.left_only),
                  bound(split.right_only, right.scope), bound(split.mixed), mixed_refs)
    rel = Relation(plan, left.fields + rfields)
    if using:
        rel = merge_using(rel, [(lf, rf) for lf, rf, _ in pairs_using], side)
    return rel


def semi(binder: "Binder", left: "Relation", right: "Relation", pairs: Sequence[Pair],
         residual: Sequence[exp.Expression], anti: bool, text: str,
         inner_first: bool = False) -> "Relation":
    """Rows of ``left`` with / without a match in ``right``: keys ``pairs``, plus ``residual``
    (reading both sides). A name means one column of either side, unless ``inner_first`` (the
    right is a correlated subquery): then the right's columns win, as SQL resolves them."""
    from .binder import Relation

    left, right, lkeys, rkeys, repeated = _distinct_keys(binder, left, right, pairs)
    residual = list(residual) + [_equality(a, b) for a, b in repeated]
    right_out_all, rfields = _renamed_right(left, right)
    residual_sql = None
    residual_left: tuple[str, ...] = ()
    right_out: tuple[tuple[str, str], ...] = ()
    if residual:
        scope = Scope(left.fields + rfields)
        rcols = {o for _, o in right_out_all}
        used: list[str] = []

        right_scope = Scope(rfields)

        def column(sub: exp.Column) -> str:
            found = right_scope.find(sub) if inner_first else []
            name = found[0].column if len(found) == 1 else \
                (Scope(left.fields).resolve(sub) if inner_first else scope.resolve(sub)).column
            used.append(name)
            return name

        residual_sql = and_all([binder.bind_expr(c, scope, "a join condition", column) for c in residual])
        residual_left = tuple(dict.fromkeys(u for u in used if u not in rcols))
        right_out = tuple((s, o) for s, o in right_out_all if o in used)
    plan = P.Semi(left.plan.columns, text, left.plan, right.plan, lkeys, rkeys, anti, residual_sql,
                  residual_left, right_out)
    return Relation(plan, left.fields)


def semi_join(binder: "Binder", left: "Relation", right: "Relation", join: exp.Join, anti: bool) -> "Relation":
    """LEFT SEMI JOIN / LEFT ANTI JOIN ... ON: right-only conjuncts filter the right first."""
    if join.args.get("using"):
        pairs = using_equalities(left.fields, right, join.args["using"], join)
        conds = [c for _, _, c in pairs]
    else:
        conds = conjuncts(join.args.get("on"))
    split = split_on(left, right, conds, binder.text)
    right = binder.filter(right, split.right_only, "ON")
    return semi(binder, left, right, split.keys, split.left_only + split.mixed, anti,
                _join_text("LEFT ANTI" if anti else "LEFT SEMI", right, conds))


def using_equalities(left_fields: list[Field], right: "Relation", using: list[exp.Expression],
                     join: exp.Join) -> list[tuple[Field, Field, exp.Expression]]:
    """``USING (k, ...)`` as equalities ``left.k = right.k`` (with the fields they join)."""
    out = []
    for ident in using:
        name = ident.name
        left = Scope(left_fields).find(exp.column(name))
        right_f = Scope(right.fields).find(exp.column(name))
        if len(left) != 1 or len(right_f) != 1:
            which = "left" if len(left) != 1 else "right"
            how = "has no" if not (left if which == "left" else right_f) else "has more than one"
            raise SqlError(f"USING ({name}): the {which} side {how} column '{name}'", ident)
        lf, rf = left[0], right_f[0]
        cond = exp.EQ(this=_ref(lf, ident), expression=_ref(rf, ident))
        out.append((lf, rf, cond))
    return out


def _ref(f: Field, at: exp.Expression) -> exp.Column:
    col = exp.Column(this=exp.Identifier(this=f.name), table=exp.Identifier(this=f.qualifier) if f.qualifier else None)
    col.this.meta.update(at.meta if isinstance(at, exp.Identifier) else {})
    return col


def merge_using(rel: "Relation", pairs: list[tuple[Field, Field]], side: str = "inner") -> "Relation":
    """After a join USING (k): ``k`` names one merged column, first in ``*``, and the two sides'
    ``k`` are reached only qualified. FULL JOIN merges with coalesce(left.k, right.k)."""
    from .binder import Relation

    by_key = {(f.qualifier, f.name.lower()): f for f in rel.fields}
    merged: list[Field] = []
    hide: set[tuple] = set()
    extra: list[tuple[str, str]] = []
    taken = set(rel.plan.columns)
    for lf, rf in pairs:
        left = by_key[(lf.qualifier, lf.name.lower())]
        right = by_key[(rf.qualifier, rf.name.lower())]
        hide |= {(left.qualifier, left.name.lower()), (right.qualifier, right.name.lower())}
        if side == "full":
            col = fresh(lf.name, taken)
            taken.add(col)
            extra.append((col, f"coalesce({column_sql(left.column)}, {column_sql(right.column)})"))
        else:
            col = (right if side == "right" else left).column
        merged.append(Field(None, lf.name, col))
    fields = merged + [replace(f, star=False, unqualified=False) if (f.qualifier, f.name.lower()) in hide else f
                       for f in rel.fields]
    plan = rel.plan
    if extra:
        exprs = tuple((c, column_sql(c)) for c in plan.columns) + tuple(extra)
        plan = P.Map(tuple(c for c, _ in exprs), "USING (merged keys)", plan, exprs)
    return Relation(plan, fields)
