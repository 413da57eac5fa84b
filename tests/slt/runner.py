"""Run sqllogictest files through the engine: every query an ``op: sql`` view, maintained over a
stream of inserts, deletes and re-inserts, and checked at every timestep against a batch answer.

For each file, the statements build tables (``db.py``); each run of queries between two data
changes is one *chunk*. Every query of a chunk is first compiled alone (a circuit of the tables
and that one ``sql`` node): a refusal is counted with its reason. The accepted queries become the
views of circuits of up to ``chunk`` views each; each circuit runs, in-process (the Arrow engine,
real Parquet state and manifests), a stream of ``steps`` timesteps whose integral at the last step
is the tables as the file has them: the rows arrive in two parts, then a third of the live rows
is deleted and re-inserted at each further step. After every step each view, integrated, must
equal the oracle's batch answer over the integrated tables: Spark SQL running the query's own
text (``oracle="spark"``, the reference) or DuckDB running it transpiled by sqlglot
(``oracle="duckdb"``, fast, for CI and quick runs). At the last step the view is also compared
with the file's expected values (formatted, sorted and hashed as sqllogictest does), where that
is meaningful: those answers are SQLite's, whose dialect differs from Spark's (integer division,
text of numbers), so a difference there is counted apart, never as wrong.

Per query: ``refused`` (the engine's reason), ``agree`` (equal to the oracle at every step),
``wrong`` (different at some step), ``error`` (the engine failed running it), ``oracle_error``
(the oracle could not run the query: nothing to compare with).
"""
from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import tempfile
import traceback
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.spec.errors import CircuitError
from tests.slt.db import Database, Unsupported
from tests.slt.parse import Query, Statement, parse
from tests.sql_streams import arrow_type, norm

WRONG_SHOWN = 3  # rows of a difference kept in the report


@dataclass
class Outcome:
    line: int
    sql: str
    status: str  # refused | agree | wrong | error | oracle_error | unsupported | accepted (not run)
    reason: str = ""
    expected: str = ""  # match | differ | unchecked | "" (not compared)
    must_refuse: bool = False  # a ``statement error`` query: the file says the engine refuses it


@dataclass
class FileReport:
    name: str
    outcomes: list[Outcome] = field(default_factory=list)
    skipped: int = 0  # records skipped by skipif/onlyif
    unsupported: list[str] = field(default_factory=list)  # statements the runner could not apply

    def counts(self) -> Counter:
        return Counter(o.status for o in self.outcomes)

    def expected_counts(self) -> Counter:
        return Counter(o.expected for o in self.outcomes if o.expected)

    def refusals(self) -> Counter:
        return Counter(reason_key(o.reason) for o in self.outcomes if o.status == "refused")

    def summary(self) -> dict:
        c = self.counts()
        total = len(self.outcomes)
        accepted = total - c["refused"] - c["unsupported"]
        return {"file": self.name, "queries": total, "accepted": accepted, "agree": c["agree"],
                "wrong": c["wrong"], "error": c["error"], "oracle_error": c["oracle_error"],
                "refused": c["refused"], "unsupported": c["unsupported"], "skipped": self.skipped,
                "not_run": c["accepted"],
                "expected": dict(self.expected_counts())}


def reason_key(message: str) -> str:
    """A refusal's message without its specifics (names, numbers, quoted text): for counting."""
    text = re.sub(r"^.*?query line \d+, column \d+: ", "", message.split("\n")[0])
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\(known here:[^)]*\)|\(columns[^)]*\)", "", text)
    text = re.sub(r"\d+", "N", text)
    return text[:140]


# ---- circuits --------------------------------------------------------------------------------

