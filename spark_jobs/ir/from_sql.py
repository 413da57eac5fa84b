"""Lower the relational plan of an ``sql`` node (``spec/sql/plan.py``) into IR operators.

Most plan nodes are one IR operator (map, filter, join, aggregate, distinct, plus). The others
are built from existing operators, in the style of section 7.5 of the DBSP paper (antijoin =
a - semijoin(a, distinct(keys of b))), so that each keeps only the state its keys need and a
timestep touches only the keys in its change:

- **semijoin** (EXISTS, IN): ``a ⋈ distinct(π_keys b)``: the distinct's ``H`` looks up only the
  keys that changed in ``b``, and emits a key only when its existence flips; the join then
  touches the rows of ``a`` with those keys (and ``Δa`` the key set). A residual condition reads
  ``a``'s columns too: the set is then ``distinct(π_{keys, columns it reads}(σ(π a ⋈ b)))``.
- **antijoin** (NOT EXISTS): ``a - semijoin``.
- **outer join**: ``σ(a ⋈ b) + pad(a - semijoin(a, matched))``: the inner join, plus the rows
  of the preserved side that match nothing, padded with NULLs (typed by the union with the
  inner join's columns). The matched set is the key set of the other side, or, when the ON
  condition reads both sides beyond keys, the distinct preserved-side columns of the inner join.
- **NOT IN**: the antijoin on non-null matches, then SQL's NULL rules with two one-row flags
  (the subquery has a row; it has a NULL): rows go only when a flag flips, as SQL says they must.
- **EXCEPT ALL / INTERSECT ALL**: per-tuple counts of both sides (a linear aggregate), then
  ``max(a - b, 0)`` / ``least(a, b)`` copies of each tuple (a flat map, linear).
- **top-k** (``row_number()``/``rank()``/``dense_rank()`` filtered by ``<= k``, ``ORDER BY ... LIMIT
  k``): one ``topk`` operator (``ir/ops/topk.py``), whose incremental form reads only the groups in
  the change.
- **GROUP BY window(ts, size[, slide])**: ``window_assign`` (``ir/ops/window.py``) under the
  aggregate, added by the same helper as a YAML ``aggregate.window``.
- **WITH RECURSIVE**: a ``scope`` whose body is ``distinct(base + step(z⁻¹ r))``, the same
  nested incremental circuit a YAML ``recursive`` node becomes; what does not depend on the
  recursion is hoisted out of the loop. A step that aggregates or negates the CTE is the while
  loop instead: an ``iterate`` (``ir/ops/iterate.py``) over the body ``distinct(base + step(r))``.

Every IR node keeps the SQL fragment it implements in its ``sql`` param (explain, draw).
"""
from __future__ import annotations

from typing import Any, Sequence

from spark_jobs.ir.graph import Circuit, Node, make_node
from spark_jobs.ir.ops.window import add_window_assign
from spark_jobs.ir.scope import DEFAULT_MAX_ITERATIONS, delta0, feedback_id, finish_scope
from spark_jobs.spec.model import NodeSpec
from spark_jobs.spec.sql import plan as P
from spark_jobs.spec.sql.node import bind_node
from spark_jobs.spec.time import WindowSpec

ONE = "__one"  # the column of a one-row flag relation


def q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def identity(cols: Sequence[str]) -> tuple[tuple[str, str], ...]:
    return tuple((c, c) for c in cols)


