"""The reference for W1 Q3: one DBSP step written by hand as direct DataFrame code.

It does what the engine's incremental circuit does for bench/circuits/w1_tpch.yaml, with the same
state layout (it reads the engine's committed traces), but with nothing generic: no circuit
walk, no quality gate, no manifest. Per step it reads the change files, computes

    Δco = Δc ⋈ Δo + z(Ic) ⋈ Δo + Δc ⋈ z(Io)           (customer ⋈ orders, Theorem 3.4)
    Δj  = Δco ⋈ Δl + z(Ico) ⋈ Δl + Δco ⋈ z(Il)         (⋈ lineitem)
    totals' = totals(Δj) per group (exact: integer limbs for the double sum, as the engine);  Δq3 = -old row + new row of each touched group

and writes what a step must persist: the four integrator deltas, the totals delta and the view
delta (6 Parquet writes), each delta broadcast when it looks state up. The engine's step is
judged against this one ("within 1.5x of a hand-written step").
"""
from __future__ import annotations

import os
import time
import uuid
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType

from spark_jobs.executor.spark.exact_sum import ExactSum
from spark_jobs.executor.spark.session import step_conf
from spark_jobs.executor.sources import spark_schema
from spark_jobs.runtime.circuit import CircuitRuntime
from spark_jobs.runtime.step import pending_inputs

from bench.workloads.harness import job_group

W = "_weight"
KEYS = ["l_orderkey", "o_orderdate", "o_shippriority"]
# the engine's trace ids for this circuit (integrators and the linear aggregate's totals)
TRACES = {"c": "I(cust_keys)", "o": "I(order_cols)", "co": "I(cust_orders)", "l": "I(items)", "q3": "q3"}
ORDER_COLS = ["o_custkey", "o_orderkey", "o_orderdate", "o_shippriority"]
CO_COLS = ["c_custkey", *ORDER_COLS]


def _changes(spark: SparkSession, rt: CircuitRuntime, name: str) -> DataFrame:
    files = [f.path for f in pending_inputs(rt)[name]]
    schema = spark_schema(rt.compiled.spec.inputs[name])
    if not files:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(*files)


def _join(a: DataFrame, b: DataFrame, on: tuple[str, str], cols: list[str]) -> DataFrame:
    """a ⋈ b on a.on[0] = b.on[1], weights multiplied; ``cols`` picked from both sides."""
    a2 = a.withColumnRenamed(W, "__wa")
    b2 = b.withColumnRenamed(W, "__wb")
    if on[0] == on[1]:
        b2 = b2.withColumnRenamed(on[1], "__k")
        cond = a2[on[0]] == b2["__k"]
    else:
        cond = a2[on[0]] == b2[on[1]]
    return a2.join(b2, cond).select(*cols, (F.col("__wa") * F.col("__wb")).alias(W))


def _term_sum(delta_a: DataFrame, delta_b: DataFrame, prev_a: DataFrame | None, prev_b: DataFrame | None,
              on: tuple[str, str], cols: list[str]) -> DataFrame:
    """Δa⋈Δb + z(Ia)⋈Δb + Δa⋈z(Ib), the deltas broadcast against the state."""
    out = _join(delta_a, delta_b, on, cols)
    if prev_a is not None:
        out = out.unionByName(_join(prev_a, F.broadcast(delta_b), on, cols))
    if prev_b is not None:
        out = out.unionByName(_join(F.broadcast(delta_a), prev_b, on, cols))
    return out


