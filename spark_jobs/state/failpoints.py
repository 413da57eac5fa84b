"""Named crash points, so tests can prove a timestep commits all-or-nothing.

A failpoint fires (raises ``InjectedFailure``) when its name is armed, either in this process
(``arm("before_manifest")``) or through the environment (``DBSP_FAILPOINT=before_manifest``,
comma-separated for several), which reaches Airflow tasks and CLI subprocesses too.

Points used by the state store: ``begin``, ``after_state_write`` (after each file write),
``before_manifest``, ``after_manifest`` (commit durable, before garbage collection).
Callers add their own, e.g. ``mid_step`` in the executor.
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from typing import Iterator

from spark_jobs.errors import DbspError

ENV_VAR = "DBSP_FAILPOINT"

# name -> number of hits still to let through before firing
_armed: dict[str, int] = {}


class InjectedFailure(DbspError, RuntimeError):
    """A simulated crash; nothing should catch it except tests."""

    def __init__(self, name: str) -> None:
        super().__init__(f"injected failure at failpoint {name!r}")
        self.name = name


def arm(name: str, skip: int = 0) -> None:
    """Fire at ``name`` after letting ``skip`` hits through (0 = the next hit)."""
    _armed[name] = skip


def disarm(name: str | None = None) -> None:
    """Disarm one failpoint, or all of them."""
    if name is None:
        _armed.clear()
    else:
        _armed.pop(name, None)


@contextmanager
def armed(name: str, skip: int = 0) -> Iterator[None]:
    """Arm ``name`` for the duration of a ``with`` block."""
    arm(name, skip)
    try:
        yield
    finally:
        disarm(name)


def _env_names() -> set[str]:
    raw = os.environ.get(ENV_VAR, "")
    return {part.strip() for part in raw.split(",") if part.strip()}


KILL_VAR = "DBSP_FAILPOINT_KILL"  # "1": die on the spot (exit 137), like a killed process
SLEEP_VAR = "DBSP_FAILPOINT_SLEEP"  # seconds: pause there, then go on (a slow writer, for tests)


def failpoint(name: str) -> None:
    """Raise ``InjectedFailure`` if ``name`` is armed; otherwise do nothing (cheap).

    With ``DBSP_FAILPOINT_KILL=1`` an environment-armed failpoint ends the process at once,
    without cleanup, as ``kill -9`` would; with ``DBSP_FAILPOINT_SLEEP=<seconds>`` it pauses there
    and then goes on (a writer caught in the middle of a step).
    """
    if name in _armed:
        if _armed[name] > 0:
            _armed[name] -= 1
            return
        raise InjectedFailure(name)
    if name in _env_names():
        if os.environ.get(KILL_VAR) == "1":
            os._exit(137)
        if os.environ.get(SLEEP_VAR):
            print(f"failpoint {name}: pausing {os.environ[SLEEP_VAR]} s", file=sys.stderr, flush=True)
            time.sleep(float(os.environ[SLEEP_VAR]))
            return
        raise InjectedFailure(name)
