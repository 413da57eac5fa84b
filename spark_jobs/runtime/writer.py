"""The writer's lease around everything that writes a circuit's state (spark_jobs/state/lease.py).

``dbsp step``/``dbsp run``/``dbsp reset`` hold a process lease for their whole run; a DAG run holds
one lease owned by its run id from ``plan`` to ``commit``: each task takes it over from the
previous task of the same run (or renews it), heartbeats it while it runs, and only ``commit``
releases it. On a local state root the lease is taken before Spark starts, so a second writer is
refused in a fraction of a second; a remote root is reached through Spark's own file system.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from spark_jobs.state.arrow_fs import is_local
from spark_jobs.state.fs import filesystem_for
from spark_jobs.state.lease import Lease, new_owner, run_owner


def lease_for(rt, owner: str, **kw) -> Lease:
    """A (not yet acquired) lease of ``rt``'s state root."""
    from spark_jobs.runtime.circuit import state_root

    root = state_root(rt.config, rt.name)
    if not is_local(root):
        rt.spark  # noqa: B018 - a remote root is reached through the session's Hadoop file system
    fs = filesystem_for(root)
    return Lease(fs, fs.normalize(root), owner, circuit=rt.name, **kw)


@contextmanager
def holding(rt, *, owner: str | None = None, kind: str = "process", release: bool = True,
            take_over_runs: bool = False) -> Iterator[Lease]:
    """Hold ``rt``'s lease for the block (``LeaseHeld`` at once if another writer holds it).

    Nested use by the same owner (``dbsp run`` around its steps) reuses the outer lease.
    ``release=False`` leaves it held after the block (a DAG task before ``commit``).
    """
    held = rt.lease
    if held is not None and (owner is None or held.owner == owner):
        yield held
        return
    lease = lease_for(rt, owner or new_owner(), kind=kind, take_over_runs=take_over_runs)
    lease.acquire()
    lease.start_heartbeat()
    rt.attach_lease(lease)
    try:
        yield lease
    finally:
        rt.attach_lease(None)
        if release:
            lease.release()
        else:
            lease.stop_heartbeat()


def run_lease(rt, run_id: str, *, release: bool = False, take_over_runs: bool = False):
    """The lease of DAG run ``run_id`` (shared by its tasks, which run in separate processes)."""
    return holding(rt, owner=run_owner(run_id), kind="run", release=release, take_over_runs=take_over_runs)


def give_up_run(rt, run_id: str) -> None:
    """Release DAG run ``run_id``'s lease after a failure no retry can fix (the run is over)."""
    lease_for(rt, run_owner(run_id), kind="run").release(any_holder_of_owner=True)


def process_lease(rt):
    """The lease of this process (``dbsp step``/``run``)."""
    return holding(rt)
