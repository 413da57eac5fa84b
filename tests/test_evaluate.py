"""The one-timestep evaluator: I(Q^Δ(Δx)) = Q(I(Δx)) on a circuit with every operator family.

Each step evaluates the incremental circuit on the input deltas (state in a ``MemoryState``) and
checks that the integrated view deltas equal the views computed from the integrated inputs: by a
Python oracle at every step, and by the *query* circuit (stateless full kernels) at the last.
"""
from __future__ import annotations

import random
from collections import Counter

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_jobs.executor.spark import zset
from spark_jobs.executor.evaluate import StateUpdate, evaluate_step
from spark_jobs.executor.spark.memory_state import MemoryState
from spark_jobs.executor.spark.zset import WEIGHT
from spark_jobs.ir.graph import Circuit, make_node
from spark_jobs.ir.incrementalize import incrementalize

SCHEMAS = {"orders": StructType([StructField("order_id", LongType()), StructField("customer_id", LongType()),
                                  StructField("amount", LongType()), StructField("status", StringType())]),
           "customers": StructType([StructField("customer_id", LongType()), StructField("region", StringType())])}


class NoState:
    def read(self, node_id: str) -> DataFrame | None:
        return None


def shop_circuit() -> Circuit:
    """Filter, equi-join, linear and min/max aggregates (grouped and global), distinct, antijoin."""
    c = Circuit("shop", inputs={n: tuple(s.fieldNames()) for n, s in SCHEMAS.items()})
    for name, schema in SCHEMAS.items():
        c.add(make_node(name, "input", columns=schema.fieldNames(), name=name))
    c.add(make_node("paid", "filter", ["orders"], c["orders"].columns, where="status = 'paid'"))
    c.add(make_node("enriched", "join", ["paid", "customers"], ("customer_id", "order_id", "amount", "region"),
                    left_keys=("customer_id",), right_keys=("customer_id",), null_safe=False,
                    left_out=(("customer_id", "customer_id"), ("order_id", "order_id"), ("amount", "amount")),
                    right_out=(("region", "region"),)))
    c.add(make_node("by_region", "aggregate", ["enriched"], ("region", "revenue", "orders", "avg_amount"),
                    group_by=("region",), aggs=(("revenue", "sum", "amount", False), ("orders", "count", None, False),
                                                ("avg_amount", "avg", "amount", False))))
    c.add(make_node("extremes", "aggregate", ["enriched"], ("region", "biggest", "smallest", "buyers"),
                    group_by=("region",), aggs=(("biggest", "max", "amount", False), ("smallest", "min", "amount", False),
                                                ("buyers", "count", "customer_id", True))))
    c.add(make_node("totals", "aggregate", ["orders"], ("n", "total"), group_by=(),
                    aggs=(("n", "count", None, False), ("total", "sum", "amount", False))))
    c.add(make_node("top", "aggregate", ["orders"], ("top",), group_by=(), aggs=(("top", "max", "amount", False),)))
    c.add(make_node("region_names", "map", ["customers"], ("region",), columns=(("region", "upper(region)"),)))
    c.add(make_node("regions", "distinct", ["region_names"], ("region",)))
    # customers without any order: customers - semijoin(customers, distinct(order keys))
    c.add(make_node("keys", "map", ["orders"], ("customer_id",), columns=(("customer_id", "customer_id"),)))
    c.add(make_node("keyset", "distinct", ["keys"], ("customer_id",)))
    c.add(make_node("semi", "join", ["customers", "keyset"], ("customer_id", "region"),
                    left_keys=("customer_id",), right_keys=("customer_id",), null_safe=False,
                    left_out=(("customer_id", "customer_id"), ("region", "region")), right_out=()))
    c.add(make_node("semi_neg", "negate", ["semi"], ("customer_id", "region")))
    c.add(make_node("lonely", "plus", ["customers", "semi_neg"], ("customer_id", "region")))
    c.outputs = {v: v for v in ("by_region", "extremes", "totals", "top", "regions", "lonely", "enriched")}
    return c


