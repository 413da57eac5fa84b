"""Random SQL views for the differential test against DuckDB (``tests/test_sql_fuzz.py``).

A case is 2-3 inputs of random column types (few distinct values and many NULLs, so joins and
groups collide) and a few ``op: sql`` nodes drawn from the subset docs/reference/sql.md documents:
projections with expressions, WHERE, inner and outer joins on one or two keys, GROUP BY with
every aggregate and HAVING, DISTINCT, the set operators, subqueries in FROM, CTEs and both top-k
forms, and subqueries correlated or not (scalar aggregates in SELECT, EXISTS / IN / NOT IN under
OR, NOT and CASE). Every query is written twice: the text the engine compiles, and the text DuckDB runs,
which differs only where docs/reference/sql.md says the engine decides what SQL leaves open (ties of
``row_number()`` and ``ORDER BY ... LIMIT`` are broken on the other selected columns, ascending,
NULLS FIRST). Expressions stay where Spark and DuckDB agree on values: no division, no float text
forms, small integers (no overflow), doubles that are exact binary fractions.
"""
from __future__ import annotations

import datetime
import decimal
import random
from dataclasses import dataclass, field
from typing import Any, Callable

TYPES = ("long", "int", "string", "date", "decimal(10,2)", "double", "boolean")
NUMERIC = ("long", "int", "decimal(10,2)", "double")
ORDERED = ("long", "int", "string", "date", "decimal(10,2)", "double")

_POOLS: dict[str, list[Any]] = {
    "long": [0, 1, 2, 3],
    "int": [-1, 0, 1, 2],
    "string": ["x", "y", "Y", ""],
    "date": [datetime.date(2024, 1, 1), datetime.date(1999, 12, 31), datetime.date(2024, 2, 29)],
    "decimal(10,2)": [decimal.Decimal("1.50"), decimal.Decimal("-2.25"), decimal.Decimal("0.00"),
                      decimal.Decimal("10.10")],
    "double": [0.5, -1.25, 2.0, 0.0],
    "boolean": [True, False],
}


def literal(t: str, rng: random.Random) -> str:
    v = rng.choice(_POOLS[t])
    if t == "string":
        return f"'{v}'"
    if t == "date":
        return f"DATE '{v.isoformat()}'"
    if t == "boolean":
        return "true" if v else "false"
    if t == "decimal(10,2)":
        return f"CAST({v} AS DECIMAL(10,2))"
    if t == "double":
        return f"CAST({v} AS DOUBLE)"
    return str(v)


@dataclass
class Rel:
    """A relation a query reads: its text for the engine and for DuckDB, and its columns."""

    engine: str  # a table name, or a SELECT
    oracle: str
    cols: list[tuple[str, str]]  # (name, type)
    table: bool = False


@dataclass
class Ctx:
    """The state of drawing one query: its CTEs and fresh names."""

    rng: random.Random
    arrow_only: bool = False  # no avg, sums of decimals or doubles, EXCEPT ALL or INTERSECT ALL (Spark only)
    ctes: list[tuple[str, str, str]] = field(default_factory=list)  # (name, engine, oracle)
    n: int = 0

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


# ---- expressions -------------------------------------------------------------------------------

def _cols_of(cols: list[tuple[str, str]], types: tuple[str, ...]) -> list[str]:
    return [c for c, t in cols if t in types]


def expr(rng: random.Random, cols: list[tuple[str, str]], t: str, depth: int = 0) -> str:
    """An expression of type ``t`` (numeric types mix: ``t`` is then any of NUMERIC)."""
    same = _cols_of(cols, (t,))
    r = rng.random()
    if depth >= 2 or r < 0.45:
        if same and rng.random() < 0.85:
            return rng.choice(same)
        return literal(t, rng)
    if t in NUMERIC and r < 0.65:
        op = rng.choice("+-*")
        return f"({expr(rng, cols, t, depth + 1)} {op} {expr(rng, cols, t, depth + 1)})"
    if t in ("long", "int") and r < 0.7:
        return f"({expr(rng, cols, t, depth + 1)} % 3)"
    if r < 0.8:
        return f"coalesce({expr(rng, cols, t, depth + 1)}, {literal(t, rng)})"
    if t == "string" and r < 0.9:
        return f"{rng.choice(['upper', 'lower'])}({expr(rng, cols, t, depth + 1)})"
    if t == "boolean":
        return pred(rng, cols, depth + 1)
    return (f"CASE WHEN {pred(rng, cols, depth + 1)} THEN {expr(rng, cols, t, depth + 1)} "
            f"ELSE {expr(rng, cols, t, depth + 1)} END")


