"""The layers of spark_jobs, in one table: every top-level package or module, its layer, its job.

A unit imports only units of a lower layer (the foundations, layer 0, import nothing of the
project), so the spec never learns about Spark and the executor never about Airflow.

Why a table in code: the layer numbers used to be written in four places (the layering test's
ranks, ARCHITECTURE.md's table, the README, package docstrings) and they disagreed. Now
``tests/test_layering.py`` checks every import against ``RANK``, ARCHITECTURE.md's table against
``LAYERS``, and each package docstring's "Layer N" against its unit's number.

This module imports nothing of the project; nothing but the tests reads it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layer:
    number: int
    name: str
    units: tuple[str, ...]  # top-level packages and modules of spark_jobs (without ".py")
    job: str


LAYERS: tuple[Layer, ...] = (
    Layer(0, "foundations", ("policy", "errors", "layers", "registry"),
          "the execution policy, the error hierarchy, registries and this table: every layer may read them"),
    Layer(1, "circuit spec", ("spec",), "YAML -> typed, validated CircuitSpec; SQL nodes bound"),
    Layer(1, "state store", ("state",), "Parquet traces, atomic manifests, compaction, leases"),
    Layer(2, "IR + incrementalizer", ("ir",), "the operator graph, Q -> Q^Δ, explain and draw"),
    Layer(2, "profiles", ("config",), "a profile's settings (Spark, paths, policy)"),
    Layer(2, "connections", ("connections",), "a named database connection's settings, passwords kept out"),
    Layer(3, "executor", ("executor",), "one timestep of Q^Δ on Z-sets, on Spark or on Arrow"),
    Layer(4, "published views", ("publish",), "every output as a Delta table after each commit"),
    Layer(4, "quality", ("quality",), "built-in checks and Great Expectations before commit"),
    Layer(5, "runtime", ("runtime",), "one timestep end to end, and as retryable tasks"),
    Layer(6, "orchestration", ("orchestration",), "one Airflow DAG per circuit"),
    Layer(6, "operations", ("cli", "services", "local_postgres", "examples"),
          "the dbsp CLI, local services (Spark, a test PostgreSQL), example data"),
    Layer(7, "demo", ("demo",), "the end-to-end demo"),
)

RANK: dict[str, int] = {unit: layer.number for layer in LAYERS for unit in layer.units}
