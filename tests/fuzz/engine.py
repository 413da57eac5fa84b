"""A fuzz case through the real engine: the circuit file loaded by the real loader and validator,
input changes written as Parquet files under a data root, ``run_step`` per timestep with the
Parquet state store, and the committed views read back in one Spark job.

How a timestep's change is laid out in files is a fixed function of the step and the input
(so a reproduction lays them out the same way): usually one file; sometimes the inserts and the
deletes in two files; sometimes an empty (zero-row) file for an input without a change.
"""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.config import load_config
from spark_jobs.runtime.circuit import CircuitRuntime, open_circuit
from spark_jobs.runtime.step import run_step
from tests.streams import collect_all

from . import sql
from tests.policies import make_input_folders

Bag = Counter


def arrow_type(t: str) -> pa.DataType:
    t = sql.norm_type(t)
    if ps := sql.decimal_ps(t):
        return pa.decimal128(*ps)
    return {"long": pa.int64(), "int": pa.int32(), "string": pa.string(), "double": pa.float64(),
            "date": pa.date32(), "boolean": pa.bool_()}[t]


class EngineRun:
    """One circuit with its own data root; ``step`` runs and commits the next timestep."""

    def __init__(self, root: Path, yaml_text: str) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        path = root / "circuit.yaml"
        path.write_text(yaml_text)
        self.rt: CircuitRuntime = open_circuit(str(path), load_config(data_root=str(root)))
        make_input_folders(self.rt)  # an input without a change at a step is an empty folder
        self.spec = self.rt.compiled.spec
        self.t = 0

    def _write(self, name: str, rows: list[tuple[tuple, int]], tag: str) -> None:
        inp = self.spec.inputs[name]
        folder = self.root / "inbox" / name
        folder.mkdir(parents=True, exist_ok=True)
        data = {c.name: pa.array([r[i] for r, _ in rows], arrow_type(c.type)) for i, c in enumerate(inp.columns)}
        data["_weight"] = pa.array([w for _, w in rows], pa.int64())
        tmp = folder / f".t{self.t:03d}{tag}.parquet"  # written, then renamed: an atomic drop
        pq.write_table(pa.table(data), tmp)
        os.replace(tmp, folder / f"t{self.t:03d}{tag}.parquet")

    def write(self, batch: dict[str, Bag]) -> None:
        for k, name in enumerate(self.spec.inputs):
            rows = [(r, w) for r, w in batch.get(name, {}).items() if w]
            ins, dels = [x for x in rows if x[1] > 0], [x for x in rows if x[1] < 0]
            if ins and dels and (self.t + k) % 3 == 0:
                self._write(name, ins, "a")
                self._write(name, dels, "b")
            elif rows:
                self._write(name, rows, "")
            elif (self.t + k) % 4 == 3:
                self._write(name, [], "")

    def step(self, batch: dict[str, Bag]) -> None:
        """Write the timestep's input files and run (and commit) it."""
        self.t += 1
        self.write(batch)
        run_step(self.rt)

    def views(self) -> dict[str, tuple[tuple[str, ...], Bag]]:
        """Every committed view (columns, {row: weight}), read in one Spark job."""
        frames = {v: self.rt.store.read_view(v) for v in self.spec.outputs}
        present = {v: df for v, df in frames.items() if df is not None}
        rows = collect_all(present) if present else {}
        out: dict[str, tuple[tuple[str, ...], Bag]] = {}
        for v, df in frames.items():
            columns = tuple(c for c in df.columns if c != "_weight") if df is not None else ()
            bag: Bag = Counter()
            for r in rows.get(v, []):
                bag[r[:-1]] += r[-1]
            out[v] = (columns, bag)
        return out
