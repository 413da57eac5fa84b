"""The operator registry: one definition per IR operator, read by every layer, and cheap to extend.

- every registered operator is complete (symbol, linearity, kernels that resolve, a state for the
  stateful ones), and the IR imports no engine;
- a new stateful operator (``tests/ops_example.py``, not shipped) is compiled, explained and run
  on both engines, committing its state, with no edit outside its module.
"""
from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter

import pyarrow as pa

from spark_jobs.executor.evaluate import evaluate_step, trace_kind
from spark_jobs.executor.arrow.kernels import ArrowEngine
from spark_jobs.executor.spark.zset import from_rows
from spark_jobs.ir.explain import explain_text
from spark_jobs.ir.graph import Circuit, make_node, state_of
from spark_jobs.ir.incrementalize import incrementalize
from spark_jobs.ir.operator import BILINEAR, LINEAR, NONLINEAR, STREAM, operator, operators
from spark_jobs.runtime.step_types import StoreReader
from spark_jobs.state.store import StateStore
from tests import ops_example
from tests.conftest import ROOT


def test_every_operator_is_complete():
    names = []
    for op in operators():
        names.append(op.name)
        assert op.symbol and op.summary and op.linearity in (LINEAR, BILINEAR, STREAM, NONLINEAR), op.name
        engines = ("loop",) if op.in_body_only else ("spark", "arrow")
        for engine in engines:
            if op.name != "integrate_nested":  # a trace: read by the loop, never evaluated itself
                assert callable(op.kernel(engine)), f"{op.name}: no {engine} kernel"
        if op.incremental is None:  # only in Q^Δ: a form some query operator's rule produces
            assert op.in_body_only or op.state is not None or op.form_of, op.name
        if op.form_of:
            assert op.incremental is None and operator(op.form_of).incremental is not None, op.name
    assert len(names) == len(set(names)) >= 20


