"""Hostile and malformed circuits (tests/circuit_mutations.py) against `dbsp validate` and `explain`.

Most mutations run in-process through the validator `dbsp validate` calls and the compiler
`dbsp explain` calls (a fixed sample per kind; `scripts/hostile_circuits.py` runs them all); a
handful go through the CLI in a subprocess, for exit codes, tracebacks, time, memory and files
written. The rules: a refused circuit names the file, the line and (when it has one) the node; no
Python traceback; exit code 1; nothing runs from the circuit; nothing is written outside the
temporary folder.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path

import pytest

from spark_jobs.cli.main import main
from spark_jobs.config import PROJECT_ROOT
from tests.circuit_mutations import BILLION_LAUGHS, Mutation, all_mutations, examples, judge, sample

PER_KIND = 60  # mutations of each kind run in CI (chosen with a fixed seed)
KINDS = ["bad_name", "cycle", "duplicate_key", "duplicate_name", "hostile_path", "hostile_sql", "huge_number",
         "missing_field", "text", "unknown_field", "unknown_format", "unknown_kind", "unknown_op", "wrong_type",
         "yaml_tag"]


@lru_cache(maxsize=1)
def _sampled() -> dict[str, list[Mutation]]:
    # tpch_sql takes ~0.3 s per check (ten SQL queries): it serves a few SQL-node mutations only
    found = [m for m in all_mutations() if m.source != "tpch_sql.yaml"]
    tpch = sample([m for m in all_mutations() if m.source == "tpch_sql.yaml" and m.kind == "hostile_sql"], 8)
    by_kind: dict[str, list[Mutation]] = {}
    for m in sample(found, PER_KIND) + tpch:
        by_kind.setdefault(m.kind, []).append(m)
    return by_kind


def test_every_kind_of_mutation_is_generated():
    assert sorted(_sampled()) == KINDS
    assert all(len(ms) >= 10 for ms in _sampled().values())


@pytest.mark.parametrize("kind", KINDS)
def test_mutations_are_refused_cleanly(kind, tmp_path):
    failures = [f"{m.source}: {m.what}: {why}" for m in _sampled()[kind] if (why := judge(m, tmp_path))]
    assert not failures, "\n".join(failures[:20])


def test_the_judge_catches_an_accepted_hostile_circuit():
    """The harness can fail: a valid example passed off as a hostile one is caught."""
    text = examples()[0].read_text()
    assert judge(Mutation("x", "x", "x", text, invalid=True)) == "accepted, but it must be refused"
    assert judge(Mutation("x", "x", "x", text, invalid=False)) is None
    assert "no problem names 'nope'" in judge(Mutation("x", "x", "x", text.replace("nodes:", "nodez:"), node="nope"))


# ---- through the CLI, in a subprocess --------------------------------------------------------

MEMORY_LIMIT = 2 << 30  # bytes of address space for one `dbsp` process


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _dbsp(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DBSP_DATA_ROOT": str(cwd / "data"), "PYTHONPATH": str(PROJECT_ROOT)}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "spark_jobs.cli.main", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, preexec_fn=_limit_memory)
    done.seconds = time.monotonic() - started  # type: ignore[attr-defined]
    return done


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_hostile_files_through_dbsp_validate(tmp_path):
    marker = tmp_path / "pwned"
    good = examples()[0].read_text()
    files = {
        "tag.yaml": good.replace("name:", f"x: !!python/object/apply:os.system ['touch {marker}']\nname:", 1),
        "tag_top.yaml": f"--- !!python/object/apply:os.system ['touch {marker}']\n",
        "laughs.yaml": BILLION_LAUGHS,
        "deep.yaml": "a: " + "[" * 5000 + "]" * 5000 + "\n",
        "nul.yaml": good.replace("\n", "\n\x00", 1),
        "tabs.yaml": good.replace("  ", "\t"),
        "reflect.yaml": "name: r\ninputs:\n  t:\n    schema: {k: long}\n    source: {kind: changes, path: inbox/t}\n"
                        "nodes:\n  f: {op: filter, input: t, where: \"reflect('java.lang.Runtime', 'getRuntime') "
                        "is not null\"}\noutputs: [f]\n",
        "escape.yaml": "name: e\ninputs:\n  t:\n    schema: {k: long}\n    source: {kind: changes, path: _dbsp/other}\n"
                       "nodes:\n  f: {op: distinct, input: t}\noutputs: [f]\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "latin1.yaml").write_bytes(good.encode() + b"# caf\xe9\n")
    (tmp_path / "folder.yaml").mkdir()
    names = [*files, "latin1.yaml", "folder.yaml", "missing.yaml"]
    before = _files(tmp_path)
    done = _dbsp(tmp_path, "validate", *names)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr and done.seconds < 60, done.stderr[-3000:]
    out = done.stdout.splitlines()
    for name in names:  # each file is named, with a line, in at least one problem
        assert any(line.startswith(f"{name}:") and line.split(":")[1].isdigit() for line in out), (name, out)
    assert not marker.exists() and _files(tmp_path) == before
    assert any(line.startswith("reflect.yaml:7: node 'f':") and "reflect" in line for line in out), out
    assert any(line.startswith("escape.yaml:5: node 't':") and "_dbsp" in line for line in out), out


def test_dbsp_explain_and_step_refuse_a_hostile_circuit_without_a_traceback(tmp_path):
    circuit = tmp_path / "h.yaml"
    circuit.write_text("name: h\ninputs:\n  t:\n    schema: {__rows: long, k: long}\n"
                       "    source: {kind: changes, path: ., format: parquet}\nnodes:\n"
                       "  f: {op: filter, input: t, where: \"java_method('java.lang.System', 'exit', 0) = 1\"}\n"
                       "outputs: [f]\n")
    done = _dbsp(tmp_path, "explain", str(circuit))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = done.stderr
    assert f"{circuit}:4: node 't': column name '__rows'" in errors
    assert f"{circuit}:5: node 't': source path '.' is the data root itself" in errors
    assert f"{circuit}:7: node 'f':" in errors and "java_method" in errors
    # `dbsp step` refuses it before anything is read or written (in this process: no Spark starts)
    data = tmp_path / "data"
    assert main(["step", str(circuit), "--data-root", str(data)]) == 1
    assert not data.exists()


def test_a_malformed_profile_is_an_error_naming_the_file_not_a_traceback(tmp_path):
    (tmp_path / "p.yaml").write_text("spark: [1\n")
    (tmp_path / "q.yaml").write_text("spark: [1]\n")
    for profile, expected in (("p.yaml", "p.yaml:2: YAML syntax error"), ("q.yaml", "q.yaml:1: 'spark' must be a mapping")):
        done = _dbsp(tmp_path, "explain", str(examples()[0]), "--config", str(tmp_path / profile))
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
        assert expected in done.stderr, done.stderr


# ---- regressions found by the harness (each also in the sampled mutations above) ------------

def _highest_bid() -> str:
    return (PROJECT_ROOT / "circuits" / "nexmark_highest_bid.yaml").read_text()


@pytest.mark.parametrize("old, new, fragment", [
    ("k: 1", "k: 2147483648", "1 to 2147483647"),
    ('lateness: "5 minutes"', 'lateness: "36501 days"', "longer than 36,500 days"),
    ('size: "10 minutes"', 'size: "99999999999999999999 days"', "longer than 36,500 days"),
])
def test_numbers_out_of_range_are_refused(old, new, fragment):
    from spark_jobs.spec.loader import check_text

    text = _highest_bid()
    assert old in text
    _, problems = check_text(text.replace(old, new), "c.yaml")
    assert any(fragment in p.message and p.node for p in problems), problems


def test_an_integral_float_k_is_kept():
    from spark_jobs.spec.loader import check_text

    spec, problems = check_text(_highest_bid().replace("k: 1", "k: 3.0"), "c.yaml")
    assert not problems and spec.nodes["highest_bid"].extra["topk"].k == 3


def test_max_iterations_is_bounded():
    from spark_jobs.spec.loader import check_text

    text = (PROJECT_ROOT / "circuits" / "transitive_closure.yaml").read_text()
    old = next(line for line in text.splitlines() if "max_iterations:" in line)
    _, problems = check_text(text.replace(old, "  max_iterations: 1000001"), "c.yaml")
    line = text[:text.index(old)].count("\n") + 1
    assert [p.line for p in problems if "at most 1000000" in p.message] == [line], problems


def test_a_file_that_is_not_utf8_names_the_line_of_the_bad_byte(tmp_path):
    from spark_jobs.spec.loader import validate_file

    path = tmp_path / "c.yaml"
    path.write_bytes(b"name: x\ninputs:\n  # caf\xe9\n")
    (problem,) = validate_file(path)
    assert problem.line == 3 and "not UTF-8" in problem.message
