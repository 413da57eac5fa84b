"""Differential runs of one circuit on both engines: the same random change files, ``run_step`` on
Spark, in-process on Arrow, and alternating between the two, each with its own Parquet state; after
every timestep the committed view deltas must be the same rows with the same weights and the same
column types (so either engine reads what the other wrote).
"""
from __future__ import annotations

import datetime
import decimal
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.runtime.circuit import CircuitRuntime, open_circuit
from spark_jobs.runtime.step import run_step
from spark_jobs.spec.model import WEIGHT
from spark_jobs.state.arrow_trace import arrow_schema
from spark_jobs.state.store import view_trace_id
from tests.policies import config, make_input_folders

Domain = dict[str, Callable[[random.Random], Any]]

ARROW_TYPES = {"long": pa.int64(), "int": pa.int32(), "string": pa.string(), "date": pa.date32(),
               "double": pa.float64(), "boolean": pa.bool_(), "timestamp": pa.timestamp("us", tz="UTC")}


def arrow_type(declared: str) -> pa.DataType:
    if declared.startswith("decimal"):
        p, s = declared[declared.index("(") + 1:-1].split(",")
        return pa.decimal128(int(p), int(s))
    return ARROW_TYPES[declared]


def maybe(rng: random.Random, values: list, nulls: float = 0.15) -> Any:
    return None if rng.random() < nulls else rng.choice(values)


# value pools with the awkward cases: NULLs, case, non-ASCII, negative and zero decimals, dates
KEYS = lambda r: maybe(r, [0, 1, 2, 3, 4])  # noqa: E731
STRINGS = lambda r: maybe(r, ["x", "y", "Y", "é", ""])  # noqa: E731
DATES = lambda r: maybe(r, [datetime.date(2024, 1, 1), datetime.date(1999, 12, 31), datetime.date(2024, 2, 29)])  # noqa: E731
_UTC = datetime.timezone.utc
TIMES = lambda r: maybe(r, [datetime.datetime(2024, 1, 1, tzinfo=_UTC),  # noqa: E731
                            datetime.datetime(1999, 12, 31, 23, 59, 59, 123456, tzinfo=_UTC),
                            datetime.datetime(2024, 2, 29, 12, 0, 0, 1, tzinfo=_UTC)])
MONEY = lambda r: maybe(r, [decimal.Decimal("1.50"), decimal.Decimal("-2.25"), decimal.Decimal("0.00")])  # noqa: E731


@dataclass
class Bag:
    """A relation changing randomly: inserts (multiplicities up to 3) and deletes of live rows."""

    columns: dict[str, str]  # name -> declared type
    domain: Domain
    rng: random.Random
    rows: Counter = field(default_factory=Counter)

    def change(self, inserts: int, deletes: int) -> Counter:
        delta: Counter = Counter()
        live = sorted((r for r, w in self.rows.items() for _ in range(w)), key=repr)
        for row in self.rng.sample(live, min(deletes, len(live))):
            delta[row] -= 1
        for _ in range(inserts):
            delta[tuple(self.domain[c](self.rng) for c in self.columns)] += self.rng.choice((1, 1, 2, 3))
        self.rows.update(delta)
        self.rows = +self.rows
        return Counter({r: w for r, w in delta.items() if w})


def write_change(root: str, name: str, t: int, columns: dict[str, str], rows: Counter) -> None:
    folder = os.path.join(root, "inbox", name)
    os.makedirs(folder, exist_ok=True)
    data = {c: pa.array([r[i] for r in rows], arrow_type(typ)) for i, (c, typ) in enumerate(columns.items())}
    data[WEIGHT] = pa.array(list(rows.values()), pa.int64())
    pq.write_table(pa.table(data), os.path.join(folder, f"t{t:04d}.parquet"))


def output_delta(rt: CircuitRuntime, view: str) -> tuple[Counter, list[tuple[str, str]]]:
    """The view's committed delta of the last timestep (rows -> weight) and its column types,
    read with pyarrow from the manifest (no Spark)."""
    m = rt.store.manifest()
    entry = m.outputs.get(view)
    trace = m.traces.get(view_trace_id(view))
    types = [(f.name, str(f.type)) for f in arrow_schema(trace.schema)] if trace and trace.schema else []
    if entry is None or not entry.delta:
        return Counter(), types
    # a batch write's file holds the union of the batch's columns: read the view's own
    table = pq.read_table(rt.store.layout.abs(entry.delta), columns=[name for name, _ in types])
    cols = [c for c in table.column_names if c != WEIGHT]
    out: Counter = Counter()
    for r in table.to_pylist():
        out[tuple(_comparable(r[c]) for c in cols)] += r[WEIGHT]
    return Counter({k: v for k, v in out.items() if v}), types