def test_the_ir_imports_no_engine():
    code = ("import sys; from spark_jobs.runtime.circuit import compile_file; "
            "from spark_jobs.ir.explain import explain_text, to_dot; "
            "c = compile_file('circuits/transitive_closure.yaml'); explain_text(c.incremental); "
            "bad = [m for m in sys.modules if m.startswith(('pyspark', 'pyarrow', 'spark_jobs.executor'))]; "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


COLUMNS = ("g", "v", "s")


def _query() -> Circuit:
    q = Circuit("example", inputs={"x": COLUMNS})
    q.add(make_node("x", "input", out=COLUMNS, name="x"))
    q.add(make_node("t", "top1", ["x"], COLUMNS, is_set=True, group_by=("g",), value="v"))
    q.outputs = {"t": "t"}
    return q


def _expected(bag: Counter) -> Counter:
    best: dict = {}
    for row, w in bag.items():
        if w > 0 and (row[0] not in best or (row[1], row[2]) > (best[row[0]][1], best[row[0]][2])):
            best[row[0]] = row
    return Counter({r: 1 for r in best.values()})


def _run(spark, tmp_path, engine: str, steps: list[Counter], inc: Circuit | None = None) -> list[Counter]:
    """Each step on ``engine`` through evaluate_step, its state committed to a Parquet store; the
    integrated view after each step (of ``inc``, by default the incremental form of ``_query``)."""
    inc = inc if inc is not None else incrementalize(_query())
    store = StateStore(lambda: spark, str(tmp_path / engine), "example", "fp")
    schema = "g long, v long, s string"
    arrow_schema = pa.schema([("g", pa.int64()), ("v", pa.int64()), ("s", pa.string()), ("_weight", pa.int64())])
    view: Counter = Counter()
    seen = []
    for t, change in enumerate(steps, start=1):
        if engine == "arrow":
            rows = [(*r, w) for r, w in change.items()]
            delta = pa.Table.from_pylist([dict(zip([*COLUMNS, "_weight"], r)) for r in rows], schema=arrow_schema)
        else:
            delta = from_rows(spark, change, schema)
        with store.begin() as txn:
            result = evaluate_step(inc, {"x": delta}, StoreReader(store), first_step=t == 1, spark=spark,
                                   broadcast_deltas=False, engine=ArrowEngine() if engine == "arrow" else None)
            out = result.outputs["t"]
            rows = out.to_pylist() if engine == "arrow" else [r.asDict() for r in out.collect()]
            for nid, u in result.updates.items():
                write = txn.append_table if engine == "arrow" else txn.append
                write(nid, u.df, kind=trace_kind(inc, nid), keys=u.keys, sort_by=u.sort_by)
            txn.commit()
        for r in rows:
            view[tuple(r[c] for c in COLUMNS)] += r["_weight"]
        view = +view
        seen.append(Counter(view))
    return seen


def _random_steps(seed: int) -> tuple[list[Counter], list[Counter]]:
    """Changes of x (inserts and deletes of live rows, groups whose top row goes away) and the
    expected view after each."""
    rng = random.Random(seed)
    bag: Counter = Counter()
    steps, want = [], []
    for _ in range(5):
        change: Counter = Counter()
        live = sorted(r for r, w in bag.items() for _ in range(w))
        for row in rng.sample(live, min(2, len(live))):
            change[row] -= 1
        for _ in range(5):
            change[(rng.randrange(3), rng.randrange(6), rng.choice("abc"))] += 1
        change = Counter({r: w for r, w in change.items() if w})
        for r, w in change.items():
            bag[r] += w
        bag = Counter({r: w for r, w in bag.items() if w > 0})
        steps.append(change)
        want.append(_expected(bag))
    return steps, want


TOP1_CIRCUIT = """\
name: example
inputs:
  x:
    schema: {g: long, v: long, s: string}
    source: {kind: changes, path: x}
nodes:
  t: {op: top1, input: x, group_by: [g], value: v}
outputs: [t]
"""


def test_a_new_yaml_op_needs_only_its_module(spark, tmp_path):
    """``op: top1`` in a circuit file (tests/ops_example.py registers its YAML form, IR operator and
    kernels; nothing else is edited): validated by the schema assembled with its fragment, its
    problems named on its fields, its columns and types derived, compiled and explained, and run
    in-process on random changes against a recompute."""
    from spark_jobs.ir.compile import compile_spec
    from spark_jobs.spec import load_circuit_text, output_columns
    from spark_jobs.spec.loader import check_text
    from tests.test_node_ops import missing_hooks

    ops_example.install()
    try:
        assert missing_hooks(ops_example.YAML_TOP1) == []
        problems = check_text(TOP1_CIRCUIT.replace("value: v", "value: w").replace("group_by: [g]", "group_by: [g], k: 3"))[1]
        assert [p.message.split(";")[0] for p in problems] == ["unknown field 'k' for op 'top1'"], problems
        problems = check_text(TOP1_CIRCUIT.replace("value: v", "value: w"))[1]
        assert len(problems) == 1 and "column 'w' in 'value' is not a column of input 'x'" in problems[0].message
        spec = load_circuit_text(TOP1_CIRCUIT)
        assert output_columns(spec)["t"] == COLUMNS
        compiled = compile_spec(spec, output_columns(spec))
        assert [n.op for n in compiled.query] == ["input", "top1"]
        assert "top1(touched)" in explain_text(compiled.incremental)
        steps, want = _random_steps(7)
        assert _run(spark, tmp_path, "arrow", steps, compiled.incremental) == want
    finally:
        ops_example.uninstall()
    assert check_text(TOP1_CIRCUIT)[1], "once unregistered, op top1 is unknown again"


def test_a_new_stateful_operator_needs_only_its_module(spark, tmp_path):
    ops_example.install()
    try:
        inc = incrementalize(_query())
        assert [n.op for n in inc] == ["input", "integrate", "top1_touched"]
        assert state_of(inc, inc["t"]) == "previous top row per group"
        text = explain_text(inc)
        assert "top1(touched)" in text and "integrated input of top1 't'" in text
        steps, want = _random_steps(5)  # inserts and deletes of live rows, groups whose top row goes away
        assert _run(spark, tmp_path, "spark", steps) == want
        assert _run(spark, tmp_path, "arrow", steps) == want
    finally:
        ops_example.uninstall()