def pred(rng: random.Random, cols: list[tuple[str, str]], depth: int = 0) -> str:
    """A boolean condition over ``cols`` (three-valued: NULLs in, NULLs out)."""
    r = rng.random()
    if depth < 2 and r < 0.2:
        return f"({pred(rng, cols, depth + 1)} {rng.choice(['AND', 'OR'])} {pred(rng, cols, depth + 1)})"
    if depth < 2 and r < 0.25:
        return f"NOT ({pred(rng, cols, depth + 1)})"
    c, t = rng.choice(cols)
    if r < 0.4:
        return f"{c} IS {rng.choice(['', 'NOT '])}NULL"
    if t == "boolean":
        return c if rng.random() < 0.5 else f"{c} = {literal(t, rng)}"
    if r < 0.5:
        return f"{c} IN ({literal(t, rng)}, {literal(t, rng)})"
    op = rng.choice(["=", "<>", "<", "<=", ">", ">="])
    other = _cols_of(cols, (t,))
    rhs = rng.choice(other) if other and rng.random() < 0.3 else expr(rng, cols, t, depth + 1)
    return f"{expr(rng, cols, t, 2)} {op} {rhs}"


# ---- relations ---------------------------------------------------------------------------------

def from_item(ctx: Ctx, rel: Rel, alias: str) -> tuple[str, str]:
    """``rel`` in a FROM clause under ``alias``: the table, a CTE or a subquery."""
    if rel.table:
        return f"{rel.engine} AS {alias}", f"{rel.oracle} AS {alias}"
    if ctx.rng.random() < 0.4:
        name = ctx.fresh("w")
        ctx.ctes.append((name, rel.engine, rel.oracle))
        return f"{name} AS {alias}", f"{name} AS {alias}"
    return f"({rel.engine}) AS {alias}", f"({rel.oracle}) AS {alias}"


def _select_list(rng: random.Random, cols: list[tuple[str, str]], n: int) -> list[tuple[str, str, str]]:
    """``n`` output columns (expression, name, type): mostly columns, some computed."""
    out = []
    for i in range(n):
        c, t = rng.choice(cols)
        if rng.random() < 0.35:
            t = rng.choice(TYPES)
            e = expr(rng, cols, t)
        else:
            e = c
        out.append((e, f"c{i}", t))
    return out


def _render(items: list[tuple[str, str, str]]) -> str:
    return ", ".join(f"{e} AS {name}" for e, name, _ in items)


def project(ctx: Ctx, rel: Rel) -> Rel:
    rng = ctx.rng
    fe, fo = from_item(ctx, rel, "p")
    cols = [(f"p.{c}", t) for c, t in rel.cols]
    items = _select_list(rng, cols, rng.randint(1, 4))
    where = f" WHERE {pred(rng, cols)}" if rng.random() < 0.6 else ""
    distinct = "DISTINCT " if rng.random() < 0.2 else ""
    sel = f"SELECT {distinct}{_render(items)} FROM "
    return Rel(sel + fe + where, sel + fo + where, [(n, t) for _, n, t in items])


