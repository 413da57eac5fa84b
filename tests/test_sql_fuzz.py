"""Random SQL views against DuckDB: the generator in ``tests/fuzz/sql_queries.py`` draws inputs of
random column types and a few queries of the documented SQL subset; each query the engine accepts
becomes a node of one circuit, which runs a random stream of inserts (multiplicities up to 3),
deletes of live rows and NULLs; after every timestep each view, integrated, must equal DuckDB
running the query on the integrated inputs (``tests/sql_streams.py``).

Two modes, one state each: *Arrow* seeds draw only what the in-process engine runs (no ``avg``,
no sums of decimals or doubles, no ``EXCEPT ALL``/``INTERSECT ALL``), every step in-process, so
hundreds of seeds run in minutes; *Spark* seeds draw everything, every second step on Spark and
the others on Arrow when the circuit allows it (each engine reads the state the other wrote).

CI runs ``ARROW_SEEDS`` and ``SPARK_SEEDS``. More: ``DBSP_SQLFUZZ_SEEDS=300`` (Arrow seeds 0-299),
``=300:600`` or ``=7,42``; ``DBSP_SQLFUZZ_SPARK_SEEDS`` the same for Spark seeds;
``DBSP_SQLFUZZ_SHAPED_SEEDS`` for the grouped and LATERAL correlated shapes; ``DBSP_SQLFUZZ_STEPS`` timesteps per seed; ``DBSP_SQLFUZZ_LOG=file`` appends one JSON line per
seed (queries generated, refused and why, compared, steps that could not run on Arrow, failure).
"""
from __future__ import annotations

import json
import os
import random

import duckdb
import pytest

from spark_jobs.runtime.circuit import compile_file
from spark_jobs.spec.errors import CircuitError
from tests.fuzz.seeds import seeds_from_env
from tests.fuzz.sql_queries import Case, circuit_text, domain, random_case, shaped_case
from tests.sql_streams import SqlStream, to_duckdb
from tests.streams import RandomRelation

ARROW_SEEDS = [0, 1, 2, 3, 5, 129, 136]  # ARROW_STEPS each; 129, 136: outer joins matching a column twice
SPARK_SEEDS = [0]  # SPARK_STEPS each
ARROW_STEPS, SPARK_STEPS = 8, 3
SHAPED_SEEDS, SHAPED_STEPS = [0, 1, 3], 6  # grouped / LATERAL correlated shapes (shaped_case)


def _refusal(tmp_path, tables, query: str) -> str | None:
    """The engine's refusal of ``query`` alone (None: accepted)."""
    path = tmp_path / "one.yaml"
    path.write_text(circuit_text(tables, {"q": query}))
    try:
        compile_file(str(path))
    except CircuitError as e:
        return str(e)
    return None


def _duckdb_error(tables, query: str) -> str | None:
    """DuckDB's error on ``query`` over empty inputs (the generator's fault, not the engine's)."""
    con = duckdb.connect()
    try:
        for name, cols in tables.items():
            types = ", ".join(f'"{c}" {t.upper()}' for c, t in cols.items())
            con.execute(f'CREATE TABLE "{name}" ({types})')
        con.execute(to_duckdb(query)).fetchall()
    except Exception as e:  # noqa: BLE001 - any failure of the oracle is reported as such
        return f"{type(e).__name__}: {e}"
    finally:
        con.close()
    return None


def run_seed(tmp_path, seed: int, steps: int, spark_every: int, arrow_only: bool, case: Case | None = None) -> dict:
    case = case or random_case(seed, arrow_only=arrow_only)
    stats = {"seed": seed, "generated": len(case.queries), "refused": [], "oracle_errors": [], "compared": 0}
    accepted, oracle = {}, {}
    for i, (engine_q, oracle_q) in enumerate(case.queries):
        refused = _refusal(tmp_path, case.tables, engine_q)
        if refused:
            stats["refused"].append(f"{engine_q}\n  -> {refused}")
            continue
        broken = _duckdb_error(case.tables, oracle_q)
        if broken:
            stats["oracle_errors"].append(f"{oracle_q}\n  -> {broken}")
            continue
        accepted[f"q{i}"], oracle[f"q{i}"] = engine_q, oracle_q
    stats["compared"] = len(accepted)
    try:
        if accepted:
            stats["fallbacks"] = run_queries(tmp_path / "run", case.tables, accepted, oracle, seed, steps, spark_every)
    except Exception as e:
        stats["failure"] = f"{type(e).__name__}: {e}"
        raise
    finally:
        _log(stats)
    return stats