def _comparable(value: Any) -> Any:
    """NaN as a marker (NaN != NaN would make equal bags differ)."""
    return "NaN" if isinstance(value, float) and value != value else value


def run_both(tmp_path, circuit_text: str, inputs: dict[str, tuple[dict[str, str], Domain]], steps: int,
             seed: int, sizes: Callable[[int], tuple[int, int]] = lambda t: (8, 3),
             writer: Callable[[str, str, int, "Bag", Counter], None] | None = None,
             **arrow_policy: dict[str, Any]) -> list[str]:
    """Run ``circuit_text`` for ``steps`` timesteps of random changes on Spark, on Arrow and on
    both alternately; assert the same view deltas and types after every step. Returns the
    engines the alternating run used, step by step. ``writer(root, input, t, bag, change)``
    writes a step's files of an input (default: the change as Parquet); ``arrow_policy``:
    sections of the policy the Arrow and alternating runs use (``config``'s keywords, e.g.
    ``arrow={...}``)."""
    rng = random.Random(seed)
    bags = {name: Bag(cols, domain, rng) for name, (cols, domain) in inputs.items()}
    write = writer or (lambda root, name, t, bag, change: write_change(root, name, t, bag.columns, change))

    def write_step(roots: list[str], t: int) -> None:
        for name, bag in bags.items():
            change = bag.change(*sizes(t))
            if change:
                for root in roots:
                    write(root, name, t, bag, change)

    return run_steps(tmp_path, circuit_text, steps, write_step, **arrow_policy)


def run_steps(tmp_path, circuit_text: str, steps: int, write_step: Callable[[list[str], int], None],
              **arrow_policy: dict[str, Any]) -> list[str]:
    """``run_both`` with any input files: ``write_step(roots, t)`` writes timestep ``t``'s files
    (the same under each data root); every step then runs on Spark, on Arrow and alternately,
    and the committed view deltas must agree."""
    path = tmp_path / "circuit.yaml"
    path.write_text(circuit_text)
    roots = {kind: str(tmp_path / kind) for kind in ("spark", "arrow", "mixed")}
    spark_rt = open_circuit(str(path), config(roots["spark"], engine="spark"))
    arrow_rt = open_circuit(str(path), config(roots["arrow"], engine="arrow", **arrow_policy))
    make_input_folders(spark_rt), make_input_folders(arrow_rt)
    views = list(spark_rt.compiled.spec.outputs)
    mixed_engines = []
    for t in range(1, steps + 1):
        write_step(list(roots.values()), t)
        engine = "arrow" if t % 2 else "spark"
        mixed_rt = open_circuit(str(path), config(roots["mixed"], engine=engine, **arrow_policy))
        make_input_folders(mixed_rt)
        reports = {"spark": run_step(spark_rt), "arrow": run_step(arrow_rt), "mixed": run_step(mixed_rt)}
        assert reports["spark"].engine == "spark"
        assert reports["arrow"].engine == "arrow", reports["arrow"].engine_reason
        assert reports["mixed"].engine == engine, reports["mixed"].engine_reason
        mixed_engines.append(engine)
        for view in views:
            want, want_types = output_delta(spark_rt, view)
            for kind, rt in (("arrow", arrow_rt), ("mixed", mixed_rt)):
                got, got_types = output_delta(rt, view)
                assert got == want, (f"timestep {t}, view {view}: {kind} != spark\n only {kind}: "
                                     f"{dict(got - want)}\n only spark: {dict(want - got)}")
                assert not want_types or not got_types or got_types == want_types, \
                    f"timestep {t}, view {view}: {kind} types {got_types} != spark {want_types}"
    return mixed_engines


# ---- kernel level: the same deltas to evaluate_step on each engine, state committed to Parquet -----

def _arrow_delta(columns: dict[str, str], rows: Counter) -> pa.Table:
    data = {c: pa.array([r[i] for r in rows], arrow_type(typ)) for i, (c, typ) in enumerate(columns.items())}
    data[WEIGHT] = pa.array(list(rows.values()), pa.int64())
    return pa.table(data)


