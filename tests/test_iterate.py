"""``op: iterate``, the relational while loop (section 7.6 of the paper), end to end.

The example circuits (shortest paths, connected components) run through ``run_step`` on random
graphs (cycles, self-loops, parallel edges, bags) with insertions and deletions for 30+ steps,
and every view, integrated, equals a from-scratch computation by a plain Python algorithm
(Dijkstra, union-find; both checked against networkx on random graphs) at every step. Loops that never converge (a counter, an oscillation) fail
the step naming the node and the iteration count, and commit nothing. Validation accepts
aggregates and negation of the loop in an ``iterate`` body (and keeps refusing them in
``recursive``).
"""
from __future__ import annotations

import random
from collections import Counter

import pytest

from bench.iterate import dijkstra as bench_dijkstra
from spark_jobs.config import PROJECT_ROOT
from spark_jobs.executor.loop import RecursionLimitExceeded
from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from spark_jobs.spec import CircuitError, load_circuit_text
from tests.engines import output_delta, write_change
from tests.policies import config, make_input_folders

SP = str(PROJECT_ROOT / "circuits" / "shortest_paths.yaml")
SP_SQL = str(PROJECT_ROOT / "circuits" / "shortest_paths_sql.yaml")
CC = str(PROJECT_ROOT / "circuits" / "connected_components.yaml")
EDGE = {"src": "long", "dst": "long", "w": "long"}
START = {"node": "long", "d": "long"}
LINK = {"src": "long", "dst": "long"}


# ---- plain Python references ------------------------------------------------------------------

def dijkstra(edges: Counter, start: Counter) -> set[tuple[int, int]]:
    """Shortest distances from the start rows (node, d) of positive multiplicity (bench.iterate's
    Dijkstra with one starting distance per node: the least, as a super-source's edges give)."""
    starts: dict[int, int] = {}
    for (node, d), n in start.items():
        if n > 0:
            starts[node] = min(d, starts.get(node, d))
    return set(bench_dijkstra(edges, starts).items())


def components(links: Counter) -> set[tuple[int, int]]:
    """(vertex, smallest vertex of its component) by union-find over the undirected links."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for (a, b), n in links.items():
        if n <= 0:
            continue
        parent.setdefault(a, a), parent.setdefault(b, b)
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {(v, find(v)) for v in parent}


def test_the_references_agree_with_networkx():
    """The plain-Python references the tests compare views with, checked against networkx on
    random graphs of the tests' kinds (cycles, self-loops, 0 weights, parallel edges, bags,
    several starting rows per node)."""
    import networkx as nx

    rng = random.Random(1)
    for _ in range(300):
        n = rng.randint(1, 14)
        edges = Counter((rng.randrange(n), rng.randrange(n), rng.randrange(6)) for _ in range(rng.randint(0, 40)))
        start = Counter((rng.randrange(n), rng.randrange(3)) for _ in range(rng.randint(0, 3)))
        g = nx.MultiDiGraph()
        g.add_weighted_edges_from(edges, weight="w")
        g.add_weighted_edges_from((("source", node, d) for node, d in start), weight="w")  # a super-source
        want = nx.single_source_dijkstra_path_length(g, "source", weight="w") if start else {}
        assert dijkstra(edges, start) == {(v, d) for v, d in want.items() if v != "source"}

        links = Counter((rng.randrange(n), rng.randrange(n)) for _ in range(rng.randint(0, 20)))
        u = nx.MultiGraph(list(links))
        assert components(links) == {(v, min(c)) for c in nx.connected_components(u) for v in c}


def test_the_benchmark_s_networkx_and_duckdb_distances_equal_dijkstra():
    """bench.iterate times networkx and DuckDB (a keyed recursive CTE) against the loop: on
    random graphs (cycles, self-loops, parallel edges) both give Dijkstra's distances."""
    from bench.iterate import duckdb_distances, networkx_distances

    rng = random.Random(2)
    for _ in range(20):
        n = rng.randint(1, 30)
        edges = Counter((rng.randrange(n), rng.randrange(n), rng.randint(1, 9)) for _ in range(rng.randint(0, 90)))
        want = bench_dijkstra(edges, 0)
        assert networkx_distances(edges, 0)[0] == want and duckdb_distances(edges, 0)[0] == want


# ---- random graphs ------------------------------------------------------------------------------

