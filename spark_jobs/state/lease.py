"""One writer per circuit and state root: a lease taken before anything is written.

Why: two writers of one store (two ``dbsp step``, or a DAG run and a ``dbsp step``) would clean
each other's in-flight files (``StateStore.recover`` removes every directory no manifest lists)
and race for the same manifest. The lease makes the second writer stop at once, before it
touches anything.

How, with nothing but the store's own file system (local disk, HDFS, object stores):

- The lease is a small JSON file ``<root>/lease/<n>.json``; the holder is the highest ``n``.
  Taking a free or stale lease is an **exclusive create** of ``n + 1`` (``publish_text(...,
  exclusive=True)``: ``link()`` locally, a rename that never replaces on HDFS, a conditional PUT
  on object stores through Hadoop). Of two takers of the same stale lease exactly one wins.
- The record names its owner (a unique process id, or ``run:<run id>`` for a DAG run whose tasks
  run in separate processes), host, pid and times. The holder **renews** it (rewrites its own
  file) from a heartbeat thread every ``heartbeat`` seconds.
- A lease is **stale** when it was not renewed for ``ttl`` seconds, or, for a process lease on
  this host, when its process is gone (a killed ``dbsp step``: taken over at once). A DAG run's
  lease may also be taken over by the plan of a later run of the same DAG (Airflow starts that
  only after the earlier run ended: ``max_active_runs=1``).
- A holder **checks** right before it publishes a manifest (and before it cleans up) that the
  lease is still its own and was renewed less than ``ttl / 4`` ago (renewing first if needed). A
  taker waits the whole ``ttl``, so the three quarters left over cover the publish itself and
  clock skew between hosts: a holder that paused past its lease does not commit after another
  writer took over and cleaned its files.
- Releasing deletes the holder's file. Pids are only compared on the same host; a reused pid
  makes a dead holder look alive, which only delays a takeover until the ttl.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from spark_jobs.errors import DbspError, EXIT_FAILED, EXIT_LEASE_HELD
from spark_jobs.state.fs import FileSystem

LEASE_DIR = "lease"
PROCESS_TTL = 60.0  # seconds a `dbsp step` lease lives without a heartbeat
RUN_TTL = 900.0  # a DAG run's lease lives between its tasks (scheduler gaps, retry delays)
_TMP = ".tmp-"


class LeaseHeld(DbspError, RuntimeError):
    """Another live writer holds the lease of this circuit and state root."""
    exit_code = EXIT_LEASE_HELD
    retryable = False


class LeaseLost(DbspError, RuntimeError):
    """This writer's lease was taken over (it was stale); it must not commit."""
    exit_code = EXIT_FAILED
    retryable = False

    def user_message(self, reset_command: str | None = None) -> str:
        return f"{self}; this run stopped before committing (nothing of it is visible)"


def _now() -> float:
    return time.time()


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")


