"""Arrow kernels against Spark kernels: every operator and example circuit over random streams,
through ``run_step`` with Parquet state (in-process on Arrow, on Spark, and alternating), with
identical view deltas and column types at every step: NULLs, bags, deletes, decimals, dates,
strings (``tests/engines.py``)."""
from __future__ import annotations

from collections import Counter
from decimal import Decimal

from spark_jobs.config import PROJECT_ROOT
from tests.engines import (DATES, KEYS, MONEY, STRINGS, TIMES, _comparable, maybe, run_both, run_kernels,
                           write_change)

ALL_OPS = """\
name: engines_all
inputs:
  a:
    schema: {k: long, s: string, d: date, m: "decimal(10,2)"}
    source: {kind: changes, path: inbox/a, format: parquet}
  b:
    schema: {k: long, s: string, n: long}
    source: {kind: changes, path: inbox/b, format: parquet}
nodes:
  a_keys: {op: select, input: a, columns: [k, s]}
  b_keys: {op: select, input: b, columns: [k, s]}
  u_all:  {op: union_all, inputs: [a_keys, b_keys]}
  u:      {op: union, inputs: [a_keys, b_keys]}
  diff:   {op: difference, left: a_keys, right: b_keys}
  inter:  {op: intersect, left: a_keys, right: b_keys}
  j:      {op: join, left: a, right: b, on: [k]}
  j2:     {op: join, left: a, right: b, left_on: [k, s], right_on: [n, s]}
  p:      {op: product, left: a_keys, right: b_keys}
  anti:   {op: antijoin, left: a, right: b_keys, on: [k]}
  dist:   {op: distinct, input: a}
  ia:     {op: integrate, input: a_keys}
  za:     {op: delay, input: b}
  dd:     {op: differentiate, input: ia}
outputs: [u_all, u, diff, inter, j, j2, p, anti, dist, ia, za, dd]
"""

A = ({"k": "long", "s": "string", "d": "date", "m": "decimal(10,2)"}, {"k": KEYS, "s": STRINGS, "d": DATES, "m": MONEY})
B = ({"k": "long", "s": "string", "n": "long"}, {"k": KEYS, "s": STRINGS, "n": KEYS})


def test_every_linear_join_distinct_and_stream_operator_agrees_on_both_engines(spark, tmp_path):
    engines = run_both(tmp_path, ALL_OPS, {"a": A, "b": B}, steps=4, seed=3)
    assert engines == ["arrow", "spark", "arrow", "spark"]


def test_streamed_lookups_agree_on_both_engines(spark, tmp_path, monkeypatch):
    """Every keyed lookup of the Arrow kernels streamed (``execution.arrow.max_lookup_rows: 0``:
    the path of a large change, ``TraceFiles.matching``) over sorted state: joins, antijoins,
    distinct, set operations and aggregates' touched groups give Spark's deltas at every step.
    (Integrals and delays as views, and products, read whole traces: other tests.)"""
    circuit = ALL_OPS.replace("  p:      {op: product, left: a_keys, right: b_keys}\n", "") \
                     .replace("j, j2, p, anti, dist, ia, za, dd", "j, j2, anti, dist, g") \
                     .replace("  ia:", "  g:      {op: aggregate, input: a, group_by: [k], aggregates: {c: \"count(*)\", lo: \"min(s)\"}}\n  ia:")
    from spark_jobs.state.lookup import TraceFiles

    streamed = []
    matching = TraceFiles.matching
    monkeypatch.setattr(TraceFiles, "matching", lambda self, *a, **k: streamed.append(a[0]) or matching(self, *a, **k))
    engines = run_both(tmp_path, circuit, {"a": A, "b": B}, steps=4, seed=5,
                       arrow={"max_lookup_rows": 0}, state={"sort_min_rows": 0})
    assert engines == ["arrow", "spark", "arrow", "spark"]
    assert len(streamed) >= 20, streamed  # the lookups of 6 arrow steps (the bag check's too)


FEED = """\
name: engines_feed
inputs:
  e:
    schema: {k: long, ts: timestamp, d: date, m: "decimal(10,2)", s: string}
    source: {kind: changes, path: inbox/e, format: parquet}
nodes:
  f: {op: filter, input: e, where: "k IS NOT NULL"}
  g: {op: aggregate, input: e, group_by: [s], aggregates: {first: "min(ts)", n: "count(*)"}}
outputs:
  f: {feed: true}
  g: {feed: true}
"""


