"""A small hostile circuit file costs little: alias bombs, deep nesting and huge files are refused
before the YAML becomes data, and unknown keys are refused everywhere (no Spark)."""
from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest

from spark_jobs.config import PROJECT_ROOT
from spark_jobs.spec import load_circuit_text, validate_file
from spark_jobs.spec.loader import check_text
from spark_jobs.spec.yaml_limits import MAX_BYTES, MAX_DEPTH
from tests.test_spec_load import BASE


def billion_laughs(levels: int = 12, width: int = 10) -> str:
    """The classic: each anchor lists the previous one ``width`` times (width**levels strings)."""
    lines = ["name: bomb", "lol: &l0 [" + ", ".join(['"lol"'] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def refused_quickly(text: str, fragment: str, seconds: float = 1.0) -> None:
    """``text`` is refused with ``fragment`` within ``seconds`` and a few MB: a check that the
    bound is applied before expansion (unbounded, these take minutes and gigabytes)."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        spec, problems = check_text(text, "bomb.yaml")
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert spec is None and [p for p in problems if fragment in p.message], problems
    assert elapsed < seconds, f"took {elapsed:.2f} s"
    assert peak < 50e6, f"peak {peak / 1e6:.0f} MB"


def test_a_700_byte_alias_bomb_is_refused_before_expansion():
    bomb = billion_laughs()
    assert 600 <= len(bomb.encode()) <= 800  # 10**12 strings once expanded
    refused_quickly(bomb, "expands to more than 100,000 values through aliases (*name)")


def test_a_circuit_too_large_without_aliases_is_not_blamed_on_aliases():
    nodes = "".join(f"  f{i}: {{op: filter, input: a, where: k > {i}}}\n" for i in range(14_000))
    (problem,) = check_text(f"name: big\nnodes:\n{nodes}", "big.yaml")[1]  # 8 values a node
    assert "expands to more than 100,000 values; a circuit this large is refused: split it" in problem.message
    assert "alias" not in problem.message


def test_a_merge_key_bomb_is_refused():
    merge = "name: m\nx0: &x0 {a: 1, b: 2}\n" + "".join(
        f"x{i}: &x{i} {{<<: [*x{i - 1}, *x{i - 1}], k{i}: 1}}\n" for i in range(1, 40))
    refused_quickly(merge, "expands to more than")


def test_a_recursive_alias_is_refused():
    refused_quickly("name: r\nnodes: &n {a: *n}\n", "refers to a node that contains it")


@pytest.mark.parametrize("text", [
    "name: d\nx: " + "[" * 100_000 + "]" * 100_000 + "\n",
    "name: d\nx: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n",
    "name: d\nx:\n" + "".join("  " * i + "- \n" for i in range(1, 200)),
], ids=["flow lists", "flow mappings", "block lists"])
def test_deep_nesting_is_refused_at_the_first_level_too_many(text):
    refused_quickly(text, f"nested more than {MAX_DEPTH} levels deep")


def test_a_file_over_the_size_limit_is_refused_before_parsing(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("name: big\ndescription: \"" + "x" * MAX_BYTES + "\"\n")
    start = time.perf_counter()
    (problem,) = validate_file(big)
    assert time.perf_counter() - start < 1.0
    assert problem.line == 1 and "limited to 1,048,576 bytes" in problem.message
    (problem,) = check_text(big.read_text(), "big.yaml")[1]
    assert "limited to" in problem.message


def test_a_never_ending_file_is_refused_too():
    (problem,) = validate_file("/dev/zero")
    assert "limited to" in problem.message


def test_small_anchors_and_merges_still_work():
    text = BASE.replace("  customers:\n    schema: {customer_id: long, name: string, region: string}",
                        "  customers:\n    schema: &cust {customer_id: long, name: string, region: string}")
    text = text.replace("outputs:", "  again: {op: filter, input: customers, where: \"region = 'x'\"}\noutputs:")
    spec = load_circuit_text(text)
    assert spec.inputs["customers"].column_names == ("customer_id", "name", "region")


@pytest.mark.parametrize("old, new, line, fragment", [
    ('schedule: "@hourly"', 'schedule: "@hourly"\nsettings: {max_iterations: 5, note: free}', 3,
     "unknown field 'note' in field 'settings'; expected one of: max_iterations"),
    ("format: csv}", "format: csv, options: {delimeter: ';'}}", 9,
     "reader option 'delimeter' is not accepted for format csv"),
    ("format: csv}", "format: csv, options: {pathGlobFilter: '*.csv'}}", 9,
     "reader option 'pathGlobFilter' is not accepted"),
    ("format: parquet}", "format: parquet, compresion: snappy}", 6, "unknown field 'compresion'"),
    ("    expectations:\n", "    expectation_suite: x\n    expectations:\n", 17, "unknown field 'expectation_suite'"),
])
def test_unknown_keys_are_refused_everywhere(old, new, line, fragment):
    assert old in BASE
    problems = check_text(BASE.replace(old, new), "c.yaml")[1]
    match = [p for p in problems if fragment in p.message]
    assert match and match[0].line == line, problems


def test_a_misspelt_reader_option_gets_a_did_you_mean():
    problems = check_text(BASE.replace("format: csv}", "format: csv, options: {delimeter: ';'}}"), "c.yaml")[1]
    assert "did you mean 'delimiter'" in problems[0].message


def test_the_example_circuits_are_far_below_the_limits():
    for path in (PROJECT_ROOT / "circuits").glob("*.yaml"):
        assert Path(path).stat().st_size < MAX_BYTES // 100