def collect_views(frames: dict[str, DataFrame]) -> dict[str, Counter]:
    """All views (differently shaped) in one Spark job: tag -> Counter of tuples."""
    union = None
    for tag, df in frames.items():
        data = [c for c in df.columns if c != WEIGHT]
        part = df.select(F.lit(tag).alias("tag"), F.struct(*data).alias(f"t_{tag}"), F.col(WEIGHT).alias("w"))
        union = part if union is None else union.unionByName(part, allowMissingColumns=True)
    result: dict[str, Counter] = {tag: Counter() for tag in frames}
    rows: dict[str, list] = {tag: [] for tag in frames}
    for row in union.collect():
        t = tuple(row[f"t_{row['tag']}"])
        rows[row["tag"]].append(t)
        result[row["tag"]][t] += row["w"]
    for tag, ts in rows.items():  # view deltas and full views come out consolidated
        assert len(ts) == len(set(ts)) and all(result[tag].values()), f"{tag} not consolidated"
    return result


def random_changes(rng: random.Random, orders: Counter, customers: Counter) -> dict[str, list]:
    """Inserts, deletes and updates (delete + insert) of orders and customers; nulls in keys."""
    changes: dict[str, list] = {}
    rows: list = []
    live = sorted((t for t, w in orders.items() if w > 0), key=repr)
    for _ in range(rng.randint(1, 6)):
        if live and rng.random() < 0.45:
            old = live.pop(rng.randrange(len(live)))
            rows.append((old, -1))
            if rng.random() < 0.5:  # an update: same order, new status or amount
                rows.append(((old[0], old[1], rng.choice([old[2], 50]), rng.choice(["paid", "open"])), 1))
        else:
            oid = rng.randint(1, 10_000)
            rows.append(((oid, rng.choice([1, 1, 2, 3, 4, None]), rng.choice([5, 10, 20, 40, None]),
                          rng.choice(["paid", "paid", "paid", "open", None])), 1))
    if rows or rng.random() < 0.5:  # sometimes the input is missing altogether: an empty delta
        changes["orders"] = rows
    rows = [] if customers else [((i, rng.choice(["eu", "us"])), 1) for i in (1, 2, 3, 5)]
    live_c = Counter({t: w for t, w in customers.items() if w > 0})
    for _ in range(rng.randint(0, 2)):
        if +live_c and rng.random() < 0.4:
            old = rng.choice(sorted(+live_c, key=repr))
            rows.append((old, -1))
            live_c[old] -= 1
            if rng.random() < 0.5:
                rows.append(((old[0], rng.choice(["eu", "us", None])), 1))
        else:
            rows.append(((rng.choice([1, 2, 3, 4, 5, None]), rng.choice(["eu", "us", "asia", None])), 1))
    if rows:
        changes["customers"] = rows
    return changes


def ref_group(z: Counter, group_by: list[str], aggs) -> Counter:
    """GROUP BY over a positive Z-set of (name, value) rows; ``aggs`` are (func, column) on the bag."""
    groups: dict = {}
    for row, w in z.items():
        if w > 0:
            r = dict(row)
            groups.setdefault(tuple(r[g] for g in group_by), []).append((r, w))
    if not group_by and not groups:
        groups[()] = []
    out: Counter = Counter()
    for k, rows in groups.items():
        values = []
        for func, c in aggs:
            xs = [(1 if c is None else r[c], w) for r, w in rows if c is None or r[c] is not None]
            if func == "count":
                values.append(sum(w for _, w in xs))
            elif func == "count_distinct":
                values.append(len({x for x, _ in xs}))
            elif not xs:
                values.append(None)
            elif func == "sum":
                values.append(sum(x * w for x, w in xs))
            elif func == "avg":
                values.append(sum(x * w for x, w in xs) / sum(w for _, w in xs))
            else:
                values.append((min if func == "min" else max)(x for x, _ in xs))
        out[k + tuple(values)] += 1
    return out


