"""A text input file's lines as Spark's line reader gives them (Hadoop's ``LineRecordReader``).

Lines end at ``\\n``, ``\\r\\n`` or a lone ``\\r`` (not at the other Unicode line separators, which
Python's ``splitlines`` would split at); a UTF-8 byte-order mark at the start of the file is
skipped; ``.gz`` and ``.bz2`` files are decompressed (the codecs Spark picks by extension,
``discovery.TEXT_COMPRESSIONS``). A file that is not valid UTF-8 raises ``NotLocal``: Java
replaces bad bytes with its own rules, so Spark reads it.
"""
from __future__ import annotations

import re
from typing import Iterator

from spark_jobs.executor.engine import NotLocal
from spark_jobs.executor.sources.discovery import locate

_LINE_END = re.compile(r"\r\n|\r|\n")


def read_bytes(path: str) -> bytes:
    """The file's bytes, decompressed by its extension."""
    loc = locate(path)
    lower = path.lower()
    compression = "gzip" if lower.endswith(".gz") else "bz2" if lower.endswith(".bz2") else None
    try:
        with loc.fs.open_input_stream(loc.inner, compression=compression) as stream:
            return stream.read()
    except (OSError, ValueError) as exc:  # a corrupt archive: Spark's reader names the file
        raise NotLocal(f"{path} cannot be decompressed here ({exc})") from None


def read_text(path: str) -> str:
    """The file decoded as UTF-8, without a leading byte-order mark."""
    data = read_bytes(path)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotLocal(f"{path} is not valid UTF-8 ({exc.reason} at byte {exc.start}): Spark reads it") from None


def lines_of(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) of every line, terminators removed; no empty last line."""
    parts = _LINE_END.split(text)
    if parts and parts[-1] == "":
        parts.pop()
    return enumerate(parts, start=1)
