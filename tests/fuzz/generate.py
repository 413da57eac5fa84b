"""Random circuits over every YAML op, and random change streams for their inputs.

A circuit is drawn as the YAML document a user would write (a dict, dumped by ``circuit_yaml``)
and must pass the real loader and validator. The generator tracks each relation's columns and
types (with the reference's rules) so that every expression is well typed, every join has keys
of one type and every set operator gets inputs with the same columns.

What is drawn: 1-3 inputs of 2-4 columns (long, string, double, date, decimal(10,2)); 2-7
nodes, each reading earlier inputs or nodes (select/map with computed columns, filter,
union_all, union, difference, intersect, join with ``on`` or ``left_on``/``right_on`` and
composite keys, product, antijoin, distinct, aggregate with every function with and without
``group_by``, integrate/delay/differentiate, and ``recursive`` nodes from a few shapes whose
fixed point exists: set closures, bag closures over an acyclic relation, a bounded counter,
mutual recursion); 1-3 of them published as views.

Two things are kept out on purpose, because the engine refuses them by design rather than
computing something else: a view that may hold negative weights (``differentiate`` and what
is linear in it; the quality gate refuses a negative weight in a view) and an ``aggregate`` over
such a relation (an aggregate is defined on relations). ``SIGNED_VIEWS`` lets them in.
"""
from __future__ import annotations

import datetime
import random
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable

import yaml

from spark_jobs.spec import load_circuit_text
from tests.streams import RandomRelation

from . import sql
from .reference import Reference, Schema, aggregate_type, join_schema, plus

Batch = dict[str, Counter]  # input name -> {row tuple: weight} of one timestep
SIGNED_VIEWS = False

INPUT_TYPES = ("long", "string", "double", "date", "decimal(10,2)")
COLUMN_POOL = ("k", "x", "y", "s", "d", "m")
OPS = ("select", "map", "filter", "union_all", "union", "difference", "intersect", "join", "product",
       "antijoin", "distinct", "aggregate", "integrate", "delay", "differentiate", "recursive")
ORDERABLE = ("long", "int", "string", "double", "date")
_STRINGS = ("a", "b", "c", "B")
_DOUBLES = (0.5, 1.25, -2.0, 0.1, 0.2, 3.0)
_DAY0 = datetime.date(2024, 1, 1)


@dataclass
class Case:
    """One fuzz case: a circuit as YAML text and the input changes of each timestep."""

    seed: int
    doc: dict[str, Any]
    batches: list[Batch]

    @property
    def yaml(self) -> str:
        return circuit_yaml(self.doc)


def circuit_yaml(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=110)


# ---- expressions -------------------------------------------------------------------------

def _orderable(t: str) -> bool:
    return t in ORDERABLE or sql.decimal_ps(t) is not None


def _family(t: str) -> str:
    """Types that compare with each other without a cast Spark and Python would do differently."""
    if t in sql.INTEGRAL or sql.decimal_ps(t):
        return "exact"
    return t


