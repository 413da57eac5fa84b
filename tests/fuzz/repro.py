"""A failing case as a pytest test, ready to paste: the circuit YAML and the changes per step."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .check import Failure
from .generate import Batch, circuit_yaml


def _batch_literal(batch: Batch) -> str:
    parts = []
    for name, change in batch.items():
        rows = ", ".join(f"{row!r}: {w}" for row, w in change.items())
        parts.append(f"{name!r}: {{{rows}}}")
    return "{" + ", ".join(parts) + "}"


def repro_test(seed: int, doc: dict[str, Any], batches: list[Batch], failure: Failure, note: str = "") -> str:
    """Python source of a test that replays the case through the engine and the reference."""
    comment = "\n".join(f"# {line}".rstrip() for line in str(failure).splitlines())
    steps = "\n".join(f"    {_batch_literal(b)},  # timestep {t}" for t, b in enumerate(batches, start=1))
    return f'''# Fuzz seed {seed}{': ' + note if note else ''}
{comment}
import datetime  # noqa: F401 (rows may hold dates)
from decimal import Decimal  # noqa: F401 (rows may hold decimals)

from tests.fuzz.check import check_case

CIRCUIT = """
{circuit_yaml(doc).rstrip()}
"""

# one entry per timestep: input -> {{row (columns in schema order): weight}}
BATCHES = [
{steps}
]


def test_fuzz_seed_{seed}(spark, tmp_path):
    check_case(spark, tmp_path, CIRCUIT, BATCHES)
'''


def write_repro(folder: Path, seed: int, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"test_fuzz_seed_{seed}.py"
    path.write_text(text)
    return path


def repro_folder() -> Path:
    """Where reproductions go: $DBSP_FUZZ_OUT, else build/fuzz in the repository (ignored by git)."""
    default = Path(__file__).resolve().parents[2] / "build" / "fuzz"
    return Path(os.environ.get("DBSP_FUZZ_OUT") or default)