def join(ctx: Ctx, left: Rel, right: Rel) -> Rel | None:
    rng = ctx.rng
    pairs = [(a, b) for a, ta in left.cols for b, tb in right.cols if ta == tb and ta != "boolean"]
    if not pairs:
        return None
    keys = rng.sample(pairs, min(len(pairs), rng.choice([1, 1, 2])))
    kind = rng.choice(["JOIN", "JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL OUTER JOIN"])
    on = " AND ".join(f"l.{a} = r.{b}" for a, b in keys)
    lcols, rcols = [(f"l.{c}", t) for c, t in left.cols], [(f"r.{c}", t) for c, t in right.cols]
    extra = rng.random()
    if extra < 0.2:
        on += f" AND {pred(rng, rcols)}"
    elif extra < 0.3:
        on += f" AND {pred(rng, lcols)}"
    elif extra < 0.4:
        (a, ta), (b, tb) = rng.choice(lcols), rng.choice(rcols)
        if ta == tb and ta in ORDERED:
            on += f" AND {a} {rng.choice(['<', '<>', '>='])} {b}"
    both = lcols + rcols
    items = _select_list(rng, both, rng.randint(1, 4))
    if kind == "FULL OUTER JOIN" and rng.random() < 0.5:
        a, b = keys[0]
        t = dict(left.cols)[a]
        items.append((f"coalesce(l.{a}, r.{b})", f"c{len(items)}", t))
    where = f" WHERE {pred(rng, both)}" if rng.random() < 0.3 else ""
    le, lo = from_item(ctx, left, "l")
    re_, ro = from_item(ctx, right, "r")
    sel = f"SELECT {_render(items)} FROM "
    return Rel(f"{sel}{le} {kind} {re_} ON {on}{where}", f"{sel}{lo} {kind} {ro} ON {on}{where}",
               [(n, t) for _, n, t in items])


def _aggregate(rng: random.Random, cols: list[tuple[str, str]], arrow_only: bool = False,
               family: tuple[str, ...] = ("sum", "avg", "min", "max")) -> tuple[str, str]:
    """One aggregate call and its (comparable) result type."""
    f = rng.choice(["count(*)", "count", "count_distinct", *family])
    if f == "count(*)":
        return "count(*)", "long"
    if f in ("count", "count_distinct"):
        c, _ = rng.choice(cols)
        return (f"count(DISTINCT {c})" if f == "count_distinct" else f"count({c})"), "long"
    if f in ("sum", "avg"):  # Arrow keeps no exact running totals of decimals and doubles
        t = rng.choice(("long", "int") if arrow_only else NUMERIC)
        e = expr(rng, cols, t, 1)
        # DISTINCT over integers, on a property of the text rather than a new draw (the queries
        # the seeds drew before stay as they were)
        d = "DISTINCT " if t in ("long", "int") and len(e) % 3 == 0 else ""
        return f"{f}({d}{e})", "double" if f == "avg" else t
    t = rng.choice(ORDERED)
    return f"{f}({expr(rng, cols, t, 1)})", t


def aggregate(ctx: Ctx, rel: Rel) -> Rel:
    rng = ctx.rng
    fe, fo = from_item(ctx, rel, "g")
    cols = [(f"g.{c}", t) for c, t in rel.cols]
    groups = []
    for _ in range(rng.choice([0, 1, 1, 2])):
        c, t = rng.choice(cols)
        e = c if rng.random() < 0.7 else expr(rng, cols, t, 1)
        if e not in [g for g, _ in groups] and not e.lstrip("-").isdigit():  # GROUP BY 3 is an ordinal
            groups.append((e, t))
    items = [(e, f"k{i}", t) for i, (e, t) in enumerate(groups)]
    # Arrow recomputes a touched group when it has a min or max, and has no exact sums to do it with
    family = rng.choice([("sum",), ("min", "max")]) if ctx.arrow_only else ("sum", "avg", "min", "max")
    for i in range(rng.randint(1, 3)):
        a, t = _aggregate(rng, cols, ctx.arrow_only, family)
        items.append((a, f"a{i}", t))
    where = f" WHERE {pred(rng, cols)}" if rng.random() < 0.4 else ""
    group_by = f" GROUP BY {', '.join(e for e, _ in groups)}" if groups else ""
    having = ""
    if rng.random() < 0.35:
        having = rng.choice([f" HAVING count(*) > {rng.randint(1, 3)}",
                             f" HAVING {_aggregate(rng, cols, ctx.arrow_only, family)[0]} IS NOT NULL",
                             f" HAVING min({rng.choice(cols)[0]}) IS NULL OR count(*) >= 2"
                             if "min" in family else " HAVING count(*) >= 2"])
    sel = f"SELECT {_render(items)} FROM "
    tail = where + group_by + having
    return Rel(sel + fe + tail, sel + fo + tail, [(n, t) for _, n, t in items])