def ref_shop(orders: Counter, customers: Counter) -> dict[str, Counter]:
    """The shop views in plain Python (SQL semantics: NULL keys never join)."""
    o_rows = {tuple(zip(SCHEMAS["orders"].fieldNames(), t)): w for t, w in orders.items() if w > 0}
    c_rows = {tuple(zip(SCHEMAS["customers"].fieldNames(), t)): w for t, w in customers.items() if w > 0}
    enriched: Counter = Counter()
    for o, wo in o_rows.items():
        od = dict(o)
        if od["status"] != "paid":
            continue
        for c, wc in c_rows.items():
            cd = dict(c)
            if od["customer_id"] is not None and od["customer_id"] == cd["customer_id"]:
                row = (("customer_id", od["customer_id"]), ("order_id", od["order_id"]),
                       ("amount", od["amount"]), ("region", cd["region"]))
                enriched[row] += wo * wc
    ordered = {r["customer_id"] for r in map(dict, o_rows) if r["customer_id"] is not None}
    return {
        "enriched": Counter({tuple(v for _, v in r): w for r, w in enriched.items()}),
        "by_region": ref_group(enriched, ["region"], [("sum", "amount"), ("count", None), ("avg", "amount")]),
        "extremes": ref_group(enriched, ["region"], [("max", "amount"), ("min", "amount"),
                                                    ("count_distinct", "customer_id")]),
        "totals": ref_group(Counter(o_rows), [], [("count", None), ("sum", "amount")]),
        "top": ref_group(Counter(o_rows), [], [("max", "amount")]),
        "regions": Counter({(r[1].upper() if r[1] is not None else None,): 1 for r in +customers}),
        "lonely": Counter({t: w for t, w in customers.items() if w > 0 and t[0] not in ordered}),
    }


def test_incremental_circuit_matches_full_recompute(spark):
    """Every step against a Python oracle; the last also against the query circuit on Spark."""
    query = shop_circuit()
    inc = incrementalize(query)
    state = MemoryState(eager=False)
    rng = random.Random(4)
    integrals = {"orders": Counter(), "customers": Counter()}
    views = {v: Counter() for v in query.outputs}
    steps = 6
    for step in range(steps):
        changes = random_changes(rng, integrals["orders"], integrals["customers"])
        deltas = {name: zset.from_rows(spark, rows, SCHEMAS[name]) for name, rows in changes.items()}
        result = evaluate_step(inc, deltas, state, first_step=step == 0, input_schemas=SCHEMAS)
        for name, rows in changes.items():
            for t, w in rows:
                integrals[name][t] += w
        frames = {f"d:{v}": df for v, df in result.outputs.items()}
        if step == steps - 1:  # the oracle of the design: Q(I(Δx)) with the full kernels
            full_inputs = {name: zset.from_rows(spark, +z, SCHEMAS[name]) for name, z in integrals.items()}
            full = evaluate_step(query, full_inputs, NoState(), first_step=True)
            assert not full.updates
            frames.update({f"f:{v}": df for v, df in full.outputs.items()})
        got = collect_views(frames)
        state.apply(result.updates)
        expected = ref_shop(integrals["orders"], integrals["customers"])
        for view in query.outputs:
            for t, w in got[f"d:{view}"].items():
                views[view][t] += w
            views[view] = Counter({t: w for t, w in views[view].items() if w})
            assert views[view] == expected[view], f"step {step} view {view}"
            if f"f:{view}" in got:
                assert got[f"f:{view}"] == expected[view], f"full recompute of {view}"
    assert all(views.values()), "every view should have rows by the end (the data is too sparse otherwise)"