def graph_change(rng: random.Random, live: Counter, make, inserts: int, deletes: int) -> Counter:
    """Delete some live rows (one copy each) and insert new ones (some twice: bags, parallel edges)."""
    change: Counter = Counter()
    rows = sorted(r for r, n in live.items() for _ in range(n))
    for row in rng.sample(rows, min(deletes, len(rows))):
        change[row] -= 1
    for _ in range(inserts):
        change[make(rng)] += rng.choice((1, 1, 1, 2))
    live.update(change)
    live -= Counter()  # drop zeros
    for k in [k for k, n in live.items() if n <= 0]:
        del live[k]
    return Counter({k: n for k, n in change.items() if n})


def integrate(view: Counter, delta: Counter) -> Counter:
    view.update(delta)
    return Counter({k: n for k, n in view.items() if n})


def _open(path: str, root, engine: str = "arrow", **sections):
    rt = open_circuit(path, config(root, engine=engine, **sections))
    make_input_folders(rt)
    return rt


def shortest_paths_run(circuit: str, root, steps: int = 32) -> None:
    """Random edges and sources of a small graph (cycles, self-loops, 0 weights, parallel edges,
    bags), inserted and deleted over ``steps`` steps; after each the integrated view must equal
    Dijkstra's distances (an AssertionError names the first timestep where it does not)."""
    rng = random.Random(7)
    rt = _open(circuit, root)
    edges, start, view = Counter(), Counter(), Counter()
    make_edge = lambda r: (r.randrange(12), r.randrange(12), r.randrange(6))  # noqa: E731 - self-loops, 0 weights
    for t in range(1, steps + 1):
        change = graph_change(rng, edges, make_edge, 6 if t < 6 else 3, 0 if t < 3 else 3)
        if change:
            write_change(str(root), "weighted_edges", t, EDGE, change)
        if t in (1, 12, 20) or rng.random() < 0.15:  # the sources move too: insert, delete
            s = graph_change(rng, start, lambda r: (r.randrange(12), r.randrange(3)), 1, 1 if t > 1 else 0)
            if s:
                write_change(str(root), "start", t, START, s)
        report = run_step(rt)
        assert report.timestep == t and report.engine == "arrow"
        view = integrate(view, output_delta(rt, "dist")[0])
        assert set(view) == dijkstra(edges, start) and set(view.values()) <= {1}, f"timestep {t}"


def components_run(root, steps: int = 32) -> None:
    """Random undirected links inserted and deleted over ``steps`` steps; after each the
    integrated view must equal union-find's components."""
    rng = random.Random(11)
    rt = _open(CC, root)
    links, view = Counter(), Counter()
    for t in range(1, steps + 1):
        change = graph_change(rng, links, lambda r: (r.randrange(16), r.randrange(16)), 4 if t < 8 else 2,
                              0 if t < 4 else 2)
        if change:
            write_change(str(root), "links", t, LINK, change)
        run_step(rt)
        view = integrate(view, output_delta(rt, "component")[0])
        assert set(view) == components(links) and set(view.values()) <= {1}, f"timestep {t}"


@pytest.mark.parametrize("circuit", [SP, SP_SQL], ids=["yaml", "sql"])
def test_shortest_paths_on_random_graphs_match_dijkstra(tmp_path, circuit):
    shortest_paths_run(circuit, tmp_path)


def test_connected_components_on_random_graphs_match_union_find(tmp_path):
    components_run(tmp_path)


@pytest.mark.parametrize("circuit", ["sp", "cc", "rich"])
def test_the_random_graph_tests_fail_when_the_loop_skips_earlier_deletions(tmp_path, monkeypatch, circuit):
    """Broken on purpose: iteration i of an incremental step is given only the insertions of
    iteration i-1's change (its deletions skipped, as a loop that only ever adds would do). The
    random-graph tests above must catch it: a mismatch with the reference at some timestep."""
    import pyarrow.compute as pc

    from spark_jobs.executor.kernels import iterate as kernels
    from spark_jobs.spec.model import WEIGHT

    real_incremental, real_evaluate = kernels.incremental, kernels.evaluate_step
    loops: list[str] = []
    skipped: list[int] = []

    def incremental(node, *args, **kwargs):  # noqa: ANN001, ANN202 - the kernel's signature
        loops.append(node.param("loop"))
        return real_incremental(node, *args, **kwargs)

    def evaluate_step(body, inputs, reader, **kwargs):  # noqa: ANN001, ANN202
        if isinstance(reader, kernels.Iteration) and loops:
            change = inputs[loops[-1]]
            gone = pc.less(change[WEIGHT], 0)
            skipped.append(pc.sum(gone.cast("int64")).as_py() or 0)
            inputs = {**inputs, loops[-1]: change.filter(pc.invert(gone))}
        return real_evaluate(body, inputs, reader, **kwargs)

    monkeypatch.setattr(kernels, "incremental", incremental)
    monkeypatch.setattr(kernels, "evaluate_step", evaluate_step)
    with pytest.raises(AssertionError, match="timestep"):
        {"sp": lambda: shortest_paths_run(SP, tmp_path), "cc": lambda: components_run(tmp_path),
         "rich": lambda: rich_run(tmp_path)}[circuit]()
    assert sum(skipped) > 0  # the deletions were there to skip