def setop(ctx: Ctx, left: Rel, right: Rel) -> Rel | None:
    rng = ctx.rng
    shared = [t for t in dict.fromkeys(t for _, t in left.cols) if t in {t2 for _, t2 in right.cols}]
    if not shared:
        return None
    sig = [rng.choice(shared) for _ in range(rng.choice([1, 1, 2]))]
    ops = ["UNION ALL", "UNION", "EXCEPT", "INTERSECT"] + ([] if ctx.arrow_only else ["EXCEPT ALL", "INTERSECT ALL"])
    op = rng.choice(ops)

    def side(rel: Rel, alias: str) -> tuple[str, str]:
        fe, fo = from_item(ctx, rel, alias)
        picks = [f"{alias}.{rng.choice([c for c, t in rel.cols if t == s])} AS c{i}" for i, s in enumerate(sig)]
        where = f" WHERE {pred(rng, [(f'{alias}.{c}', t) for c, t in rel.cols])}" if rng.random() < 0.3 else ""
        sel = f"SELECT {', '.join(picks)} FROM "
        return sel + fe + where, sel + fo + where

    (le, lo), (re_, ro) = side(left, "l"), side(right, "r")
    return Rel(f"{le} {op} {re_}", f"{lo} {op} {ro}", [(f"c{i}", t) for i, t in enumerate(sig)])


def _order(rng: random.Random, cols: list[tuple[str, str]]) -> list[str]:
    keys = []
    for c, _ in rng.sample(cols, min(len(cols), rng.choice([1, 1, 2]))):
        direction = rng.choice(["", " ASC", " DESC"])
        nulls = rng.choice(["", "", " NULLS FIRST", " NULLS LAST"])
        keys.append(c + direction + nulls)
    return keys


def _tie_break(keys: list[str], cols: list[str]) -> list[str]:
    """The engine's documented tie-break spelled out: the other columns, ascending, NULLS FIRST."""
    return keys + [f"{c} ASC NULLS FIRST" for c in cols]


def _explicit(keys: list[str]) -> list[str]:
    """Spark's default NULL order written out, so DuckDB (NULLS LAST by default) agrees."""
    out = []
    for k in keys:
        if "NULLS" not in k:
            k += " NULLS LAST" if k.endswith("DESC") else " NULLS FIRST"
        out.append(k)
    return out


def topk(ctx: Ctx, rel: Rel) -> Rel:
    """``rank() OVER (...) <= k`` in a subquery read by a WHERE, or ``ORDER BY ... LIMIT k``."""
    rng = ctx.rng
    k = rng.randint(1, 3)
    fe, fo = from_item(ctx, rel, "s")
    cols = [(f"s.{c}", t) for c, t in rel.cols]
    names = [n for n, _ in rel.cols]
    if rng.random() < 0.3:  # ORDER BY names output columns (the engine does not resolve s.x there)
        keys = _order(rng, list(rel.cols))
        tail = f" ORDER BY {', '.join(keys)} LIMIT {k}"
        otail = f" ORDER BY {', '.join(_tie_break(_explicit(keys), names))} LIMIT {k}"
        sel = f"SELECT {', '.join(f's.{n} AS {n}' for n in names)} FROM "
        return Rel(sel + fe + tail, sel + fo + otail, list(rel.cols))
    part = [c for c, _ in rng.sample(cols, rng.choice([0, 1, 1, 2]) if len(cols) > 1 else 0)]
    order_cols = [c for c in cols if c[0] not in part] or cols
    keys = _order(rng, order_cols)
    fn = rng.choice(["row_number", "row_number", "rank", "dense_rank"])
    over = (f"PARTITION BY {', '.join(part)} " if part else "")
    sel = ", ".join(f"s.{n} AS {n}" for n in names)
    okeys = _tie_break(_explicit(keys), [f"s.{n}" for n in names]) if fn == "row_number" else _explicit(keys)
    rn = ctx.fresh("rn")
    cond = rng.choice([f"{rn} <= {k}", f"{rn} < {k + 1}", f"{k} >= {rn}", f"{rn} = 1"])
    keep_rn = rng.random() < 0.5
    outer = ", ".join(names + ([rn] if keep_rn else []))
    inner_e = f"SELECT {sel}, {fn}() OVER ({over}ORDER BY {', '.join(keys)}) AS {rn} FROM {fe}"
    inner_o = f"SELECT {sel}, {fn}() OVER ({over}ORDER BY {', '.join(okeys)}) AS {rn} FROM {fo}"
    cols_out = list(rel.cols) + ([(rn, "int")] if keep_rn else [])
    return Rel(f"SELECT {outer} FROM ({inner_e}) AS ranked WHERE {cond}",
               f"SELECT {outer} FROM ({inner_o}) AS ranked WHERE {cond}", cols_out)


