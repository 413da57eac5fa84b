"""Random tables and random expressions for the Arrow-vs-Spark expression tests, and the comparison.

``random_table`` mixes ordinary values with the ones that break naive kernels: NULLs, min/max of
every integer width, 0 and -0.0, NaN and infinities, decimals at full precision, empty and
non-ASCII strings, strings that are (almost) numbers, dates and booleans, dates near the epoch,
leap days and far years. ``random_expression`` draws from the covered grammar, typed so most
draws compile. ``compare`` evaluates many expressions on one table with the Arrow kernels and
with Spark (one ``selectExpr`` job for all the expressions that do not raise, plus one job per
raising expression checked) and returns the differences.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from decimal import Decimal

import pyarrow as pa

from spark_jobs.executor.arrow.compiler import ExpressionFailed, NotCovered, compile_expression

SCHEMA = pa.schema([
    ("b", pa.bool_()), ("i8", pa.int8()), ("i16", pa.int16()), ("i32", pa.int32()), ("i64", pa.int64()),
    ("z", pa.int32()), ("f32", pa.float32()), ("f64", pa.float64()),
    ("dec_a", pa.decimal128(10, 2)), ("dec_b", pa.decimal128(38, 18)), ("dec_c", pa.decimal128(20, 0)),
    ("dec_d", pa.decimal128(4, 3)), ("s", pa.string()), ("sn", pa.string()), ("dt", pa.date32()),
    ("ts", pa.timestamp("us", tz="UTC")), ("tsn", pa.timestamp("us")),
])
STRINGS = ["", " ", "a", "abc", "PROMO BRUSHED", "promo", "Straße", "İstanbul", "ΣΑΣ", "naïve", "日本語", "🙂x",
           "a%b_c", "  padded  ", "x\ny", "MiXeD", "ǅ", "ﬁ", "ABCabc", "zzz"]
NUMERIC_STRINGS = ["0", "1", "-7", " 42 ", "+3", "2147483647", "2147483648", "-9223372036854775808", "1.5", "-0.25",
                   "1e3", "abc", "", " ", "2020-02-29", "1970-01-01", "2021-13-01", "2019-1-5", "true", "FALSE",
                   " yes ", "n", "12345678901234567890.5", "٣"]
DATES = [0, -1, 1, 10957, 11016, 11017, -25508, 19782, 2932896, -719162, 18321, 17532, 59, -365]  # epoch days


def _decimal(rng: random.Random, precision: int, scale: int) -> Decimal:
    kind = rng.random()
    unscaled = 10 ** precision - 1 if kind < 0.15 else rng.randrange(-10 ** min(precision, 6), 10 ** min(precision, 6))
    if kind < 0.08:
        unscaled = -unscaled
    if 0.15 <= kind < 0.2:
        unscaled = 0
    return Decimal(f"{unscaled}E{-scale}")


_WIDTH = {pa.int8(): 8, pa.int16(): 16, pa.int32(): 32, pa.int64(): 64}
_SPECIAL_DOUBLES = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1.0, -2.5, 0.1, 2.0 ** 63, -(2.0 ** 31),
                    123.456]
TIMESTAMPS = [0, -1, 1, 951782400123456, -86400000000, 1709164800000000, 253402300799999999]


def value_of(rng: random.Random, t: pa.DataType, name: str = ""):
    """One random value of Arrow type ``t`` (None about one time in eight); the column names
    ``z`` (small divisors, zeros), ``sn`` (strings that are almost numbers, dates, booleans) and
    ``s`` (words, non-ASCII) pick a pool of their own."""
    r = rng.random()
    if r < 0.12:
        return None
    if name == "z":
        return rng.choice([0, 0, 1, -1, 2, 3, 7, -3, 100])
    if t in _WIDTH:
        bits = _WIDTH[t]
        lo, hi = -2 ** (bits - 1), 2 ** (bits - 1) - 1
        return rng.choice([lo, hi, 0, -1, 1, rng.randint(-100, 100), rng.randint(lo, hi), rng.randint(-9, 9)])
    if pa.types.is_floating(t):
        extreme = [1e-300, 1.7e308] if t == pa.float64() else [1e-30, 3.4e38]
        return rng.choice(_SPECIAL_DOUBLES + extreme) if r < 0.6 else rng.uniform(-1000, 1000)
    if t == pa.bool_():
        return rng.random() < 0.5
    if pa.types.is_decimal(t):
        return _decimal(rng, t.precision, t.scale)
    if pa.types.is_string(t):
        return rng.choice(NUMERIC_STRINGS if name == "sn" else STRINGS)
    if t == pa.date32():
        return rng.choice(DATES) if r < 0.7 else rng.randint(-30000, 30000)
    if pa.types.is_timestamp(t):
        return rng.choice(TIMESTAMPS) if r < 0.5 else rng.randint(-2 * 10**15, 2 * 10**15)
    raise AssertionError(f"no random values of {t}")


def random_table(rng: random.Random, rows: int = 40, schema: pa.Schema = SCHEMA) -> pa.Table:
    """``rows`` random rows of ``schema`` (by default the fuzz schema of every covered type)."""
    return pa.table({f.name: pa.array([value_of(rng, f.type, f.name) for _ in range(rows)], f.type)
                     for f in schema}, schema=schema)


# -- expressions -----------------------------------------------------------------------------
NUM_COLS = ["i8", "i16", "i32", "i64", "z", "f32", "f64", "dec_a", "dec_b", "dec_c", "dec_d"]
EXACT_COLS = ["i8", "i16", "i32", "i64", "z", "dec_a", "dec_b", "dec_c", "dec_d"]
INT_LITERALS = ["0", "1", "-1", "2", "7", "-3", "100", "2147483647", "-2147483648", "9223372036854775807", "1L",
                "3S", "2Y", "99999999999999999999"]
DATE_FIELDS = ["year", "month", "day", "dayofweek", "dayofyear", "quarter", "weekday", "weekofyear"]
CONCAT_TAILS = ["null", "'-'", "b", "dt"]
NUM_LITERALS = INT_LITERALS + ["1.5", "0.25", "-2.75", "1e3", "2.5D", "1.5F", "0.0D", "-0.0D", "0.001",
                               "12345.678901234567890123"]


class Gen:
    """Random typed expressions (kind: num, int, bool, str, date, ts)."""

    def __init__(self, rng: random.Random, max_depth: int = 3):
        self.rng = rng
        self.max_depth = max_depth

    def pick(self, options):
        return self.rng.choice(options)

    def col(self, name: str) -> str:
        r = self.rng.random()
        return name.upper() if r < 0.1 else f"`{name}`" if r < 0.15 else name

    def small_int(self) -> str:
        """A day or month count that keeps dates in years Spark's calendar functions agree on
        (far-off wrapped dates are left to Spark by the compiler), now and then an extreme one."""
        if self.rng.random() < 0.05:
            return self.pick(["i32", "2147483647", "-2147483648"])
        return self.pick(["z", "i8", "1", "-1", "30", "365", "-400", "(z * 7)"])

    def expr(self, kind: str, depth: int = 0) -> str:
        leaf = depth >= self.max_depth or self.rng.random() < 0.3
        return getattr(self, f"_{kind}")(depth, leaf)

    def _int(self, depth: int, leaf: bool) -> str:
        if leaf:
            return self.col(self.pick(["i8", "i16", "i32", "i64", "z"])) if self.rng.random() < 0.75 \
                else self.pick(INT_LITERALS[:10])
        d = depth + 1
        return self.pick([
            lambda: f"({self.expr('int', d)} {self.pick(['+', '-', '*'])} {self.expr('int', d)})",
            lambda: f"({self.expr('int', d)} div {self.expr('int', d)})",
            lambda: f"({self.expr('int', d)} % {self.expr('int', d)})",
            lambda: f"pmod({self.expr('int', d)}, {self.expr('int', d)})",
            lambda: f"abs({self.expr('int', d)})",
            lambda: f"-{self.expr('int', d)}",
            lambda: f"length({self.expr('str', d)})",
            lambda: f"{self.pick(DATE_FIELDS)}"
                    f"({self.expr('date', d)})",
            lambda: f"extract({self.pick(['year', 'month', 'day', 'dow', 'doy', 'hour', 'minute'])} from "
                    f"{self.expr(self.pick(['date', 'ts']), d)})",
            lambda: f"datediff({self.expr('date', d)}, {self.expr('date', d)})",
            lambda: f"cast({self.expr(self.pick(['num', 'int', 'str']), d)} as "
                    f"{self.pick(['int', 'bigint', 'smallint', 'tinyint'])})",
            lambda: f"floor({self.expr('num', d)})",
            lambda: f"ceil({self.expr('num', d)})",
            lambda: f"round({self.expr('int', d)}, {self.pick(['0', '-1', '-2', '1'])})",
            lambda: f"coalesce({self.expr('int', d)}, {self.expr('int', d)})",
            lambda: f"greatest({self.expr('int', d)}, {self.expr('int', d)})",
            lambda: f"{self.pick(['hour', 'minute', 'second'])}({self.expr('ts', d)})",
            lambda: f"date_part({self.pick(['year', 'MONTH', 'dayofweek', 'hour'])!r}, {self.expr('ts', d)})",
            lambda: f"ifnull({self.expr('int', d)}, {self.pick(INT_LITERALS[:6])})",
            lambda: f"nvl2({self.expr('num', d)}, {self.expr('int', d)}, {self.expr('int', d)})",
            lambda: f"{self.pick(['positive', 'negative'])}({self.expr('int', d)})",
        ])()

    def _num(self, depth: int, leaf: bool) -> str:
        if leaf:
            return self.col(self.pick(NUM_COLS)) if self.rng.random() < 0.75 else self.pick(NUM_LITERALS)
        d = depth + 1
        return self.pick([
            lambda: f"({self.expr('num', d)} {self.pick(['+', '-', '*', '/'])} {self.expr('num', d)})",
            lambda: f"({self.expr('num', d)} {self.pick(['+', '-', '*', '/', '%'])} {self.expr('num', d)})",
            lambda: f"({self.expr('exact', d)} {self.pick(['+', '-', '*', '/', '%', 'div'])} {self.expr('exact', d)})",
            lambda: f"mod({self.expr('num', d)}, {self.expr('num', d)})",
            lambda: f"pmod({self.expr('num', d)}, {self.expr('num', d)})",
            lambda: f"abs({self.expr('num', d)})",
            lambda: f"-{self.expr('num', d)}",
            lambda: self.expr("int", d),
            lambda: f"round({self.expr('exact', d)}, {self.pick(['0', '1', '2', '-1', '5'])})",
            lambda: f"bround({self.expr('exact', d)}, {self.pick(['0', '1', '-1'])})",
            lambda: f"cast({self.expr(self.pick(['num', 'int']), d)} as "
                    f"{self.pick(['double', 'float', 'decimal(10,2)', 'decimal(38,10)', 'decimal(5,1)'])})",
            lambda: f"cast({self.col('sn')} as {self.pick(['decimal(10,2)', 'decimal(38,0)', 'int', 'bigint'])})",
            lambda: f"{self.pick(['sign', 'signum'])}({self.expr('num', d)})",
            lambda: f"ceiling({self.expr('exact', d)})",
            lambda: f"extract(second from {self.expr('ts', d)})",
            lambda: f"sqrt({self.expr('num', d)})",
            lambda: f"nanvl({self.col(self.pick(['f64', 'f32']))}, {self.expr('num', d)})",
            lambda: f"case when {self.expr('bool', d)} then {self.expr('num', d)} else {self.expr('num', d)} end",
            lambda: f"if({self.expr('bool', d)}, {self.expr('num', d)}, {self.expr('num', d)})",
            lambda: f"coalesce({self.expr('num', d)}, {self.expr('num', d)}, {self.expr('num', d)})",
            lambda: f"nvl({self.expr('num', d)}, {self.expr('num', d)})",
            lambda: f"nullif({self.expr('num', d)}, {self.expr('num', d)})",
            lambda: f"{self.pick(['greatest', 'least'])}({self.expr('num', d)}, {self.expr('num', d)})",
            lambda: f"case {self.expr('int', d)} when {self.pick(INT_LITERALS[:6])} then {self.expr('num', d)} "
                    f"when {self.expr('int', d)} then {self.expr('num', d)} end",
        ])()

    def _exact(self, depth: int, leaf: bool) -> str:
        if leaf:
            return self.col(self.pick(EXACT_COLS)) if self.rng.random() < 0.75 else \
                self.pick(INT_LITERALS + ["1.5", "0.25", "-2.75", "0.001", "1.5BD", "12345.678901234567890123"])
        d = depth + 1
        return self.pick([
            lambda: f"({self.expr('exact', d)} {self.pick(['+', '-', '*', '/', '%'])} {self.expr('exact', d)})",
            lambda: f"(1 - {self.expr('exact', d)})",
            lambda: f"({self.col(self.pick(['dec_a', 'dec_b', 'dec_c', 'dec_d']))} * (1 - "
                    f"{self.col(self.pick(['dec_a', 'dec_d']))}))",
            lambda: f"case when {self.expr('bool', d)} then {self.expr('exact', d)} else 0 end",
            lambda: f"abs({self.expr('exact', d)})",
            lambda: f"floor({self.expr('exact', d)})",
        ])()

    def _bool(self, depth: int, leaf: bool) -> str:
        if leaf:
            return self.pick([self.col("b"), "true", "false", f"{self.col(self.pick(NUM_COLS))} > 0",
                              f"{self.col('s')} = 'abc'"])
        d = depth + 1
        cmp = self.pick(["=", "<>", "<", "<=", ">", ">=", "<=>", "==", "!="])
        kind = self.pick(["num", "num", "int", "str", "date", "ts", "exact"])
        return self.pick([
            lambda: f"({self.expr(kind, d)} {cmp} {self.expr(kind, d)})",
            lambda: f"({self.expr('bool', d)} {self.pick(['and', 'or', 'AND', 'OR'])} {self.expr('bool', d)})",
            lambda: f"(not {self.expr('bool', d)})",
            lambda: f"({self.expr(self.pick(['num', 'str', 'date']), d)} is {self.pick(['', 'not '])}null)",
            lambda: f"({self.expr('int', d)} {self.pick(['', 'not '])}in ({self.pick(INT_LITERALS[:6])}, "
                    f"{self.expr('int', d)}, {self.pick(['null', '5', '2.5'])}))",
            lambda: f"({self.expr('str', d)} in ('abc', 'a', {self.expr('str', d)}))",
            lambda: f"({self.expr('num', d)} {self.pick(['', 'not '])}between {self.expr('num', d)} and "
                    f"{self.expr('num', d)})",
            lambda: f"({self.expr('str', d)} {self.pick(['like', 'not like', 'ilike'])} "
                    f"'{self.pick(['PROMO%', '%a%', 'a_c', '%', '_', 'abc', '%ß%', 'a!%b', '%x%y'])}')",
            lambda: f"({self.col('s')} like '{self.pick(['a!%b', 'a!_c%', '!!%'])}' escape '!')",
            lambda: f"{self.pick(['startswith', 'endswith', 'contains'])}({self.expr('str', d)}, "
                    f"{self.pick(['', 'a', 'PROMO', 'ß'])!r})",
            lambda: f"isnan({self.col(self.pick(['f64', 'f32']))})",
            lambda: f"({self.col('dt')} {self.pick(['<', '>=', '='])} '{self.pick(['2000-02-29', '1970-01-01'])}')",
            lambda: f"({self.expr('bool', d)} is {self.pick(['true', 'false', 'not true'])})",
            lambda: f"cast({self.expr(self.pick(['int', 'num', 'str']), d)} as boolean)",
            lambda: f"(({self.expr('int', d)} > 1.5) or ({self.expr('int', d)} <= 99999999999999999999))",
            lambda: f"{self.pick(['isnull', 'isnotnull'])}({self.expr('num', d)})",
            lambda: f"({self.expr('int', d)} in ({', '.join(self.pick(INT_LITERALS) for _ in range(12))}))",
            lambda: f"({self.col('s')} {self.pick(['like', 'ilike'])} {self.col('sn')})",
            lambda: f"({self.expr('str', d)} {self.pick(['=', '<', '>='])} {self.expr('str', d)})",
            lambda: f"coalesce({self.expr('bool', d)}, {self.expr('bool', d)})",
        ])()

    def _str(self, depth: int, leaf: bool) -> str:
        if leaf:
            return self.col(self.pick(["s", "sn"])) if self.rng.random() < 0.8 else \
                self.pick(["''", "'abc'", "'PROMO'", "'ß'", "' x '", '"dq"'])
        d = depth + 1
        return self.pick([
            lambda: f"{self.pick(['upper', 'lower', 'ucase', 'lcase'])}({self.expr('str', d)})",
            lambda: f"substring({self.expr('str', d)}, {self.pick(['1', '0', '-1', '2', '-3', '100'])}, "
                    f"{self.pick(['1', '2', '0', '-1', '5', '2147483647'])})",
            lambda: f"substr({self.expr('str', d)}, {self.expr('int', d)})",
            lambda: f"concat({self.expr('str', d)}, {self.expr(self.pick(['str', 'int', 'exact', 'date']), d)})",
            lambda: f"concat({self.expr('str', d)}, {self.expr('str', d)}, {self.pick(CONCAT_TAILS)})",
            lambda: f"({self.expr('str', d)} || {self.expr('str', d)})",
            lambda: f"{self.pick(['trim', 'ltrim', 'rtrim'])}({self.expr('str', d)})",
            lambda: f"trim({self.pick(['BOTH', 'LEADING', 'TRAILING'])} 'a ' from {self.expr('str', d)})",
            lambda: f"replace({self.expr('str', d)}, {self.pick(['a', '', 'ab', ' '])!r}, "
                    f"{self.pick(['X', '', 'yy'])!r})",
            lambda: f"{self.pick(['left', 'right'])}({self.expr('str', d)}, {self.pick(['0', '1', '3', '-1'])})",
            lambda: f"cast({self.expr(self.pick(['int', 'exact', 'date', 'bool']), d)} as string)",
            lambda: f"case when {self.expr('bool', d)} then {self.expr('str', d)} end",
            lambda: f"coalesce({self.expr('str', d)}, {self.expr('str', d)})",
        ])()

    def _date(self, depth: int, leaf: bool) -> str:
        if leaf:
            return self.col("dt") if self.rng.random() < 0.8 else \
                self.pick(["date '2020-02-29'", "date '1970-01-01'", "DATE '1999-12-31'"])
        d = depth + 1
        return self.pick([
            lambda: f"{self.pick(['date_add', 'date_sub'])}({self.expr('date', d)}, {self.small_int()})",
            lambda: f"date_add({self.expr('date', d)}, {self.pick(['1', '-1', '365', '0'])})",
            lambda: f"cast({self.expr(self.pick(['ts', 'str']), d)} as date)",
            lambda: f"to_date({self.col('sn')})",
            lambda: f"trunc({self.expr('date', d)}, {self.pick(['year', 'MM', 'quarter', 'week', 'day', 'yy'])!r})",
            lambda: f"last_day({self.expr('date', d)})",
            lambda: f"add_months({self.expr('date', d)}, {self.pick(['1', '-1', '13', '0'])})",
            lambda: f"coalesce({self.expr('date', d)}, {self.expr('date', d)})",
            lambda: f"({self.expr('date', d)} {self.pick(['+', '-'])} interval '{self.pick(['1', '90', '-3'])}' "
                    f"{self.pick(['day', 'month', 'year', 'days'])})",
            lambda: f"({self.expr('date', d)} {self.pick(['+', '-'])} {self.small_int()})",
        ])()

    def _ts(self, depth: int, leaf: bool) -> str:
        if leaf:
            return self.col(self.pick(["ts", "ts", "tsn"])) if self.rng.random() < 0.8 else \
                self.pick(["timestamp '2020-02-29 12:34:56.789'", "TIMESTAMP '1970-01-01'"])
        d = depth + 1
        return self.pick([
            lambda: f"cast({self.expr('date', d)} as timestamp)",
            lambda: f"date_trunc({self.pick(['year', 'month', 'day', 'hour', 'minute', 'week', 'quarter', 'x'])!r},"
                    f" {self.expr('ts', d)})",
            lambda: f"greatest({self.expr('ts', d)}, {self.expr('ts', d)})",
        ])()


def random_expressions(rng: random.Random, count: int) -> list[str]:
    gen = Gen(rng, max_depth=rng.choice([3, 3, 4]))
    kinds = ["num", "num", "exact", "int", "bool", "bool", "str", "date", "ts"]
    return [gen.expr(rng.choice(kinds)) for _ in range(count)]


# -- comparison ------------------------------------------------------------------------------
@dataclass
class Outcome:
    """One expression on one table, by the Arrow kernels."""

    text: str
    spark_type: str = ""
    values: list | None = None  # per row, when no row raises
    row_errors: dict[int, str] = field(default_factory=dict)  # row -> condition, when some raise
    row_values: dict[int, object] = field(default_factory=dict)  # row -> value of the rows that do not


def normalized(arr: pa.Array) -> list:
    """Comparable Python values: dates and timestamps as integers, floats as (kind, bits) so NaN
    equals NaN and -0.0 differs from 0.0."""
    t = arr.type
    if pa.types.is_date32(t):
        arr = arr.cast(pa.int32())
    elif pa.types.is_timestamp(t):
        arr = arr.cast(pa.int64())
    out = []
    for v in arr.to_pylist():
        if isinstance(v, float):
            out.append(("nan",) if math.isnan(v) else ("f", v, math.copysign(1.0, v)))
        else:
            out.append(v)
    return out


def arrow_outcome(text: str, table: pa.Table) -> Outcome | None:
    try:
        compiled = compile_expression(text, table.schema)
    except NotCovered:
        return None
    out = Outcome(text, compiled.spark_type)
    try:
        out.values = normalized(compiled.evaluate(table))
        return out
    except ExpressionFailed:
        pass
    for row in range(table.num_rows):
        try:
            out.row_values[row] = normalized(compiled.evaluate(table.slice(row, 1)))[0]
        except ExpressionFailed as exc:
            out.row_errors[row] = exc.condition
    if not out.row_errors:
        raise AssertionError(f"{text}: the whole table raises but no single row does")
    return out


def spark_condition(exc: Exception) -> str | None:
    """Spark's error class of ``exc`` (before the first dot), None for an unclassified error."""
    getter = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    cond = getter() if getter else None
    return cond.split(".")[0] if cond else None