def circuit_text(tables: dict[str, list[tuple[str, str]]], queries: dict[str, str]) -> str:
    lines = ["name: slt", "inputs:"]
    for name, cols in tables.items():
        schema = ", ".join(f'{c}: "{t}"' for c, t in cols)
        lines += [f"  {name}:", f"    schema: {{{schema}}}",
                  f"    source: {{kind: changes, path: inbox/{name}, format: parquet}}"]
    lines.append("nodes:")
    for node, q in queries.items():
        lines += [f"  {node}:", "    op: sql", "    query: |"] + [f"      {ln}" for ln in q.split("\n")]
    lines.append(f"outputs: [{', '.join(queries)}]")
    return "\n".join(lines) + "\n"


def view_sql(q: Query) -> str:
    """The view's query: the file's, its columns named by a derived table's column list (a view's
    columns need names; the files leave expressions unnamed). The oracle runs the file's text."""
    names = ", ".join(f"c{i}" for i in range(max(1, len(q.types))))
    return f"SELECT * FROM (\n{q.sql}\n) AS _slt({names})"


def refusal(tables: dict[str, list[tuple[str, str]]], sql: str) -> str | None:
    """The engine's refusal of ``sql`` as the one view of a circuit (None: accepted)."""
    from tests.streams import compile_text

    try:
        compile_text(circuit_text(tables, {"q": sql}))
    except CircuitError as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - a crash of the compiler is reported, never hidden
        return f"compiler crash: {type(e).__name__}: {e}"
    return None


