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

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from spark_jobs.executor.evaluate import evaluate_step
from spark_jobs.executor.spark.memory_state import MemoryState
from spark_jobs.executor.sources import spark_schema
from spark_jobs.executor.spark.zset import from_tuples
from spark_jobs.ir.compile import CompiledCircuit, compile_spec
from spark_jobs.spec import load_circuit, load_circuit_text, output_columns
from spark_jobs.spec.model import WEIGHT

Row = tuple
Domain = dict[str, Callable[[random.Random], Any]]


class LiteralState(MemoryState):
    """MemoryState whose states are literal rows (VALUES relations) collected by the step's job.

    A test step's time is Spark's per-job and per-stage overhead: recomputing the new states in a
    second job (a checkpoint) nearly doubles it. Here the new states come back to the driver in the
    same job as the views (``check_script``) and are rebuilt as local relations; test states are
    a few hundred rows, and a VALUES scan costs no job.
    """

    def pending(self, updates) -> dict[str, DataFrame]:
        """The new state of every updated node, lazily (old state combined with the update)."""
        return {node_id: self._combine(node_id, u) for node_id, u in updates.items()}

    def replace(self, spark: SparkSession, rows: dict[str, tuple[StructType, list[tuple]]]) -> None:
        self._state.update({node_id: from_tuples(spark, data, schema) for node_id, (schema, data) in rows.items()})


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
    """A Z-set built in the JVM (a VALUES relation): no Python worker re-reads it at every scan."""
    return from_tuples(spark, [tuple(r) + (w,) for r, w in rows.items() if w], schema)


def collect_all(frames: dict[Any, DataFrame]) -> dict[Any, list[tuple]]:
    """Collect many Z-sets with ONE Spark job, as typed tuples (weight last).

    Each row travels as (tag, JSON of its columns); the JSON is read back with the frame's schema.
    """
    from functools import reduce

    from pyspark.sql import functions as F

    tagged = [df.select(F.lit(i).alias("_tag"), F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns])).alias("_row"))
              for i, df in enumerate(frames.values())]
    rows = reduce(lambda a, b: a.unionByName(b), tagged).collect() if tagged else []
    keys = list(frames)
    decoders = [_decoder(df.schema) for df in frames.values()]
    out: dict[Any, list[tuple]] = {k: [] for k in keys}
    for r in rows:
        out[keys[r["_tag"]]].append(decoders[r["_tag"]](r["_row"]))
    return out


def _decoder(schema: StructType) -> Callable[[str], tuple]:
    """JSON (from ``to_json``; null fields omitted) back to a tuple of Python values of ``schema``."""
    import base64
    import datetime
    import decimal
    import json

    from pyspark.sql import types as T

    def convert(dtype):
        if isinstance(dtype, (T.DoubleType, T.FloatType)):
            return lambda v: float(v) if not isinstance(v, str) else float(v.replace("Infinity", "inf"))
        if isinstance(dtype, T.DecimalType):
            return lambda v: decimal.Decimal(str(v))
        if isinstance(dtype, (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
            return int
        if isinstance(dtype, T.DateType):
            return datetime.date.fromisoformat
        if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
            return _naive_utc
        if isinstance(dtype, T.BinaryType):  # to_json writes binary as base64
            return lambda v: base64.b64decode(v)
        return lambda v: v

    fields = [(f.name, convert(f.dataType)) for f in schema.fields]

    def decode(text: str) -> tuple:
        obj = json.loads(text, parse_float=decimal.Decimal)
        return tuple(None if obj.get(name) is None else conv(obj[name]) for name, conv in fields)

    return decode


def _naive_utc(text: str):
    """A timestamp from to_json (in the session's time zone, with its offset) as naive UTC."""
    import datetime

    value = datetime.datetime.fromisoformat(text)
    if value.tzinfo is not None:
        value = value.astimezone(datetime.timezone.utc)
    return value.replace(tzinfo=None)


def _counter(rows: list[tuple]) -> Counter:
    out: Counter = Counter()
    for r in rows:
        out[_norm(r[:-1])] += r[-1]
    return Counter({k: v for k, v in out.items() if v})


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
    inc_state, query_state = LiteralState(), LiteralState()
    integrals: dict[str, Counter] = {v: Counter() for v in spec.outputs}
    bags: dict[str, Counter] = {name: Counter() for name in spec.inputs}
    for t, deltas in enumerate(script, start=1):
        for name, d in deltas.items():
            bags[name].update(d)
            bags[name] = Counter({k: v for k, v in bags[name].items() if v})
        delta_dfs = {name: zset_df(spark, schemas[name], d) for name, d in deltas.items() if d}
        full_dfs = {name: zset_df(spark, schemas[name], bag) for name, bag in bags.items()}
        inc = evaluate_step(compiled.incremental, delta_dfs, inc_state, first_step=t == 1, input_schemas=schemas,
                            broadcast_deltas=False)
        full = evaluate_step(compiled.query, full_dfs, query_state, first_step=t == 1, input_schemas=schemas,
                            broadcast_deltas=False)
        states = {("inc_state", k): df for k, df in inc_state.pending(inc.updates).items()} | \
                 {("full_state", k): df for k, df in query_state.pending(full.updates).items()}
        frames = {("inc", v): df for v, df in inc.outputs.items()} | \
                 {("full", v): df for v, df in full.outputs.items()} | states
        got = collect_all(frames)  # the step's one Spark job: views and new states
        for view in spec.outputs:
            integrals[view].update(_counter(got[("inc", view)]))
            integrals[view] = Counter({k: v for k, v in integrals[view].items() if v})
            expected = _counter(got[("full", view)])
            assert integrals[view] == expected, (
                f"step {t}, view {view}: incremental != recompute\n"
                f"  only incremental: {dict(integrals[view] - expected)}\n"
                f"  only recompute:   {dict(expected - integrals[view])}\n"
                f"  deltas: {deltas}")
        for state, tag in ((inc_state, "inc_state"), (query_state, "full_state")):
            state.replace(spark, {k: (df.schema, got[(t_, k)]) for (t_, k), df in states.items() if t_ == tag})
