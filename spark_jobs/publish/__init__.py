"""Layer 4, published views: after each commit, every output of a circuit as a Delta table
readers can use without this project (Spark, DuckDB, pandas/polars, Trino).

Publishing is the last part of the commit protocol. The manifest is the commit point; the tables
follow it. ``publish_views`` brings every table from the timestep it holds (its Delta
transaction version) up to the last committed one, one Delta commit per timestep, from the view
deltas the store keeps for every timestep. So it is idempotent, and a crash between the manifest
and the tables (or in the middle of catching up) is repaired by the next call: the next step, the
next DAG commit, or ``dbsp publish``. Nothing here uses Spark.

    from spark_jobs.publish import publish_views
    publish_views(rt)            # rt: an open circuit (spark_jobs.runtime.circuit.CircuitRuntime)
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import pyarrow as pa
from typing import Callable, Protocol

from spark_jobs.config import Config
from spark_jobs.errors import DbspError, EXIT_FAILED
from spark_jobs.publish.delta import (PublishError, Unpublishable, commit_change, create, open_table, overwrite,
                                      published_timestep, remove, version_timesteps)
from spark_jobs.publish.ownership import claim_problem, removal_problem
from spark_jobs.publish.targets import Target, targets
from spark_jobs.spec.model import CircuitSpec
from spark_jobs.state.arrow_read import arrow_schema, read_delta, read_view
from spark_jobs.state.failpoints import InjectedFailure, failpoint
from spark_jobs.state.layout import safe_name
from spark_jobs.state.retention import Removed
from spark_jobs.state.trace import WEIGHT


class PublishFailed(DbspError, RuntimeError):
    """Some views could not be published; their timesteps are committed all the same."""
    exit_code = EXIT_FAILED


class _Circuit(Protocol):  # what publishing needs of an open circuit (runtime.circuit.CircuitRuntime)
    config: Config

    @property
    def compiled(self): ...
    @property
    def committed(self): ...  # a StateStore (Spark not needed)


@dataclass
class TableResult:
    view: str
    uri: str
    before: int = 0  # timestep the table held before this call
    after: int = 0  # timestep it holds now
    error: str = ""
    note: str = ""


@dataclass
class PublishReport:
    results: list[TableResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[TableResult]:
        return [r for r in self.results if r.error]

    def summary(self) -> str:
        if not self.results:
            return "views: not published (views.enabled: false, or every output has publish: false)"
        lines = []
        for r in self.results:
            if r.error:
                lines.append(f"view {r.view}: NOT published, its table is behind (at timestep {r.after}): {r.error}; "
                             f"the next step or `dbsp publish` retries")
            elif r.note:
                lines.append(f"view {r.view}: {r.note}")
            elif r.after == r.before:
                lines.append(f"view {r.view}: table at timestep {r.after} already ({r.uri})")
            else:
                lines.append(f"view {r.view}: published timestep(s) {r.before + 1}..{r.after} to {r.uri}")
        return "\n".join(lines) + f"\n(published in {self.seconds:.2f}s)"

    def raise_if_failed(self) -> "PublishReport":
        if self.failed:
            raise PublishFailed(self.summary())
        return self


VIEW_STARTS = "view_starts"  # manifest meta: views a circuit change started again (``runtime/change.py``)


def restart_of(store, view: str, before: int, last: int) -> int | None:
    """The last timestep in (before, last] at which a change of the circuit started ``view``
    again (new, or its columns changed): its table is rewritten with the whole view there
    instead of applying deltas that do not fit it."""
    for t in range(last, before, -1):
        m = store.manifest(t)
        if m is None:
            return None
        if view in ((m.meta or {}).get(VIEW_STARTS) or {}):
            return t
    return None


def _catch_up(target: Target, store, last: int, say: Callable[[str], None],
              circuits: Callable[[], set[str]] = set, result: TableResult | None = None) -> TableResult:
    result = result if result is not None else TableResult(target.view, target.uri)
    table = open_table(target)
    if table is None:
        schema = arrow_schema(store.view_schema(target.view))
        if schema is None:  # no row yet: nothing says its column types; created with its first rows
            result.note = "no table yet: the view has had no row"
            return result
        if target.root and (why := claim_problem(target.root, target.uri, target.circuit, target.view,
                                                 circuits(), target.storage_options)):
            raise PublishError(why)
        start = restart_of(store, target.view, 0, last)
        if start is not None:  # a change of the circuit started the view at `start` (new): its table
            # is created holding the whole view there, one commit (not an empty one and then the view)
            view = read_view(store, target.view, start)
            if view is None:  # no row at `start`: the columns, no rows
                view = (schema if WEIGHT in schema.names else schema.append(pa.field(WEIGHT, pa.int64()))).empty_table()
            table = create(target, schema, view, start)
            result.note = (f"the view starts at timestep {start} (a change of the circuit): its table created "
                           f"with its whole value, one commit")
        else:
            table = create(target, schema)
    result.before = result.after = published_timestep(table, target)
    pruned = Removed.read(store).view_deltas_through.get(safe_name(target.view), 0)
    if result.before > last or pruned > result.before:
        # the state was reset under the table, or retention removed deltas it never got (it was
        # switched on late): start its rows again from the view
        view = read_view(store, target.view, last)
        if view is None:  # no row committed (yet): the table's columns, no rows
            schema = pa.schema(table.schema().to_arrow())
            view = schema.append(pa.field(WEIGHT, pa.int64())).empty_table()
        overwrite(target, view, last)
        result.after = last
        why = "the state at" if result.before > last else f"retention removed deltas through {pruned}, the state at"
        result.note = f"table was at timestep {result.before}, {why} {last}: rebuilt at {last}"
        return result
    first = result.before + 1
    start = restart_of(store, target.view, result.before, last)
    if start is not None:  # a circuit change made the view new or changed its columns at `start`
        view = read_view(store, target.view, start)
        if view is None:
            view = pa.schema(table.schema().to_arrow()).append(pa.field(WEIGHT, pa.int64())).empty_table()
        overwrite(target, view, start)
        result.after, first = start, start + 1
        result.note = f"the view starts again at timestep {start} (a change of the circuit): one commit of its whole value"
    for t in range(first, last + 1):
        try:
            commit_change(table, target, t, read_delta(store, target.view, t))
        except Unpublishable as exc:
            if t == last:
                raise
            # the change of t cannot be written, a later view may be: rebuild the table from the
            # last one (the versions of t..last-1 are skipped); else the error of t stands
            try:
                view = read_view(store, target.view, last)
                if view is None:
                    view = pa.schema(table.schema().to_arrow()).append(pa.field(WEIGHT, pa.int64())).empty_table()
                overwrite(target, view, last)
            except Unpublishable:
                raise exc from None
            result.after = last
            result.note = f"timestep {t} could not be published ({exc}); rebuilt from the view at {last}"
            return result
        result.after = t
        failpoint("mid_publish")
    return result  # (said once, in the report's summary: `dbsp step` and `dbsp publish` print it)


def publish(config: Config, spec: CircuitSpec, store, progress: Callable[[str], None] | None = None,
            views: list[str] | None = None) -> PublishReport:
    """Bring the published table of every output (or of ``views``) up to the last committed
    timestep of ``store``. A view that fails is reported (``PublishReport.failed``); the others
    are still published."""
    say = progress or (lambda _m: None)
    started = time.time()
    failpoint("before_publish")
    report = PublishReport()
    last = store.last_committed()
    for target in targets(config, spec):
        if views is not None and target.view not in views:
            continue
        result = TableResult(target.view, target.uri)
        report.results.append(result)
        try:
            _catch_up(target, store, last, say, lambda: known_circuits(config), result)
        except InjectedFailure:  # a test's crash: the process dies here
            raise
        except (PublishError, OSError) as exc:
            result.error = str(exc)
        except Exception as exc:  # deltalake's own errors, or a value it cannot write: one view
            # never blocks the others or the step (the state is committed; a retry catches up)
            result.error = f"{type(exc).__name__}: {exc}"
    report.seconds = time.time() - started
    return report


def publish_views(rt: _Circuit, progress: Callable[[str], None] | None = None) -> PublishReport:
    """``publish`` for an open circuit: the step runner, the DAG's commit task and ``dbsp publish``
    call this after a commit (or to repair one)."""
    return publish(rt.config, rt.compiled.spec, rt.committed, progress)


def _ours(target: Target) -> bool:
    """Is there a table at the target that this circuit's view published? (Not a foreign one.)"""
    try:
        return open_table(target) is not None
    except PublishError:
        return False


