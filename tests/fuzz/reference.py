"""A from-scratch reference evaluator of a circuit over Python bags: obviously correct, not fast.

It reads a ``CircuitSpec`` as the real loader and validator produced it, and at every timestep
evaluates every node again from the integrated inputs, following the definition of
each op in docs/reference/ (written here independently of the engine: output columns and their naming rules,
SQL NULL semantics, bag/set semantics, aggregates, stream operators, recursion). A relation is
a ``Counter`` of tuples (a Z-set: weights may be negative after ``differentiate``).

- ``select``/``filter``: expressions in the fuzzer's subset (``sql.py``); WHERE keeps TRUE only.
- Set operators compare whole tuples with NULLs equal (SQL set semantics); ``join`` and
  ``antijoin`` never match a NULL key.
- ``aggregate`` counts a tuple with its multiplicity when its weight is positive (the engine's
  documented rule); without ``group_by`` there is exactly one row, even on empty input.
- ``integrate``/``delay``/``differentiate`` act on the stream of their input's values, so the
  evaluator keeps the history it needs from its own earlier steps.
- ``recursive``: the least fixed point by naive (Jacobi) iteration from empty: every body node,
  and the recursive node's own name, reads the previous iteration's values.
"""
from __future__ import annotations

import math
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import Any, Iterable

from . import sql

Bag = Counter  # tuple -> weight
Schema = tuple[tuple[str, str], ...]  # (column, type)
MAX_ITERATIONS = 5000


class NotEvaluable(RuntimeError):
    """The circuit is outside what the reference evaluates (or its recursion diverges)."""


def clean(bag: Bag) -> Bag:
    return Counter({k: w for k, w in bag.items() if w})


def _names(schema: Schema) -> tuple[str, ...]:
    return tuple(c for c, _ in schema)


# ---- output columns ------------------------------------------------------------------------

def join_schema(left: Schema, right: Schema, right_name: str, on: Iterable[str] = ()) -> Schema:
    """docs/reference/circuits.md: with ``on`` the keys once (left order), left's others, right's others; else all
    left then all right. A right column whose name is taken becomes ``<right>_<col>``."""
    on = tuple(on)
    if on:
        out = [c for c in left if c[0] in on] + [c for c in left if c[0] not in on]
        rest = [c for c in right if c[0] not in on]
    else:
        out, rest = list(left), list(right)
    taken = {c for c, _ in out}
    for col, typ in rest:
        name = col if col not in taken else f"{right_name}_{col}"
        if name in taken:
            raise NotEvaluable(f"column {col!r} of {right_name!r} clashes after renaming")
        taken.add(name)
        out.append((name, typ))
    return tuple(out)


def aggregate_type(func: str, distinct: bool, arg_type: str | None) -> str:
    """Spark's result type of one aggregate."""
    if func == "count":
        return "long"
    assert arg_type is not None
    if func in ("min", "max"):
        return arg_type
    ps = sql.decimal_ps(arg_type)
    if ps:
        p, s = ps
        return sql._bounded(p + 10, s) if func == "sum" else sql._bounded(p + 4, s + 4)
    if func == "sum" and arg_type in sql.INTEGRAL:
        return "long"
    return "double"


class _Node:
    """One node as the reference runs it: its schema and the parsed parts of its spec."""

    def __init__(self, spec: Any, schema: Schema, exprs: dict[str, sql.Expr], reads: dict[str, Schema]) -> None:
        self.spec = spec
        self.schema = schema
        self.exprs = exprs  # "where", "col:<name>", "agg:<name>" -> tree
        self.reads = reads  # schema of each name it reads (rows are read by column name)

    def source(self, side: str = "input") -> Schema:
        return self.reads[getattr(self.spec, side)]


def _env(schema: Schema) -> sql.Env:
    return {c.lower(): t for c, t in schema}


