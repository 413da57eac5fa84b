"""How many rows a step's input files hold, known cheaply, for the engine choice
(``ExecutionPolicy.engine_for``): Parquet from its footers, text files by counting their lines
(a large uncompressed file from the length of its first lines; a large compressed one is not
estimated: None, the size is unknown)."""
from __future__ import annotations

from typing import Sequence

from spark_jobs.executor.sources import InputFile
from spark_jobs.executor.sources.discovery import data_files, file_format, locate
from spark_jobs.spec.model import InputSpec

from spark_jobs.executor.engine import NotLocal

from .parquet_files import footer_rows
from .text_files import read_bytes

COUNTED_BYTES = 64 << 20  # text files up to this size are counted line by line
SAMPLE_BYTES = 1 << 20  # a larger one: estimated from its first MiB
COMPRESSED = (".gz", ".bz2")


def text_rows(f: InputFile) -> int | None:
    """Lines of a text file (an estimate past ``COUNTED_BYTES``; None for a large compressed one)."""
    compressed = f.path.lower().endswith(COMPRESSED)
    if compressed and f.size > COUNTED_BYTES // 8:
        return None
    if compressed or f.size <= COUNTED_BYTES:
        try:
            data = read_bytes(f.path)
        except NotLocal:  # a corrupt archive: its size is unknown (Spark reads and names it)
            return None
        ends = data.count(b"\n") or data.count(b"\r")
        return ends + (1 if data.strip() and not data.endswith((b"\n", b"\r")) else 0)
    loc = locate(f.path)
    with loc.fs.open_input_file(loc.inner) as fh:
        head = fh.read(SAMPLE_BYTES)
    lines = head.count(b"\n") or 1
    return int(f.size * lines / max(len(head), 1))


def change_rows(spec: InputSpec, files: Sequence[InputFile]) -> int | None:
    """Rows the input's files hold (a snapshots input: its newest snapshot); None: unknown."""
    if not files:
        return 0
    if spec.source is not None and spec.source.kind == "postgres":
        return 0  # not known before reading the log; read in-process whatever the engine
    if spec.source is not None and spec.source.kind == "delta":
        from .delta_tables import estimate_rows

        return estimate_rows(files[-1])
    if spec.source is not None and spec.source.kind == "snapshots":
        files = data_files(files[-1].path)
    parquet = [f.path for f in files if file_format(f.path) == "parquet"]
    total = footer_rows(parquet) if parquet else 0
    if total is None:
        return None
    for f in files:
        if file_format(f.path) in ("csv", "json"):
            rows = text_rows(f)
            if rows is None:
                return None
            total += rows
    return total