def schedule(rows: Counter, steps: int, rng: random.Random) -> list[Counter]:
    """Changes whose integral after ``steps`` steps is ``rows``: the rows in two parts, then at
    each step a third of the live rows deleted and the previous step's deletions re-inserted."""
    items = [r for r, w in sorted(rows.items(), key=repr) for _ in range(w)]
    rng.shuffle(items)
    if steps <= 1:
        return [Counter(items)]
    cut = (len(items) * 3 + 4) // 5
    out = [Counter(items[:cut])]
    live = Counter(items[:cut])
    pending = Counter(items[cut:])
    for t in range(1, steps):
        change = Counter(pending)
        live.update(pending)
        pending = Counter()
        if t < steps - 1:
            pool = sorted((r for r, w in live.items() for _ in range(w)), key=repr)
            for r in rng.sample(pool, len(pool) // 3):
                change[r] -= 1
                live[r] -= 1
                pending[r] += 1
        out.append(Counter({r: w for r, w in change.items() if w}))
        live = +live
    assert +live == +rows or not rows, "the schedule must end at the file's tables"
    return out


# ---- oracles ---------------------------------------------------------------------------------

class SparkOracle:
    """Spark SQL's batch answer: the query's own text over temporary views of the tables."""

    name = "spark"

    def __init__(self) -> None:
        from spark_jobs.config import load_config
        from spark_jobs.executor.spark.session import get_spark

        self.spark = get_spark(load_config())

    def load(self, tables: dict[str, list[tuple[str, str]]], bags: dict[str, Counter]) -> None:
        from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

        kinds = {"long": LongType(), "double": DoubleType(), "string": StringType()}
        for name, cols in tables.items():
            schema = StructType([StructField(c, kinds[t]) for c, t in cols])
            rows = [r for r, w in bags[name].items() for _ in range(w)]
            self.spark.createDataFrame(rows, schema).createOrReplaceTempView(name)

    def answer(self, sql: str) -> Counter:
        self.last = [tuple(norm(v) for v in r) for r in self.spark.sql(sql).collect()]
        return Counter(self.last)


class DuckOracle:
    """DuckDB's batch answer to the query transpiled from Spark SQL by sqlglot."""

    name = "duckdb"

    def __init__(self) -> None:
        import duckdb

        self.con = duckdb.connect()

    def load(self, tables: dict[str, list[tuple[str, str]]], bags: dict[str, Counter]) -> None:
        for name, cols in tables.items():
            rows = [r for r, w in bags[name].items() for _ in range(w)]
            table = pa.table({c: pa.array([r[i] for r in rows], arrow_type(t)) for i, (c, t) in enumerate(cols)})
            self.con.register("__load", table)
            self.con.execute(f'CREATE OR REPLACE TABLE "{name}" AS SELECT * FROM __load')
            self.con.unregister("__load")

    def answer(self, sql: str) -> Counter:
        from tests.sql_streams import to_duckdb

        self.last = [tuple(norm(v) for v in r) for r in self.con.execute(to_duckdb(sql)).fetchall()]
        return Counter(self.last)


# ---- the stream ------------------------------------------------------------------------------

class EngineFailed(Exception):
    pass


def run_stream(root: str, tables: dict[str, list[tuple[str, str]]], bags: dict[str, Counter],
               queries: dict[str, str], steps: int, seed: int, oracle,
               oracle_sql: dict[str, str] | None = None
               ) -> tuple[dict[str, Counter], dict[str, str], dict[str, list[tuple]]]:
    """Run the circuit of ``queries`` over the stream; return each view's integral at the end,
    the views that differed from the oracle (view -> description) or whose oracle failed, and the
    oracle's rows in its order at the end (an ORDER BY's order, for a ``nosort`` result)."""
    from spark_jobs.runtime.circuit import open_circuit
    from spark_jobs.runtime.step import run_step
    from tests.engines import output_delta
    from tests.policies import config, make_input_folders

    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, "circuit.yaml")
    with open(path, "w") as f:
        f.write(circuit_text(tables, queries))
    oracle_sql = oracle_sql or queries
    try:
        rt = open_circuit(path, config(root, engine="arrow"))  # state compacted as the policy says
        make_input_folders(rt)
    except Exception as e:  # noqa: BLE001
        raise EngineFailed(f"open: {type(e).__name__}: {e}") from e
    rng = random.Random(seed)
    changes = {name: schedule(bags[name], steps, rng) for name in tables}
    integral = {name: Counter() for name in tables}
    views: dict[str, Counter] = {v: Counter() for v in queries}
    bad: dict[str, str] = {}
    ordered: dict[str, list[tuple]] = {}
    for t in range(steps):
        for name, cols in tables.items():
            delta = changes[name][t]
            integral[name].update(delta)
            integral[name] = +integral[name]
            if not delta:
                continue
            folder = os.path.join(root, "inbox", name)
            data = {c: pa.array([r[i] for r in delta], arrow_type(typ)) for i, (c, typ) in enumerate(cols)}
            data["_weight"] = pa.array(list(delta.values()), pa.int64())
            pq.write_table(pa.table(data), os.path.join(folder, f"t{t:04d}.parquet"))
        try:
            step = run_step(rt)
            if step.engine != "arrow" and os.environ.get("SLT_DEBUG"):
                print(f"step {t + 1} ran on {step.engine}: {step.engine_reason}")
            for v in queries:
                delta, _ = output_delta(rt, v)
                for row, w in delta.items():
                    views[v][tuple(norm(x) for x in row)] += w
                views[v] = Counter({k: w for k, w in views[v].items() if w})
        except Exception as e:  # noqa: BLE001
            raise EngineFailed(f"step {t + 1}: {type(e).__name__}: {str(e)[:400]}") from e
        oracle.load(tables, integral)
        for v, sql in oracle_sql.items():
            if v in bad:
                continue
            try:
                want = oracle.answer(sql)
            except Exception as e:  # noqa: BLE001
                bad[v] = f"oracle_error: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
                continue
            got = views[v]
            ordered[v] = oracle.last
            if any(w < 0 for w in got.values()) or got != want:
                only_engine = list((got - want).items())[:WRONG_SHOWN]
                only_oracle = list((want - got).items())[:WRONG_SHOWN]
                bad[v] = (f"wrong at step {t + 1}: only the engine {only_engine}, only {oracle.name} "
                          f"{only_oracle}")
    return views, bad, ordered


# ---- expected values -------------------------------------------------------------------------