def _subquery(ctx: Ctx, outer: list[tuple[str, str]], tables: dict[str, list[tuple[str, str]]], alias: str
              ) -> tuple[str, list[tuple[str, str]]]:
    """``FROM t AS alias WHERE <correlation> [AND pred]`` over a random input, correlated with the
    ``outer`` columns on a column of the same type (=, <>, <, <=; sometimes not at all), and that
    input's columns under ``alias``."""
    rng = ctx.rng
    name = rng.choice(sorted(tables))
    cols = [(f"{alias}.{c}", t) for c, t in tables[name]]
    pairs = [(o, c) for o, to in outer for c, tc in cols if to == tc and to in ORDERED]
    conds = []
    if pairs and rng.random() < 0.85:
        o, c = rng.choice(pairs)
        conds.append(f"{c} {rng.choice(['=', '=', '<>', '<', '<='])} {o}")
    if rng.random() < 0.4:
        conds.append(pred(rng, cols, 1))
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    return f"FROM {name} AS {alias}{where}", cols


def correlated(ctx: Ctx, rel: Rel, tables: dict[str, list[tuple[str, str]]]) -> Rel:
    """A projection of ``rel`` with subqueries that read it: a scalar aggregate in the SELECT list
    (count's empty group included), and EXISTS / IN / NOT IN under OR, NOT or CASE in WHERE."""
    rng = ctx.rng
    fe, fo = from_item(ctx, rel, "p")
    cols = [(f"p.{c}", t) for c, t in rel.cols]
    items = _select_list(rng, cols, rng.randint(1, 2))
    body, inner = _subquery(ctx, cols, tables, ctx.fresh("s"))
    c, t = rng.choice(inner)
    func = rng.choice(["count(*)", f"count({c})", f"max({c})", f"min({c})"])
    kind = "long" if func.startswith("count") else t
    value = f"(SELECT {func} {body})"
    if kind in ("long", "int") and rng.random() < 0.3:
        value = f"coalesce({value}, 0) + 1"
    items.append((value, f"c{len(items)}", kind))
    where = ""
    if rng.random() < 0.8:
        body, inner = _subquery(ctx, cols, tables, ctx.fresh("s"))
        r = rng.random()
        if r < 0.4:
            test = f"{rng.choice(['', 'NOT '])}EXISTS (SELECT 1 {body})"
        else:
            probe, pt = rng.choice(cols)
            same = [ic for ic, it in inner if it == pt]
            if same:
                test = f"{probe} {rng.choice(['', 'NOT '])}IN (SELECT {rng.choice(same)} {body})"
            else:
                test = f"EXISTS (SELECT 1 {body})"
        shape = rng.random()
        if shape < 0.4:
            where = f" WHERE {test} OR {pred(rng, cols, 1)}"
        elif shape < 0.6:
            where = f" WHERE NOT ({test})"
        elif shape < 0.8:
            where = f" WHERE CASE WHEN {test} THEN {pred(rng, cols, 1)} ELSE true END"
        else:
            where = f" WHERE {test}"
    sel = f"SELECT {_render(items)} FROM "
    return Rel(sel + fe + where, sel + fo + where, [(n, t) for _, n, t in items])


def _scalar(ctx: Ctx, outer: list[tuple[str, str]], tables: dict[str, list[tuple[str, str]]]) -> tuple[str, str]:
    """An aggregate subquery correlated with ``outer`` (text without parentheses) and its type."""
    body, inner = _subquery(ctx, outer, tables, ctx.fresh("s"))
    c, t = ctx.rng.choice(inner)
    func = ctx.rng.choice(["count(*)", f"count({c})", f"max({c})", f"min({c})"])
    return f"SELECT {func} AS v {body}", "long" if func.startswith("count") else t