def _build(spec: Any, lookup) -> _Node | None:
    """The reference's view of one node (None while an input's schema is unknown)."""
    op = spec.op
    refs = [r for r in (spec.input, *spec.inputs, spec.left, spec.right) if r]
    schemas = [lookup(r) for r in refs]
    if any(s is None for s in schemas):
        return None
    reads = dict(zip(refs, schemas))
    if op in ("filter", "distinct", "delay", "integrate", "differentiate"):
        exprs = {"where": sql.parse(spec.where)} if op == "filter" else {}
        return _Node(spec, schemas[0], exprs, reads)
    if op in ("select", "map"):
        env = _env(schemas[0])
        exprs = {f"col:{name}": sql.parse(text) for name, text in spec.columns}
        schema = tuple((name, sql.type_of(exprs[f"col:{name}"], env)) for name, _ in spec.columns)
        return _Node(spec, schema, exprs, reads)
    if op in ("union", "union_all", "difference", "intersect"):
        return _Node(spec, schemas[0], {}, reads)
    if op in ("join", "product"):
        return _Node(spec, join_schema(schemas[0], schemas[1], spec.right, spec.on), {}, reads)
    if op == "antijoin":
        return _Node(spec, schemas[0], {}, reads)
    if op == "aggregate":
        env = _env(schemas[0])
        exprs, out = {}, [c for g in spec.group_by for c in schemas[0] if c[0] == g]
        for a in spec.aggregates:
            arg_type = None
            if a.arg is not None:
                exprs[f"agg:{a.name}"] = sql.parse(a.arg)
                arg_type = sql.type_of(exprs[f"agg:{a.name}"], env)
            out.append((a.name, aggregate_type(a.func, a.distinct, arg_type)))
        return _Node(spec, tuple(out), exprs, reads)
    raise NotEvaluable(f"op {op!r} is not evaluated by the reference")


class _Recursive:
    """A recursive node: its body's nodes, typed by iterating over the body's cycle (a set
    operator takes its first input's columns, so ``union(base, step)`` is typed from ``base``)."""

    def __init__(self, spec: Any, outer) -> None:
        self.spec = spec
        schemas: dict[str, Schema] = {}

        def lookup(ref: str) -> Schema | None:
            if ref in spec.body:
                return schemas.get(ref)
            return schemas.get(spec.outputs[0]) if ref == spec.name else outer(ref)

        for _ in range(len(spec.body) + 2):
            for name, b in spec.body.items():
                if name not in schemas:
                    if b.op in ("union", "union_all", "difference", "intersect"):
                        found = lookup((b.inputs or (b.left,))[0])
                    else:
                        found = node.schema if (node := _build(b, lookup)) is not None else None
                    if found is not None:
                        schemas[name] = found
        missing = set(spec.body) - set(schemas)
        if missing:
            raise NotEvaluable(f"recursive {spec.name!r}: cannot type body nodes {sorted(missing)}")
        self.body = {name: _build(b, lookup) for name, b in spec.body.items()}
        self.schema = schemas[spec.outputs[0]]

    def fixed_point(self, outer_value) -> Bag:
        """Jacobi iteration from empty: every body reference reads the previous iteration."""
        first = self.spec.outputs[0]
        values: dict[str, Bag] = {name: Counter() for name in self.body}
        for _ in range(MAX_ITERATIONS):
            def value(ref: str) -> Bag:
                if ref in values:
                    return values[ref]
                if ref == self.spec.name:
                    return values[first]
                return outer_value(ref)
            new = {name: clean(_apply(node, value, {})) for name, node in self.body.items()}
            if new == values:
                return values[first]
            values = new
        raise NotEvaluable(f"recursive {self.spec.name!r}: no fixed point in {MAX_ITERATIONS} iterations")


# ---- operators on bags ---------------------------------------------------------------------

def _rows(schema: Schema, bag: Bag) -> Iterable[tuple[dict[str, Any], tuple, int]]:
    names = [c.lower() for c in _names(schema)]
    for t, w in bag.items():
        yield dict(zip(names, t)), t, w


def _align(schema: Schema, like: Schema, bag: Bag) -> Bag:
    """``bag`` with its columns put in ``like``'s order (set operators match columns by name)."""
    idx = [_names(schema).index(c) for c in _names(like)]
    out: Bag = Counter()
    for t, w in bag.items():
        out[tuple(t[i] for i in idx)] += w
    return out


def _positive(bag: Bag) -> Bag:
    return Counter({t: w for t, w in bag.items() if w > 0})