def compare(spark, table: pa.Table, texts: list[str], error_checks: int = 6,
            rng: random.Random | None = None) -> tuple[list[str], dict]:
    """Differences between the Arrow kernels and Spark for ``texts`` on ``table``, and counts.

    A difference is a value or type that differs, a row on which Spark raises and Arrow returns
    a value, or a row on which both raise with different conditions. A row on which Arrow raises
    and Spark does not is counted apart (``stats["spurious"]``, with examples): it is not a wrong
    value (the engine runs such a step on Spark, whose optimizer sometimes drops the raising part
    of an expression, e.g. ``x IS NULL`` for an ``x`` it proves non-NULL)."""
    rng = rng or random.Random(0)
    outcomes = [o for o in (arrow_outcome(t, table) for t in texts) if o is not None]
    stats = {"expressions": len(texts), "compiled": len(outcomes),
             "raising": sum(1 for o in outcomes if o.values is None), "checked_errors": 0, "spurious": 0,
             "spurious_examples": []}
    problems: list[str] = []
    rows = table.num_rows
    extra = {"__row": pa.array(range(rows), pa.int32())}
    select = []
    for i, o in enumerate(outcomes):
        if o.values is None:
            extra[f"__ok{i}"] = pa.array([r not in o.row_errors for r in range(rows)], pa.bool_())
            select.append(f"CASE WHEN __ok{i} THEN {o.text} END AS c{i}")
        else:
            select.append(f"{o.text} AS c{i}")
    full = table
    for name, arr in extra.items():
        full = full.append_column(name, arr)
    df = spark.createDataFrame(full)
    for f in table.schema:  # Spark reads a naive Arrow timestamp as TIMESTAMP; Parquet's as TIMESTAMP_NTZ
        if pa.types.is_timestamp(f.type) and f.type.tz is None:
            df = df.withColumn(f.name, df[f"`{f.name}`"].cast("timestamp_ntz"))
    result = _collect(spark, df, select, outcomes, problems)
    for i, o in enumerate(outcomes):
        if result is None or f"c{i}" not in result:
            continue
        got_type, got = result[f"c{i}"]
        if got_type != o.spark_type:
            problems.append(f"{o.text}: type {o.spark_type} (Arrow) vs {got_type} (Spark)")
            continue
        want = o.values if o.values is not None else [o.row_values.get(r) for r in range(rows)]
        for r in range(rows):
            if got[r] != want[r]:
                problems.append(f"{o.text}: row {r} ({_row(table, r)}): Arrow {want[r]!r} vs Spark {got[r]!r}")
                break
    raising = [(i, o) for i, o in enumerate(outcomes) if o.values is None]
    nulls = [sum(table.column(c)[r].as_py() is None for c in table.column_names) for r in range(rows)]
    for i, o in rng.sample(raising, min(error_checks, len(raising))):
        # the raising row with the most NULLs: where skipping (NULL operands, untaken branches)
        # matters most, so an Arrow error on a row Spark would skip shows
        row = max(sorted(o.row_errors), key=lambda r: nulls[r])
        stats["checked_errors"] += 1
        try:
            df.where(f"__row = {row}").selectExpr(o.text).collect()
            stats["spurious"] += 1
            stats["spurious_examples"].append(f"{o.text}: row {row} ({_row(table, row)}): Arrow raises "
                                              f"{o.row_errors[row]}, Spark does not")
        except Exception as exc:  # noqa: BLE001 - any Spark error
            cond = spark_condition(exc)
            if cond is not None and cond != o.row_errors[row]:
                problems.append(f"{o.text}: row {row}: Arrow raises {o.row_errors[row]}, Spark {cond}")
    return problems, stats


def _collect(spark, df, select: list[str], outcomes: list[Outcome], problems: list[str]):
    """One Spark job for all columns; on failure, find the raising columns by bisection."""
    def run(indices: list[int]):
        part = df.selectExpr(*[select[i] for i in indices])
        arrow = part.toArrow()
        fields = {f.name: f.dataType.simpleString() for f in part.schema.fields}
        return {name: (fields[name], normalized(arrow.column(name).combine_chunks())) for name in arrow.column_names}

    def search(indices: list[int]) -> dict:
        try:
            return run(indices)
        except Exception as exc:  # noqa: BLE001 - any Spark error
            if len(indices) == 1:
                o = outcomes[indices[0]]
                problems.append(f"{o.text}: Spark raises {spark_condition(exc)} on rows where Arrow does not")
                return {}
            mid = len(indices) // 2
            return {**search(indices[:mid]), **search(indices[mid:])}

    return search(list(range(len(select))))


def _row(table: pa.Table, r: int) -> str:
    one = table.slice(r, 1)
    values = {name: normalized(one.column(name).combine_chunks())[0] for name in one.column_names}
    return ", ".join(f"{k}={v!r}" for k, v in values.items() if v is not None)[:400]