class Expressions:
    """Well-typed random expressions over a relation's columns."""

    def __init__(self, rng: random.Random, schema: Schema) -> None:
        self.rng = rng
        self.cols = list(schema)

    def columns_of(self, want: Callable[[str], bool]) -> list[sql.Col]:
        return [sql.Col(c) for c, t in self.cols if want(t)]

    def literal(self, t: str) -> sql.Lit:
        r = self.rng
        if t in sql.INTEGRAL:
            return sql.Lit(r.randint(0, 3), "int")
        if t == "double":
            return sql.Lit(r.choice((0.5, 2.0, -1.0)), "double")
        if sql.decimal_ps(t):
            return sql.Lit(r.choice((Decimal("1.5"), Decimal("0.25"), Decimal("2.0"))),
                           "decimal(2,1)")  # type fixed below
        if t == "string":
            return sql.Lit(r.choice(_STRINGS), "string")
        if t == "date":
            return sql.Lit(_DAY0 + datetime.timedelta(days=r.randint(0, 3)), "date")
        return sql.Lit(r.random() < 0.5, "boolean")

    def of(self, t: str, depth: int = 2) -> sql.Expr:
        """An expression of type ``t`` (decimals: some decimal type)."""
        r = self.rng
        exact = [c for c in self.columns_of(lambda u: u == t or (sql.decimal_ps(t) and sql.decimal_ps(u))
                                             or (t in sql.INTEGRAL and u in sql.INTEGRAL))]
        if depth <= 0 or r.random() < 0.35:
            if exact and r.random() < 0.85:
                return r.choice(exact)
            lit = self.literal(t)
            return sql.parse(sql.render(lit)) if sql.decimal_ps(t) else lit
        sub = lambda: self.of(t, depth - 1)  # noqa: E731
        choices: list[Callable[[], sql.Expr]] = [
            lambda: sql.Case(self.predicate(depth - 1), sub(), sub()),
            lambda: sql.Func("coalesce", (sub(), self.literal(t) if not sql.decimal_ps(t) else sub())),
        ]
        if t in sql.INTEGRAL:
            choices += [lambda: sql.Bin(r.choice("+-*"), sub(), sql.Lit(r.randint(1, 3), "int")),
                        lambda: sql.Bin("%", sub(), sql.Lit(r.randint(2, 3), "int")),
                        lambda: sql.Func("abs", (sub(),))]
            if self.columns_of(lambda u: u == "string"):
                choices.append(lambda: sql.Func("length", (self.of("string", depth - 1),)))
            if self.columns_of(lambda u: u == "date"):
                choices.append(lambda: sql.Func("datediff", (self.of("date", depth - 1), self.literal("date"))))
        elif t == "double":
            choices += [lambda: sql.Bin(r.choice("+-*"), sub(), sub()),
                        lambda: sql.Cast(self.of("long", depth - 1), "double")]
        elif sql.decimal_ps(t):
            choices += [lambda: sql.Bin(r.choice("+-"), sub(), sub()),
                        lambda: sql.Bin("*", sub(), sql.Lit(r.randint(1, 3), "int"))]
        elif t == "string":
            choices += [lambda: sql.Func(r.choice(("upper", "lower")), (sub(),)),
                        lambda: sql.Func("concat", (sub(), self.literal("string"))),
                        lambda: sql.Cast(self.of("long", depth - 1), "string")]
        elif t == "date":
            choices += [lambda: sql.Func("date_add", (sub(), sql.Lit(r.randint(0, 2), "int")))]
        return r.choice(choices)()

    def predicate(self, depth: int = 2) -> sql.Expr:
        r = self.rng
        roll = r.random()
        if depth > 0 and roll < 0.25:
            op = r.choice(("and", "or"))
            return sql.Bin(op, self.predicate(depth - 1), self.predicate(depth - 1))
        if depth > 0 and roll < 0.32:
            return sql.Not(self.predicate(depth - 1))
        if roll < 0.45 and self.cols:
            return sql.IsNull(r.choice(self.columns_of(lambda u: True)), r.random() < 0.5)
        t = r.choice([t for _, t in self.cols if t != "boolean"] or ["long"])
        left = self.of(t, depth - 1)
        right = self.of(t, 0) if r.random() < 0.6 else self.literal(t)
        if sql.decimal_ps(t) and isinstance(right, sql.Lit):
            right = sql.parse(sql.render(right))
        ops = sql.COMPARISONS if _orderable(t) else ("=", "<>")
        return sql.Bin(r.choice(ops), left, right)


# ---- circuits ----------------------------------------------------------------------------

@dataclass
class Rel:
    """A relation nodes can read: an input or a node, its columns, and whether it may be signed."""

    name: str
    schema: Schema
    signed: bool = False
    cost: int = 1  # rough size factor: products and joins of big relations are avoided