def correlated_grouped(ctx: Ctx, rel: Rel, tables: dict[str, list[tuple[str, str]]]) -> Rel:
    """``rel`` grouped by one of its columns, with a subquery correlated on that key in the
    SELECT list and, sometimes, an EXISTS correlated on it in HAVING."""
    rng = ctx.rng
    fe, fo = from_item(ctx, rel, "p")
    key, kt = rng.choice([(f"p.{c}", t) for c, t in rel.cols])
    sub, kind = _scalar(ctx, [(key, kt)], tables)
    items = [(key, "k0", kt), ("count(*)", "n", "long"), (f"({sub})", "c", kind)]
    having = ""
    if rng.random() < 0.5:
        body, _ = _subquery(ctx, [(key, kt)], tables, ctx.fresh("s"))
        having = f" HAVING {rng.choice(['', 'NOT '])}EXISTS (SELECT 1 {body})"
        if rng.random() < 0.3:
            having += " OR count(*) > 1"
    sel = f"SELECT {_render(items)} FROM "
    tail = f" GROUP BY {key}{having}"
    return Rel(sel + fe + tail, sel + fo + tail, [(n, t) for _, n, t in items])


def lateral(ctx: Ctx, rel: Rel, tables: dict[str, list[tuple[str, str]]]) -> Rel:
    """``rel, LATERAL (q)``: q an aggregate (one row per row of ``rel``) or a plain selection
    (rows of ``rel`` without a match dropped), correlated with ``rel``'s columns."""
    rng = ctx.rng
    fe, fo = from_item(ctx, rel, "p")
    cols = [(f"p.{c}", t) for c, t in rel.cols]
    alias = ctx.fresh("l")
    if rng.random() < 0.6:
        sub, kind = _scalar(ctx, cols, tables)
    else:
        body, inner = _subquery(ctx, cols, tables, ctx.fresh("s"))
        c, kind = rng.choice(inner)
        sub = f"SELECT {c} AS v {body}"
    items = _select_list(rng, cols, rng.randint(1, 2)) + [(f"{alias}.v", "lv", kind)]
    join = f", LATERAL ({sub}) AS {alias}"
    sel = f"SELECT {_render(items)} FROM "
    return Rel(sel + fe + join, sel + fo + join, [(n, t) for _, n, t in items])


def relation(ctx: Ctx, tables: dict[str, list[tuple[str, str]]], depth: int) -> Rel:
    rng = ctx.rng
    if depth <= 0 or rng.random() < 0.3:
        name = rng.choice(sorted(tables))
        return Rel(name, name, tables[name], table=True)
    shapes: list[Callable[[], Rel | None]] = [
        lambda: project(ctx, relation(ctx, tables, depth - 1)),
        lambda: join(ctx, relation(ctx, tables, depth - 1), relation(ctx, tables, depth - 1)),
        lambda: join(ctx, relation(ctx, tables, depth - 1), relation(ctx, tables, depth - 1)),
        lambda: aggregate(ctx, relation(ctx, tables, depth - 1)),
        lambda: aggregate(ctx, relation(ctx, tables, depth - 1)),
        lambda: setop(ctx, relation(ctx, tables, depth - 1), relation(ctx, tables, depth - 1)),
        lambda: topk(ctx, relation(ctx, tables, depth - 1)),
    ]
    for _ in range(10):
        out = rng.choice(shapes)()
        if out is not None:
            return out
    name = rng.choice(sorted(tables))
    return Rel(name, name, tables[name], table=True)


def query(rng: random.Random, tables: dict[str, list[tuple[str, str]]], arrow_only: bool = False) -> tuple[str, str]:
    """One random query (engine text, DuckDB text) over ``tables``; never a bare table."""
    ctx = Ctx(rng, arrow_only)
    rel = relation(ctx, tables, rng.choice([1, 2, 2, 3]))
    if rel.table:
        rel = project(ctx, rel)
    if not ctx.ctes:
        return rel.engine, rel.oracle
    with_e = ", ".join(f"{n} AS ({e})" for n, e, _ in ctx.ctes)
    with_o = ", ".join(f"{n} AS ({o})" for n, _, o in ctx.ctes)
    return f"WITH {with_e} {rel.engine}", f"WITH {with_o} {rel.oracle}"