def pid_alive(pid: int) -> bool:
    """Is process ``pid`` running on this host (a zombie counts as gone)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


@dataclass
class LeaseRecord:
    owner: str
    kind: str  # "process" (one dbsp process) | "run" (a DAG run: owner is run:<run id>)
    host: str
    pid: int
    acquired_at: float
    renewed_at: float
    ttl: float
    circuit: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "LeaseRecord":
        raw: dict[str, Any] = json.loads(text)
        return cls(str(raw["owner"]), str(raw["kind"]), str(raw["host"]), int(raw["pid"]),
                   float(raw["acquired_at"]), float(raw["renewed_at"]), float(raw["ttl"]),
                   str(raw.get("circuit", "")))

    def stale_reason(self, now: float, host: str) -> str | None:
        """Why this lease may be taken over, or None while its holder may be alive."""
        quiet = now - self.renewed_at
        if quiet > self.ttl:
            return f"not renewed for {quiet:.0f} s (ttl {self.ttl:.0f} s)"
        if self.kind == "process" and self.host == host and not pid_alive(self.pid):
            return f"its process {self.pid} on {host} is gone"
        return None

    def describe(self) -> str:
        who = f"DAG run {self.owner[4:]!r}" if self.kind == "run" else f"process {self.pid}"
        return (f"{who} on host {self.host} (since {_iso(self.acquired_at)}, last renewed "
                f"{_iso(self.renewed_at)}, expires {_iso(self.renewed_at + self.ttl)} unless renewed)")


def _index(name: str) -> int | None:
    stem, dot, ext = name.partition(".")
    return int(stem) if dot and ext == "json" and stem.isdigit() else None


class Lease:
    """The lease of one state root, as one writer holds it (see the module docstring)."""

    def __init__(self, fs: FileSystem, root: str, owner: str, *, kind: str = "process",
                 ttl: float | None = None, heartbeat: float | None = None, circuit: str = "",
                 take_over_runs: bool = False) -> None:
        self.fs, self.root, self.owner, self.kind, self.circuit = fs, root, owner, kind, circuit
        self.ttl = float(ttl if ttl is not None else (RUN_TTL if kind == "run" else PROCESS_TTL))
        self.heartbeat = float(heartbeat if heartbeat is not None else min(self.ttl / 4, 30.0))
        self.take_over_runs = take_over_runs
        self.host = socket.gethostname()
        self.dir = fs.join(root, LEASE_DIR)
        self._n: int | None = None
        self._renewed = 0.0  # time.monotonic() of the last successful renewal
        self._acquired_at = 0.0
        self._lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._io = threading.Lock()

    # ---- reading ---------------------------------------------------------------------------
    def _path(self, n: int) -> str:
        return self.fs.join(self.dir, f"{n:012d}.json")

    def _indices(self) -> list[int]:
        return sorted(i for i in map(_index, self.fs.listdir(self.dir)) if i is not None)

    def current(self) -> tuple[int, LeaseRecord | None]:
        """The highest lease file and its record (0, None: no lease was ever taken or all were
        released). A file that cannot be read counts as held by an unknown writer.

        When every file listed vanished before it was read (a taker superseded them meanwhile),
        the highest index listed comes back with no record: a taker then publishes above it, never
        at an index a faster taker freed, so two takers of a stale lease cannot both win."""
        indices = self._indices()
        for n in reversed(indices):
            try:
                return n, LeaseRecord.from_json(self.fs.read_text(self._path(n)))
            except FileNotFoundError:  # released or cleaned meanwhile: look again below it
                continue
            except (ValueError, KeyError, TypeError):
                return n, LeaseRecord("?", "unknown", "?", -1, 0.0, _now(), self.ttl)
        return (indices[-1] if indices else 0), None

    # ---- taking and giving back -------------------------------------------------------------
    def _record(self, now: float) -> LeaseRecord:
        return LeaseRecord(self.owner, self.kind, self.host, os.getpid(), self._acquired_at or now, now,
                           self.ttl, self.circuit)

    def acquire(self) -> "Lease":
        """Take the lease (or renew it, if this owner holds it already: a later task of the same
        DAG run); ``LeaseHeld`` at once if another live writer holds it."""
        for _ in range(5):
            n, rec = self.current()
            now = _now()
            if rec is not None and rec.owner == self.owner:
                self._n, self._acquired_at = n, rec.acquired_at
                self.renew()
                return self
            if rec is not None and rec.stale_reason(now, self.host) is None and not (
                    self.take_over_runs and rec.kind == "run"):
                raise LeaseHeld(self._held_message(rec))
            self._acquired_at = now
            try:
                self.fs.publish_text(self._path(n + 1), self._record(now).to_json(), _TMP, exclusive=True)
            except FileExistsError:  # another writer took it first: look again
                continue
            self._n, self._renewed, self._lost = n + 1, time.monotonic(), None
            for old in self._indices():  # the records this one supersedes
                if old <= n:
                    self.fs.remove_file(self._path(old))
            return self
        n, rec = self.current()
        raise LeaseHeld(self._held_message(rec) if rec else f"the lease of {self.root} is contended; try again")

    def _held_message(self, rec: LeaseRecord) -> str:
        what = f"circuit {self.circuit!r}" if self.circuit else "this circuit"
        return (f"another writer is running {what} on the state at {self.root}: {rec.describe()}. "
                f"Only one `dbsp step`/`dbsp run` or DAG run may write a circuit's state at a time; "
                f"wait for it to finish (a killed writer's lease is taken over once its process is "
                f"gone or its lease expires)")

    def renew(self) -> None:
        """Rewrite this holder's record with a new time; ``LeaseLost`` if it was taken over."""
        with self._io:
            n, rec = self.current()
            if self._n is None or rec is None or n != self._n or rec.owner != self.owner:
                holder = rec.describe() if rec else "nobody"
                self._lost = f"the lease of {self.root} was taken over (now held by {holder})"
                raise LeaseLost(self._lost)
            self.fs.publish_text(self._path(n), self._record(_now()).to_json(), _TMP)
            self._renewed = time.monotonic()

    def check(self) -> None:
        """Before a commit or a cleanup: ``LeaseLost`` unless this holder still holds the lease,
        renewed less than a quarter of its ttl ago (it renews first when that is older)."""
        if self._lost:
            raise LeaseLost(self._lost)
        if time.monotonic() - self._renewed > self.ttl / 4:
            self.renew()
            return
        n, rec = self.current()
        if rec is None or n != self._n or rec.owner != self.owner:
            self._lost = f"the lease of {self.root} was taken over (now held by {rec.describe() if rec else 'nobody'})"
            raise LeaseLost(self._lost)

    def release(self, *, any_holder_of_owner: bool = False) -> None:
        """Give the lease back (delete this holder's file, if it is still its own).

        ``any_holder_of_owner``: also when this object did not take it (a DAG run gives up its
        lease from whichever task failed)."""
        self.stop_heartbeat()
        with self._io:
            n, rec = self.current()
            mine = n == self._n or (any_holder_of_owner and self._n is None)
            if rec is not None and mine and rec.owner == self.owner:
                self.fs.remove_file(self._path(n))
            self._n = None

    # ---- heartbeat ------------------------------------------------------------------------------
    def start_heartbeat(self) -> None:
        """Renew from a daemon thread every ``heartbeat`` seconds until ``stop_heartbeat``."""
        if self._thread is not None:
            return
        self._stop.clear()

        def beat() -> None:
            while not self._stop.wait(self.heartbeat):
                try:
                    self.renew()
                except LeaseLost:
                    return
                except Exception:  # a flaky store: the next beat tries again; check() decides
                    continue

        self._thread = threading.Thread(target=beat, name=f"dbsp-lease-{self.circuit}", daemon=True)
        self._thread.start()

    def stop_heartbeat(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "Lease":
        self.acquire()
        self.start_heartbeat()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def new_owner() -> str:
    """A unique owner for one process (host, pid and a random part: pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def run_owner(run_id: str) -> str:
    return f"run:{run_id}"