@dataclass
class CircuitBuilder:
    rng: random.Random
    name: str
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    rels: list[Rel] = field(default_factory=list)
    counter: int = 0

    def fresh(self, prefix: str = "n") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def rel(self, name: str) -> Rel:
        return next(r for r in self.rels if r.name == name)

    def pick(self, *, unsigned: bool = False, max_cost: int = 99, exclude: tuple[str, ...] = ()) -> Rel | None:
        options = [r for r in self.rels if (not unsigned or not r.signed) and r.cost <= max_cost
                   and r.name not in exclude]
        if not options:
            return None
        weights = [1 + i for i in range(len(options))]  # later relations more often: deeper circuits
        return self.rng.choices(options, weights)[0]

    def add(self, node: dict[str, Any], schema: Schema, signed: bool, cost: int, name: str | None = None) -> Rel:
        name = name or self.fresh()
        self.nodes[name] = node
        rel = Rel(name, schema, signed, cost)
        self.rels.append(rel)
        return rel

    # -- inputs --

    def add_inputs(self) -> None:
        r = self.rng
        types = {c: r.choice(INPUT_TYPES) for c in COLUMN_POOL}
        types["k"] = "long"
        for i in range(r.choice((1, 2, 2, 3))):
            cols = ["k"] if r.random() < 0.8 else []
            cols += r.sample([c for c in COLUMN_POOL if c not in cols], r.randint(2, 4) - len(cols))
            r.shuffle(cols)
            name = f"in{i}"
            self.inputs[name] = {"schema": {c: types[c] for c in cols},
                                 "source": {"kind": "changes", "path": f"inbox/{name}", "format": "parquet"}}
            self.rels.append(Rel(name, tuple((c, types[c]) for c in cols)))

    # -- one node per op --

    def select(self, op: str = "select") -> Rel | None:
        src = self.pick()
        r = self.rng
        if src is None:
            return None
        if r.random() < 0.3:  # list form: a projection (maybe reordered)
            cols = r.sample([c for c, _ in src.schema], r.randint(1, len(src.schema)))
            schema = tuple(next(c for c in src.schema if c[0] == name) for name in cols)
            return self.add({"op": op, "input": src.name, "columns": cols}, schema, src.signed, src.cost)
        ex = Expressions(r, src.schema)
        columns: dict[str, str] = {}
        schema: list[tuple[str, str]] = []
        env = {c.lower(): t for c, t in src.schema}
        for _ in range(r.randint(1, 3)):
            if r.random() < 0.4:
                name, t = r.choice(src.schema)
                expr: sql.Expr = sql.Col(name)
            else:
                t = r.choice([t for _, t in src.schema])
                expr = ex.of(t)
                name = self.fresh("e")
            if name in columns:
                continue
            columns[name] = sql.render(expr)
            schema.append((name, sql.type_of(expr, env)))
        return self.add({"op": op, "input": src.name, "columns": columns}, tuple(schema), src.signed, src.cost)

    def filter(self) -> Rel | None:
        src = self.pick()
        if src is None:
            return None
        where = sql.render(Expressions(self.rng, src.schema).predicate())
        return self.add({"op": "filter", "input": src.name, "where": where}, src.schema, src.signed, src.cost)

    def same_columns(self, like: Rel) -> Rel:
        """A relation with ``like``'s columns and types: one that has them, or a select that
        makes them from another relation (its columns of the right types, or literals)."""
        r = self.rng
        same = [x for x in self.rels if x is not like and set(x.schema) == set(like.schema)]
        if same and r.random() < 0.7:
            return r.choice(same)
        src = self.pick(exclude=(like.name,)) or like
        ex = Expressions(r, src.schema)
        columns: dict[str, str] = {}
        order = list(like.schema)
        if r.random() < 0.5:
            r.shuffle(order)  # set operators match columns by name, not position
        for name, t in order:
            fits = [c for c, u in src.schema if u == t]
            if fits and r.random() < 0.8:
                columns[name] = r.choice(fits)
            else:
                lit = ex.literal(t)
                columns[name] = sql.render(lit if not sql.decimal_ps(t) else sql.Cast(lit, t))
        return self.add({"op": "select", "input": src.name, "columns": columns}, tuple(order), src.signed, src.cost)

    def set_op(self, op: str) -> Rel | None:
        a = self.pick()
        if a is None:
            return None
        others = [self.same_columns(a) for _ in range(1 if op != "union_all" and op != "union"
                                                      else self.rng.choice((1, 1, 2)))]
        if op in ("union_all", "union"):
            node = {"op": op, "inputs": [a.name] + [o.name for o in others]}
            if len(others) == 1 and self.rng.random() < 0.3:
                node = {"op": op, "left": a.name, "right": others[0].name}
            signed = op == "union_all" and (a.signed or any(o.signed for o in others))
        else:
            node = {"op": op, "left": a.name, "right": others[0].name}
            signed = False
        return self.add(node, a.schema, signed, a.cost + sum(o.cost for o in others))

    def _keys(self, a: Rel, b: Rel) -> dict[str, Any] | None:
        """``on`` or ``left_on``/``right_on`` with 1-2 type-matched column pairs, or None."""
        r = self.rng
        shared = [c for c in a.schema if c in b.schema]
        if shared and r.random() < 0.6:
            return {"on": [c for c, _ in r.sample(shared, min(len(shared), r.choice((1, 1, 2))))]}
        pairs = [(x, y) for x, t in a.schema for y, u in b.schema if t == u]
        if not pairs:
            return None
        chosen = r.sample(pairs, min(len(pairs), r.choice((1, 1, 2))))
        left = [x for x, _ in chosen]
        right = [y for _, y in chosen]
        if len(set(left)) < len(left) or len(set(right)) < len(right):
            chosen = chosen[:1]
        return {"left_on": [x for x, _ in chosen], "right_on": [y for _, y in chosen]}

    def join(self, op: str) -> Rel | None:
        max_cost = 2 if op == "product" else 4
        a = self.pick(max_cost=max_cost)
        b = self.pick(max_cost=max_cost)
        if a is None or b is None:
            return None
        if op == "product":
            a = self._small(a)
            b = self._small(b)
            keys: dict[str, Any] = {}
        else:
            keys = self._keys(a, b) or {}
            if not keys:
                return None
        try:
            schema = a.schema if op == "antijoin" else join_schema(a.schema, b.schema, b.name, keys.get("on", ()))
        except Exception:
            return None  # a clash even after renaming: the validator would ask for a select
        node = {"op": op, "left": a.name, "right": b.name, **keys}
        signed = a.signed or (b.signed and op != "antijoin")
        cost = a.cost if op == "antijoin" else a.cost * b.cost + 1
        return self.add(node, schema, signed, cost)

    def _small(self, rel: Rel) -> Rel:
        """A filtered copy, so a product stays tens of rows."""
        where = sql.render(Expressions(self.rng, rel.schema).predicate(1))
        return self.add({"op": "filter", "input": rel.name, "where": where}, rel.schema, rel.signed, rel.cost)

    def distinct(self) -> Rel | None:
        src = self.pick()
        return src and self.add({"op": "distinct", "input": src.name}, src.schema, False, src.cost)

    def stream(self, op: str) -> Rel | None:
        src = self.pick()
        if src is None:
            return None
        signed = src.signed or op == "differentiate"
        return self.add({"op": op, "input": src.name}, src.schema, signed, src.cost + (op == "integrate"))

    def aggregate(self, src: Rel | None = None, grouped: bool = True) -> Rel | None:
        src = src or self.pick(unsigned=not SIGNED_VIEWS)
        if src is None:
            return None
        r = self.rng
        env = {c.lower(): t for c, t in src.schema}
        size = r.choice((0, 1, 1, 2)) if grouped and len(src.schema) > 1 else 0
        group = [c for c, _ in r.sample(src.schema, size)]
        ex = Expressions(r, src.schema)
        aggs: dict[str, str] = {}
        schema = [c for c in src.schema if c[0] in group]
        schema.sort(key=lambda c: group.index(c[0]))
        for _ in range(r.randint(1, 3)):
            func = r.choice(("count", "count", "sum", "avg", "min", "max"))
            name = self.fresh("a")
            if func == "count":
                form = r.choice(("*", "x", "distinct"))
                if form == "*":
                    aggs[name], arg_type = "count(*)", None
                else:
                    t = r.choice([t for _, t in src.schema])
                    arg = sql.render(ex.of(t, 1))
                    aggs[name] = f"count({'distinct ' if form == 'distinct' else ''}{arg})"
                schema.append((name, "long"))
                continue
            if func in ("sum", "avg"):
                types = [t for _, t in src.schema if sql.is_numeric(t)] or ["long"]
            else:
                types = [t for _, t in src.schema if _orderable(t)] or ["long"]
            expr = ex.of(r.choice(types), 1)
            aggs[name] = f"{func}({sql.render(expr)})"
            schema.append((name, aggregate_type(func, False, sql.type_of(expr, env))))
        node: dict[str, Any] = {"op": "aggregate", "input": src.name}
        if group:
            node["group_by"] = group
        node["aggregates"] = aggs
        return self.add(node, tuple(schema), False, src.cost)

    # -- recursion --

    def pairs(self) -> Rel | None:
        """A two-column relation (p, q) of one orderable type, to recurse over."""
        r = self.rng
        options = [(rel, t) for rel in self.rels if not rel.signed and rel.cost <= 2
                   for t in dict.fromkeys(t for _, t in rel.schema if _orderable(t) and t != "double")]
        if not options:
            return None
        rel, t = r.choice(options)
        fits = [c for c, u in rel.schema if u == t]
        ex = Expressions(r, rel.schema)
        p = r.choice(fits)
        q = r.choice(fits) if len(fits) > 1 and r.random() < 0.8 else sql.render(ex.of(t, 1))
        return self.add({"op": "select", "input": rel.name, "columns": {"p": p, "q": q}},
                        (("p", t), ("q", t)), False, rel.cost)

    def recursive(self) -> Rel | None:
        """A recursive node; sometimes with a global aggregate over it (the shape of a known
        failure: a count of reachable nodes over a bag base case)."""
        shape = self.rng.choice(("closure", "closure", "bag_dag", "counter", "mutual"))
        rec = getattr(self, f"_rec_{shape}")()
        if rec is not None and self.rng.random() < 0.3:
            return self.aggregate(rec, grouped=False)
        return rec

    def _hop(self, body: dict, rec_ref: str, edges: Rel) -> str:
        """Body nodes: paths (p, q) extended by one edge; returns the name of the (p, q) node."""
        step, hop = self.fresh("j"), self.fresh("h")
        body[step] = {"op": "join", "left": rec_ref, "right": edges.name, "left_on": ["q"], "right_on": ["p"]}
        body[hop] = {"op": "select", "input": step, "columns": {"p": "p", "q": f"{edges.name}_q"}}
        return hop

    def _rec_closure(self) -> Rel | None:
        """The transitive closure, a set: union (or distinct of union_all) of edges and hops,
        sometimes with a filter, a stratified antijoin or a product inside the recursion."""
        edges = self.pairs()
        if edges is None:
            return None
        r = self.rng
        name = self.fresh("r")
        body: dict[str, Any] = {}
        t = edges.schema[0][1]
        hop = self._hop(body, name, edges)
        if r.random() < 0.3:
            f = self.fresh("f")
            pred = sql.render(Expressions(r, edges.schema).predicate(1))
            body[f] = {"op": "filter", "input": hop, "where": pred}
            hop = f
        if r.random() < 0.3:
            lower = self.pick(unsigned=True, exclude=(name,))
            keys = [c for c, u in (lower.schema if lower else ()) if u == t]
            if lower and keys:
                aj = self.fresh("aj")
                body[aj] = {"op": "antijoin", "left": hop, "right": lower.name, "left_on": ["q"],
                            "right_on": [r.choice(keys)]}
                hop = aj
        if r.random() < 0.2:
            ends = self.fresh("pe")
            self.add({"op": "select", "input": edges.name, "columns": ["q"]}, (("q", t),), False, edges.cost,
                     name=ends)
            prod, back = self.fresh("x"), self.fresh("b")
            body[prod] = {"op": "product", "left": name, "right": ends}
            body[back] = {"op": "select", "input": prod, "columns": {"p": "p", "q": f"{ends}_q"}}
            extra = [back]
        else:
            extra = []
        out = self.fresh("u")
        if r.random() < 0.5:
            body[out] = {"op": "union", "inputs": [edges.name, hop, *extra]}
        else:
            all_ = self.fresh("ua")
            body[all_] = {"op": "union_all", "inputs": [edges.name, hop, *extra]}
            body[out] = {"op": "distinct", "input": all_}
        return self._finish_rec(name, body, out, edges.schema, edges.cost + 1)

    def _rec_bag_dag(self) -> Rel | None:
        """A bag recursion (union_all) over edges with p < q: the weights count paths."""
        edges = self.pairs()
        if edges is None:
            return None
        up = self.add({"op": "filter", "input": edges.name, "where": "(p < q)"}, edges.schema, False, edges.cost)
        name = self.fresh("r")
        body: dict[str, Any] = {}
        hop = self._hop(body, name, up)
        out = self.fresh("u")
        body[out] = {"op": "union_all", "inputs": [up.name, hop]}
        return self._finish_rec(name, body, out, up.schema, up.cost + 1)

    def _rec_counter(self) -> Rel | None:
        """(k, n) counted up from a base to a bound: a recursion with expressions in its body."""
        src = self.pick(unsigned=True)
        if src is None:
            return None
        r = self.rng
        c, t = r.choice(src.schema)
        base = self.add({"op": "select", "input": src.name, "columns": {"k": c, "n": str(r.randint(0, 2))}},
                        (("k", t), ("n", "int")), False, src.cost)
        name = self.fresh("r")
        f, inc, out = self.fresh("f"), self.fresh("i"), self.fresh("u")
        body = {f: {"op": "filter", "input": name, "where": f"(n < {r.randint(1, 4)})"},
                inc: {"op": "select", "input": f, "columns": {"k": "k", "n": "(n + 1)"}},
                out: {"op": r.choice(("union", "union_all")), "inputs": [base.name, inc]}}
        return self._finish_rec(name, body, out, base.schema, src.cost + 1)

    def _rec_mutual(self) -> Rel | None:
        """Paths of even length and of odd length, defined through each other."""
        edges = self.pairs()
        if edges is None:
            return None
        name = self.fresh("r")
        odd, even = self.fresh("od"), self.fresh("ev")
        body: dict[str, Any] = {}
        to_odd = self._hop(body, even, edges)
        to_even = self._hop(body, odd, edges)
        body[odd] = {"op": "union", "inputs": [edges.name, to_odd]}
        body[even] = {"op": "distinct", "input": to_even}
        return self._finish_rec(name, body, odd, edges.schema, edges.cost + 1, outputs=[odd, even])

    def _finish_rec(self, name: str, body: dict, out: str, schema: Schema, cost: int,
                    outputs: list[str] | None = None) -> Rel:
        return self.add({"op": "recursive", "body": body, "outputs": outputs or [out]}, schema, False, cost,
                        name=name)

    # -- the whole circuit --

    def node(self, op: str) -> Rel | None:
        if op in ("select", "map"):
            return self.select(op)
        if op in ("union_all", "union", "difference", "intersect"):
            return self.set_op(op)
        if op in ("join", "product", "antijoin"):
            return self.join(op)
        if op in ("integrate", "delay", "differentiate"):
            return self.stream(op)
        return getattr(self, op)()


