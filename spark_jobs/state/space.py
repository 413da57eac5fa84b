"""A full disk, recognized in whatever form it reaches the driver.

A write that runs out of space fails in one of three places: a Spark task writing Parquet (the
driver gets a Py4J error whose text carries Java's ``IOException: No space left on device`` and
the folder being written), the driver publishing a small file (an ``OSError``), or the Hadoop
file system of a remote store (a Py4J error again). ``no_space_left`` finds the condition and the
path in each, so the step can end with one message instead of hundreds of lines of Java.
"""
from __future__ import annotations

import errno
import re

from spark_jobs.errors import DbspError, EXIT_FAILED

NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_NO_SPACE_TEXT = ("No space left on device", "Disk quota exceeded")
# Spark: "[TASK_WRITE_FAILED] Task failed while writing rows to file:/root/x. SQLSTATE: 58030"
_WRITING = re.compile(r"writing rows to (\S+?)\.?(?:\s|$)")


class StorageFull(DbspError, OSError):
    """A step ran out of space while writing; its message names the path and what was committed."""
    exit_code = EXIT_FAILED


def no_space_left(exc: BaseException) -> str | None:
    """The path being written when ``exc`` says the device (or quota) is full, "" when that path
    is not known; None when ``exc`` is about something else."""
    if isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS:
        return str(exc.filename or "")
    text = str(exc)
    if not any(marker in text for marker in _NO_SPACE_TEXT):
        return None
    found = _WRITING.search(text)
    return found.group(1) if found else ""
