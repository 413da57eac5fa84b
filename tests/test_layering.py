"""The layers of ``spark_jobs/layers.py``, checked on the code: a package imports only packages of
lower layers, so the spec never learns about Spark and the executor never about Airflow; and the
places that repeat the layer numbers (ARCHITECTURE.md's table, the packages' docstrings) agree
with that one table.

Read from the parse tree of every module (imports inside functions count too)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from spark_jobs.layers import LAYERS, RANK

PACKAGE = Path(__file__).resolve().parent.parent / "spark_jobs"

ARCHITECTURE = PACKAGE.parent / "ARCHITECTURE.md"


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
    assert units <= set(RANK), f"give these a layer in spark_jobs/layers.py: {sorted(units - set(RANK))}"
    assert set(RANK) <= units, f"layers.py names units that do not exist: {sorted(set(RANK) - units)}"


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


def test_architecture_md_tables_the_same_layers():
    """Each row of ARCHITECTURE.md's layer table: its number is the layer of every spark_jobs
    package or module it names, and every unit of ``LAYERS`` is in some row."""
    text = ARCHITECTURE.read_text()
    table = text[text.index("## Layers"):].split("\n## ", 1)[0]
    documented: dict[str, int] = {}
    for row in re.findall(r"^\| *(\d+) *\|[^|]*\|([^|]*)\|", table, re.M):
        for unit in re.findall(r"`spark_jobs/(\w+)(?:/|\.py)`", row[1]):
            documented[unit] = int(row[0])
    assert documented == RANK, ("ARCHITECTURE.md's layer table disagrees with spark_jobs/layers.py: "
                                f"{sorted(set(documented.items()) ^ set(RANK.items()))}")


def test_package_docstrings_name_their_layer():
    """A package docstring that starts by naming its layer ("Layer N, ...") names the right one;
    so does any other mention of "layer N" in a top-level docstring."""
    wrong = []
    for layer in LAYERS:
        for unit in layer.units:
            path = PACKAGE / unit / "__init__.py"
            path = path if path.exists() else PACKAGE / f"{unit}.py"
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            for number in re.findall(r"\b[Ll]ayer (\d+)\b", doc):
                if int(number) != layer.number:
                    wrong.append(f"{path.relative_to(PACKAGE.parent)} says layer {number}, layers.py {layer.number}")
    assert not wrong, "\n  ".join(["docstrings that name another layer:", *wrong])
    named = [p for p in PACKAGE.glob("*/__init__.py") if re.match(r"Layer \d+, ", ast.get_docstring(ast.parse(p.read_text())) or "")]
    assert len(named) >= 8  # the check above reads the docstrings it means to