def _spark_delta(spark, columns: dict[str, str], rows: Counter):  # noqa: ANN001, ANN201
    from spark_jobs.executor.spark.zset import from_rows

    return from_rows(spark, rows, ", ".join(f"`{c}` {t}" for c, t in columns.items()))


def kernel_step(spark, rt: CircuitRuntime, engine: str, deltas: dict[str, Counter],
                columns: dict[str, dict[str, str]]) -> None:
    """One timestep of ``rt``'s incremental circuit on ``engine`` from these deltas (no input files,
    no quality gate): evaluate_step, then every state update and view delta committed."""
    from spark_jobs.executor.evaluate import evaluate_step, trace_kind
    from spark_jobs.executor.arrow.kernels import ArrowEngine
    from spark_jobs.executor.arrow import inputs as arrow_inputs
    from spark_jobs.executor.sources import spark_schema
    from spark_jobs.runtime.step_types import StoreReader

    spec, circuit = rt.compiled.spec, rt.compiled.incremental
    arrow = engine == "arrow"
    with rt.store.begin() as txn:
        t = txn.timestep
        if arrow:
            txn.in_process = True
            inputs = {n: _arrow_delta(columns[n], d) for n, d in deltas.items() if d}
            schemas = {n: arrow_inputs.schema(i) for n, i in spec.inputs.items()}
        else:
            inputs = {n: _spark_delta(spark, columns[n], d) for n, d in deltas.items() if d}
            schemas = {n: spark_schema(i) for n, i in spec.inputs.items()}
        result = evaluate_step(circuit, inputs, StoreReader(rt.store), first_step=t == 1, input_schemas=schemas,
                               spark=spark, broadcast_deltas=True, persist=not arrow,
                               engine=ArrowEngine(rt.config.policy, rt.config.session_timezone) if arrow else None, policy=rt.config.policy)
        try:
            for nid, u in result.updates.items():
                kind = trace_kind(circuit, nid)
                if u.kind == "replace":
                    (txn.replace_table if arrow else txn.replace)(nid, u.df, kind=kind, keys=u.keys, sort_by=u.sort_by)
                else:
                    (txn.append_table if arrow else txn.append)(nid, u.df, kind=kind, keys=u.keys, sort_by=u.sort_by)
            for view, value in result.outputs.items():
                (txn.write_output_table if arrow else txn.write_output)(view, value)
            txn.commit()
        finally:
            result.release()


def run_kernels(spark, tmp_path, circuit_path: str, inputs: dict[str, tuple[dict[str, str], Domain]], steps: int,
                seed: int, sizes: Callable[[int], tuple[int, int]] = lambda t: (8, 3), mixed: bool = True) -> None:
    """``run_both`` at the kernel level: each step's deltas go straight to evaluate_step on Spark,
    on Arrow, and (``mixed``) on both alternately (any input source and format); same checks."""
    kinds = ("spark", "arrow", "mixed") if mixed else ("spark", "arrow")
    rts = {kind: open_circuit(circuit_path, config(tmp_path / kind, engine=kind if kind != "mixed" else "auto"))
           for kind in kinds}
    rng = random.Random(seed)
    bags = {name: Bag(cols, domain, rng) for name, (cols, domain) in inputs.items()}
    columns = {name: cols for name, (cols, _) in inputs.items()}
    for t in range(1, steps + 1):
        deltas = {name: bag.change(*sizes(t)) for name, bag in bags.items()}
        for kind, rt in rts.items():
            engine = kind if kind != "mixed" else ("arrow" if t % 2 else "spark")
            kernel_step(spark, rt, engine, deltas, columns)
        for view in rts["spark"].compiled.spec.outputs:
            want, want_types = output_delta(rts["spark"], view)
            for kind in kinds[1:]:
                got, got_types = output_delta(rts[kind], view)
                assert got == want, (
                    f"timestep {t}, view {view}: {kind} != spark\n only {kind}: {dict(got - want)}\n"
                    f" only spark: {dict(want - got)}\n deltas {deltas}")
                assert not want_types or not got_types or got_types == want_types, \
                    f"timestep {t}, view {view}: {kind} types {got_types} != spark {want_types}"
