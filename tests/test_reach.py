"""A profile whose files this process cannot reach itself runs its steps on Spark, and says why.

A small step runs in-process only where this process reads the inputs and reads and writes the
state itself (``runtime/reach.py``). Where it cannot (the profile says so with
``execution.driver_access: never``, or the state is on a Hadoop file system that a Spark Connect
client has no driver for), the step goes to Spark, and the reason is in the step's summary (what
`dbsp step` prints), in the manifest (``meta.engine_reason``) and in a DAG run's plan.
"""
from __future__ import annotations

import dataclasses
import random

from spark_jobs.cli.main import main
from spark_jobs.config import PROJECT_ROOT, load_config
from spark_jobs.runtime import timestep
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.reach import driver_reach
from tests.engines import KEYS, STRINGS, Bag, write_change

CIRCUIT = """
name: reach
inputs:
  orders:
    schema: {id: long, cust: long, status: string}
    source: {kind: changes, path: inbox/orders, format: parquet}
nodes:
  paid: {op: filter, input: orders, where: "status <> 'x'"}
  per_cust: {op: aggregate, input: paid, group_by: [cust], aggregates: {n: "count(*)"}}
outputs:
  per_cust: {}
"""
NEVER = "the profile sets execution.driver_access: never"


def _profile(tmp_path, **execution) -> str:
    """config/local.yaml with ``execution`` settings added (a profile file, as a user writes one)."""
    text = (PROJECT_ROOT / "config" / "local.yaml").read_text()
    lines = "".join(f"  {k}: {v}\n" for k, v in execution.items())
    path = tmp_path / "profile.yaml"
    path.write_text(text.replace("execution:\n", "execution:\n" + lines, 1))
    return str(path)


def _changes(root, t: int, bag: Bag) -> None:
    write_change(str(root), "orders", t, bag.columns, bag.change(8, 3))


def test_a_step_the_driver_cannot_reach_runs_on_spark_and_says_why(spark, tmp_path, capsys):
    circuit = tmp_path / "reach.yaml"
    circuit.write_text(CIRCUIT)
    profile = _profile(tmp_path, driver_access="never")
    bag = Bag({"id": "long", "cust": "long", "status": "string"},
              {"id": KEYS, "cust": KEYS, "status": STRINGS}, random.Random(5))
    _changes(tmp_path, 1, bag)
    assert main(["step", str(circuit), "--data-root", str(tmp_path)]) == 0  # the load, in-process
    assert "engine: in-process (Arrow)" in capsys.readouterr().out
    _changes(tmp_path, 2, bag)  # a small change, which runs in-process wherever the files are reached
    assert main(["step", str(circuit), "--config", profile, "--data-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"engine: Spark: {NEVER}" in out, out
    rt = open_circuit(str(circuit), load_config(profile, data_root=str(tmp_path)))
    meta = rt.committed.manifest().meta
    assert meta["engine"] == "spark" and meta["engine_reason"].startswith(NEVER), meta

    # the same profile as a DAG run: the plan picks Spark for the same reason, the manifest keeps it
    _changes(tmp_path, 3, bag)
    done = timestep.run_task(rt, "timestep", "run-3")
    assert done["plan"]["engine"] == "spark" and done["plan"]["engine_reason"].startswith(NEVER), done["plan"]
    meta = rt.committed.manifest().meta
    assert meta["engine"] == "spark" and meta["engine_reason"].startswith(NEVER) and meta["run_id"] == "run-3"

    # the default profile on the same files: in-process, because this process reaches them
    local = open_circuit(str(circuit), load_config(data_root=str(tmp_path)))
    _changes(tmp_path, 4, bag)
    assert driver_reach(local) is None
    assert main(["step", str(circuit), "--data-root", str(tmp_path)]) == 0
    assert "engine: in-process (Arrow)" in capsys.readouterr().out


def test_state_on_hadoop_behind_spark_connect_goes_to_spark(tmp_path):
    """A Spark Connect client has no JVM, so no Hadoop file system: state on HDFS is Spark's to
    read and write (said before any Spark session or store is opened). The same state under a
    cluster profile is reached through this process's own driver; an object store through pyarrow."""
    circuit = tmp_path / "reach.yaml"
    circuit.write_text(CIRCUIT)

    def reach(profile: str, state_root: str) -> str | None:
        cfg = load_config(profile, data_root=str(tmp_path))
        rt = open_circuit(str(circuit), dataclasses.replace(cfg, state_root=state_root))
        return driver_reach(rt)

    why = reach("connect", "hdfs://namenode:8020/dbsp")
    assert why is not None and "Hadoop file system" in why and "Spark Connect" in why, why
    assert reach("cluster", "hdfs://namenode:8020/dbsp") is None
    assert reach("connect", "s3://bucket/dbsp") is None
    assert reach("connect", str(tmp_path / "state")) is None
    engine = load_config("connect").policy.engine_for(10, first_step=False, driver_reach=why)
    assert engine == ("spark", why)
