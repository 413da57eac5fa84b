"""WITH RECURSIVE: a CTE that reads itself, as the least fixed point of ``base UNION step``.

The step reads the CTE as of the previous iteration (``plan.Loop``). When the step is monotone
in the CTE (stratified negation: a relation the step computes from the CTE may be joined,
filtered, projected, unioned and made distinct, and may be the *kept* side of an antijoin, NOT IN,
EXCEPT or outer join, but not the side that is subtracted or padded, nor aggregated), the IR
turns it into the same ``recursive`` scope a YAML ``recursive`` node becomes (semi-naive,
incremental across timesteps, section 6 of the DBSP paper). Otherwise (an aggregate or GROUP BY
over the CTE, as in shortest paths: ``SELECT dst, min(d + w) ... GROUP BY dst``, a negation or
top-k of it) the CTE is the paper's while loop (section 7.6), ``x := base; x := distinct(base +
step(x))`` until ``x`` stops changing, lowered to the same ``iterate`` a YAML ``iterate`` node
becomes. UNION ALL is refused: with bags the iteration need not stop, and SQL's result would
count paths.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from . import plan as P
from .errors import SqlError
from .scope import Field

if TYPE_CHECKING:
    from .binder import Binder, Relation
    from .scope import Scope


def reads(q: exp.Expression, name: str) -> bool:
    return any(isinstance(t.this, exp.Identifier) and t.name.lower() == name.lower() for t in q.find_all(exp.Table))


def bind_recursive(binder: "Binder", cte: exp.CTE, outer: "Scope | None", ctes: dict) -> "Relation":
    from .binder import Relation

    name = cte.alias_or_name
    q = cte.this
    if not isinstance(q, exp.Union) or q.args.get("order") or q.args.get("limit"):
        raise SqlError(f"recursive CTE '{name}' must be <base query> UNION <step query reading '{name}'>", q)
    if not q.args.get("distinct"):
        raise SqlError(f"recursive CTE '{name}': UNION ALL is not supported (with duplicates the iteration need "
                       f"not end, and counts paths); use UNION", q)
    if reads(q.this, name):
        raise SqlError(f"recursive CTE '{name}': the first query of the UNION (the base case) must not read "
                       f"'{name}'", q.this)
    listed = bool(cte.args.get("alias") is not None and cte.args["alias"].columns)
    base = binder.query(q.this, outer, ctes, names_needed=not listed)
    base = binder.rename_columns(base, cte.args.get("alias"), f"CTE '{name}'")
    names = tuple(f.name for f in base.fields)
    loop = P.Loop(names, f"{name} (previous iteration)", name)
    inner = dict(ctes)
    inner[name.lower()] = Relation(loop, [Field(None, n, n) for n in names])
    step = binder.query(q.expression, outer, inner, names_needed=False)
    if len(step.plan.columns) != len(names):
        raise SqlError(f"recursive CTE '{name}': the step has {len(step.plan.columns)} columns, the base "
                       f"{len(names)}", q.expression)
    step_plan = step.plan
    if step_plan.columns != names:
        step_plan = P.Map(names, "(columns by position)", step.plan,
                          tuple((n, "`" + c.replace("`", "``") + "`") for n, c in zip(names, step.plan.columns)))
    try:
        _monotone(step_plan, loop, q.expression, name)
        while_loop = False
    except SqlError:
        _nested(step_plan, loop, q.expression, name)
        while_loop = True  # aggregation or negation of the CTE: the while loop (lowered to iterate)
    rec = P.Recursive(names, f"WITH RECURSIVE {name}", name, base.plan, step_plan, loop, while_loop)
    return Relation(rec, [Field(None, n, n) for n in names])


def _nested(rel: P.Rel, loop: P.Loop, at: exp.Expression, name: str) -> None:
    """A while loop's step may hold any operator but a recursive CTE of its own."""
    for r in P.walk(rel):
        if isinstance(r, P.Recursive):
            raise SqlError(f"recursive CTE '{name}': its step aggregates or negates '{name}' (a while loop) "
                           f"and holds a recursive CTE of its own, which is not supported", at)


def _monotone(rel: P.Rel, loop: P.Loop, at: exp.Expression, name: str) -> None:
    """Refuse a step whose result is not monotone in ``loop`` (stratified negation)."""
    memo: dict[int, bool] = {}

    def variant(r: P.Rel) -> bool:
        if id(r) not in memo:
            memo[id(r)] = r is loop or any(variant(i) for i in P.inputs_of(r))
        return memo[id(r)]

    def refuse(what: str) -> None:
        raise SqlError(f"recursive CTE '{name}': {what} depends on '{name}' itself; only joins, filters, "
                       f"projections, UNION and DISTINCT may (negation and aggregation only of relations "
                       f"that do not read '{name}')", at)

    for r in P.walk(rel):
        if isinstance(r, P.Aggregate) and variant(r.input):
            refuse("an aggregate (GROUP BY) of a relation that")
        if isinstance(r, P.TopK) and variant(r.input):
            refuse(f"a top-k ({r.sql}) of a relation that")
        if isinstance(r, (P.Semi, P.NotIn)) and (r.anti if isinstance(r, P.Semi) else True) and variant(r.right):
            refuse("the subquery of NOT EXISTS / NOT IN / ANTI JOIN")
        if isinstance(r, P.SetOp) and (r.kind == "except" or r.all and r.kind == "intersect") and variant(r.right):
            refuse(f"the right side of {r.sql}")
        if isinstance(r, P.SetOp) and r.all and r.kind in ("except", "intersect") and variant(r.left):
            refuse(f"the left side of {r.sql}")
        if isinstance(r, P.Join) and r.kind != "inner":
            padded = {"left": (r.right,), "right": (r.left,), "full": (r.left, r.right)}[r.kind]
            if any(variant(p) for p in padded):
                refuse(f"the NULL-supplying side of {r.kind.upper()} JOIN")
        if isinstance(r, P.Recursive) and r is not rel and variant(r):
            refuse("a nested recursive CTE")