def subquery_query(rng: random.Random, tables: dict[str, list[tuple[str, str]]], arrow_only: bool = False,
                   shape: Callable[[Ctx, Rel, dict[str, list[tuple[str, str]]]], Rel] | None = None
                   ) -> tuple[str, str]:
    """A query with correlated (or uncorrelated) subqueries over a random relation (``shape``:
    ``correlated`` by default, or ``correlated_grouped`` / ``lateral``)."""
    ctx = Ctx(rng, arrow_only)
    rel = (shape or correlated)(ctx, relation(ctx, tables, rng.choice([0, 1, 1, 2])), tables)
    if not ctx.ctes:
        return rel.engine, rel.oracle
    with_e = ", ".join(f"{n} AS ({e})" for n, e, _ in ctx.ctes)
    with_o = ", ".join(f"{n} AS ({o})" for n, _, o in ctx.ctes)
    return f"WITH {with_e} {rel.engine}", f"WITH {with_o} {rel.oracle}"


# ---- a case --------------------------------------------------------------------------------------

@dataclass
class Case:
    tables: dict[str, dict[str, str]]  # input -> column -> type
    queries: list[tuple[str, str]]  # (engine, oracle)


def domain(t: str) -> Callable[[random.Random], Any]:
    pool = _POOLS[t]
    return lambda r: None if r.random() < 0.25 else r.choice(pool)


def random_case(seed: int, n_queries: int = 5, arrow_only: bool = False) -> Case:
    """Inputs ``a``, ``b`` (and maybe ``c``) whose first column has a type shared by all, so every
    pair of inputs can join; then ``n_queries`` random queries (``arrow_only``: of the constructs
    the in-process engine runs, so a long local run stays off Spark)."""
    rng = random.Random(seed)
    key_type = rng.choice(["long", "long", "string", "int", "date"])
    tables: dict[str, dict[str, str]] = {}
    for name in ["a", "b", "c"][: rng.choice([2, 3, 3])]:
        cols = {f"{name}k": key_type}
        for i in range(rng.randint(1, 3)):
            cols[f"{name}{i}"] = rng.choice(TYPES)
        tables[name] = cols
    listed = {n: list(c.items()) for n, c in tables.items()}
    queries = [query(rng, listed, arrow_only) for _ in range(n_queries)]
    # and two with subqueries, from an RNG of their own (the queries above stay what each seed drew)
    sub = random.Random(seed * 7919 + 17)
    queries += [subquery_query(sub, listed, arrow_only) for _ in range(2)]
    return Case(tables, queries)


def shaped_case(seed: int, arrow_only: bool = False) -> Case:
    """``random_case``'s inputs for ``seed`` and two queries of the grouped and LATERAL correlated
    shapes (``correlated_grouped``: a subquery on the group key in SELECT, EXISTS in HAVING;
    ``lateral``), from an RNG of their own: a seed of ``random_case`` keeps its queries."""
    tables = random_case(seed, n_queries=0, arrow_only=arrow_only).tables
    listed = {n: list(c.items()) for n, c in tables.items()}
    rng = random.Random(seed * 104729 + 29)
    return Case(tables, [subquery_query(rng, listed, arrow_only, shape) for shape in (correlated_grouped, lateral)])


def circuit_text(tables: dict[str, dict[str, str]], queries: dict[str, str]) -> str:
    """A circuit of the inputs and one SQL node per query (named ``q<i>``), all of them outputs."""
    lines = ["name: sqlfuzz", "inputs:"]
    for name, cols in tables.items():
        schema = ", ".join(f'{c}: "{t}"' for c, t in cols.items())
        lines += [f"  {name}:", f"    schema: {{{schema}}}",
                  f"    source: {{kind: changes, path: inbox/{name}, format: parquet}}"]
    lines.append("nodes:")
    for node, q in queries.items():
        lines += [f"  {node}:", "    op: sql", "    query: |", f"      {q}"]
    lines.append(f"outputs: [{', '.join(queries)}]")
    return "\n".join(lines) + "\n"
