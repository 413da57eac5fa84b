"""The Arrow expression compiler against Spark itself: same values, same types, same errors.

Random expressions from the covered grammar (``tests/arrow_expr_fuzz.py``), hand-picked edge
cases, TPC-H-style expressions on decimals, and every row expression of the example circuits,
each evaluated on random tables (NULLs, extremes, NaN, -0.0, full-precision decimals, unicode,
far dates) by the compiler and by Spark, with one Spark job for the expressions that do not
raise and one per raising expression checked. Spark runs the expressions as it runs a step's
(generated code: ``ConvertToLocalRelation`` is switched off so the local table is not folded in
the optimizer). Fixed seeds in CI; ``ARROW_EXPR_SEEDS=50`` (a count) or ``=7,8,9`` runs others.
"""
from __future__ import annotations

import glob
import os
import random
import sys
from pathlib import Path

import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from arrow_expr_circuits import expression_sites  # noqa: E402
from arrow_expr_fuzz import compare, random_expressions, random_table  # noqa: E402

from spark_jobs.executor.arrow.compiler import compile_expression  # noqa: E402
from spark_jobs.executor.spark.session import temporary_conf  # noqa: E402
from spark_jobs.spec.loader import load_circuit  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CODEGEN = {"spark.sql.optimizer.excludedRules": "org.apache.spark.sql.catalyst.optimizer.ConvertToLocalRelation"}
CI_SEEDS = (1, 2, 3, 4, 5, 6)
EXPRESSIONS_PER_SEED = 150
ROWS = 40


def _seeds() -> tuple[int, ...]:
    wanted = os.environ.get("ARROW_EXPR_SEEDS", "").strip()
    if not wanted:
        return CI_SEEDS
    if "," in wanted:
        return tuple(int(s) for s in wanted.split(","))
    return tuple(range(1000, 1000 + int(wanted)))


def _check(spark, table: pa.Table, texts: list[str], seed: int = 0, min_compiled: float = 1.0,
           error_checks: int = 6) -> dict:
    with temporary_conf(spark, CODEGEN):
        problems, stats = compare(spark, table, texts, error_checks, rng=random.Random(seed))
    assert not problems, f"{len(problems)} differences from Spark:\n" + "\n".join(p[:600] for p in problems[:20])
    assert stats["compiled"] >= min_compiled * stats["expressions"], stats
    return stats