def test_view_deltas_and_feeds_have_one_schema_whichever_engine_wrote_them(spark, tmp_path):
    """A reader of a view's delta or feed files (pandas, DuckDB, another circuit) sees the same
    column types at every timestep, whether Spark or Arrow ran it: timestamps are INT64
    microseconds adjusted to UTC from both (Spark's default, INT96, reads back as naive
    nanoseconds). Values equal at every step (``run_both``)."""
    import glob

    import pyarrow.parquet as pq

    E = ({"k": "long", "ts": "timestamp", "d": "date", "m": "decimal(10,2)", "s": "string"},
         {"k": KEYS, "ts": TIMES, "d": DATES, "m": MONEY, "s": STRINGS})
    run_both(tmp_path, FEED, {"e": E}, steps=4, seed=8)
    for view in ("f", "g"):
        files = glob.glob(str(tmp_path / "*" / "feeds" / "engines_feed" / view / "*.parquet"))
        assert len(files) >= 8, files  # Spark, Arrow and alternating roots
        schemas = {str(pq.read_schema(f).remove_metadata()) for f in files}
        assert len(schemas) == 1, (view, schemas)
        assert "timestamp[us, tz=UTC]" in schemas.pop()


EDGES = ({"src": "long", "dst": "long"}, {"src": lambda r: r.choice([0, 1, 2, 3, 4, 5, None]),
                                          "dst": lambda r: r.choice([0, 1, 2, 3, 4, 5])})


def test_recursion_agrees_on_both_engines(spark, tmp_path):
    """The transitive closure: the fixed-point loop in-process and on Spark (cycles, self-loops,
    NULL sources, bags and deletes)."""
    run_kernels(spark, tmp_path, str(PROJECT_ROOT / "circuits" / "transitive_closure.yaml"), {"edges": EDGES},
                steps=4, seed=7, sizes=lambda t: (6, 2))


PAPER = ({"id": "long", "a": "long", "x": "string"}, {"id": KEYS, "a": lambda r: r.choice([1, 2, 3, 4, None]),
                                                     "x": STRINGS})
PAPER_R = ({"id": "long", "s": "long", "y": "string"}, {"id": KEYS, "s": lambda r: r.choice([3, 6, 9, None]),
                                                       "y": STRINGS})


def test_the_paper_example_agrees_on_both_engines(spark, tmp_path):
    run_kernels(spark, tmp_path, str(PROJECT_ROOT / "circuits" / "paper_example.yaml"), {"t": PAPER, "r": PAPER_R},
                steps=4, seed=11)


AGGREGATES = """\
name: engines_aggregates
inputs:
  a:
    schema: {k: long, s: string, d: date, m: "decimal(10,2)", n: long, x: double}
    source: {kind: changes, path: inbox/a, format: parquet}
nodes:
  g:   {op: aggregate, input: a, group_by: [k],
        aggregates: {lo: "min(m)", hi: "max(s)", first: "min(d)", n: "count(distinct s)", c: "count(*)", cm: "count(m)"}}
  all: {op: aggregate, input: a, aggregates: {hi: "max(d)", n: "count(distinct k)", c: "count(*)"}}
  t:   {op: aggregate, input: a, group_by: [k, s],
        aggregates: {c: "count(*)", cn: "count(n)", sn: "sum(n)", an: "avg(n)", sm: "sum(m)", am: "avg(m)",
                     sx: "sum(x)", ax: "avg(x)", e: "sum(m * 3)"}}
  tall: {op: aggregate, input: a, aggregates: {c: "count(*)", sm: "sum(m)", am: "avg(m)", ax: "avg(x)"}}
outputs: [g, all, t, tall]
"""

AGG_INPUT = ({**A[0], "n": "long", "x": "double"},
             {**A[1], "n": lambda r: maybe(r, [-3, 0, 7, 2 ** 40]),
              # doubles whose sums depend on the order of addition: the running totals are exact
              # (integer limbs), so both engines must give the same bits whatever order they add in
              "x": lambda r: maybe(r, [0.1, 0.2, -1.25, 1e16, -1e16, 1813.12, 768.99, float("nan")], 0.1)})


def test_aggregates_agree_on_both_engines(spark, tmp_path):
    """Recomputed aggregates (min, max, count(distinct ...)) of the touched groups, and count, sum
    and avg kept as running totals (longs, decimals, doubles; NULL arguments and groups, groups
    emptied and refilled, a group's extreme deleted, the global group); the state either engine
    appends is read by the other in the alternating run."""
    engines = run_both(tmp_path, AGGREGATES, {"a": AGG_INPUT}, steps=4, seed=21, sizes=lambda t: (10, 6))
    assert engines == ["arrow", "spark", "arrow", "spark"]


