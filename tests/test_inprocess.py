"""Steps in-process on Arrow through ``run_step``: no JVM for a small step, and Spark (with the
reason in the report and the manifest) for what the Arrow kernels do not cover."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from collections import Counter

from spark_jobs.runtime.circuit import open_circuit
from spark_jobs.runtime.step import run_step
from tests.conftest import ROOT
from tests.engines import output_delta, write_change
from tests.policies import config

CIRCUIT = """\
name: inproc
inputs:
  a:
    schema: {k: long, s: string}
    source: {kind: changes, path: inbox/a, format: parquet}
  b:
    schema: {k: long, n: long}
    source: {kind: changes, path: inbox/b, format: parquet}
nodes:
  j:    {op: join, left: a, right: b, on: [k]}
  keys: {op: select, input: j, columns: [s]}
  d:    {op: distinct, input: keys}
  odd:  {op: filter, input: b, where: "md5(cast(n AS string)) <> ''"}
outputs: [j, d, odd]
"""
A = {"k": "long", "s": "string"}
B = {"k": "long", "n": "long"}


EXPECTED = """\
outputs:
  j:
    expectations:
      - expect_column_values_to_not_be_null: {column: s}
      - expect_column_values_to_be_between: {column: n, min_value: 0}
  d: {}
"""


def test_a_small_step_runs_in_process_and_starts_no_jvm(tmp_path):
    """Two steps in a fresh process (the first forced in-process, the second chosen by the
    policy); the view deltas are right, the declared expectations ran (on pandas: they mean the
    same there), and no Spark gateway was ever started."""
    (tmp_path / "c.yaml").write_text(CIRCUIT.replace("  odd:  {op: filter, input: b, where: \"md5(cast(n AS string)) <> ''\"}\n", "")
                                     .replace("outputs: [j, d, odd]\n", EXPECTED))
    code = textwrap.dedent(f"""
        import sys
        from collections import Counter
        from pyspark import SparkContext
        from spark_jobs.runtime.circuit import open_circuit
        from spark_jobs.runtime.step import run_step
        from tests.engines import output_delta, write_change
        from tests.policies import config
        root, path = {str(tmp_path)!r}, {str(tmp_path / "c.yaml")!r}
        write_change(root, "a", 1, {A!r}, Counter({{(1, "x"): 1, (2, "y"): 2}}))
        write_change(root, "b", 1, {B!r}, Counter({{(1, 10): 1, (2, 20): 1}}))
        first = run_step(open_circuit(path, config(root, engine="arrow")))
        write_change(root, "a", 2, {A!r}, Counter({{(1, "x"): -1, (3, "z"): 1}}))
        write_change(root, "b", 2, {B!r}, Counter({{(3, 30): 1}}))
        rt = open_circuit(path, config(root))
        second = run_step(rt)
        print(first.engine, second.engine, repr(second.engine_reason))
        print(second.quality.splitlines()[0])
        print(sorted(output_delta(rt, "j")[0].items()), sorted(output_delta(rt, "d")[0].items()))
        print("jvm", SparkContext._gateway is not None)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    engines, quality, deltas, jvm = out.stdout.strip().splitlines()[-4:]
    assert engines.startswith("arrow arrow") and "changed rows <= execution.arrow.max_change_rows" in engines
    assert quality.startswith("quality gate t=2: 7 checks, 0 failed"), quality
    assert deltas == ("[((1, 'x', 10), -1), ((3, 'z', 30), 1)] [(('x',), -1), (('z',), 1)]")
    assert jvm == "jvm False"


