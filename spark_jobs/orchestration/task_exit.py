"""A task's end reported when its process ends, not up to 5 s later (Airflow 3.3's supervisor).

Each Airflow 3 task runs in a process forked by a supervisor (in the LocalExecutor's worker),
which waits in ``select`` on the task's sockets (stdout, stderr, logs, requests) for at most
``[workers] min_heartbeat_interval`` (5 s), and after each wake-up asks whether the process has
ended; the task's end (its state, ``end_date``, and so the run's end) is reported only then. When
the task process closes its sockets a moment before it is reapable - it closes the log and
request sockets itself, then exits; a process with threads (pyarrow's pools) ends after its last
thread - the supervisor reads the EOFs, finds the process still there, and waits again in a
``select`` that has no socket left to wake it: the full 5 s. Measured under ``make airflow``:
an empty run's one task finished its work in 0.1 s and was reported 5.1-5.4 s later in 4 runs of
5 (its process a zombie all that time); a no-op task lost the race less often.

``install()`` wraps ``ActivitySubprocess._service_subprocess``: when no socket is left and the
exit is not known yet, it polls the process itself (``waitid(..., WNOWAIT)``: it does not reap it,
the supervisor still does) every few milliseconds for up to the same wait, then lets the
original check the exit at once. Nothing else changes: with sockets open, the original ``select``
runs as before. If Airflow's supervisor no longer has these names, nothing is patched (and the
launcher's output says so). Installed by ``$AIRFLOW_HOME/config/airflow_local_settings.py``
(``scripts/airflow_local.sh``), in the scheduler that forks the workers.
"""
from __future__ import annotations

import logging
import os
import time

log = logging.getLogger(__name__)
POLL_SECONDS = 0.005
_PATCHED = "_dbsp_waits_for_exit"


def wait_for_exit(pid: int, timeout: float, poll: float = POLL_SECONDS) -> bool | None:
    """True once the child ``pid`` has ended (left reapable: the caller reaps it), False after
    ``timeout``, None at once when it is not a child of this process."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:
            return None
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)


def install() -> bool:
    """Patch the supervisor once per process; False if its names are not there."""
    try:
        from airflow.sdk.execution_time.supervisor import ActivitySubprocess
    except Exception:  # noqa: BLE001 - not an Airflow 3 process: nothing to fix
        return False
    if getattr(ActivitySubprocess, _PATCHED, False):
        return True
    original = getattr(ActivitySubprocess, "_service_subprocess", None)
    if original is None or not hasattr(os, "waitid"):
        log.warning("dbsp: Airflow's task supervisor has no _service_subprocess: task ends may be "
                    "reported up to [workers] min_heartbeat_interval late")
        return False

    def _service_subprocess(self, max_wait_time: float, raise_on_timeout: bool = False,
                            expect_signal: int | None = None):
        selector, pid = getattr(self, "selector", None), getattr(self, "pid", None)
        if (getattr(self, "_exit_code", 0) is None and selector is not None and pid
                and not selector.get_map()
                and wait_for_exit(pid, max(0.01, max_wait_time)) is not None):
            max_wait_time = 0  # waited here already: the original checks the exit without sleeping
        return original(self, max_wait_time, raise_on_timeout, expect_signal)

    ActivitySubprocess._service_subprocess = _service_subprocess
    setattr(ActivitySubprocess, _PATCHED, True)
    return True
