"""Random change streams through the real engine, checked against DuckDB running the same SQL.

Each timestep writes every input's change as a Parquet file (rows + ``_weight``) under the data
root, runs ``run_step`` (real Parquet state, manifests, compaction), reads back every view
integrated over all committed steps, and compares it with DuckDB evaluating the circuit's SQL
nodes, transpiled from Spark SQL by sqlglot, over the integrated inputs (bags: a row with weight
3 is three rows). Numbers are compared rounded to 6 decimals (Spark's and DuckDB's avg/decimal
types differ); everything else exactly, NULLs included.
"""
from __future__ import annotations

import datetime
import decimal
import logging
import math
import os
import re
import time
from collections import Counter
from typing import Iterable

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import sqlglot

from spark_jobs.config import load_config
from spark_jobs.executor.evaluate import evaluate_step
from spark_jobs.executor.sources import spark_schema
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from spark_jobs.spec.model import dependency_order
from tests.streams import LiteralState, collect_all, zset_df
from tests.policies import make_input_folders

log = logging.getLogger(__name__)
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
_SIMPLE = {"long": pa.int64(), "bigint": pa.int64(), "int": pa.int32(), "integer": pa.int32(),
           "smallint": pa.int16(), "short": pa.int16(), "tinyint": pa.int8(), "byte": pa.int8(),
           "double": pa.float64(), "float": pa.float32(), "string": pa.string(), "boolean": pa.bool_(),
           "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"), "binary": pa.binary()}


def arrow_type(name: str) -> pa.DataType:
    m = _DECIMAL.match(name.replace(" ", ""))
    return pa.decimal128(int(m.group(1)), int(m.group(2))) if m else _SIMPLE[name.lower()]