def _distinct(bag: Bag) -> Bag:
    return Counter({t: 1 for t, w in bag.items() if w > 0})


def _key(t: tuple, idx: list[int]) -> tuple | None:
    k = tuple(t[i] for i in idx)
    return None if any(v is None for v in k) else k


def _join(node: _Node, left: Schema, a: Bag, right: Schema, b: Bag) -> Bag:
    spec = node.spec
    ls, rs = left, right
    if spec.op == "product":
        lk, rk = [], []
    elif spec.on:
        lk = [_names(ls).index(c) for c in spec.on]
        rk = [_names(rs).index(c) for c in spec.on]
    else:
        lk = [_names(ls).index(c) for c in spec.left_on]
        rk = [_names(rs).index(c) for c in spec.right_on]
    by_key: dict[tuple, list[tuple[tuple, int]]] = {}
    for r, w in b.items():
        k = _key(r, rk)
        if k is not None:
            by_key.setdefault(k, []).append((r, w))
    if spec.on:  # keys once (left order), left's others, right's others
        l_order = [i for i, c in enumerate(_names(ls)) if c in spec.on] + \
                  [i for i, c in enumerate(_names(ls)) if c not in spec.on]
        r_order = [i for i, c in enumerate(_names(rs)) if c not in spec.on]
    else:
        l_order, r_order = list(range(len(ls))), list(range(len(rs)))
    out: Bag = Counter()
    for t, w in a.items():
        k = _key(t, lk)
        for r, v in by_key.get(k, []) if k is not None else []:
            out[tuple(t[i] for i in l_order) + tuple(r[i] for i in r_order)] += w * v
    return out


def _antijoin(node: _Node, left: Schema, a: Bag, right: Schema, b: Bag) -> Bag:
    spec = node.spec
    lkeys, rkeys = (spec.on, spec.on) if spec.on else (spec.left_on, spec.right_on)
    lk = [_names(left).index(c) for c in lkeys]
    rk = [_names(right).index(c) for c in rkeys]
    present = {k for r, w in b.items() if w > 0 and (k := _key(r, rk)) is not None}
    return Counter({t: w for t, w in a.items() if _key(t, lk) not in present})


def _sum(values: list[Any]) -> Any:
    if any(isinstance(v, float) for v in values):
        return math.fsum(values)
    return sum(values[1:], values[0])


def _aggregate(node: _Node, schema: Schema, bag: Bag) -> Bag:
    spec = node.spec
    gi = [_names(schema).index(g) for g in spec.group_by]
    groups: dict[tuple, list[tuple[dict, int]]] = {}
    if not spec.group_by:
        groups[()] = []
    for row, t, w in _rows(schema, _positive(bag)):
        groups.setdefault(tuple(t[i] for i in gi), []).append((row, w))
    out: Bag = Counter()
    for key, members in groups.items():
        values = []
        for a in spec.aggregates:
            if a.arg is None:
                values.append(sum(w for _, w in members))
                continue
            expr = node.exprs[f"agg:{a.name}"]
            args = [(sql.evaluate(expr, row), w) for row, w in members]
            args = [(v, w) for v, w in args if v is not None]
            values.append(_aggregate_value(a.func, a.distinct, args, dict(node.schema)[a.name]))
        out[key + tuple(values)] += 1
    return out


def _aggregate_value(func: str, distinct: bool, args: list[tuple[Any, int]], out_type: str) -> Any:
    """One aggregate over the non-null (value, multiplicity) pairs of a group."""
    if func == "count":
        return len({v for v, _ in args}) if distinct else sum(w for _, w in args)
    if not args:
        return None
    if func == "min":
        return min(v for v, _ in args)
    if func == "max":
        return max(v for v, _ in args)
    with localcontext() as ctx:
        ctx.prec = 60
        total = _sum([v * w for v, w in args])
        if func == "sum":
            return total
        count = sum(w for _, w in args)
        if ps := sql.decimal_ps(out_type):
            return (Decimal(total) / count).quantize(Decimal(1).scaleb(-ps[1]), rounding=ROUND_HALF_UP)
        return float(total) / count if isinstance(total, float) else total / count