def step(rt: CircuitRuntime, out_dir: str) -> DataFrame:
    """Compute and write one Q3 step from the pending change files and the committed state;
    returns the view delta (read back from its Parquet file)."""
    spark = rt.spark
    read = rt.store.read_trace
    dc = (_changes(spark, rt, "customer").where("c_mktsegment = 'BUILDING'").select("c_custkey", W))
    do = (_changes(spark, rt, "orders").where("o_orderdate < date '1995-03-15'").select(*ORDER_COLS, W))
    dl = (_changes(spark, rt, "lineitem").where("l_shipdate > date '1995-03-15'")
          .select("l_orderkey", "l_linenumber", (F.col("l_extendedprice") * (1 - F.col("l_discount"))).alias("volume"), W))
    dco = _term_sum(dc, do, read(TRACES["c"]), read(TRACES["o"]), ("c_custkey", "o_custkey"), CO_COLS).cache()
    dj = _term_sum(dco, dl, read(TRACES["co"]), read(TRACES["l"]), ("o_orderkey", "l_orderkey"),
                   [*CO_COLS, "l_orderkey", "l_linenumber", "volume"])
    revenue = ExactSum(slot="__s0", x="volume", arg_type=DoubleType(), sum_type=DoubleType(),
                       label="q3.revenue", weight=W)  # the engine's exact totals (exact_sum.py)
    cols = ["__rows", "__c0", *(c.name for c in revenue.columns())]
    acc = dj.groupBy(*KEYS).agg(F.sum(W).alias("__rows"),
                                F.sum(F.when(F.col("volume").isNotNull(), F.col(W)).otherwise(0)).alias("__c0"),
                                *(F.sum(F.expr(c.term)).cast(c.type).alias(c.name) for c in revenue.columns())
                                ).cache()
    prev = read(TRACES["q3"])
    new = acc.select(*KEYS, *(F.col(c).alias(f"d_{c}") for c in cols))
    if prev is not None:
        old = (prev.join(F.broadcast(acc.select(*KEYS)), KEYS, "left_semi")
               .groupBy(*KEYS).agg(*(F.sum(c).alias(f"o_{c}") for c in cols)))
        both = new.join(old, KEYS, "left")
    else:
        both = new.select("*", *(F.lit(None).alias(f"o_{c}") for c in cols))
    both = both.select(*KEYS, *(F.coalesce(F.col(f"o_{c}"), F.lit(0)).cast(acc.schema[c].dataType).alias(f"o_{c}")
                                for c in cols),
                       *(F.col(f"d_{c}") for c in cols))
    both = both.select("*", *((F.col(f"o_{c}") + F.col(f"d_{c}")).cast(acc.schema[c].dataType).alias(f"n_{c}")
                              for c in cols))
    old_row = F.struct(F.when(F.col("o___c0") > 0, F.expr(revenue.value("o_"))).alias("revenue"),
                       F.col("o___rows").alias("items"), F.lit(-1).cast("long").alias(W),
                       (F.col("o___rows") > 0).alias("ok"))
    new_row = F.struct(F.when(F.col("n___c0") > 0, F.expr(revenue.value("n_"))).alias("revenue"),
                       F.col("n___rows").alias("items"), F.lit(1).cast("long").alias(W),
                       (F.col("n___rows") > 0).alias("ok"))
    view = (both.select(*KEYS, F.explode(F.array(old_row, new_row)).alias("r")).where("r.ok")
            .select(*KEYS, "r.revenue", "r.items", f"r.{W}"))
    for name, df in (("c", dc), ("o", do), ("l", dl), ("co", dco), ("q3", acc), ("view", view)):
        df.write.mode("error").parquet(os.path.join(out_dir, name))
    dco.unpersist()
    acc.unpersist()
    return spark.read.parquet(os.path.join(out_dir, "view"))


def measure(rt: CircuitRuntime) -> dict[str, Any]:
    """Time one hand-written step (same session, small-change settings as the engine's step);
    its files go to a fresh folder under the data root (``view_dir``: its view delta)."""
    out_dir = os.path.join(rt.config.data_root, "handwritten", uuid.uuid4().hex[:8])
    with job_group(rt.spark, "handwritten") as jobs, step_conf(rt.spark, True):
        started = time.perf_counter()
        step(rt, out_dir)
        seconds = time.perf_counter() - started
    return {"seconds": seconds, "jobs": jobs.count, "view_dir": os.path.join(out_dir, "view")}