def run_queries(root, tables: dict[str, dict[str, str]], queries: dict[str, str], oracle: dict[str, str],
                seed: int, steps: int, spark_every: int = 0) -> list[str]:
    """``queries`` as nodes of one circuit over a random stream of ``steps`` timesteps (every
    ``spark_every``-th on Spark, the others on Arrow when they can), compared with DuckDB after
    each; returns why steps meant for Arrow ran on Spark."""
    root.mkdir()
    stream = SqlStream(root, circuit_text(tables, queries), in_process=True, oracle=oracle)
    rng = random.Random(seed)
    rels = {n: RandomRelation(list(cols), {c: domain(t) for c, t in cols.items()}, rng) for n, cols in tables.items()}
    for t in range(1, steps + 1):
        stream.use_engine("spark" if spark_every and t % spark_every == 0 else "arrow")
        inserts, deletes = (0, 0) if t % 5 == 3 else (6, 1) if t < 3 else (3, 3)
        stream.step({n: rel.change(inserts, deletes) for n, rel in rels.items()})
    return sorted(set(stream.fallbacks))


def _log(stats: dict) -> None:
    log = os.environ.get("DBSP_SQLFUZZ_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(stats) + "\n")


def _run(tmp_path, seed: int, steps: int, spark_every: int, arrow_only: bool, case: Case | None = None) -> dict:
    steps = int(os.environ.get("DBSP_SQLFUZZ_STEPS", steps))
    stats = run_seed(tmp_path, seed, steps, spark_every, arrow_only, case)
    assert not stats["oracle_errors"], "the generator wrote a query DuckDB cannot run:\n" + "\n".join(stats["oracle_errors"])
    return stats


@pytest.mark.parametrize("seed", seeds_from_env("DBSP_SQLFUZZ_SEEDS", ARROW_SEEDS))
def test_random_sql_views_equal_duckdb_in_process(spark, tmp_path, seed):
    _run(tmp_path, seed, ARROW_STEPS, spark_every=0, arrow_only=True)


@pytest.mark.parametrize("seed", seeds_from_env("DBSP_SQLFUZZ_SHAPED_SEEDS", SHAPED_SEEDS))
def test_grouped_and_lateral_correlated_shapes_equal_duckdb_in_process(spark, tmp_path, seed):
    """``shaped_case``: a grouped query with a subquery correlated on its key in SELECT (and
    EXISTS in HAVING), and a LATERAL subquery, over the seed's random inputs, every step on Arrow."""
    stats = _run(tmp_path, seed, SHAPED_STEPS, spark_every=0, arrow_only=True, case=shaped_case(seed, arrow_only=True))
    assert stats["compared"] == 2, stats["refused"]
    assert not stats["fallbacks"], stats["fallbacks"]


@pytest.mark.parametrize("seed", seeds_from_env("DBSP_SQLFUZZ_SPARK_SEEDS", SPARK_SEEDS))
def test_random_sql_views_equal_duckdb_on_spark_and_arrow(spark, tmp_path, seed):
    _run(tmp_path, seed, SPARK_STEPS, spark_every=2, arrow_only=False)


# ---- what the fuzzer found, as streams (each failed or was refused before its fix) -----------------

FOUND = {
    # a self-join's ON condition on its preserved side read the renamed columns (r_a0) of the input
    "self_right_join": "SELECT l.a0 AS c0, r.ak AS c1 FROM a AS l RIGHT JOIN a AS r ON l.ak = r.ak AND r.a0 >= 'x'",
    # an outer join / anti-join matching one column twice had a key set with that column twice
    "key_twice_outer": "SELECT l.a0 AS c0, r.bk AS c1 FROM a AS l FULL JOIN b AS r ON l.ak = r.bk AND l.ak = r.b0",
    "key_twice_anti": "SELECT * FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.bk = a.ak AND b.b0 = a.ak)",
    # TRUE / NULL have no position in sqlglot's tree; a CAST beside a conjunct lost its ')'
    "literals": "SELECT ak, true AS t, NULL AS n FROM a WHERE (ak IN (0, 1) OR a0 = CAST('x' AS STRING))",
}


def test_what_the_fuzzer_found_equals_duckdb(spark, tmp_path):
    tables = {"a": {"ak": "long", "a0": "string"}, "b": {"bk": "long", "b0": "long"}}
    run_queries(tmp_path / "run", tables, FOUND, dict(FOUND), seed=3, steps=6)