def random_circuit(rng: random.Random, name: str, focus: str | None = None) -> dict[str, Any]:
    """A circuit document; ``focus`` is an op that appears at least once (if it can be built)."""
    b = CircuitBuilder(rng, name)
    b.add_inputs()
    ops = [focus] if focus else []
    ops += rng.choices(OPS, k=rng.randint(1, 6))
    made: list[Rel] = []
    for op in ops:
        rel = b.node(op)
        if rel is not None:
            made.append(rel)
    if not made:
        made.append(b.distinct())
    views = [r for r in made if SIGNED_VIEWS or not r.signed]
    if not views:
        views = [b.distinct()]
    outputs = rng.sample(views, min(len(views), rng.randint(1, 3)))
    if made[-1] in views and made[-1] not in outputs:
        outputs[0] = made[-1]
    return {"name": name, "inputs": b.inputs, "nodes": b.nodes, "outputs": sorted({o.name for o in outputs})}


# ---- streams -----------------------------------------------------------------------------

def _maybe_null(gen: Callable[[random.Random], Any], p: float = 0.15) -> Callable[[random.Random], Any]:
    return lambda rng: None if rng.random() < p else gen(rng)


def domain(t: str) -> Callable[[random.Random], Any]:
    """Small value domains, so joins match, groups collide and rows repeat (bags)."""
    t = sql.norm_type(t)
    if t in sql.INTEGRAL:
        gen: Callable[[random.Random], Any] = lambda r: r.randint(0, 4)  # noqa: E731
    elif t == "string":
        gen = lambda r: r.choice(_STRINGS)  # noqa: E731
    elif t == "double":
        gen = lambda r: r.choice(_DOUBLES)  # noqa: E731
    elif t == "date":
        gen = lambda r: _DAY0 + datetime.timedelta(days=r.randint(0, 3))  # noqa: E731
    else:
        scale = sql.decimal_ps(t)[1]
        gen = lambda r: (Decimal(r.randint(-250, 250)) / 100).quantize(Decimal(1).scaleb(-scale))  # noqa: E731
    return _maybe_null(gen)


