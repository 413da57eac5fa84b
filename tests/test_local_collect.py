"""executor.spark.local_relations.collect_local: small frames to driver-local relations in one job, summary rows
beside them, and a plan whose generated code repeats (so a warm step compiles nothing)."""
from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from spark_jobs.executor.spark.local_relations import collect_local
from spark_jobs.executor.spark.session import ENGINE_STATIC_CONF, compiled_classes
from spark_jobs.executor.spark.zset import is_local


def _frames(spark, n: int, offset: int = 0):
    a = spark.range(offset, offset + n).select(F.col("id").alias("k"), (F.col("id") * 2).alias("v"))
    b = spark.range(offset, offset + n).select(F.col("id").cast("string").alias("k"))  # same name, other type
    return {"a": a, "b": b}


def _totals(frames):
    return {f"n_{name}": df.agg(F.count(F.lit(1)).alias("n")) for name, df in frames.items()}


def test_small_frames_come_back_local_with_their_rows(spark):
    frames = _frames(spark, 5)
    local, extras = collect_local(spark, frames, max_rows=10, extras=_totals(frames))
    assert local is not None and set(local) == {"a", "b"}
    assert all(is_local(df) for df in local.values())
    assert sorted(tuple(r) for r in local["a"].collect()) == [(i, 2 * i) for i in range(5)]
    assert sorted(r.k for r in local["b"].collect()) == [str(i) for i in range(5)]
    assert {name: rows[0]["n"] for name, rows in extras.items()} == {"n_a": 5, "n_b": 5}


def test_frames_over_the_limit_together_stay_distributed_but_extras_are_whole(spark):
    frames = _frames(spark, 6)  # 12 rows together, 6 each
    local, extras = collect_local(spark, frames, max_rows=10, extras=_totals(frames))
    assert local is None
    assert {name: rows[0]["n"] for name, rows in extras.items()} == {"n_a": 6, "n_b": 6}
    local, _ = collect_local(spark, frames, max_rows=12)
    assert local is not None and sum(df.count() for df in local.values()) == 12


def test_extras_past_the_bound_are_refused(spark):
    too_many = {"rows": spark.range(25).select("id")}
    with pytest.raises(ValueError, match="extras"):
        collect_local(spark, _frames(spark, 2), max_rows=10, extras=too_many, max_extra_rows=20)


def test_the_same_plan_on_new_files_compiles_no_new_code(spark, tmp_path):
    # Spark's generated-class cache must hold a step's classes (ENGINE_STATIC_CONF), and the plan
    # must not embed per-query names (a limit inside the plan does): else every step recompiles.
    assert spark.conf.get("spark.sql.codegen.cache.maxEntries") == ENGINE_STATIC_CONF["spark.sql.codegen.cache.maxEntries"]

    def files(offset: int):  # like a step's change files: new Parquet files, same schema
        for name, df in _frames(spark, 4, offset).items():
            df.write.parquet(str(tmp_path / f"{name}{offset}"))
        return {name: spark.read.parquet(str(tmp_path / f"{name}{offset}")) for name in ("a", "b")}

    frames = files(0)
    collect_local(spark, frames, max_rows=10, extras=_totals(frames))
    frames = files(100)
    before = compiled_classes(spark)
    local, extras = collect_local(spark, frames, max_rows=10, extras=_totals(frames))
    assert compiled_classes(spark) == before
    assert local is not None and sorted(r.k for r in local["a"].collect()) == [100, 101, 102, 103]
    assert extras["n_a"][0]["n"] == 4