def test_deleting_a_bridge_splits_a_component_and_a_path_lengthens(tmp_path):
    rt = _open(SP, tmp_path / "sp")
    write_change(str(tmp_path / "sp"), "weighted_edges", 1, EDGE, Counter({(1, 2, 1): 1, (2, 3, 1): 1, (1, 3, 5): 1}))
    write_change(str(tmp_path / "sp"), "start", 1, START, Counter({(1, 0): 1}))
    run_step(rt)
    write_change(str(tmp_path / "sp"), "weighted_edges", 2, EDGE, Counter({(2, 3, 1): -1}))
    run_step(rt)
    assert output_delta(rt, "dist")[0] == Counter({(3, 2): -1, (3, 5): 1})
    write_change(str(tmp_path / "sp"), "weighted_edges", 3, EDGE, Counter({(1, 3, 5): -1}))
    run_step(rt)
    assert output_delta(rt, "dist")[0] == Counter({(3, 5): -1})  # unreachable now

    cc = _open(CC, tmp_path / "cc")
    write_change(str(tmp_path / "cc"), "links", 1, LINK, Counter({(1, 2): 1, (2, 3): 1, (3, 4): 1}))
    run_step(cc)
    write_change(str(tmp_path / "cc"), "links", 2, LINK, Counter({(2, 3): -1}))
    run_step(cc)
    assert output_delta(cc, "component")[0] == Counter({(3, 1): -1, (4, 1): -1, (3, 3): 1, (4, 3): 1})


# ---- termination ----------------------------------------------------------------------------------

LOOP = """\
name: {name}
settings: {{max_iterations: 7}}
inputs:
  seeds:
    schema: {{n: long}}
    source: {{kind: changes, path: inbox/seeds, format: parquet}}
nodes:
  x:
    op: iterate
    init: seeds
    body:
      next: {{op: select, input: x, columns: {{n: "{expr}"}}}}
    outputs: [next]
outputs: [x]
"""


@pytest.mark.parametrize("name, expr", [("counter", "n + 1"), ("oscillation", "1 - n")])
def test_a_loop_that_does_not_converge_fails_the_step_and_commits_nothing(tmp_path, name, expr):
    path = tmp_path / f"{name}.yaml"
    path.write_text(LOOP.format(name=name, expr=expr))
    rt = _open(str(path), tmp_path)
    write_change(str(tmp_path), "seeds", 1, {"n": "long"}, Counter({(0,): 1}))
    with pytest.raises(RecursionLimitExceeded) as err:
        run_step(rt)
    message = str(err.value)
    assert "iterate node 'x'" in message and "within 7 iterations" in message and "Nothing was committed" in message
    assert rt.store.manifest() is None  # nothing committed