def test_state_updates_of_each_stateful_node(spark):
    inc = incrementalize(shop_circuit())
    changes = {"orders": [((1, 1, 10, "paid"), 1)], "customers": [((1, "eu"), 1)]}
    deltas = {name: zset.from_rows(spark, rows, SCHEMAS[name]) for name, rows in changes.items()}
    result = evaluate_step(inc, deltas, MemoryState(), first_step=True)
    kinds = {nid: (u.kind, u.keys) for nid, u in result.updates.items()}
    assert kinds["I(paid)"] == ("append", ("customer_id",))  # looked up by the join key
    assert kinds["by_region"] == ("append", ("region",))
    assert kinds["extremes"] == ("append", ("region",))
    assert kinds["totals"] == ("append", ())
    assert kinds["I(region_names)"] == ("append", ("region",))
    assert not any(nid.startswith("z(") for nid in kinds)  # z^-1(I x) keeps no state of its own
    assert set(result.outputs) == set(shop_circuit().outputs)


def stream_circuit() -> Circuit:
    c = Circuit("raw", inputs={"x": ("k",)})
    c.add(make_node("x", "input", columns=("k",), name="x"))
    c.add(make_node("ix", "integrate", ["x"], ("k",)))
    c.add(make_node("zx", "delay", ["x"], ("k",)))
    c.add(make_node("dx", "differentiate", ["x"], ("k",)))
    c.add(make_node("zix", "delay", ["ix"], ("k",)))
    c.outputs = {"ix": "ix", "zx": "zx", "dx": "dx", "zix": "zix"}
    return c


def test_stream_operators_over_three_steps(spark):
    circuit, state = stream_circuit(), MemoryState()
    schema = {"x": StructType([StructField("k", StringType())])}
    seen = []
    for step, rows in enumerate([{("a",): 1}, {("a",): 1, ("b",): 2}, {}]):
        # an RDD-backed (not driver-local) delta: a driver-local one is never cached (it is computed)
        inputs = ({"x": spark.createDataFrame([(*t, w) for t, w in rows.items()], "k string, _weight long")}
                  if rows else {})
        result = evaluate_step(circuit, inputs, state, first_step=step == 0, input_schemas=schema, persist=True)
        assert set(result.updates) == {"ix", "zx", "dx"}
        assert len(result.persisted) == (1 if rows else 0)  # x is read three times; integrals are never cached
        assert result.updates["zx"].kind == "replace" and result.updates["ix"].kind == "append"
        seen.append(collect_views(dict(result.outputs)))
        state.apply(result.updates)
        result.release()
    a, b = ("a",), ("b",)
    assert [s["ix"] for s in seen] == [Counter({a: 1}), Counter({a: 2, b: 2}), Counter({a: 2, b: 2})]
    assert [s["zix"] for s in seen] == [Counter(), Counter({a: 1}), Counter({a: 2, b: 2})]
    assert [s["zx"] for s in seen] == [Counter(), Counter({a: 1}), Counter({a: 1, b: 2})]
    assert [s["dx"] for s in seen] == [Counter({a: 1}), Counter({b: 2}), Counter({a: -1, b: -2})]


def test_missing_input_without_schema_and_scope_without_output_are_errors(spark):
    circuit = stream_circuit()
    with pytest.raises(ValueError, match="'x'"):
        evaluate_step(circuit, {}, MemoryState(), first_step=True)
    scoped = Circuit("s", inputs={"x": ("k",)})
    scoped.add(make_node("x", "input", columns=("k",), name="x"))
    scoped.add(make_node("loop", "scope", ["x"], ("k",), body=Circuit("body"), outputs=("k",)))
    scoped.outputs = {"loop": "loop"}
    with pytest.raises(ValueError, match="'loop'.*no output"):  # a scope must define its value
        evaluate_step(scoped, {"x": zset.from_rows(spark, {}, "k string")}, MemoryState(), first_step=True)
    update = StateUpdate("append", zset.from_rows(spark, {}, "k string"))
    assert update.keys == ()
