"""The layers of ARCHITECTURE.md, checked on the code: a package imports only packages of lower
layers, so the spec never learns about Spark and the executor never about Airflow.

Read from the parse tree of every module (imports inside functions count too)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "spark_jobs"

# rank of each top-level package or module of spark_jobs: imports must point to a lower rank
RANK = {
    "policy": -1,  # the execution policy's thresholds: imports nothing of the project, every layer reads it
    "spec": 0, "state": 0,
    "config": 1, "ir": 1,
    "executor": 2,
    "publish": 3, "quality": 3,
    "runtime": 4,
    "orchestration": 5, "cli": 5, "services": 5, "examples": 5,
    "demo": 6,
}


def _unit(path: Path) -> str:
    rel = path.relative_to(PACKAGE).parts
    return rel[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "spark_jobs" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_every_package_has_a_layer():
    units = {_unit(p) for p in PACKAGE.rglob("*.py")} - {"__init__"}
    assert units <= set(RANK), f"give these a layer in RANK (and ARCHITECTURE.md): {sorted(units - set(RANK))}"


def test_imports_point_down_only():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        unit = _unit(path)
        if unit == "__init__":
            continue
        for target in _imports(path) - {unit}:
            if target in RANK and RANK[target] >= RANK[unit]:
                upward.append(f"{path.relative_to(PACKAGE.parent)} ({unit}) imports spark_jobs.{target}")
    assert not upward, "imports that point up or sideways:\n  " + "\n  ".join(upward)


def test_the_check_sees_an_upward_import(tmp_path):
    """The scanner itself: an import of the executor from the spec would be found."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from spark_jobs.executor.spark import zset\n")
    assert _imports(module) == {"executor"}


def _module_names(path: Path) -> set[str]:
    """Every absolute module name a module imports (imports inside functions count too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_the_arrow_engine_needs_no_spark():
    """``executor/arrow/`` is the in-process engine: none of its modules imports pyspark or the
    Spark engine (``executor/spark/``), so the layout's engine boundary is a fact."""
    spark = []
    for path in sorted((PACKAGE / "executor" / "arrow").rglob("*.py")):
        for name in _module_names(path):
            if name.split(".")[0] == "pyspark" or name.startswith("spark_jobs.executor.spark"):
                spark.append(f"{path.relative_to(PACKAGE.parent)} imports {name}")
    assert not spark, "\n  ".join(["the Arrow engine imports Spark:", *spark])