def test_a_loop_that_converges_at_once_and_one_over_nothing(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(LOOP.format(name="c", expr="least(n + 1, 3)"))
    rt = _open(str(path), tmp_path)
    run_step(rt)  # no seeds: body(empty) = empty
    assert output_delta(rt, "x")[0] == Counter()
    write_change(str(tmp_path), "seeds", 2, {"n": "long"}, Counter({(0,): 1, (9,): 1}))
    run_step(rt)  # 0 -> 1 -> 2 -> 3 -> 3; 9 -> 3: the two rows meet
    assert output_delta(rt, "x")[0] == Counter({(3,): 2})


# ---- validation ---------------------------------------------------------------------------------

def _problems(text: str) -> str:
    with pytest.raises(CircuitError) as err:
        load_circuit_text(text, "c.yaml")
    return str(err.value)


BASE = """\
name: c
inputs:
  edges: {schema: {src: long, dst: long}, source: {kind: changes, path: inbox/e, format: parquet}}
  seed: {schema: {node: long, label: long}, source: {kind: changes, path: inbox/s, format: parquet}}
nodes:
  lab:
    op: iterate
    init: seed
    body:
BODY
outputs: [lab]
"""


def _circuit(body: str, outputs: str = "[best]") -> str:
    lines = "\n".join("      " + line for line in body.strip().splitlines())
    return BASE.replace("BODY", lines + f"\n    outputs: {outputs}")


AGG_BODY = """
hop: {op: join, left: lab, right: edges, left_on: [node], right_on: [src]}
cand: {op: select, input: hop, columns: {node: dst, label: label}}
all: {op: union_all, inputs: [lab, cand]}
best: {op: aggregate, input: all, group_by: [node], aggregates: {label: "min(label)"}}
"""


def test_validation_accepts_aggregates_negation_and_topk_of_the_loop():
    load_circuit_text(_circuit(AGG_BODY), "c.yaml")
    load_circuit_text(_circuit(AGG_BODY + """
gone: {op: antijoin, left: best, right: lab, on: [node]}
back: {op: union_all, inputs: [best, gone]}
top: {op: topk, input: back, partition_by: [node], order_by: [label], k: 1}
out: {op: select, input: top, columns: [node, label]}
""", "[out]"), "c.yaml")


def test_validation_refuses_what_a_loop_body_cannot_be():
    assert "is not a node of its body" in _problems(_circuit(AGG_BODY, "[nope]"))
    assert "has one output" in _problems(_circuit(AGG_BODY, "[best, all]"))
    assert "body cycle" in _problems(_circuit("""
a: {op: union_all, inputs: [lab, best]}
best: {op: distinct, input: a}
"""))
    assert "stream operators run on the outer clock" in _problems(_circuit("""
prev: {op: delay, input: lab}
best: {op: union, inputs: [lab, prev]}
"""))
    assert "must have the columns of the previous one" in _problems(_circuit("""
best: {op: select, input: lab, columns: {node: node}}
"""))


def test_recursive_keeps_refusing_aggregates_through_recursion():
    text = _circuit(AGG_BODY).replace("op: iterate\n    init: seed\n", "op: recursive\n")
    text = text.replace("all: {op: union_all, inputs: [lab, cand]}", "all: {op: union_all, inputs: [seed, cand]}")
    assert "aggregation through recursion is not" in _problems(text)


# ---- both engines ---------------------------------------------------------------------------------

RICH = """\
name: rich
settings: {max_iterations: 50}
inputs:
  edges: {schema: {src: long, dst: long, w: long}, source: {kind: changes, path: inbox/edges, format: parquet}}
  start: {schema: {node: long, d: long}, source: {kind: changes, path: inbox/start, format: parquet}}
nodes:
  dist:
    op: iterate
    init: start
    body:
      hop:  {op: join, left: dist, right: edges, left_on: [node], right_on: [src]}
      cand: {op: select, input: hop, columns: {node: dst, d: "least(d + w, 20)"}}
      both: {op: union_all, inputs: [dist, cand]}
      best: {op: aggregate, input: both, group_by: [node], aggregates: {d: "min(d)"}}
      new:  {op: antijoin, left: best, right: dist, on: [node]}
      seen: {op: distinct, input: new}
      top:  {op: topk, input: best, partition_by: [node], order_by: ["d"], k: 1}
      out:  {op: union_all, inputs: [top, seen]}
      one:  {op: aggregate, input: out, group_by: [node], aggregates: {d: "min(d)"}}
    outputs: [one]
  counts: {op: aggregate, input: dist, group_by: [d], aggregates: {n: "count(*)"}}
outputs: [dist, counts]
"""
# The same loop with the shortest paths' body only (a join and a min of the loop): a Spark step
# pays Spark jobs per body operator and iteration (the antijoin and distinct of RICH made its one
# Spark step take 100-200 s under load), and what the engine hand-over proves is in the state of
# the join and the aggregate as much as in any other.
LEAN = RICH.replace("""\
      new:  {op: antijoin, left: best, right: dist, on: [node]}
      seen: {op: distinct, input: new}
      top:  {op: topk, input: best, partition_by: [node], order_by: ["d"], k: 1}
      out:  {op: union_all, inputs: [top, seen]}
      one:  {op: aggregate, input: out, group_by: [node], aggregates: {d: "min(d)"}}
    outputs: [one]""", "    outputs: [best]")
assert LEAN != RICH


def rich_run(tmp_path) -> None:
    """RICH (an aggregate, an antijoin and a distinct of the loop, a top-k) on random graphs,
    inserted and deleted over 16 steps in-process: its value is the distances capped at 20
    (``least(d + w, 20)``; the antijoin and top-k add nothing the min does not), at every step."""
    path = tmp_path / "rich.yaml"
    path.write_text(RICH)
    rt = _open(str(path), tmp_path)
    rng = random.Random(19)
    edges, start, view, counts = Counter(), Counter(), Counter(), Counter()
    for t in range(1, 17):
        change = graph_change(rng, edges, lambda r: (r.randrange(9), r.randrange(9), r.randrange(8)),
                              5 if t < 5 else 3, 0 if t < 3 else 3)
        if change:
            write_change(str(tmp_path), "edges", t, EDGE, change)
        if t in (1, 8) or rng.random() < 0.2:
            s = graph_change(rng, start, lambda r: (r.randrange(9), r.randrange(2)), 1, 1 if t > 1 else 0)
            if s:
                write_change(str(tmp_path), "start", t, START, s)
        assert run_step(rt).engine == "arrow"
        view = integrate(view, output_delta(rt, "dist")[0])
        counts = integrate(counts, output_delta(rt, "counts")[0])
        want = {(v, min(d, 20)) for v, d in dijkstra(edges, start)}
        assert set(view) == want and set(view.values()) <= {1}, f"timestep {t}"
        assert counts == Counter({(d, n): 1 for d, n in Counter(d for _, d in want).items()}), f"timestep {t}"


def test_a_loop_body_with_an_antijoin_distinct_and_topk_of_the_loop_matches_dijkstra(tmp_path):
    rich_run(tmp_path)


@pytest.mark.slow
def test_both_engines_give_the_same_loop_and_read_each_others_state(spark, tmp_path, monkeypatch):
    """Arrow at every step, and Arrow, Spark, Arrow alternating over one Parquet state: the Spark
    step continues incrementally from the per-iteration state Arrow wrote (a loop-variant join
    and aggregate state per iteration, the loop-invariant join state shared), and the next Arrow
    step from the state Spark wrote (both run ``incremental``, not the loop from scratch); the
    same view deltas and column types at every step, for the loop and an aggregate over it. One
    Spark step, of a 2-edge change on a 5-node graph: each costs jobs per iteration it reaches."""
    from spark_jobs.executor.kernels import iterate as kernels
    from tests.engines import output_delta as delta_of

    real = kernels.incremental
    calls: list[str] = []

    def incremental(node, deltas, *args, **kwargs):  # noqa: ANN001, ANN202 - the kernel's signature
        calls.append("spark" if type(deltas[0]).__module__.startswith("pyspark") else "arrow")
        return real(node, deltas, *args, **kwargs)

    monkeypatch.setattr(kernels, "incremental", incremental)
    iterations: list[int] = []
    real_settle = kernels._SparkSettle.settle

    def settle(self, *args):  # noqa: ANN001, ANN202 - counts the Spark loop's iterations
        iterations.append(1)
        return real_settle(self, *args)

    monkeypatch.setattr(kernels._SparkSettle, "settle", settle)
    path = tmp_path / "lean.yaml"
    path.write_text(LEAN)
    rts = {kind: _open(str(path), tmp_path / kind) for kind in ("arrow", "mixed")}
    rng = random.Random(5)
    edges, start = Counter(), Counter()
    for t in range(1, 4):
        # the Spark step changes one edge each way (a Spark step costs jobs per iteration it reaches)
        change = graph_change(rng, edges, lambda r: (r.randrange(5), r.randrange(5), r.randrange(3)),
                              1 if t == 2 else 4, {1: 0, 2: 1, 3: 2}[t])
        s = graph_change(rng, start, lambda r: (r.randrange(5), r.randrange(2)), 1, 1 if t == 3 else 0) \
            if t in (1, 3) else None
        for kind in rts:
            if change:
                write_change(str(tmp_path / kind), "edges", t, EDGE, change)
            if s:
                write_change(str(tmp_path / kind), "start", t, START, s)
        engine = "spark" if t == 2 else "arrow"
        mixed = _open(str(path), tmp_path / "mixed", engine=engine)
        assert run_step(rts["arrow"]).engine == "arrow"
        if engine == "spark":
            mixed.spark.sparkContext.setJobGroup("iterate-spark-step", "iterate-spark-step")
        assert run_step(mixed).engine == engine
        if engine == "spark":  # each iteration's results in one job (was ~12 jobs an iteration)
            jobs = mixed.spark.sparkContext.statusTracker().getJobIdsForGroup("iterate-spark-step")
            mixed.spark.sparkContext.setJobGroup(None, None)  # type: ignore[arg-type]
            assert iterations and len(jobs) <= len(iterations) + 6, (len(jobs), len(iterations))
        for view in ("dist", "counts"):
            (want, want_types), (got, got_types) = delta_of(rts["arrow"], view), delta_of(mixed, view)
            assert got == want, f"timestep {t}, view {view}: {engine} {dict(got)} != arrow {dict(want)}"
            assert not want_types or not got_types or got_types == want_types, f"timestep {t}, {view}"
    assert calls == ["arrow", "spark", "arrow", "arrow"]  # t2: arrow, then mixed on Spark; t3: both arrow



def test_the_spark_loop_computes_an_iteration_once_to_the_driver_or_as_one_checkpoint(spark):
    """``_SparkSettle``: an iteration's value change, its comparison and the body's state deltas
    (parts of other columns and types) in one job: to the driver as local relations while they
    fit, else as one tagged local checkpoint read back part by part; the same rows either way,
    and emptiness known without a job."""
    from pyspark.sql import functions as F

    from spark_jobs.executor.kernels.iterate import _SparkSettle
    from spark_jobs.executor.spark import zset

    def order(df):  # noqa: ANN001, ANN202
        return zset.consolidate(df.select("node", "d", "_weight"))

    value = spark.createDataFrame([(1, 5, 1), (2, 7, 1), (2, 7, 1), (3, 1, -1)], "node long, d long, _weight long")
    prev = spark.createDataFrame([(1, 5, 1)], "node long, d long, _weight long")
    deltas = {"I(x)": spark.createDataFrame([(1, 2.5, 1)], "k long, v double, _weight long"),
              "empty": spark.createDataFrame([], "k int, d string, _weight long"),
              "cast": value.select(F.col("node").cast("int").alias("node"), "_weight")}
    results = []
    for driver, rows in ((True, 100), (False, 100), (True, 3)):  # 3 rows: past the driver's bound
        settle = _SparkSettle(spark, order, rows, driver)
        cur, change, settled, unchanged = settle.settle(value, prev, deltas)
        assert not unchanged and settle.driver == (driver and rows == 100)
        assert zset.is_local(cur) == settle.driver
        spark.sparkContext.setJobGroup("settled", "settled")
        assert not settle.is_empty(cur) and settle.is_empty(settled["empty"])
        assert spark.sparkContext.statusTracker().getJobIdsForGroup("settled") == []
        spark.sparkContext.setJobGroup(None, None)  # type: ignore[arg-type]
        assert all(settled[k].schema == df.schema for k, df in deltas.items())
        results.append((sorted(cur.collect()), sorted(change.collect()),
                        {k: sorted(df.collect()) for k, df in settled.items()}))
    assert results[0] == results[1] == results[2]
    assert results[0][1] == [(2, 7, 2), (3, 1, -1)]



def test_the_spark_loop_from_scratch_hands_the_commit_computed_rows(spark, tmp_path, monkeypatch):
    """A first step on Spark runs the loop from init and writes every iteration's body state:
    each iteration's value, change and state are computed once (``settle_iteration``), so no
    DataFrame the commit writes holds a join (before, each iteration's state was its whole plan,
    re-run by the commit's writes); the view equals the in-process first step's."""
    from spark_jobs.executor.kernels import iterate as kernels

    real, done = kernels.scratch, []

    def scratch(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - the kernel's signature
        done.append(real(*args, **kwargs))
        return done[-1]

    monkeypatch.setattr(kernels, "scratch", scratch)
    path = tmp_path / "lean.yaml"
    path.write_text(LEAN)
    rng = random.Random(3)
    edges, start = Counter(), Counter()
    change = graph_change(rng, edges, lambda r: (r.randrange(6), r.randrange(6), r.randrange(4)), 9, 0)
    s = graph_change(rng, start, lambda r: (r.randrange(2), 0), 1, 0)
    deltas = []
    for kind in ("arrow", "spark"):
        write_change(str(tmp_path / kind), "edges", 1, EDGE, change)
        write_change(str(tmp_path / kind), "start", 1, START, s)
        rt = _open(str(path), tmp_path / kind, engine=kind)
        assert run_step(rt).engine == kind
        deltas.append(output_delta(rt, "dist"))
    assert deltas[0] == deltas[1]
    updates = done[-1].updates
    assert any("/1/" in t for t in updates) and any("/2/" in t for t in updates)
    for trace, update in updates.items():
        plan = update.df._jdf.queryExecution().optimizedPlan().toString()
        assert "Join" not in plan, (trace, plan)


# ---- WITH RECURSIVE whose step aggregates, negates or ranks the CTE: the while loop ---------------

SQL_BASE = """\
name: t
settings: {max_iterations: 20}
inputs:
  a: {schema: {k: long, x: long}, source: {kind: changes, path: inbox/a, format: parquet}}
  b: {schema: {k: long, y: long}, source: {kind: changes, path: inbox/b, format: parquet}}
nodes:
  q:
    op: sql
    query: |
      %s
outputs: [q]
"""

WHILE_QUERIES = [
    "WITH RECURSIVE r (k, n) AS (SELECT k, 1 FROM a UNION SELECT k, count(*) FROM r GROUP BY k) SELECT k, n FROM r",
    "WITH RECURSIVE r AS (SELECT k FROM a UNION SELECT b.k FROM b WHERE NOT EXISTS "
    "(SELECT 1 FROM r WHERE r.k = b.k)) SELECT k FROM r",
    "WITH RECURSIVE r AS (SELECT k FROM a UNION SELECT k FROM (SELECT k, row_number() OVER (ORDER BY k) AS rn "
    "FROM r) t WHERE rn <= 2) SELECT k FROM r",
]


@pytest.mark.parametrize("query", WHILE_QUERIES, ids=["group_by", "not_exists", "topk"])
def test_with_recursive_over_an_aggregate_negation_or_topk_is_an_iterate(query):
    from spark_jobs.ir.compile import compile_spec
    from spark_jobs.spec.columns import output_columns

    spec = load_circuit_text(SQL_BASE % query, "t.yaml")
    compiled = compile_spec(spec, output_columns(spec))
    assert any(n.op == "iterate" for n in compiled.query) and not any(n.op == "scope" for n in compiled.query)


def test_with_recursive_while_loop_values(tmp_path):
    """count(*) over the CTE converges at once; NOT EXISTS of the CTE oscillates when b holds a
    key a lacks (x0 = a, x1 = a + (b - a), x2 = a, ...) and fails the step, as the loop says."""
    path = tmp_path / "t.yaml"
    path.write_text(SQL_BASE % WHILE_QUERIES[0])
    rt = _open(str(path), tmp_path / "count")
    write_change(str(tmp_path / "count"), "a", 1, {"k": "long", "x": "long"}, Counter({(1, 5): 1, (2, 5): 2}))
    run_step(rt)
    assert output_delta(rt, "q")[0] == Counter({(1, 1): 1, (2, 1): 1})

    path.write_text(SQL_BASE % WHILE_QUERIES[1])
    rt = _open(str(path), tmp_path / "neg")
    write_change(str(tmp_path / "neg"), "a", 1, {"k": "long", "x": "long"}, Counter({(1, 5): 1}))
    write_change(str(tmp_path / "neg"), "b", 1, {"k": "long", "y": "long"}, Counter({(1, 0): 1}))
    run_step(rt)  # b ⊆ a: x1 = a = x0
    assert output_delta(rt, "q")[0] == Counter({(1,): 1})
    write_change(str(tmp_path / "neg"), "b", 2, {"k": "long", "y": "long"}, Counter({(2, 0): 1}))
    with pytest.raises(RecursionLimitExceeded, match="iterate node 'q' did not converge within 20 iterations"):
        run_step(rt)
    assert rt.store.manifest().timestep == 1


COUNTING = """\
name: counting
inputs:
  seeds: {schema: {k: long}, source: {kind: changes, path: inbox/seeds, format: parquet}}
nodes:
  start: {op: select, input: seeds, columns: {k: k, n: "0"}}
  x:
    op: iterate
    init: start
    body:
      both: {op: union_all, inputs: [x, start]}
      agg:  {op: aggregate, input: both, group_by: [k], aggregates: {n: "count(*)"}}
      out:  {op: select, input: agg, columns: {k: k, n: "least(n, 3)"}}
    outputs: [out]
outputs: [x]
"""


def test_a_linear_aggregate_in_the_loop_keeps_per_iteration_running_totals(tmp_path):
    """count(*) keeps running totals (a "sum" trace) per iteration: x_1 = min(2m, 3), then
    x_2 = x_3 = min(1 + m, 3) per key of multiplicity m, over 30 steps of inserts and deletes."""
    path = tmp_path / "c.yaml"
    path.write_text(COUNTING)
    rt = _open(str(path), tmp_path)
    rng = random.Random(3)
    seeds, view = Counter(), Counter()
    for t in range(1, 31):
        change = graph_change(rng, seeds, lambda r: (r.randrange(6),), 3, 0 if t < 3 else 2)
        if change:
            write_change(str(tmp_path), "seeds", t, {"k": "long"}, change)
        run_step(rt)
        view = integrate(view, output_delta(rt, "x")[0])
        want = {(k, min(1 + m, 3)) for (k,), m in seeds.items() if m > 0}
        assert set(view) == want and set(view.values()) <= {1}, f"timestep {t}"
    assert any(k.startswith("x/2/") for k in rt.store.status()["traces"])  # per-iteration state


def test_recompute_steps_interleave_with_incremental_ones(tmp_path):
    """A recompute (the loop from scratch over the integrated inputs, ``execution.cost``) between
    incremental steps: the same view deltas as the incremental run, and Dijkstra's distances."""
    rng = random.Random(13)
    plain = _open(SP, tmp_path / "plain", cost={"recompute": "never"})
    edges, start, view = Counter(), Counter({(0, 0): 1}), Counter()
    modes = []
    for t in range(1, 8):
        change = graph_change(rng, edges, lambda r: (r.randrange(9), r.randrange(9), r.randrange(5)), 5,
                              0 if t < 2 else 3)
        for root in ("plain", "mixed"):
            write_change(str(tmp_path / root), "weighted_edges", t, EDGE, change)
            if t == 1:
                write_change(str(tmp_path / root), "start", t, START, start)
        mixed = _open(SP, tmp_path / "mixed", cost={"recompute": "always" if t % 2 == 0 else "never"})
        run_step(plain)
        modes.append(run_step(mixed).mode)
        assert output_delta(mixed, "dist") == output_delta(plain, "dist"), f"timestep {t}"
        view = integrate(view, output_delta(mixed, "dist")[0])
        assert set(view) == dijkstra(edges, start), f"timestep {t}"
    assert "recompute" in modes and "incremental" in modes


def test_an_init_of_another_type_than_the_loop_s_value(tmp_path):
    """``init`` has long distances, the body computes doubles (``d + w`` with double weights):
    the loop's value has the body's types, incrementally too."""
    text = open(SP).read().replace("{src: long, dst: long, w: long}", "{src: long, dst: long, w: double}")
    path = tmp_path / "sp.yaml"
    path.write_text(text)
    rt = _open(str(path), tmp_path)
    rng = random.Random(17)
    edges, start, view = Counter(), Counter({(0, 0): 1}), Counter()
    write_change(str(tmp_path), "start", 1, START, start)
    for t in range(1, 7):
        change = graph_change(rng, edges, lambda r: (r.randrange(7), r.randrange(7), float(r.randrange(4))), 4,
                              0 if t < 2 else 2)
        write_change(str(tmp_path), "weighted_edges", t, {"src": "long", "dst": "long", "w": "double"}, change)
        run_step(rt)
        delta, types = output_delta(rt, "dist")
        view = integrate(view, delta)
        assert set(view) == dijkstra(edges, start), f"timestep {t}"
        assert not types or types[1] == ("d", "double"), types


def test_explain_says_what_state_the_loop_keeps_and_what_a_step_may_recompute(capsys):
    from spark_jobs.cli.main import main

    assert main(["explain", SP]) == 0
    text = capsys.readouterr().out
    assert "While loop 'dist'" in text and "at most 500 iterations" in text
    assert "dist/<i>/I(dist)" in text and "dist/I(edges)" in text and "dist/diff" in text and "dist/depth" in text
    assert "reaches every iteration up to where the last loop stopped" in text and "(edges)" in text
    assert "rerun the loop from init" in text and "On Spark each iteration reached costs one job" in text


def test_the_loop_s_stop_check_never_calls_a_zero_change_non_zero():
    """``may_be_zero`` (the sums the in-process loop checks before consolidating D_i + its
    change) is True for every zero Z-set, whatever the row order, NULLs, dates, weights and values
    near the int64 limits (wrapping sums stay linear), and False only for non-zero ones."""
    import datetime

    import pyarrow as pa

    from spark_jobs.executor.arrow import zsets
    from spark_jobs.executor.kernels.iterate import may_be_zero

    rng = random.Random(11)
    big = 2 ** 63 - 1
    schema = pa.schema([("a", pa.int64()), ("b", pa.int32()), ("t", pa.date32()), ("s", pa.string()),
                        ("f", pa.float64()), ("u", pa.uint64()), ("_weight", pa.int64())])
    said_no = 0
    for _ in range(300):
        rows = [(rng.choice([0, 1, -5, big, -big - 1, None]), rng.choice([2, None, 7]),
                 rng.choice([datetime.date(2020, 1, 1), None]), rng.choice(["x", None]),
                 rng.choice([0.5, -0.0, None]), rng.choice([0, 2 ** 64 - 1, None]),
                 rng.choice([1, 3, -2]))
                for _ in range(rng.randint(1, 6))]
        zero = rows + [(*r[:-1], -r[-1]) for r in rows]
        rng.shuffle(zero)
        extra = [] if rng.random() < 0.5 else [rows[0][:-1] + (rng.choice([1, -1, 2]),)]
        table = pa.Table.from_pylist([dict(zip(schema.names, r)) for r in zero + extra], schema=schema)
        maybe = may_be_zero(table)
        really = zsets.consolidate(table).num_rows == 0
        assert maybe or not really, (zero + extra)
        said_no += not maybe
    assert said_no > 50  # it does rule out most non-zero ones