def published_tables(config: Config, spec: CircuitSpec) -> list[str]:
    """Locations of the tables this circuit's views published (that exist now)."""
    return [t.uri for t in targets(config, spec) if _ours(t)]


def table_states(config: Config, spec: CircuitSpec) -> list[tuple[str, str, str]]:
    """(view, location, timestep it holds) of every table the circuit publishes, for `dbsp status`."""
    out = []
    for t in targets(config, spec):
        try:
            table = open_table(t)
            state = "no table yet" if table is None else str(published_timestep(table, t))
        except Exception as exc:  # a foreign or unreadable table: say so, status still prints
            state = f"unreadable: {str(exc).splitlines()[0][:80]}"
        out.append((t.view, t.uri, state))
    return out


def removal_problems(config: Config, spec: CircuitSpec) -> list[str]:
    """Why some of this circuit's tables may not be deleted whole (another table inside): checked
    by ``dbsp reset`` before it deletes anything."""
    return [why for t in targets(config, spec) if _ours(t) and (why := removal_problem(t.uri))]


def remove_tables(config: Config, spec: CircuitSpec) -> list[str]:
    """Delete the tables this circuit published (``dbsp reset``; other tables stay); returns
    their locations."""
    return [t.uri for t in targets(config, spec) if _ours(t) and remove(t)]


def known_circuits(config: Config) -> set[str]:
    """Names of the circuits known to this profile: a circuit file in its circuits folder, or a
    state folder under its state root (a circuit that has run). The views root's folder of each is
    its own (``ownership.py``)."""
    import os

    from spark_jobs.state.fs import filesystem_for

    names: set[str] = set()
    if os.path.isdir(config.circuits_dir):
        names |= {f.rsplit(".", 1)[0] for f in os.listdir(config.circuits_dir) if f.endswith((".yaml", ".yml"))}
    state = config.resolved_state_root
    try:
        names |= {n for n in filesystem_for(state).listdir(state) if not n.startswith((".", "_"))}
    except OSError:
        pass
    return names


__all__ = ["PublishError", "PublishFailed", "PublishReport", "Target", "TableResult", "known_circuits", "publish",
           "publish_views", "published_tables", "removal_problems", "remove_tables", "table_states", "targets", "version_timesteps"]
