"""One error hierarchy (``spark_jobs/errors.py``): every exception class of the project derives
from ``DbspError``, whose ``exit_code`` and ``retryable`` the CLI and the DAG's task wrapper read.

The exit codes are checked through the real `dbsp` command (in a subprocess whose JAVA_HOME does
not exist, so a step must run in-process and no JVM can start), the retry decision through the
task callable Airflow runs."""
from __future__ import annotations

import ast
import builtins
import importlib
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_jobs.errors import (EXIT_FAILED, EXIT_LEASE_HELD, EXIT_QUALITY, EXIT_REFUSED, DbspError)
from tests.conftest import ROOT
from tests.engines import write_change

PACKAGE = Path(ROOT) / "spark_jobs"

# What reaches the user as one message, with its exit code, and what a retry cannot fix. Every
# other exception class of the project is a signal between modules (or a bug): no exit code
# (the CLI shows its traceback), and Airflow may retry it.
USER_ERRORS = {
    "spark_jobs.spec.errors:CircuitError": (EXIT_FAILED, False),
    "spark_jobs.config:ProfileError": (EXIT_FAILED, True),
    "spark_jobs.state.store:FingerprintMismatch": (EXIT_FAILED, False),
    "spark_jobs.state.store:TimestepNotRetained": (EXIT_FAILED, True),
    "spark_jobs.state.space:StorageFull": (EXIT_FAILED, True),
    "spark_jobs.state.lease:LeaseLost": (EXIT_FAILED, False),
    "spark_jobs.state.lease:LeaseHeld": (EXIT_LEASE_HELD, False),
    "spark_jobs.executor.refusal:ValueRefused": (EXIT_REFUSED, False),
    "spark_jobs.executor.weights:WeightOutOfRange": (EXIT_REFUSED, False),
    "spark_jobs.publish.delta:Unpublishable": (EXIT_FAILED, True),
    "spark_jobs.state.arrow_trace:WeightOverflow": (EXIT_REFUSED, False),
    "spark_jobs.executor.sources.checks:InputRefused": (EXIT_REFUSED, False),
    "spark_jobs.executor.loop:RecursionLimitExceeded": (EXIT_FAILED, True),
    "spark_jobs.executor.spark.session:ConnectServerUnreachable": (EXIT_FAILED, True),
    "spark_jobs.quality.report:QualityGateFailed": (EXIT_QUALITY, False),
    "spark_jobs.quality.expectations:ExpectationConfigError": (EXIT_FAILED, False),
    "spark_jobs.quality.expectations:UnknownExpectationError": (EXIT_FAILED, False),
    "spark_jobs.publish.delta:PublishError": (EXIT_FAILED, True),
    "spark_jobs.publish:PublishFailed": (EXIT_FAILED, True),
    "spark_jobs.runtime.inputs:CannotRebuild": (EXIT_FAILED, True),
    "spark_jobs.services:ServiceError": (EXIT_FAILED, True),
    "spark_jobs.cli.commands:UserError": (EXIT_FAILED, True),  # its default; each raise may choose
    "spark_jobs.orchestration.tasks:NotRetried": (EXIT_FAILED, False),  # its default; each carries its error's code
    "spark_jobs.connections:NoConnection": (EXIT_REFUSED, False),
    "spark_jobs.executor.sources.pg_log:PostgresRefused": (EXIT_REFUSED, False),
    "spark_jobs.executor.sources.pg_log:PostgresUnavailable": (EXIT_FAILED, True),
    "spark_jobs.publish.postgres_sink:SinkRefused": (EXIT_REFUSED, False),
    "spark_jobs.publish.postgres_sink:SinkFailed": (EXIT_FAILED, True),
    "spark_jobs.local_postgres:NoServer": (EXIT_FAILED, True),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exception_classes() -> dict[str, list[str]]:
    """``module:Class`` -> its base names, for every class of spark_jobs that is an exception,
    read from the parse trees (a base is an exception when it is a built-in one, a project
    exception, or a third-party class named ``...Error``/``...Exception``)."""
    classes: dict[str, tuple[str, list[str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
                classes[f"{_module_name(path)}:{node.name}"] = (node.name, bases)
    builtin = {n for n in dir(builtins) if isinstance(getattr(builtins, n), type)
               and issubclass(getattr(builtins, n), BaseException)}
    found = {name for name, _ in classes.values() if name == "DbspError"}
    changed = True
    while changed:
        changed = False
        for name, bases in classes.values():
            if name not in found and any(b in builtin or b in found or b.endswith(("Error", "Exception"))
                                         for b in bases):
                found.add(name)
                changed = True
    return {key: bases for key, (name, bases) in classes.items() if name in found}


def _cls(key: str) -> type:
    module, name = key.split(":")
    return getattr(importlib.import_module(module), name)


def test_every_exception_class_of_the_project_derives_from_the_base():
    classes = _exception_classes()
    assert len(classes) > 30 and "spark_jobs.executor.sources.checks:InputRefused" in classes  # the scan sees them
    outside = [key for key in classes if not issubclass(_cls(key), DbspError)]
    assert not outside, f"derive these from spark_jobs.errors.DbspError: {outside}"


def test_exit_codes_and_retries_are_the_documented_ones():
    """The table above, and nothing else reaches the user as a message: a new error class says
    what it is on purpose, not by inheriting from a builtin the CLI happened to catch."""
    for key in _exception_classes():
        cls = _cls(key)
        expected = USER_ERRORS.get(key, (None, True))
        assert (cls.exit_code, cls.retryable) == expected, key


def test_the_cli_and_the_task_wrapper_name_no_error_class():
    """The decisions are read from the errors: no list of classes (nor module-path strings) in
    the CLI's or the task wrapper's handlers."""
    for path, function in ((PACKAGE / "cli" / "commands.py", "_user_errors"),
                           (PACKAGE / "orchestration" / "tasks.py", "run_step")):
        tree = ast.parse(path.read_text())
        body = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
        caught = {ast.unparse(h.type) for n in ast.walk(body) if isinstance(n, ast.Try) for h in n.handlers if h.type}
        assert caught <= {"Exception", "DbspError"}, (function, caught)
        strings = [n.value for n in ast.walk(body) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        assert not [s for s in strings if s.startswith("spark_jobs.")], (function, strings)


CIRCUIT = """\
name: errs
inputs:
  a:
    schema: {k: long, s: string}
    source: {kind: changes, path: inbox/a, format: parquet}
  b:
    schema: {k: long, n: long}
    source: {kind: changes, path: inbox/b, format: parquet}
nodes:
  j: {op: join, left: a, right: b, on: [k]}
outputs:
  j:
    expectations:
      - expect_column_values_to_be_between: {column: n, min_value: 0}
"""
A = {"k": "long", "s": "string"}
B = {"k": "long", "n": "long"}


def _dbsp(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java")}  # any JVM start fails the command
    return subprocess.run([sys.executable, "-m", "spark_jobs.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env=env)


def test_exit_codes_through_the_cli(tmp_path):
    """0 committed (the first step is committed in-process by ``run_step``: a load runs on Spark);
    2 an input file refused; 3 the quality gate failed; 4 another writer holds
    the lease; 1 a circuit error. Nothing is committed unless the code is 0."""
    from spark_jobs.runtime.circuit import open_circuit, state_root
    from spark_jobs.runtime.step import run_step
    from spark_jobs.state.fs import LocalFileSystem
    from spark_jobs.state.lease import Lease, new_owner
    from tests.policies import config

    root, path = str(tmp_path), str(tmp_path / "c.yaml")
    (tmp_path / "c.yaml").write_text(CIRCUIT)
    write_change(root, "a", 1, A, Counter({(1, "x"): 1}))
    write_change(root, "b", 1, B, Counter({(1, 10): 1}))
    assert run_step(open_circuit(path, config(root, engine="arrow"))).engine == "arrow"  # a first step loads on Spark
    write_change(root, "a", 2, A, Counter({(2, "y"): 1}))
    ok = _dbsp(tmp_path, "step", path, "--data-root", root)
    assert ok.returncode == 0 and "committed timestep 2" in ok.stdout, ok.stderr[-3000:]

    bad = tmp_path / "inbox" / "a" / "t0003.parquet"  # k is declared long
    pq.write_table(pa.table({"k": pa.array(["2"]), "s": pa.array(["y"]), "_weight": pa.array([1], pa.int64())}), bad)
    refused = _dbsp(tmp_path, "step", path, "--data-root", root)
    assert refused.returncode == EXIT_REFUSED, refused.stderr[-3000:]
    assert "input refused; nothing was committed" in refused.stderr and "t0003.parquet" in refused.stderr
    bad.unlink()

    write_change(root, "b", 3, B, Counter({(1, -5): 1}))  # joins a's row 1: n = -5 < 0
    gate = _dbsp(tmp_path, "step", path, "--data-root", root)
    assert gate.returncode == EXIT_QUALITY, gate.stderr[-3000:]
    assert "quality gate failed; nothing was committed" in gate.stderr

    lease = Lease(LocalFileSystem(), state_root(config(root), "errs"), new_owner(), circuit="errs").acquire()
    try:
        held = _dbsp(tmp_path, "step", path, "--data-root", root)
    finally:
        lease.release()
    assert held.returncode == EXIT_LEASE_HELD, held.stderr[-3000:]

    (tmp_path / "broken.yaml").write_text(CIRCUIT.replace("right: b", "right: nowhere"))
    broken = _dbsp(tmp_path, "explain", str(tmp_path / "broken.yaml"))
    assert broken.returncode == EXIT_FAILED and "nowhere" in broken.stderr, broken.stderr[-3000:]
    assert "Traceback" not in refused.stderr + gate.stderr + held.stderr + broken.stderr
    assert open_circuit(path, config(root)).committed.manifest().timestep == 2  # nothing else committed


def test_the_task_wrapper_fails_at_once_on_an_error_a_retry_cannot_fix(tmp_path, monkeypatch):
    """A real plan task of a DAG run while a `dbsp step` holds the circuit's lease: LeaseHeld is
    not retryable, so the task fails for good (``NotRetried``: its retry policy fails it) instead of retrying."""
    from spark_jobs.orchestration import tasks
    from spark_jobs.runtime.circuit import state_root
    from spark_jobs.state.fs import LocalFileSystem
    from spark_jobs.state.lease import Lease, new_owner
    from tests.policies import config

    monkeypatch.setenv("DBSP_DATA_ROOT", str(tmp_path))
    path = str(tmp_path / "c.yaml")
    (tmp_path / "c.yaml").write_text(CIRCUIT)
    lease = Lease(LocalFileSystem(), state_root(config(tmp_path), "errs"), new_owner(), circuit="errs").acquire()
    try:
        with pytest.raises(tasks.NotRetried) as failed:
            tasks.run_step("plan", path, run_id="manual__1", params={})
        assert type(failed.value.error).__name__ == "LeaseHeld" and failed.value.code == 4
    finally:
        lease.release()


@pytest.mark.parametrize("retryable", [True, False])
def test_the_task_wrapper_retries_exactly_the_retryable_errors(monkeypatch, retryable):
    """Whatever the class, the wrapper reads ``retryable``: a retryable error reaches Airflow as
    raised (it retries the task), another fails the task for good. (``execute`` is replaced to
    raise a made-up error class: what is tested is the wrapper's reading of the attribute.)"""
    from spark_jobs.orchestration import tasks

    class Made(DbspError):
        pass

    Made.retryable = retryable

    def fail(*args, **kwargs):
        raise Made("made up")

    monkeypatch.setattr(tasks, "execute", fail)
    monkeypatch.setattr(tasks, "give_up", lambda *a: None)  # no circuit to give a lease back for
    with pytest.raises(Made if retryable else tasks.NotRetried):
        tasks.run_step("plan", "c.yaml", run_id="manual__1", params={})