def _apply(node: _Node, value, history: dict[str, Any]) -> Bag:
    """The node's value given ``value(ref)`` of what it reads (``history``: stream operators)."""
    spec = node.spec
    op = spec.op
    if op == "filter":
        where = node.exprs["where"]
        return Counter({t: w for row, t, w in _rows(node.schema, value(spec.input))
                        if sql.evaluate(where, row) is True})
    if op in ("select", "map"):
        out: Bag = Counter()
        exprs = [node.exprs[f"col:{name}"] for name, _ in spec.columns]
        for row, _, w in _rows(node.source(), value(spec.input)):
            out[tuple(sql.evaluate(e, row) for e in exprs)] += w
        return out
    if op == "distinct":
        return _distinct(value(spec.input))
    if op in ("union", "union_all"):
        refs = spec.inputs or (spec.left, spec.right)
        total: Bag = Counter()
        for ref in refs:
            total.update(_align(node.reads[ref], node.schema, value(ref)))
        return _distinct(total) if op == "union" else total
    if op in ("difference", "intersect"):
        a = _distinct(value(spec.left))
        b = _distinct(_align(node.source("right"), node.schema, value(spec.right)))
        keep = (lambda t: t not in b) if op == "difference" else (lambda t: t in b)
        return Counter({t: 1 for t in a if keep(t)})
    if op in ("join", "product", "antijoin"):
        kernel = _antijoin if op == "antijoin" else _join
        return kernel(node, node.source("left"), value(spec.left), node.source("right"), value(spec.right))
    if op == "aggregate":
        return _aggregate(node, node.source(), value(spec.input))
    if op in ("integrate", "delay", "differentiate"):
        current = value(spec.input)
        previous = history.get(spec.name, {"sum": Counter(), "last": Counter()})
        total = plus(previous["sum"], current)
        history[spec.name] = {"sum": total, "last": current}
        if op == "integrate":
            return total
        if op == "delay":
            return previous["last"]
        return plus(current, Counter({t: -w for t, w in previous["last"].items()}))
    raise NotEvaluable(f"op {op!r} is not evaluated by the reference")


def plus(a: Bag, b: Bag) -> Bag:
    """a + b, zero weights dropped."""
    out = Counter(a)
    for t, w in b.items():
        out[t] += w
    return clean(out)


class Reference:
    """The reference evaluator of one circuit; ``step`` takes the integrated inputs of a timestep."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec
        self.schemas: dict[str, Schema] = {
            name: tuple((c.name, sql.norm_type(c.type)) for c in inp.columns) for name, inp in spec.inputs.items()}
        self.nodes: dict[str, _Node | _Recursive] = {}
        pending = dict(spec.nodes)
        while pending:
            progressed = False
            for name, node_spec in list(pending.items()):
                if node_spec.op == "recursive":
                    if all(d in self.schemas for d in node_spec.dependencies):
                        rec = _Recursive(node_spec, self.schemas.get)
                        self.nodes[name], self.schemas[name] = rec, rec.schema
                        del pending[name]
                        progressed = True
                    continue
                built = _build(node_spec, self.schemas.get)
                if built is not None:
                    self.nodes[name], self.schemas[name] = built, built.schema
                    del pending[name]
                    progressed = True
            if not progressed:
                raise NotEvaluable(f"cannot order nodes {sorted(pending)}")
        self.order = list(self.nodes)
        self.history: dict[str, Any] = {}

    def columns(self, view: str) -> tuple[str, ...]:
        return _names(self.schemas[view])

    def step(self, inputs: dict[str, Bag], every_node: bool = False) -> dict[str, Bag]:
        """Every view's value (or every node's), computed from scratch from the integrated ``inputs``."""
        values: dict[str, Bag] = {name: clean(inputs.get(name, Counter())) for name in self.spec.inputs}
        for name in self.order:
            node = self.nodes[name]
            if isinstance(node, _Recursive):
                values[name] = node.fixed_point(values.__getitem__)
            else:
                values[name] = clean(_apply(node, values.__getitem__, self.history))
        return values if every_node else {view: values[view] for view in self.spec.outputs}