def norm(value):
    """One spelling per value across Spark and DuckDB: numbers rounded, -0.0 folded into 0.0."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (float, decimal.Decimal)):
        f = float(value)
        return f if math.isnan(f) else round(f, 6) + 0.0
    if isinstance(value, datetime.datetime):  # DuckDB returns timestamps aware, Spark's decoder naive UTC
        if value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc)
        return value.replace(tzinfo=None)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return value


def counter(rows: Iterable[tuple], weighted: bool) -> Counter:
    out: Counter = Counter()
    for r in rows:
        if weighted:
            out[tuple(norm(v) for v in r[:-1])] += r[-1]
        else:
            out[tuple(norm(v) for v in r)] += 1
    return Counter({k: v for k, v in out.items() if v})


class SqlStream:
    """One circuit under test over a temporary data root, and its integrated inputs.

    ``real_files=True``: every step goes through ``run_step`` (input files, Parquet state,
    manifests). ``False``: ``evaluate_step`` on in-memory deltas and state (``LiteralState``), the
    views integrated here: one Spark job per step, for the many-construct streams. ``oracle``
    gives DuckDB another query for a node (the same result spelled out, e.g. a tie-break).
    ``in_process``: real files, every step asserted to run on Arrow (or the engine ``use_engine``
    chose), views read with pyarrow.
    """

    def __init__(self, tmp_path, text: str, real_files: bool = True, oracle: dict[str, str] | None = None,
                 in_process: bool = False) -> None:
        self.root = str(tmp_path)
        path = os.path.join(self.root, "circuit.yaml")
        with open(path, "w") as f:
            f.write(text)
        if in_process:  # engine: arrow, so the first step (a load) runs in-process too
            from tests.policies import config

            self.rt = open_circuit(path, config(self.root, engine="arrow"))
        else:
            self.rt = open_circuit(path, load_config(data_root=self.root))
        make_input_folders(self.rt)  # an input without a change at a step is an empty folder
        self.spec = self.rt.compiled.spec
        self.bags: dict[str, Counter] = {name: Counter() for name in self.spec.inputs}
        self.real_files = real_files
        self.oracle = oracle or {}  # node -> the Spark SQL DuckDB runs instead of its query
        self.in_process = in_process  # every step must run on Arrow; view deltas read with pyarrow
        self.state = LiteralState()
        self.views: dict[str, Counter] = {v: Counter() for v in self.spec.outputs}
        self.t = 0
        self.engine = "arrow"  # the engine ``in_process`` steps must run on (``use_engine``)
        self.fallbacks: list[str] = []  # with ``use_engine``: Arrow steps that had to run on Spark, and why
        self.may_fall_back = False
        self._runtimes = {"arrow": self.rt} if in_process else {}

    def use_engine(self, engine: str) -> None:
        """Run the next ``in_process`` steps on ``engine`` (``arrow`` or ``spark``), on the same
        state and compiled circuit: a stream can alternate engines, each reading what the other wrote."""
        from spark_jobs.runtime.circuit import CircuitRuntime
        from tests.policies import config

        assert self.in_process, "only an in_process stream reads its views without Spark"
        if engine not in self._runtimes:
            self._runtimes[engine] = CircuitRuntime(config(self.root, engine=engine), self.rt.compiled, self.rt.path)
        self.rt = self._runtimes[engine]
        self.engine = engine
        self.may_fall_back = True

    def _write(self, name: str, rows: Counter) -> None:
        folder = os.path.join(self.root, self.spec.inputs[name].source.path)
        os.makedirs(folder, exist_ok=True)
        columns = self.spec.inputs[name].columns
        data = {c.name: pa.array([r[i] for r in rows], arrow_type(c.type)) for i, c in enumerate(columns)}
        data["_weight"] = pa.array(list(rows.values()), pa.int64())
        pq.write_table(pa.table(data), os.path.join(folder, f"t{self.t:04d}.parquet"))

    def step(self, changes: dict[str, Counter]) -> None:
        """Apply one timestep of changes and assert every view equals DuckDB's."""
        self.t += 1
        for name, rows in changes.items():
            rows = Counter({r: w for r, w in rows.items() if w})
            if rows:
                self._write(name, rows)
                self.bags[name].update(rows)
                self.bags[name] = +self.bags[name]
        started = time.time()
        got = (self._run_in_process() if self.in_process else self._run_real(changes) if self.real_files
               else self._run_memory(changes))
        log.info("%s step %d: %.1f s", self.spec.name, self.t, time.time() - started)
        expected = self.duckdb()
        for view in self.spec.outputs:
            mine = got[view]
            assert all(w > 0 for w in mine.values()), f"step {self.t}, view {view}: negative weights {mine}"
            assert mine == expected[view], (
                f"step {self.t}, view {view}: engine != DuckDB\n"
                f"  only engine: {dict(mine - expected[view])}\n"
                f"  only DuckDB: {dict(expected[view] - mine)}\n  changes: {changes}")

    def _run_real(self, changes: dict[str, Counter]) -> dict[str, Counter]:
        run_step(self.rt)
        views = {v: self.rt.store.read_view(v) for v in self.spec.outputs}
        got = collect_all({v: df for v, df in views.items() if df is not None})
        return {v: counter(got.get(v, []), weighted=True) for v in self.spec.outputs}

    def _run_in_process(self) -> dict[str, Counter]:
        """``run_step`` in-process (asserted), each view's committed delta read with pyarrow and
        integrated here: no Spark job at all."""
        from tests.engines import output_delta

        report = run_step(self.rt)
        if report.engine != self.engine and self.may_fall_back and self.engine == "arrow":
            self.fallbacks.append(report.engine_reason)
        else:
            assert report.engine == self.engine, f"step {self.t} ran on {report.engine}: {report.engine_reason}"
        for v in self.spec.outputs:
            delta, _ = output_delta(self.rt, v)
            for row, w in delta.items():
                self.views[v][tuple(norm(x) for x in row)] += w
            self.views[v] = Counter({k: w for k, w in self.views[v].items() if w})
        return {v: Counter(c) for v, c in self.views.items()}

    def _run_memory(self, changes: dict[str, Counter]) -> dict[str, Counter]:
        spark = self.rt.spark
        schemas = {name: spark_schema(inp) for name, inp in self.spec.inputs.items()}
        deltas = {name: zset_df(spark, schemas[name], d) for name, d in changes.items() if +d or -d}
        result = evaluate_step(self.rt.compiled.incremental, deltas, self.state, first_step=self.t == 1,
                               input_schemas=schemas, broadcast_deltas=False)
        states = {("state", k): df for k, df in self.state.pending(result.updates).items()}
        got = collect_all({("view", v): df for v, df in result.outputs.items()} | states)
        self.state.replace(spark, {k: (df.schema, got[("state", k)]) for (_, k), df in states.items()})
        for v in self.spec.outputs:
            self.views[v].update(counter(got[("view", v)], weighted=True))
            self.views[v] = Counter({k: w for k, w in self.views[v].items() if w})
        return {v: Counter(c) for v, c in self.views.items()}

    def duckdb(self) -> dict[str, Counter]:
        """Every output of the circuit, evaluated by DuckDB on the integrated inputs."""
        con = duckdb.connect()
        for name, inp in self.spec.inputs.items():
            rows = [r for r, w in self.bags[name].items() for _ in range(w)]
            table = pa.table({c.name: pa.array([r[i] for r in rows], arrow_type(c.type))
                              for i, c in enumerate(inp.columns)})
            con.register(f"{name}_arrow", table)
            con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM "{name}_arrow"')
        for name in dependency_order(self.spec.nodes):
            node = self.spec.nodes[name]
            assert node.op == "sql" or name in self.oracle, \
                f"the DuckDB oracle reads sql nodes only, or those it is given a query for ({name} is {node.op})"
            con.execute(f'CREATE VIEW "{name}" AS {to_duckdb(self.oracle.get(name, node.query))}')
        out = {}
        for view in self.spec.outputs:
            out[view] = counter(con.execute(f'SELECT * FROM "{view}"').fetchall(), weighted=False)
        con.close()
        return out


def to_duckdb(query: str) -> str:
    (text,) = sqlglot.transpile(query, read="spark", write="duckdb")
    return text