def test_dbsp_step_in_process_starts_no_jvm(tmp_path):
    """`dbsp step` on a small change answers without starting Java: run with a JAVA_HOME that does
    not exist (any JVM start would fail the command), it commits in-process. (The CLI used to
    start Spark only to set its log level: 4 s of every command.)"""
    import os

    (tmp_path / "c.yaml").write_text(CIRCUIT.replace("  odd:  {op: filter, input: b, where: \"md5(cast(n AS string)) <> ''\"}\n", "")
                                     .replace("outputs: [j, d, odd]", "outputs: [j, d]"))
    root, path = str(tmp_path), str(tmp_path / "c.yaml")
    write_change(root, "a", 1, A, Counter({(1, "x"): 1, (2, "y"): 2}))
    write_change(root, "b", 1, B, Counter({(1, 10): 1, (2, 20): 1}))
    assert run_step(open_circuit(path, config(root, engine="arrow"))).engine == "arrow"
    write_change(root, "a", 2, A, Counter({(2, "y"): -1}))
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java")}
    out = subprocess.run([sys.executable, "-m", "spark_jobs.cli.main", "step", path, "--data-root", root],
                         capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "committed timestep 2" in out.stdout and "engine: in-process (Arrow)" in out.stdout, out.stdout
    assert output_delta(open_circuit(path, config(root)), "j")[0] == Counter({(2, "y", 20): -1})


def test_what_the_arrow_kernels_do_not_cover_runs_on_spark_and_says_why(spark, tmp_path):
    (tmp_path / "c.yaml").write_text(CIRCUIT)
    rt = open_circuit(str(tmp_path / "c.yaml"), config(tmp_path, engine="arrow"))
    write_change(str(tmp_path), "a", 1, A, Counter({(1, "x"): 1}))
    write_change(str(tmp_path), "b", 1, B, Counter({(1, 10): 2}))
    report = run_step(rt)
    assert report.engine == "spark"
    assert "in-process on Arrow was not possible" in report.engine_reason and "md5" in report.engine_reason
    meta = rt.store.manifest().meta
    assert meta["engine"] == "spark" and meta["engine_reason"] == report.engine_reason
    assert output_delta(rt, "odd")[0] == Counter({(1, 10): 2})


def test_a_lookup_past_its_bounds_streams_then_hands_the_step_to_spark(spark, tmp_path):
    """``execution.arrow.max_lookup_rows`` bounds the trace rows an in-process step decodes and
    keeps: past it a lookup streams the row groups and keeps only its matches (same result, still
    in-process); past ``max_scan_rows`` the step stops before writing anything and runs on
    Spark, with the same result."""
    text = CIRCUIT.replace("  odd:  {op: filter, input: b, where: \"md5(cast(n AS string)) <> ''\"}\n", "") \
                  .replace("outputs: [j, d, odd]", "outputs: [j, d]")
    (tmp_path / "c.yaml").write_text(text)
    write_change(str(tmp_path), "a", 1, A, Counter({(k, "x"): 1 for k in range(20)}))
    write_change(str(tmp_path), "b", 1, B, Counter({(k, k): 1 for k in range(20)}))
    assert run_step(open_circuit(str(tmp_path / "c.yaml"), config(tmp_path, engine="arrow"))).engine == "arrow"
    write_change(str(tmp_path), "b", 2, B, Counter({(5, 50): 1}))
    rt = open_circuit(str(tmp_path / "c.yaml"), config(tmp_path, engine="arrow", arrow={"max_lookup_rows": 0}))
    report = run_step(rt)
    assert report.engine == "arrow"
    assert output_delta(rt, "j")[0] == Counter({(5, "x", 50): 1})
    write_change(str(tmp_path), "b", 3, B, Counter({(6, 60): 1}))
    rt = open_circuit(str(tmp_path / "c.yaml"), config(tmp_path, engine="arrow",
                                                       arrow={"max_lookup_rows": 0, "max_scan_rows": 3}))
    report = run_step(rt)
    assert report.engine == "spark" and "execution.arrow.max_scan_rows" in report.engine_reason
    assert output_delta(rt, "j")[0] == Counter({(6, "x", 60): 1})


def test_every_input_kind_is_read_in_process_and_reader_options_that_change_parsing_are_not():
    """cdc, snapshots, append_only and changes inputs in every format are read in-process (the
    Arrow readers refuse what Spark's refuse, ``tests/test_arrow_readers.py``); a reader option
    whose effect on Spark's parsing the in-process readers do not reproduce keeps the input on
    Spark, named in the reason, and so do timestamps read from text in another session zone."""
    from spark_jobs.executor.arrow import inputs as arrow_inputs
    from spark_jobs.spec.loader import load_circuit_text

    spec = load_circuit_text(textwrap.dedent("""\
        name: kinds
        inputs:
          o:
            schema: {id: long, v: long, op: string}
            key: [id]
            source: {kind: cdc, path: cdc/o, format: jsonl}
          a:
            schema: {id: long}
            source: {kind: append_only, path: in/a, format: parquet}
          c:
            schema: {id: long, t: timestamp}
            source: {kind: changes, path: in/c, format: csv, options: {sep: ";", header: true}}
          s:
            schema: {id: long}
            source: {kind: snapshots, path: in/s, format: json}
          n:
            schema: {id: long}
            source: {kind: changes, path: in/n, format: csv, options: {nullValue: "NA"}}
        nodes:
          u: {op: union_all, inputs: [a, s]}
        outputs: [o, u, c, n]
        """))
    for name in "oacs":
        assert arrow_inputs.unsupported(spec.inputs[name]) is None, name
    assert arrow_inputs.unsupported(spec.inputs["n"]) == "input 'n' sets reader option nullValue='NA': read by Spark"
    assert "session time zone Europe/Paris" in arrow_inputs.unsupported(spec.inputs["c"], "Europe/Paris")