@pytest.mark.parametrize("seed", _seeds())
def test_random_expressions_match_spark(spark, seed):
    rng = random.Random(seed)
    table = random_table(rng, ROWS)
    stats = _check(spark, table, random_expressions(rng, EXPRESSIONS_PER_SEED), seed, min_compiled=0.9)
    # Arrow raising where Spark's optimizer dropped the raising part is safe (the engine re-runs
    # the step on Spark) but must stay rare.
    assert stats["spurious"] <= max(1, stats["checked_errors"] // 5), stats["spurious_examples"]
    assert stats["raising"] and stats["checked_errors"], stats


# Cases found while building the compiler: evaluation order, optimizer rewrites, type rules.
EDGE_CASES = [
    "i32 + 1/z", "1/z + i32", "z / i32", "coalesce(i32, 1/z)", "case when z = 0 then null else 1 / z end",
    "i32 is not null and 1/z = 1", "i32 is null or 1/z = 1", "(1/z = 1) and false", "(1/z = 1) or true",
    "concat(s, cast(i32 div z as string))", "substr(s, i32, z)", "substr(s, z, i32 % z)", "i32 between 1/z and 2",
    "i32 in (1, 1/z)",
    "nullif(i32, 1/z)", "greatest(i32, 1/z)", "i32 <=> 1/z", "(1/z) <=> (1/z)", "if(1/z > 0, i32, i32)",
    "(1/z) + null", "(i32 + 2147483647) + (-2147483647)", "(i64 * 2) * 3", "-dec_b", "abs(dec_b)",
    "-i8", "i8 * i8", "i16 - i8", "pmod(i32, z)", "i32 % z", "i64 div z", "dec_a % 0.7", "pmod(dec_d, -3)",
    "dec_c div 7", "f64 % z", "dec_b * dec_b", "dec_b / dec_d", "dec_a / 3", "dec_d * (1 - dec_d)",
    "cast(i64 as float) + 0.5D", "ceil(cast(i32 as float))", "cast(cast(i16 as int) as bigint)",
    "cast(dec_a as int)", "cast(dec_b as int)", "cast(dec_b as bigint)", "cast(dec_d as tinyint)",
    "cast(f64 as int)", "cast(f32 as bigint)", "cast(f64 as boolean)", "cast(sn as int)", "cast(sn as bigint)",
    "cast(sn as decimal(10,2))", "cast(sn as boolean)", "cast(sn as date)", "to_date(sn)", "cast(dt as string)",
    "cast(dec_b as string)", "cast(b as string)", "cast(dt as timestamp)", "cast(ts as date)",
    "i32 > 1.5", "i64 <= 99999999999999999999", "i8 = 1.5", "f32 = f64", "f64 = f64", "f64 < 0.0D",
    "greatest(f64, -0.0D, 0.0D)", "least(0.0D, f64, -0.0D)", "s < sn", "s like '%a%'", "s ilike 'PROMO%'",
    "s like 'a!%b' escape '!'", "s like sn", "upper(s)", "lower(s)", "upper(lower(s))", "length(s)",
    "substring(s, -3, 2)", "substring(s, 0)", "left(s, 2)", "right(s, -1)", "trim(s)", "trim(both 'a ' from s)",
    "replace(s, '', 'x')", "replace(s, 'a')", "concat(s, null)", "s || dt", "startswith(s, '')",
    "dt >= '2000-02-29'", "dt + interval '90' day", "dt - interval '1' month", "dt + interval '1' year",
    "date_add(dt, i32)", "date_sub(dt, i16)", "datediff(dt, date '2000-02-29')", "add_months(dt, -13)",
    "last_day(dt)", "trunc(dt, 'quarter')", "trunc(dt, 'day')", "date_trunc('week', ts)", "date_trunc('x', ts)",
    "extract(second from ts)", "hour(ts)", "weekofyear(dt)", "dayofweek(dt)", "date_part('doy', dt)",
    "round(dec_b, 3)", "round(dec_a, -2)", "bround(dec_d, 1)", "round(i32, -9)", "floor(dec_b)", "ceil(f64)",
    "sign(f64)", "sqrt(f64)", "isnan(f32)", "nanvl(f64, 1.5D)", "typeof(1 + 1.5)", "1.5BD * i8",
    "cast(1 as decimal(38,0)) * cast(0.5 as decimal(38,38))", "case i32 when 1 then 'a' when z then 'b' end",
    "b is true", "b is not false", "date_trunc('day', tsn)", "cast(tsn as date)", "hour(tsn)",
    "extract(second from tsn)", "tsn > timestamp '2000-01-01'", "cast(dt as timestamp_ntz)",
]


def test_edge_cases_match_spark(spark):
    table = random_table(random.Random(7), 60)
    stats = _check(spark, table, EDGE_CASES, min_compiled=1.0, error_checks=len(EDGE_CASES))
    assert stats["checked_errors"] == stats["raising"] >= 20, stats
    assert stats["spurious"] == 0, stats["spurious_examples"]  # every raising case raises in Spark too


TPCH = pa.schema([
    ("l_quantity", pa.decimal128(15, 2)), ("l_extendedprice", pa.decimal128(15, 2)),
    ("l_discount", pa.decimal128(15, 2)), ("l_tax", pa.decimal128(15, 2)), ("l_shipdate", pa.date32()),
    ("l_commitdate", pa.date32()), ("l_receiptdate", pa.date32()), ("o_orderdate", pa.date32()),
    ("o_orderpriority", pa.string()), ("p_type", pa.string()), ("p_name", pa.string()), ("c_phone", pa.string()),
    ("ps_supplycost", pa.decimal128(15, 2)), ("ps_availqty", pa.int32()), ("l_linenumber", pa.int32())])
TPCH_EXPRESSIONS = [
    "l_extendedprice * (1 - l_discount)", "l_extendedprice * (1 - l_discount) * (1 + l_tax)",
    "case when p_type like 'PROMO%' then l_extendedprice * (1 - l_discount) else 0 end",
    "extract(year from o_orderdate)", "year(l_shipdate)",
    "o_orderdate >= date '1994-01-01' and o_orderdate < date '1994-01-01' + interval '1' year",
    "l_shipdate <= date '1998-12-01' - interval '90' day", "l_discount between 0.06 - 0.01 and 0.06 + 0.01",
    "l_quantity < 24", "substring(c_phone, 1, 2) in ('13', '31', '23', '29', '30', '18', '17')",
    "p_name like '%green%'", "l_receiptdate > l_commitdate",
    "case when o_orderpriority = '1-URGENT' or o_orderpriority = '2-HIGH' then 1 else 0 end",
    "0.2 * l_quantity", "100.00 * l_extendedprice", "ps_supplycost * ps_availqty",
    "l_extendedprice / l_quantity", "l_linenumber * l_quantity", "round(l_extendedprice * (1 - l_discount), 2)",
]


def test_tpch_expressions_match_spark(spark):
    table = random_table(random.Random(11), 60, TPCH)
    _check(spark, table, TPCH_EXPRESSIONS, min_compiled=1.0)


CIRCUITS = sorted(glob.glob(str(ROOT / "circuits" / "*.yaml")) + glob.glob(str(ROOT / "bench" / "circuits" / "*.yaml")))


def test_example_circuit_expressions_match_spark(spark):
    by_schema: dict[str, tuple[pa.Schema, list[str]]] = {}
    for path in CIRCUITS:
        for label, text, schema in expression_sites(load_circuit(path)):
            compile_expression(text, schema)  # every example expression is covered (NotCovered fails)
            by_schema.setdefault(schema.to_string(), (schema, []))[1].append(text)
    assert sum(len(texts) for _, texts in by_schema.values()) >= 70  # TPC-H SQL nodes included
    for i, (schema, texts) in enumerate(by_schema.values()):
        _check(spark, random_table(random.Random(i), 30, schema), sorted(set(texts)), min_compiled=1.0)