ORDERS = ({"order_id": "long", "customer_id": "long", "amount": "double", "status": "string"},
          {"order_id": KEYS, "customer_id": KEYS, "amount": lambda r: maybe(r, [50.0, 100.0, 250.5, -0.5]),
           "status": lambda r: maybe(r, ["paid", "paid", "open"])})
CUSTOMERS = ({"customer_id": "long", "name": "string", "region": "string"},
             {"customer_id": lambda r: r.choice([0, 1, 2, 3, 4]), "name": STRINGS,
              "region": lambda r: maybe(r, ["EU", "US"])})
CONTAINS = ({"assembly": "long", "part": "long"}, {"assembly": lambda r: r.choice(range(6)),
                                                   "part": lambda r: r.choice(range(6))})
DISCONTINUED = ({"part": "long"}, {"part": lambda r: r.choice(range(8))})


def test_the_example_circuits_agree_on_both_engines(spark, tmp_path):
    """``revenue_by_region`` (filter, join, linear and recomputed aggregates, distinct) and
    ``bill_of_materials`` (recursion with an antijoin on a lower stratum, an aggregate over it).
    The other examples: ``paper_example`` and ``transitive_closure`` above; ``tpch_sql``'s steps
    after its load run in-process against DuckDB (``test_sql_tpch.py``)."""
    examples = PROJECT_ROOT / "circuits"
    run_kernels(spark, tmp_path / "rbr", str(examples / "revenue_by_region.yaml"),
                {"orders": ORDERS, "customers": CUSTOMERS}, steps=3, seed=13, sizes=lambda t: (8, 3), mixed=False)
    run_kernels(spark, tmp_path / "bom", str(examples / "bill_of_materials.yaml"),
                {"contains": CONTAINS, "discontinued": DISCONTINUED}, steps=3, seed=17,
                sizes=lambda t: (6, 2) if t > 1 else (10, 0), mixed=False)


MIXED = """\
name: engines_mixed
inputs:
  a:
    schema: {k: long, s: string, d: date, m: "decimal(10,2)", n: long, x: double, b: "decimal(38,0)"}
    source: {kind: changes, path: inbox/a, format: parquet}
nodes:
  g:   {op: aggregate, input: a, group_by: [k],
        aggregates: {sn: "sum(n)", hi: "max(n)", lo: "min(m)", am: "avg(m)", sx: "sum(x)", c: "count(*)",
                     sb: "sum(b)", ab: "avg(n)", nd: "count(distinct s)", ax: "max(x)"}}
  all: {op: aggregate, input: a, aggregates: {sn: "sum(n)", lo: "min(d)", sm: "sum(m)", ax: "avg(x)"}}
outputs: [g, all]
"""

MIXED_INPUT = ({**AGG_INPUT[0], "b": "decimal(38,0)"},
               {**AGG_INPUT[1], "b": lambda r: maybe(r, [Decimal(0), Decimal(7), Decimal(-10 ** 20), Decimal(10 ** 30)])})


def test_sums_mixed_with_min_max_run_in_process_and_agree(spark, tmp_path):
    """An aggregate mixing sum/avg with min/max/count(distinct) recomputes its touched groups on
    Arrow too (exact sums of longs, decimals up to decimal(38,0), doubles; a group's extreme
    deleted), the same deltas as Spark at every step, with every trace compacted in-process on
    the way (``compact_fraction`` tiny: the decimal(38,0) totals are consolidated by pyarrow)."""
    bags = {}

    def writer(root, name, t, bag, change):  # noqa: ANN001, ANN202 - run_both's writer
        bags[name] = bag
        write_change(root, name, t, bag.columns, change)

    engines = run_both(tmp_path, MIXED, {"a": MIXED_INPUT}, steps=4, seed=29, sizes=lambda t: (10, 6),
                       writer=writer, state={"compact_fraction": 0.01, "delta_fanout": 2})
    assert engines == ["arrow", "spark", "arrow", "spark"]
    # and the integrated views equal the query over the integrated input (a fresh first step)
    from spark_jobs.runtime.circuit import open_circuit
    from tests.policies import config
    from tests.test_recompute import _recomputed, _view

    def nan_free(rows: Counter) -> Counter:  # NaN as a marker, so equal rows add up
        out = Counter()
        for row, w in rows.items():
            out[tuple(_comparable(v) for v in row)] += w
        return +out

    arrow_rt = open_circuit(str(tmp_path / "circuit.yaml"), config(tmp_path / "arrow", engine="arrow"))
    for view, rows in _recomputed(tmp_path, tmp_path / "circuit.yaml", bags, 4).items():
        assert nan_free(_view(arrow_rt, view)) == nan_free(rows), view