def _text(value, kind: str) -> str:
    if value is None:
        return "NULL"
    if kind == "I":
        if isinstance(value, (bool, int)):
            return str(int(value))
        if isinstance(value, float):
            return str(int(value))
        try:
            return str(int(float(value)))
        except (TypeError, ValueError):
            return "0"
    if kind == "R":
        try:
            return f"{float(value):.3f}"
        except (TypeError, ValueError):
            return "0.000"
    s = str(value)
    return "(empty)" if s == "" else "".join(ch if " " <= ch <= "~" else "@" for ch in s)


def check_expected(q: Query, view: Counter, order: list[tuple] | None = None) -> str:
    """match / differ / unchecked: the view's values as sqllogictest prints them vs the file's.
    A ``nosort`` result is the view's rows in ``order`` (the oracle's rows, when they are the
    view's: its ORDER BY's order); without it, only a listed (not hashed) result is comparable."""
    rows = [[_text(v, k) for v, k in zip(r, q.types)] for r, w in view.items() for _ in range(w)]
    if q.sort == "nosort" and order is not None and Counter(order) == view:
        values = [_text(v, k) for r in order for v, k in zip(r, q.types)]
        if q.hashed is not None:
            digest = hashlib.md5("".join(v + "\n" for v in values).encode()).hexdigest()
            return "match" if (len(values), digest) == q.hashed else "differ"
        return "match" if values == [v for line in q.values or [] for v in line.split("\t")] else "differ"
    if q.sort == "valuesort":
        values = sorted(v for r in rows for v in r)
    else:  # rowsort; nosort too, since a view has no order (only a non-hashed list is comparable)
        if q.sort == "nosort" and q.hashed is not None:
            return "unchecked"
        values = [v for r in sorted(rows) for v in r]
    if q.hashed is not None:
        digest = hashlib.md5("".join(v + "\n" for v in values).encode()).hexdigest()
        return "match" if (len(values), digest) == q.hashed else "differ"
    expected = [v for line in q.values or [] for v in line.split("\t")] if q.values else []
    if q.sort == "nosort":
        width = max(1, len(q.types))
        exp_rows = [expected[i:i + width] for i in range(0, len(expected), width)]
        expected = [v for r in sorted(exp_rows) for v in r]
    return "match" if values == expected else "differ"


# ---- a file ----------------------------------------------------------------------------------

@dataclass
class Options:
    oracle: str = "duckdb"  # spark | duckdb
    steps: int = 4
    chunk: int = 64
    seed: int = 0
    workdir: str | None = None
    log: object = None  # a callable(str) for progress lines
    accept_only: bool = False  # only compile each query (accepted / refused), run nothing
    sample: int = 1  # run every n-th accepted query of a file (the others: accepted, not run)
    subset: int = 1  # take only every n-th query of a file at all (the others are not counted)


def run_file(path: str, opts: Options, oracle=None) -> FileReport:
    with open(path) as f:
        parsed = parse(f.read())
    report = FileReport(os.path.basename(path), skipped=parsed.skipped)
    if not opts.accept_only:
        oracle = oracle or (SparkOracle() if opts.oracle == "spark" else DuckOracle())
    db = Database()
    pending: list[Query] = []
    broken: str | None = None
    work = opts.workdir or tempfile.mkdtemp(prefix="slt-")
    n_chunk = [0]
    n_query = 0

    def flush() -> None:
        if pending:
            run_chunk(report, db, list(pending), opts, oracle, work, n_chunk)
            pending.clear()

    for rec in parsed.records:
        if isinstance(rec, Statement):
            if not rec.ok:
                if rec.sql.lstrip().upper().startswith(("SELECT", "WITH")) and not broken:
                    # a query the engine must refuse (the project's files list each refusal so)
                    tables = {name: t.columns for name, t in db.tables.items()}
                    why = refusal(tables, view_sql(Query(rec.sql, "I" * _width(rec.sql), "rowsort", None, None,
                                                          None, rec.line)))
                    report.outcomes.append(Outcome(rec.line, rec.sql, "refused", why, must_refuse=True) if why
                                           else Outcome(rec.line, rec.sql, "wrong", "accepted, but the file says "
                                                        "it must be refused (statement error)", must_refuse=True))
                continue  # a statement SQLite refuses: nothing to apply
            flush()
            if broken:
                continue
            try:
                db.apply(rec.sql)
            except Unsupported as e:
                broken = f"line {rec.line}: {e}"
                report.unsupported.append(broken)
            continue
        n_query += 1
        if (n_query - 1) % opts.subset:
            continue
        if broken:
            report.outcomes.append(Outcome(rec.line, rec.sql, "unsupported", f"after unsupported statement {broken}"))
            continue
        pending.append(rec)
    flush()
    if not opts.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return report


