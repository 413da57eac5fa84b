"""Random change streams and the DBSP correctness check I(Q^Δ(Δx)) = Q(I(Δx)).

For each timestep the incremental circuit runs on the change; the query circuit (the plain,
non-incremental translation, before any optimization) runs on the integrated inputs; the
integral of the incremental outputs must equal the query's outputs at every step.
"""
from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any, Callable

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from spark_jobs.executor.evaluate import evaluate_step
from spark_jobs.executor.memory_state import MemoryState
from spark_jobs.executor.sources import spark_schema
from spark_jobs.ir.compile import CompiledCircuit, compile_spec
from spark_jobs.spec import load_circuit, load_circuit_text, output_columns
from spark_jobs.spec.model import WEIGHT

Row = tuple
Domain = dict[str, Callable[[random.Random], Any]]


class BatchedMemoryState(MemoryState):
    """MemoryState whose ``apply`` checkpoints every new state in one Spark job, not one each.

    Lazy local checkpoints are materialized (and their lineage cut) by the first job that
    computes them, so one count over all of them does it at once; the test's time is dominated
    by the number of Spark jobs.
    """

    def apply(self, updates) -> None:
        from functools import reduce

        from pyspark.sql import functions as F

        new = {node_id: self._combine(node_id, u).localCheckpoint(eager=False) for node_id, u in updates.items()}
        if new:
            reduce(lambda a, b: a.unionByName(b), [df.select(F.lit(1).alias("one")) for df in new.values()]).count()
        self._state.update(new)


def compile_text(text: str) -> CompiledCircuit:
    spec = load_circuit_text(text)
    return compile_spec(spec, output_columns(spec))


def compile_path(path: str) -> CompiledCircuit:
    spec = load_circuit(path)
    return compile_spec(spec, output_columns(spec))


class RandomRelation:
    """A bag that changes randomly: inserts (some with multiplicity > 1) and deletes of existing rows."""

    def __init__(self, columns: list[str], domain: Domain, rng: random.Random) -> None:
        self.columns = columns
        self.domain = domain
        self.rng = rng
        self.bag: Counter = Counter()

    def change(self, inserts: int, deletes: int) -> Counter:
        delta: Counter = Counter()
        live = [r for r, w in self.bag.items() for _ in range(w)]
        for row in self.rng.sample(live, min(deletes, len(live))):
            delta[row] -= 1
        for _ in range(inserts):
            row = tuple(self.domain[c](self.rng) for c in self.columns)
            delta[row] += self.rng.choice((1, 1, 1, 2, 3))
        for row, w in delta.items():
            self.bag[row] += w
        self.bag = +self.bag  # drop zeros
        return Counter({r: w for r, w in delta.items() if w})


def zset_df(spark: SparkSession, schema: StructType, rows: Counter):
    data = [tuple(r) + (w,) for r, w in rows.items() if w]
    return spark.createDataFrame(data, schema=schema)


def to_counter(df, columns: tuple[str, ...]) -> Counter:
    out: Counter = Counter()
    if df is None:
        return out
    for r in df.select(*[f"`{c}`" for c in columns], WEIGHT).collect():
        out[_norm(tuple(r)[:-1])] += r[WEIGHT]
    return Counter({k: v for k, v in out.items() if v})


def collect_all(frames: dict[tuple[str, str], Any]) -> dict[tuple[str, str], Counter]:
    """Collect many Z-sets with one Spark job: each row becomes (tag, JSON of its columns, weight).

    Spark actions dominate the test's time, so all views of both circuits come back together.
    """
    from functools import reduce

    from pyspark.sql import functions as F

    tagged = []
    for i, (key, df) in enumerate(frames.items()):
        types = dict(df.dtypes)
        cols = [c for c in df.columns if c != WEIGHT]
        # doubles summed in a different order differ in the last bits: compare them rounded
        values = [(F.round(F.col(f"`{c}`"), 6) + F.lit(0.0)) if types[c] in ("double", "float") else F.col(f"`{c}`")
                  for c in cols]
        payload = F.to_json(F.array(*[v.cast("string") for v in values])) if cols else F.lit("[]")
        tagged.append(df.select(F.lit(i).alias("_tag"), payload.alias("_row"), F.col(WEIGHT)))
    rows = reduce(lambda a, b: a.unionByName(b), tagged).collect()
    keys = list(frames)
    out: dict[tuple[str, str], Counter] = {k: Counter() for k in keys}
    for r in rows:
        out[keys[r["_tag"]]][r["_row"]] += r[WEIGHT]
    return {k: Counter({row: w for row, w in c.items() if w}) for k, c in out.items()}


def _norm(row: tuple) -> tuple:
    """Round floats so sums computed in different orders compare equal."""
    return tuple(round(v, 6) + 0.0 if isinstance(v, float) and not math.isnan(v) else v for v in row)


def check_stream(spark: SparkSession, compiled: CompiledCircuit, relations: dict[str, RandomRelation],
                 steps: int = 20, inserts: int = 6, deletes: int = 3) -> None:
    """Run ``steps`` random timesteps and assert I(Q^Δ(Δx)) = Q(I(Δx)) for every view at every step."""
    script = ({name: rel.change(inserts, deletes) for name, rel in relations.items()} for _ in range(steps))
    check_script(spark, compiled, script)


def check_script(spark: SparkSession, compiled: CompiledCircuit, script) -> None:
    """Feed the given per-step changes (input name -> Counter of row -> weight) and assert
    I(Q^Δ(Δx)) = Q(I(Δx)) for every view after every step."""
    spec = compiled.spec
    schemas = {name: spark_schema(inp) for name, inp in spec.inputs.items()}
    inc_state, query_state = BatchedMemoryState(), BatchedMemoryState()
    integrals: dict[str, Counter] = {v: Counter() for v in spec.outputs}
    bags: dict[str, Counter] = {name: Counter() for name in spec.inputs}
    for t, deltas in enumerate(script, start=1):
        for name, d in deltas.items():
            bags[name].update(d)
            bags[name] = Counter({k: v for k, v in bags[name].items() if v})
        delta_dfs = {name: zset_df(spark, schemas[name], d) for name, d in deltas.items() if d}
        full_dfs = {name: zset_df(spark, schemas[name], bag) for name, bag in bags.items()}
        inc = evaluate_step(compiled.incremental, delta_dfs, inc_state, first_step=t == 1, input_schemas=schemas)
        full = evaluate_step(compiled.query, full_dfs, query_state, first_step=t == 1, input_schemas=schemas)
        got = collect_all({("inc", v): df for v, df in inc.outputs.items()} |
                          {("full", v): df for v, df in full.outputs.items()})
        for view in spec.outputs:
            integrals[view].update(got[("inc", view)])
            integrals[view] = Counter({k: v for k, v in integrals[view].items() if v})
            expected = got[("full", view)]
            assert integrals[view] == expected, (
                f"step {t}, view {view}: incremental != recompute\n"
                f"  only incremental: {dict(integrals[view] - expected)}\n"
                f"  only recompute:   {dict(expected - integrals[view])}\n"
                f"  deltas: {deltas}")
        inc_state.apply(inc.updates)
        query_state.apply(full.updates)