def random_batches(rng: random.Random, inputs: dict[str, dict[str, Any]], steps: int) -> list[Batch]:
    """Per timestep, each input's change: inserts (some with multiplicity > 1), deletes of rows
    that exist, re-inserts (small domains), inputs without a change and wholly empty steps."""
    relations = {name: RandomRelation(list(spec["schema"]), {c: domain(t) for c, t in spec["schema"].items()}, rng)
                 for name, spec in inputs.items()}
    batches: list[Batch] = []
    for t in range(steps):
        batch: Batch = {}
        if t > 0 and rng.random() < 0.15:
            batches.append(batch)  # an empty step
            continue
        for name, rel in relations.items():
            if t > 0 and rng.random() < 0.25:
                continue  # this input has no change this step
            sizes = (rng.randint(6, 14), 0) if t == 0 else (rng.randint(0, 5), rng.randint(0, 4))
            change = rel.change(*sizes)
            if change:
                batch[name] = change
        batches.append(batch)
    return batches


MAX_ROWS = 600  # per node and timestep (rows times |weight|): keeps a step's data tiny


def _largest(doc: dict[str, Any], batches: list[Batch]) -> int:
    """The largest relation (rows times |weight|) any node holds at any step, per the reference."""
    ref = Reference(load_circuit_text(circuit_yaml(doc)))
    bags: dict[str, Counter] = {}
    largest = 0
    for batch in batches:
        bags = {name: plus(bags.get(name, Counter()), batch.get(name, Counter())) for name in doc["inputs"]}
        values = ref.step(bags, every_node=True)
        largest = max([largest, *(sum(abs(w) for w in v.values()) for v in values.values())])
    return largest


def random_case(seed: int, steps: int) -> Case:
    """The case of ``seed``: a circuit (with ``OPS[seed % len(OPS)]`` in it when it can be
    built) and ``steps`` timesteps of changes; drawn again while some node grows too large."""
    rng = random.Random(seed)
    focus = OPS[seed % len(OPS)]
    while True:
        doc = random_circuit(rng, f"fuzz_{seed}", focus)
        batches = random_batches(rng, doc["inputs"], steps)
        if _largest(doc, batches) <= MAX_ROWS:
            return Case(seed, doc, batches)