def _width(sql: str) -> int:
    """The number of columns of a query's SELECT list (for naming a refused query's columns)."""
    import sqlglot

    try:
        tree = sqlglot.parse_one(sql, read="spark")
        return max(1, len(tree.selects))
    except Exception:  # noqa: BLE001 - unparseable: the engine refuses it anyway
        return 1


def run_chunk(report: FileReport, db: Database, queries: list[Query], opts: Options, oracle, work: str,
              n_chunk: list[int]) -> None:
    tables = {name: t.columns for name, t in db.tables.items()}
    bags = {name: Counter(t.rows) for name, t in db.tables.items()}
    accepted: list[Query] = []
    outcome: dict[int, Outcome] = {}
    for q in queries:
        why = refusal(tables, view_sql(q))
        outcome[id(q)] = Outcome(q.line, q.sql, "refused" if why else "agree", why or "")
        if not why:
            accepted.append(q)
    if opts.accept_only or opts.sample > 1:
        run = [] if opts.accept_only else [q for q in accepted if (q.line // 2) % opts.sample == 0]
        for q in accepted:
            if q not in run:
                outcome[id(q)].status = "accepted"
        accepted = run
    for i in range(0, len(accepted), opts.chunk):
        part = accepted[i:i + opts.chunk]
        _run_part(part, tables, bags, opts, oracle, work, n_chunk, outcome)
        if opts.log:
            opts.log(f"{report.name}: {min(i + opts.chunk, len(accepted))}/{len(accepted)} accepted views run")
    report.outcomes.extend(outcome[id(q)] for q in queries)


def _run_part(part: list[Query], tables, bags, opts: Options, oracle, work: str, n_chunk: list[int],
              outcome: dict[int, Outcome]) -> None:
    n_chunk[0] += 1
    root = os.path.join(work, f"c{n_chunk[0]}")
    names = {f"q{q.line}": q for q in part}
    try:
        views, bad, ordered = run_stream(root, tables, bags, {n: view_sql(q) for n, q in names.items()}, opts.steps,
                                opts.seed + n_chunk[0], oracle, {n: q.sql for n, q in names.items()})
    except EngineFailed as e:
        if len(part) == 1:
            o = outcome[id(part[0])]
            o.status, o.reason = "error", str(e)
        else:  # find the views that fail: halves, from scratch
            half = len(part) // 2
            _run_part(part[:half], tables, bags, opts, oracle, work, n_chunk, outcome)
            _run_part(part[half:], tables, bags, opts, oracle, work, n_chunk, outcome)
        return
    except Exception as e:  # noqa: BLE001 - the runner's own failure: every view of the part is an error
        for q in part:
            o = outcome[id(q)]
            o.status, o.reason = "error", f"runner: {type(e).__name__}: {e}\n{traceback.format_exc()[-600:]}"
        return
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for n, q in names.items():
        o = outcome[id(q)]
        if n in bad:
            o.status = "oracle_error" if bad[n].startswith("oracle_error") else "wrong"
            o.reason = bad[n]
            continue
        o.expected = check_expected(q, views[n], ordered.get(n))