class Lowering:
    """Adds the IR nodes of one sql node's plan to a circuit; ids are ``<node>.<op><n>``.

    A recursive CTE is lowered by a nested ``Lowering`` into the body of a ``scope`` (``outer``
    is then the enclosing one: what it has lowered, and the circuit's relations, enter the body
    through ``δ0``; the CTE's own reference is the back edge ``z⁻¹``).
    """

    def __init__(self, circuit: Circuit, name: str, max_iterations: int = DEFAULT_MAX_ITERATIONS,
                 outer: "Lowering | None" = None, loop: tuple[P.Loop, str] | None = None,
                 imports: list[str] | None = None) -> None:
        self.c = circuit
        self.name = name
        self.max_iterations = max_iterations
        self.outer = outer
        self.loop = loop  # (the Loop plan, the body node it reads as of the previous iteration)
        self.imports = imports  # a while loop's body: the outer relations it reads (its input nodes)
        self.done: dict[int, str] = {}  # id(plan node) -> IR node id (a CTE read twice is lowered once)
        self.count = outer.count if outer else 0

    # ---- helpers: one IR node each ---------------------------------------------------------

    def add(self, op: str, inputs: Sequence[str], cols: Sequence[str], sql: str, node_id: str | None = None,
            is_set: bool = False, **params) -> str:
        if node_id is None:
            self.count += 1
            node_id = self.c.fresh_id(f"{self.name}.{op}{self.count}")
        node = make_node(node_id, op, inputs, cols, origin=self.name, is_set=is_set, **params, sql=sql)
        return self.c.add(node).id

    def cols(self, node_id: str) -> tuple[str, ...]:
        return self.c[node_id].columns

    def map(self, src: str, exprs: Sequence[tuple[str, str]], sql: str, node_id: str | None = None) -> str:
        return self.add("map", [src], [n for n, _ in exprs], sql, node_id, columns=tuple(exprs))

    def project(self, src: str, cols: Sequence[str], sql: str, renames: Sequence[tuple[str, str]] = ()) -> str:
        """``src``'s columns ``cols`` (or ``renames``: (source, output) pairs)."""
        pairs = tuple(renames) or identity(cols)
        return self.map(src, [(out, q(s)) for s, out in pairs], sql)

    def filter(self, src: str, where: str, sql: str, node_id: str | None = None) -> str:
        return self.add("filter", [src], self.cols(src), sql, node_id, is_set=self.c[src].is_set, where=where)

    def plus(self, parts: Sequence[str], cols: Sequence[str], sql: str, node_id: str | None = None) -> str:
        return self.add("plus", parts, cols, sql, node_id)

    def minus(self, a: str, b: str, sql: str, node_id: str | None = None) -> str:
        neg = self.add("negate", [b], self.cols(b), sql)
        return self.plus([a, neg], self.cols(a), sql, node_id)

    def distinct(self, src: str, sql: str, node_id: str | None = None) -> str:
        if self.c[src].is_set and node_id is None:
            return src
        return self.add("distinct", [src], self.cols(src), sql, node_id, is_set=True)

    def join(self, left: str, right: str, lkeys: Sequence[str], rkeys: Sequence[str], null_safe: bool,
             left_out: Sequence[tuple[str, str]], right_out: Sequence[tuple[str, str]], sql: str,
             node_id: str | None = None) -> str:
        cols = [o for _, o in left_out] + [o for _, o in right_out]
        is_set = self.c[left].is_set and self.c[right].is_set
        return self.add("join", [left, right], cols, sql, node_id, is_set=is_set, left_keys=tuple(lkeys),
                        right_keys=tuple(rkeys), null_safe=null_safe, left_out=tuple(left_out),
                        right_out=tuple(right_out))

    def semijoin(self, rows: str, keyset: str, lkeys: Sequence[str], rkeys: Sequence[str], null_safe: bool,
                 sql: str, node_id: str | None = None) -> str:
        """Rows of ``rows`` whose keys are in the set ``keyset`` (multiplicities of ``rows`` kept)."""
        return self.join(rows, keyset, lkeys, rkeys, null_safe, identity(self.cols(rows)), (), sql, node_id)

    def keyset(self, src: str, keys: Sequence[str], sql: str) -> str:
        """distinct(π_keys src); with no keys, the one-row flag "src is not empty"."""
        if not keys:
            return self.distinct(self.map(src, [(ONE, "1")], sql), sql)
        return self.distinct(self.project(src, keys, sql), sql)

    # ---- plan nodes ------------------------------------------------------------------------

    def lower(self, rel: P.Rel, node_id: str | None = None) -> str:
        if id(rel) in self.done:
            return self.done[id(rel)]
        if self.outer is not None and id(rel) in self.outer.done:
            return self._outer_ref(self.outer.done[id(rel)])
        method = getattr(self, "_" + type(rel).__name__.lower())
        out = method(rel, node_id)
        self.done[id(rel)] = out
        return out

    def _table(self, rel: P.Table, node_id: str | None) -> str:
        name = rel.name if self.outer is None else self._outer_ref(rel.name)
        if node_id is not None:  # the whole query is one table: the node is its copy
            return self.map(name, [(c, q(c)) for c in rel.columns], rel.sql, node_id)
        return name

    def _outer_ref(self, outer_id: str) -> str:
        """An outer relation read inside a loop's body: through ``δ0`` in a recursive scope, as an
        ``input`` node of a while loop's body (whose value the ``iterate`` node passes in)."""
        if self.imports is None:
            return delta0(self.c, self.outer.c, outer_id)
        if outer_id not in self.c:
            src = self.outer.c[outer_id]
            self.c.inputs[outer_id] = src.columns
            self.c.add(make_node(outer_id, "input", out=src.columns, origin=self.name, is_set=src.is_set,
                                 name=outer_id))
            self.imports.append(outer_id)
        return outer_id

    def _loop(self, rel: P.Loop, node_id: str | None) -> str:
        assert self.loop is not None and self.loop[0] is rel, "a recursive step reads its own CTE only"
        source = self.loop[1]
        if self.imports is not None:  # a while loop: the previous iteration is the body's input
            return source
        fid = feedback_id(source)
        if fid not in self.c:
            self.c.add(make_node(fid, "feedback", out=rel.columns, origin=self.name, source=source, sql=rel.sql))
        return fid

    def _recursive(self, rel: P.Recursive, node_id: str | None) -> str:
        """The least fixed point of base UNION step: a scope whose body is distinct(base + step)."""
        if rel.while_loop:
            return self._while(rel, node_id)
        body = Circuit(f"{self.name}.{rel.name}.body")
        value = f"{self.name}.{rel.name}"
        inner = Lowering(body, self.name, self.max_iterations, outer=self, loop=(rel.loop, value))
        base, step = inner.lower(rel.base), inner.lower(rel.step)
        total = inner.plus([base, step], rel.columns, f"(base + step) {rel.sql}")
        inner.add("distinct", [total], rel.columns, rel.sql, value, is_set=True)
        self.count = inner.count
        body.outputs = {value: value}
        scope_id = node_id or self.c.fresh_id(value)
        return finish_scope(self.c, scope_id, self.name, body, rel.columns, self.max_iterations, sql=rel.sql).id

    def _while(self, rel: P.Recursive, node_id: str | None) -> str:
        """A step that aggregates or negates the CTE: the while loop of section 7.6, ``x :=
        distinct(base); x := distinct(base + step(x))`` until it stops changing, an ``iterate``
        whose body is a query circuit reading ``x`` and the outer relations as its inputs."""
        from spark_jobs.ir.optimize import consolidate_distinct

        init = self.distinct(self.lower(rel.base), f"(base) {rel.sql}")
        value = f"{self.name}.{rel.name}"
        body = Circuit(f"{value}.body", inputs={value: rel.columns})
        body.add(make_node(value, "input", out=rel.columns, origin=self.name, name=value))
        inner = Lowering(body, self.name, self.max_iterations, outer=self, loop=(rel.loop, value), imports=[])
        base, step = inner.lower(rel.base), inner.lower(rel.step)
        total = inner.plus([base, step], rel.columns, f"(base + step) {rel.sql}")
        out = inner.add("distinct", [total], rel.columns, rel.sql, f"{value}.next", is_set=True)
        self.count = inner.count
        body.outputs = {"value": out}
        body = consolidate_distinct(body)
        loop_id = node_id or self.c.fresh_id(value)
        return self.c.add(make_node(loop_id, "iterate", [init, *inner.imports], rel.columns, origin=self.name,
                                    body=body, loop=value, imports=tuple(inner.imports), output=out,
                                    max_iterations=self.max_iterations, sql=rel.sql)).id

    def _map(self, rel: P.Map, node_id: str | None) -> str:
        return self.map(self.lower(rel.input), rel.exprs, rel.sql, node_id)

    def _filter(self, rel: P.Filter, node_id: str | None) -> str:
        return self.filter(self.lower(rel.input), rel.where, rel.sql, node_id)

    def _distinct(self, rel: P.Distinct, node_id: str | None) -> str:
        return self.add("distinct", [self.lower(rel.input)], rel.columns, rel.sql, node_id, is_set=True)

    def _windowassign(self, rel: P.WindowAssign, node_id: str | None) -> str:
        if node_id is None:
            self.count += 1
            node_id = self.c.fresh_id(f"{self.name}.window{self.count}")
        window = WindowSpec(rel.column, rel.size_us, rel.slide_us)
        return add_window_assign(self.c, node_id, self.lower(rel.input), window, origin=self.name, sql=rel.sql)

    def _aggregate(self, rel: P.Aggregate, node_id: str | None) -> str:
        return self.add("aggregate", [self.lower(rel.input)], rel.columns, rel.sql, node_id, is_set=True,
                        group_by=rel.group_by, aggs=rel.aggs)

    def _topk(self, rel: P.TopK, node_id: str | None) -> str:
        assert rel.k is not None, "the binder refuses a ranking without its <= k filter"
        return self.add("topk", [self.lower(rel.input)], rel.columns, rel.sql, node_id,
                        partition_by=rel.partition_by, order_by=rel.order_by, k=rel.k, rank=rel.rank,
                        rank_column=rel.rank_column)

    def _join(self, rel: P.Join, node_id: str | None) -> str:
        left, right = self.lower(rel.left), self.lower(rel.right)
        if rel.kind == "inner":
            return self.join(left, right, rel.left_keys, rel.right_keys, rel.null_safe, rel.left_out, rel.right_out,
                             rel.sql, node_id)
        assert not rel.null_safe, "null-safe keys are for inner joins"
        lf = self.filter(left, rel.left_only, f"(left side) {rel.sql}") if rel.left_only else left
        rf = self.filter(right, rel.right_only, f"(right side) {rel.sql}") if rel.right_only else right
        inner = self.join(lf, rf, rel.left_keys, rel.right_keys, False, rel.left_out, rel.right_out,
                          f"(matches) {rel.sql}")
        if rel.mixed:
            inner = self.filter(inner, rel.mixed, f"(matches) {rel.sql}")
        parts = [inner]
        lcols = [o for _, o in rel.left_out]
        rnames = [o for _, o in rel.right_out]
        if rel.kind in ("left", "full"):
            idcols = _dedup(list(rel.left_keys) + [c for c in rel.mixed_refs if c in lcols])
            matched = self._matched(inner, rf, rel.left_keys, rel.right_keys, idcols, identity(idcols), rel)
            unmatched = self.minus(left, self.semijoin(lf, matched, idcols if rel.mixed else rel.left_keys,
                                                       idcols if rel.mixed else rel.right_keys, bool(rel.mixed),
                                                       f"(left rows with a match) {rel.sql}"),
                                   f"(left rows without a match) {rel.sql}")
            parts.append(self.map(unmatched, [(c, q(c)) for c in lcols] + [(c, "NULL") for c in rnames],
                                  f"(NULL-padded left rows) {rel.sql}"))
        if rel.kind in ("right", "full"):
            src_of = {out: src for src, out in rel.right_out}
            ids_out = _dedup([next(o for s, o in rel.right_out if s == k) for k in rel.right_keys]
                             + [c for c in rel.mixed_refs if c in rnames])
            idcols = [src_of[o] for o in ids_out]
            matched = self._matched(inner, lf, rel.right_keys, rel.left_keys, idcols,
                                    tuple((o, src_of[o]) for o in ids_out), rel)
            unmatched = self.minus(right, self.semijoin(rf, matched, idcols if rel.mixed else rel.right_keys,
                                                        idcols if rel.mixed else rel.left_keys, bool(rel.mixed),
                                                        f"(right rows with a match) {rel.sql}"),
                                   f"(right rows without a match) {rel.sql}")
            parts.append(self.map(unmatched, [(c, "NULL") for c in lcols] + [(o, q(s)) for s, o in rel.right_out],
                                  f"(NULL-padded right rows) {rel.sql}"))
        return self.plus(parts, rel.columns, rel.sql, node_id)

    def _matched(self, inner: str, other: str, own_keys: Sequence[str], other_keys: Sequence[str],
                 idcols: Sequence[str], from_inner: Sequence[tuple[str, str]], rel: P.Join) -> str:
        """The set a preserved-side row must be in to have a match: the other side's key set, or
        (a condition beyond keys) the distinct identifying columns of the matches."""
        if not rel.mixed:
            return self.keyset(other, other_keys, f"(keys with a match) {rel.sql}")
        return self.distinct(self.project(inner, (), f"(rows with a match) {rel.sql}", from_inner),
                             f"(rows with a match) {rel.sql}")

    def _semi(self, rel: P.Semi, node_id: str | None) -> str:
        left, right = self.lower(rel.left), self.lower(rel.right)
        if rel.residual is None:
            keyset = self.keyset(right, rel.right_keys, f"(keys) {rel.sql}")
            semi = self.semijoin(left, keyset, rel.left_keys, rel.right_keys, rel.null_safe,
                                 rel.sql if not rel.anti else f"(rows with a match) {rel.sql}",
                                 None if rel.anti else node_id)
        else:
            assert not rel.null_safe, "null-safe keys are for semijoins without a residual"
            idcols = _dedup(list(rel.left_keys) + list(rel.residual_left))
            probe = self.project(left, idcols, f"(columns the match reads) {rel.sql}")
            pairs = self.join(probe, right, rel.left_keys, rel.right_keys, False, identity(idcols), rel.right_out,
                              f"(candidate matches) {rel.sql}")
            pairs = self.filter(pairs, rel.residual, f"(matches) {rel.sql}")
            matched = self.distinct(self.project(pairs, idcols, f"(rows with a match) {rel.sql}"),
                                    f"(rows with a match) {rel.sql}")
            semi = self.semijoin(left, matched, idcols, idcols, True,
                                 rel.sql if not rel.anti else f"(rows with a match) {rel.sql}",
                                 None if rel.anti else node_id)
        if not rel.anti:
            return semi
        return self.minus(left, semi, rel.sql, node_id)

    def _notin(self, rel: P.NotIn, node_id: str | None) -> str:
        left, right = self.lower(rel.left), self.lower(rel.right)
        x, y = q(rel.left_key), q(rel.right_key)
        keyset = self.keyset(right, (rel.right_key,), f"(values) {rel.sql}")
        semi = self.semijoin(left, keyset, (rel.left_key,), (rel.right_key,), False, f"(rows equal to a value) {rel.sql}")
        unmatched = self.minus(left, semi, f"(rows equal to no value) {rel.sql}")
        any_row = self.keyset(right, (), f"(the subquery has a row) {rel.sql}")
        nulls = self.filter(right, f"{y} IS NULL", f"(NULL values) {rel.sql}")
        has_null = self.keyset(nulls, (), f"(the subquery has a NULL) {rel.sql}")
        nonnull = self.filter(unmatched, f"{x} IS NOT NULL", f"(non-NULL probe) {rel.sql}")
        null = self.filter(unmatched, f"{x} IS NULL", f"(NULL probe: kept only if the subquery is empty) {rel.sql}")
        unknown = self.semijoin(nonnull, has_null, (), (), False, f"(a NULL value: unknown) {rel.sql}")
        not_empty = self.semijoin(null, any_row, (), (), False, f"(NULL probe, non-empty subquery) {rel.sql}")
        parts = [nonnull, self.add("negate", [unknown], rel.columns, rel.sql),
                 null, self.add("negate", [not_empty], rel.columns, rel.sql)]
        return self.plus(parts, rel.columns, rel.sql, node_id)

    def _setop(self, rel: P.SetOp, node_id: str | None) -> str:
        left, right = self.lower(rel.left), self.lower(rel.right)
        cols = rel.columns
        if rel.kind == "union":
            if rel.all:
                return self.plus([left, right], cols, rel.sql, node_id)
            total = self.plus([left, right], cols, f"(both sides) {rel.sql}")
            return self.add("distinct", [total], cols, rel.sql, node_id, is_set=True)
        if not rel.all:
            a, b = self.distinct(left, f"(left as a set) {rel.sql}"), self.distinct(right, f"(right as a set) {rel.sql}")
            if rel.kind == "intersect":  # nulls equal, as set operators compare
                return self.join(a, b, cols, cols, True, identity(cols), (), rel.sql, node_id)
            diff = self.minus(a, b, f"(left - right) {rel.sql}")
            return self.add("distinct", [diff], cols, rel.sql, node_id, is_set=True)
        return self._bag_setop(rel, left, right, node_id)

    def _bag_setop(self, rel: P.SetOp, left: str, right: str, node_id: str | None) -> str:
        """EXCEPT ALL: max(m_a - m_b, 0) copies; INTERSECT ALL: least(m_a, m_b) copies."""
        cols = list(rel.columns)
        taken = set(cols)
        a_n, b_n, n, i = (_fresh(base, taken) for base in ("__a", "__b", "__n", "__i"))
        tag = [(c, q(c)) for c in cols]
        ta = self.map(left, tag + [(a_n, "1"), (b_n, "0")], f"(count the left) {rel.sql}")
        tb = self.map(right, tag + [(a_n, "0"), (b_n, "1")], f"(count the right) {rel.sql}")
        both = self.plus([ta, tb], cols + [a_n, b_n], f"(both sides) {rel.sql}")
        counts = self.add("aggregate", [both], cols + [a_n, b_n], f"(copies per row) {rel.sql}", is_set=True,
                          group_by=tuple(cols), aggs=((a_n, "sum", q(a_n), False), (b_n, "sum", q(b_n), False)))
        copies = f"{q(a_n)} - {q(b_n)}" if rel.kind == "except" else f"least({q(a_n)}, {q(b_n)})"
        counted = self.map(counts, tag + [(n, copies)], f"(copies per row) {rel.sql}")
        kept = self.filter(counted, f"{q(n)} > 0", f"(rows with copies) {rel.sql}")
        exploded = self.map(kept, tag + [(i, f"explode(sequence(1, {q(n)}))")], f"(one row per copy) {rel.sql}")
        return self.map(exploded, tag, rel.sql, node_id)


def _dedup(cols: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(cols))


def _fresh(base: str, taken: set[str]) -> str:
    name, i = base, 2
    while name.lower() in {t.lower() for t in taken}:
        name, i = f"{base}{i}", i + 1
    taken.add(name)
    return name


def lower_sql(circuit: Circuit, name: str, rel: P.Rel, max_iterations: int = DEFAULT_MAX_ITERATIONS) -> Node:
    """Add the IR nodes of an sql node's plan; the last one has the node's name."""
    lowering = Lowering(circuit, name, max_iterations)
    return circuit[lowering.lower(rel, name)]


def from_yaml(circuit: Circuit, node: NodeSpec, columns: dict, ctx: Any) -> Node:
    """An ``sql`` node of a circuit file (``spec/ops/sql.py`` names this function): its plan,
    bound once at validation and kept on the node, lowered."""
    return lower_sql(circuit, node.name, bind_node(node.sql, columns.get, list(columns)), ctx.max_iterations)
