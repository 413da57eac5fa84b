"""The state store of one circuit: committed timesteps, their traces and output deltas.

Commit protocol (why a crash can never leave a half-applied timestep):
1. ``begin()`` removes leftovers of unfinished timesteps, then opens timestep t = last + 1.
2. Every write goes to a *new* directory named ``t<t>-<uuid>``; nothing committed is modified.
3. ``commit()`` compacts, fsyncs the new files, then publishes ``manifests/<t>.json`` with one
   atomic rename. That rename is the commit point: before it the timestep does not exist.
4. Only then are manifests older than ``keep_timesteps`` deleted, and trace files that no
   remaining manifest lists. Output deltas are the published change log and are kept.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from spark_jobs.errors import DbspError, EXIT_FAILED
from spark_jobs.policy import StatePolicy
from spark_jobs.state import layout as L
from spark_jobs.state.failpoints import failpoint
from spark_jobs.state.fs import filesystem_for, sidecars_apply
from spark_jobs.state import arrow_trace
from spark_jobs.state.arrow_trace import arrow_schema
from spark_jobs.state.lease import Lease
from spark_jobs.state.lookup import TraceFiles
from spark_jobs.state.manifest import FileStat, Manifest, OutputEntry, TraceEntry
from spark_jobs.state.retention import Removed, expired_manifests, parse_time
from spark_jobs.state.trace import (consolidate, delta_merge, dir_stats, drop_below, needs_compaction, read_dirs,
                                    slot_dir, slots_compatible, validate_columns, weight_totals,
                                    write_dir, write_slots)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.state.retention import Rule

VIEW_TRACE_PREFIX = "view:"


def view_trace_id(view: str) -> str:
    """The trace that integrates a view's output deltas (maintained by ``write_output``)."""
    return f"{VIEW_TRACE_PREFIX}{view}"


class FingerprintMismatch(DbspError, RuntimeError):
    """The committed state was built by a different circuit definition.

    ``describe(reset)`` words the message around the exact command that rebuilds the state; the
    CLI passes the command as the user typed it (their circuit path, ``--data-root``, profile)."""
    exit_code = EXIT_FAILED
    retryable = False

    def __init__(self, circuit: str, root: str, timestep: int, state_fingerprint: str,
                 circuit_fingerprint: str, change: str = "") -> None:
        self.circuit, self.root, self.timestep = circuit, root, timestep
        self.state_fingerprint, self.circuit_fingerprint = state_fingerprint, circuit_fingerprint
        self.change = change  # what changed, node by node (runtime/change.py), when the runtime knows
        super().__init__(self.describe(f"dbsp reset {circuit} --yes"))

    def __reduce__(self):  # picklable with its fields (the message is derived)
        return (type(self), (self.circuit, self.root, self.timestep, self.state_fingerprint,
                             self.circuit_fingerprint, self.change))

    def user_message(self, reset_command: str | None = None) -> str:
        return self.describe(reset_command) if reset_command else str(self)

    def describe(self, reset: str) -> str:
        return (f"circuit {self.circuit!r} changed since its state was committed: state at "
                f"{self.root} (timestep {self.timestep}) has fingerprint {self.state_fingerprint}, the "
                f"circuit now has fingerprint {self.circuit_fingerprint}"
                + (f": {self.change}" if self.change else "") + ". "
                f"Apply the change with `dbsp step --apply-change` (or set `settings.on_change: bootstrap` "
                f"in the circuit): unchanged nodes keep their state, new and changed ones are rebuilt from "
                f"the state (`dbsp plan-change` shows which); or rebuild it from the inputs with `{reset}`.")


class TimestepNotRetained(DbspError, LookupError):
    """The timestep was committed but its manifest has been garbage-collected."""
    exit_code = EXIT_FAILED


class ConcurrentCommit(DbspError, RuntimeError):
    """Another writer committed this timestep first (max_active_runs must be 1)."""


class TransactionClosed(DbspError, RuntimeError):
    """The transaction was already committed or aborted."""


class StateStore:
    """Checkpointed Parquet traces with one atomic manifest per committed timestep."""

    def __init__(self, spark: "SparkSession | Callable[[], SparkSession]", root: str, circuit: str,
                 fingerprint: str, *, policy: StatePolicy | None = None, compact_fraction: float | None = None,
                 keep_timesteps: int | None = None, manifest_retention: "Rule | None" = None,
                 track_commit_times_us: int | None = None) -> None:
        """``spark``: the session, or a function that gives it when first needed (an in-process
        step commits without one). ``policy``: the profile's ``state:`` settings;
        ``compact_fraction`` and ``keep_timesteps`` override two of them (a store made by hand).
        ``keep_timesteps``: manifests kept, unless ``manifest_retention`` says otherwise (by
        count or by age; ``state/retention.py``). ``track_commit_times_us``: the longest age an
        age-based retention measures; commit times are carried in the manifests' timeline that
        far back (None: no timeline)."""
        policy = policy or StatePolicy()
        if compact_fraction is not None:
            policy = replace(policy, compact_fraction=compact_fraction)
        if keep_timesteps is not None:
            policy = replace(policy, keep_timesteps=keep_timesteps)
        keep_timesteps, compact_fraction = policy.keep_timesteps, policy.compact_fraction
        if keep_timesteps < 1:
            raise ValueError("keep_timesteps must be >= 1 (the latest timestep is always kept)")
        self._spark = spark
        self.fs = filesystem_for(root)
        self.root = self.fs.normalize(root)
        self.layout = L.Layout(self.fs, self.root)
        self.circuit = circuit
        self.fingerprint = fingerprint
        self.policy = policy
        self.compact_fraction = compact_fraction
        self.keep_timesteps = keep_timesteps
        self.manifest_retention = manifest_retention
        self.track_commit_times_us = track_commit_times_us
        self._cache: dict[int, Manifest] = {}
        self._open: Transaction | None = None
        self._uncollected: list[str] = []  # the last commit's own writes, for ``collect_garbage``
        # The writer's lease (state/lease.py), set by the runtime while it holds it: cleanup and
        # the manifest publish check it first, so a writer whose lease was taken over stops.
        self.lease: Lease | None = None

    @property
    def spark(self) -> "SparkSession":
        """The Spark session (started on first use when the store was given a function)."""
        if callable(self._spark):  # a session is not callable; a function that makes one is
            self._spark = self._spark()
        return self._spark  # type: ignore[return-value]

    # ---- committed state -------------------------------------------------------------------
    def timesteps(self) -> list[int]:
        """Committed timesteps whose manifests are still on disk, oldest first."""
        names = self.fs.listdir(self.layout.manifests_dir)
        ts = sorted(t for t in map(L.parse_manifest_name, names) if t is not None)
        for stale in set(self._cache) - set(ts):  # deleted by GC or a reset elsewhere
            del self._cache[stale]
        return ts

    def last_committed(self) -> int:
        """The latest committed timestep; 0 when nothing was ever committed."""
        ts = self.timesteps()
        return ts[-1] if ts else 0

    def manifest(self, t: int | None = None) -> Manifest | None:
        """The manifest of timestep t (latest if None); None if absent."""
        if t is None:
            t = self.last_committed()
        if t <= 0:
            return None
        if t not in self._cache:
            path = self.layout.manifest_path(t)
            if not self.fs.exists(path):
                return None
            self._cache[t] = Manifest.from_json(self.fs.read_text(path))
        return self._cache[t]

    def check_fingerprint(self) -> None:
        """Refuse to continue state built by another version of the circuit."""
        m = self.manifest()
        if m is not None and m.fingerprint != self.fingerprint:
            raise FingerprintMismatch(self.circuit, self.root, m.timestep, m.fingerprint, self.fingerprint)

    def _committed(self, t: int | None) -> Manifest | None:
        """The manifest readers use for t; errors say why a timestep cannot be read."""
        last = self.last_committed()
        if t is None:
            t = last
        if t <= 0:
            return None
        if t > last:
            raise ValueError(f"timestep {t} is not committed (last committed: {last})")
        m = self.manifest(t)
        if m is None:
            raise TimestepNotRetained(
                f"timestep {t} is no longer retained (keep_timesteps={self.keep_timesteps}; "
                f"retained: {self.timesteps()})")
        return m

    def _read_entry(self, entry: TraceEntry | None) -> "DataFrame | None":
        if entry is None or not entry.dirs:
            return None
        uris = [self.fs.spark_uri(self.layout.abs(d)) for d in entry.dirs]
        return read_dirs(self.spark, uris, entry.schema)

    def read_trace(self, trace_id: str, t: int | None = None) -> "DataFrame | None":
        """The union of the trace's files as of committed timestep t (latest if None).

        Not consolidated: rows of one tuple may repeat with partial weights/sums.
        """
        m = self._committed(t)
        return None if m is None else self._read_entry(m.traces.get(trace_id))

    def trace_files(self, trace_id: str, t: int | None = None) -> "TraceFiles | None":
        """The trace's Parquet files as of committed timestep t (latest if None), for key
        lookups with pyarrow (no Spark job); None exactly when ``read_trace`` is None."""
        m = self._committed(t)
        return self._entry_files(None if m is None else m.traces.get(trace_id))

    def _entry_files(self, entry: TraceEntry | None) -> "TraceFiles | None":
        """The Parquet files of a trace entry (committed, or a transaction's own), for pyarrow lookups."""
        if entry is None or not entry.dirs:
            return None
        listed = [f for d in entry.dirs for f in self.fs.data_files(self.layout.abs(d))]
        paths = [full for full, _ in listed]
        if entry.schema:
            schema = arrow_schema(entry.schema)  # timestamps as UTC instants, as Spark stores them
        elif paths:  # an old manifest without the schema: the first file's (its columns are the trace's)
            import pyarrow.parquet as pq

            with self.fs.open_read(paths[0]) as fh:
                schema = pq.read_schema(fh)
        else:
            return None
        return TraceFiles(self.fs, paths, schema, [size for _, size in listed])

    def delta_dirs(self, view: str, t: int) -> list[str]:
        """The root-relative directories of the view's delta committed at t (none: it was empty)."""
        last = self.last_committed()
        if not 0 < t <= last:
            raise ValueError(f"timestep {t} is not committed (last committed: {last})")
        m = self.manifest(t)
        if m is not None:
            out = m.outputs.get(view)
            return [out.delta] if out is not None and out.delta else []
        rels = self._output_dirs(view, t, t)
        if not rels:
            self._check_kept(view, t, f"the change of view {view!r} at timestep {t}")
        return rels

    def _check_kept(self, view: str, t: int, what: str) -> None:
        """Refuse to read history that retention removed (an absent delta is not an empty one)."""
        through = Removed.read(self).view_deltas_through.get(L.safe_name(view), 0)
        if t <= through:
            raise TimestepNotRetained(
                f"{what} is no longer kept: retention (settings.retention.view_deltas) removed the view's "
                f"deltas up to timestep {through}; retained timesteps, readable whole: {self.timesteps()}")

    def view_dirs(self, view: str, t: int | None = None) -> list[str]:
        """The root-relative directories whose union, consolidated, is the view at t (latest if
        None): the view trace of a retained t, else every output delta up to t."""
        last = self.last_committed()
        t = last if t is None else t
        if t <= 0:
            return []
        if t > last:
            raise ValueError(f"timestep {t} is not committed (last committed: {last})")
        m = self.manifest(t)
        if m is not None:
            entry = m.traces.get(view_trace_id(view))
            return entry.dirs if entry is not None else []
        self._check_kept(view, 1, f"view {view!r} as of timestep {t} (the sum of its deltas)")
        return self._output_dirs(view, 1, t)

    def view_schema(self, view: str) -> str | None:
        """The Spark schema (JSON) of the view's rows, as last written; None before any row."""
        m = self.manifest()
        entry = m.traces.get(view_trace_id(view)) if m else None
        return entry.schema if entry else None

    def read_output_delta(self, view: str, t: int) -> "DataFrame | None":
        """The view's consolidated delta committed at t (None if it was empty)."""
        return self._read_rels(self.delta_dirs(view, t), self.view_schema(view))

    def read_view(self, view: str, t: int | None = None) -> "DataFrame | None":
        """The materialized view at t (latest if None): the consolidated integral of its
        output deltas up to t. Retained t reads the view trace; older t sums output deltas."""
        df = self._read_rels(self.view_dirs(view, t), self.view_schema(view))
        return None if df is None else consolidate(df, "zset")

    def _output_dirs(self, view: str, lo: int, hi: int) -> list[str]:
        """Committed output deltas of ``view`` with lo <= t <= hi, found by listing.

        Valid for t <= last committed: begin() removes every uncommitted directory of a
        timestep before that timestep can commit, so what remains there was committed.
        """
        top = self.layout.output_view_dir(view)
        out = []
        for name in self.fs.listdir(self.layout.abs(top)):
            ts = L.parse_dir_timestep(name)
            if ts is not None and lo <= ts <= hi:
                out.append(f"{top}/{name}")
        return out

    def _read_rels(self, rels: list[str], schema: str | None) -> "DataFrame | None":
        if not rels:
            return None
        return read_dirs(self.spark, [self.fs.spark_uri(self.layout.abs(r)) for r in rels], schema)

    # ---- writing ---------------------------------------------------------------------------
    def begin(self, *, refresh: bool = False) -> "Transaction":
        """Open timestep last_committed() + 1, after cleaning what failed runs left behind.

        ``refresh``: the timestep rebuilds the state from the inputs (a full refresh), so state
        of another circuit definition is not refused: this commit records the new fingerprint.
        """
        if not refresh:
            self.check_fingerprint()
        if self._open is not None:  # recover() is about to delete its files: disable it
            self._open._state = "aborted"
        self.recover()
        failpoint("begin")
        self._open = Transaction(self, self.manifest())
        return self._open

    def recover(self) -> dict[str, list[str]]:
        """Delete leftovers: temp manifests, manifests past retention, trace directories no
        manifest lists, and output directories of timesteps after the last commit."""
        if self.lease is not None:  # never clean up under a live writer
            self.lease.check()
        removed: dict[str, list[str]] = {"temp": [], "manifests": [], "traces": [], "outputs": []}
        mdir = self.layout.manifests_dir
        for name in self.fs.listdir(mdir):
            if name.startswith(L.TMP_PREFIX):
                self.fs.remove_file(self.fs.join(mdir, name))
                removed["temp"].append(name)
        last = self.last_committed()
        for t in expired_manifests(self, datetime.now(timezone.utc)):
            self.fs.remove_file(self.layout.manifest_path(t))
            self._cache.pop(t, None)
            removed["manifests"].append(L.manifest_name(t))
        referenced: set[str] = set()
        for t in self.timesteps():
            referenced |= self.manifest(t).referenced_dirs()  # type: ignore[union-attr]
        referenced = L.with_parents(referenced)
        for rel in self.layout.data_dirs(L.TRACES):
            if L.timestep_of(rel) is not None and rel not in referenced:
                self.fs.remove_tree(self.layout.abs(rel))
                removed["traces"].append(rel)
        for rel in self.layout.data_dirs(L.OUTPUTS):
            ts = L.timestep_of(rel)
            if ts is not None and ts > last and rel not in referenced:
                self.fs.remove_tree(self.layout.abs(rel))
                removed["outputs"].append(rel)
        return removed

    def _collect_garbage(self, t: int, written: Sequence[str]) -> None:
        """After committing t: drop manifests past their retention, then the trace directories
        only they listed (and this commit's own superseded writes)."""
        assert self.manifest(t) is not None
        self.drop_manifests(expired_manifests(self, datetime.now(timezone.utc)), written)

    def collect_garbage(self) -> None:
        """The garbage collection a ``commit(collect=False)`` left for later (the runtime's phase
        7): manifests past their retention, then the trace directories no remaining manifest
        lists. Removing them is never needed for correctness, and deleting a merge's or a
        compaction's old files cost an SF1 step 27-47 ms before its commit returned. Files a
        crash leaves unlisted here are removed by the next ``begin`` (``recover``)."""
        written, self._uncollected = self._uncollected, []
        if self.last_committed():
            self._collect_garbage(self.last_committed(), written)

    def drop_manifests(self, old: Sequence[int], written: Sequence[str] = ()) -> None:
        """Delete manifests ``old`` (never the latest), then the trace directories that no
        remaining manifest lists (``written``: this commit's superseded writes, likewise)."""
        old = [x for x in old if x != self.last_committed()]
        garbage: set[str] = set(written)
        for x in old:
            m = self.manifest(x)
            if m is not None:
                garbage |= m.referenced_dirs()
        for x in old:  # manifests first: a crash then leaves only unlisted files for recover()
            self.fs.remove_file(self.layout.manifest_path(x))
            self._cache.pop(x, None)
        keep: set[str] = set()
        for x in self.timesteps():
            keep |= self.manifest(x).referenced_dirs()  # type: ignore[union-attr]
        keep = L.with_parents(keep)
        for rel in sorted(garbage - keep):
            if rel.startswith(L.TRACES + "/") and not self.layout.through_link(rel):
                self.fs.remove_tree(self.layout.abs(rel))

    # ---- inspection ------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """What is committed: last timestep and, per trace, kind, files, rows and bytes."""
        m = self.manifest()
        traces = {}
        if m is not None:
            for tid, e in sorted(m.traces.items()):
                traces[tid] = {"kind": e.kind, "keys": list(e.keys), "files": len(e.dirs),
                               "base_files": len(e.base), "delta_files": len(e.deltas),
                               "rows": e.rows, "bytes": e.bytes}
        return {
            "circuit": self.circuit,
            "root": self.root,
            "last_committed": m.timestep if m else 0,
            "committed_at": m.committed_at if m else None,
            "fingerprint": m.fingerprint if m else None,
            "retained": self.timesteps(),
            "traces": traces,
            "outputs": {v: o.to_dict() for v, o in sorted(m.outputs.items())} if m else {},
        }

    def reset(self) -> None:
        """Delete the whole store: the next begin() starts again at timestep 1."""
        self.fs.remove_tree(self.root)
        self._cache.clear()


def _json_value(what: str, value: Any) -> Any:
    """Fail at the call, not at commit, if a metadata value cannot go into the manifest."""
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serializable: {exc}") from None
    return value


class Transaction:
    """The writes of one timestep; invisible to readers until ``commit()`` returns.

    Use as a context manager to abort automatically unless committed.
    """

    def __init__(self, store: StateStore, previous: Manifest | None) -> None:
        self.store = store
        self.previous = previous
        self.timestep = (previous.timestep if previous else 0) + 1
        carried = previous.copy() if previous else None
        self._traces: dict[str, TraceEntry] = carried.traces if carried else {}
        self._inputs: dict[str, dict[str, Any]] = carried.inputs if carried else {}
        self._timeline: list[tuple[int, str]] = carried.timeline if carried else []
        self._outputs: dict[str, OutputEntry] = {}
        self._meta: dict[str, Any] = {}
        self._written: list[str] = []  # root-relative dirs this transaction created
        self._touched: set[str] = set()
        self._bag_indexed: set[str] = set()  # traces whose in-process files get digest sidecars
        self._bounds: dict[str, tuple[tuple[tuple[str, int], ...], int]] = {}
        self._state = "open"  # open -> published -> committed | aborted
        # an in-process step: compactions and merges up to ``inprocess_rewrite_rows`` rows are done
        # with pyarrow (the bigger ones, rare, start Spark)
        self.in_process = False

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._state == "open":
            self.abort()

    def _check_open(self) -> None:
        if self._state != "open":
            raise TransactionClosed(f"transaction for timestep {self.timestep} is {self._state}")

    # ---- writes ----------------------------------------------------------------------------
    def _write(self, rel: str, df: "DataFrame", *, sort_by: Sequence[str] = (),
               keys: Sequence[str] = (), rows: int | None = None, row_group_bytes: int = 0):
        """Write one new directory; returns its FileStat, or None if it held no rows."""
        s = self.store
        path = s.layout.abs(rel)
        uri = s.fs.spark_uri(path)
        self._written.append(rel)
        write_dir(df, uri, self._policy(row_group_bytes), sort_by=sort_by, keys=keys, rows=rows)
        stat = dir_stats(s.fs, path, lambda: s.spark, uri)
        if stat.rows == 0:
            self._discard(rel)
        elif sort_by and sidecars_apply(s.fs):
            self._summarize(path)
        failpoint("after_state_write")
        return stat if stat.rows else None

    def _summarize(self, path: str) -> None:
        """Statistics sidecars (``stats_sidecar``) for the large sorted files Spark just wrote
        here, as the in-process writer gives its own: a load on Spark is what later steps'
        new processes look up most."""
        from spark_jobs.state import stats_sidecar

        for full, _ in self.store.fs.data_files(path):
            stats_sidecar.write_if_large(full)

    def _policy(self, row_group_bytes: int) -> StatePolicy:
        """The store's policy with a trace's own row-group size (``TraceEntry.row_group_bytes``)."""
        policy = self.store.policy
        return replace(policy, sorted_row_group_bytes=row_group_bytes) if row_group_bytes else policy

    def _discard(self, rel: str) -> None:
        """Delete a directory this transaction wrote and no longer needs."""
        if rel in self._written:
            self.store.fs.remove_tree(self.store.layout.abs(rel))
            self._written.remove(rel)

    def _entry_for_append(self, trace_id: str, kind: str, keys: tuple[str, ...]) -> TraceEntry:
        entry = self._traces.get(trace_id)
        if entry is not None and entry.dirs:
            if entry.kind != kind or tuple(entry.keys) != keys:
                raise ValueError(
                    f"trace {trace_id!r} is kind={entry.kind} keys={list(entry.keys)}; cannot "
                    f"append kind={kind} keys={list(keys)} (use replace to redefine it)")
            return entry
        return TraceEntry(kind=kind, keys=keys, sort_by=entry.sort_by if entry is not None else (),
                          row_group_bytes=entry.row_group_bytes if entry is not None else 0)

    def append(self, trace_id: str, df: "DataFrame", *, kind: str = "zset",
               keys: Sequence[str] = (), sort_by: Sequence[str] = (),
               rows: int | None = None, row_group_bytes: int = 0) -> None:
        """Add ``df`` as a new delta of the trace; writes only ``df`` (rows=0 writes nothing).
        With ``sort_by``, ``df`` is written sorted, and into an empty trace it becomes the base."""
        self._check_open()
        keys = tuple(keys)
        validate_columns(df.dtypes, kind, keys)
        entry = self._entry_for_append(trace_id, kind, keys)
        if sort_by:
            entry.sort_by = tuple(sort_by)
        if row_group_bytes:
            entry.row_group_bytes = row_group_bytes
        self._traces[trace_id] = entry
        if rows == 0:
            return
        rel = self.store.layout.new_trace_dir(trace_id, self.timestep)
        stat = self._write(rel, df, sort_by=entry.sort_by, keys=keys, rows=rows,
                           row_group_bytes=entry.row_group_bytes)
        if stat is not None:
            if entry.sort_by and not entry.dirs:  # written sorted into an empty trace: its base
                entry.base = [rel]  # (else the load would be rewritten sorted at the 4th delta)
            else:
                entry.deltas.append((self.timestep, rel))
            entry.files[rel] = stat
            entry.schema = df.schema.json()
            self._touched.add(trace_id)

    def append_many(self, items: Sequence[tuple],
                    outputs: Mapping[str, "DataFrame"] | None = None) -> None:
        """``append`` to several traces, ``(trace_id, df, kind, keys[, sort_by[, row_group_bytes]])`` each, and
        ``write_output`` of several views (``outputs``), all with one Spark job.

        The deltas go to slots of one batch folder (a union written partitioned by slot), so a
        step pays one write job instead of one per stateful operator and view; a view's slot is
        then moved to its output folder. Deltas in a batch are not sorted (they are delta-sized;
        ``sort_by`` orders the files compaction writes). Falls back to one write each where one
        write cannot serve: a single item, or columns of one name with different types.
        """
        self._check_open()
        outputs = dict(outputs or {})
        prepared = []
        for trace_id, df, kind, keys, *rest in items:
            validate_columns(df.dtypes, kind, tuple(keys))
            entry = self._entry_for_append(trace_id, kind, tuple(keys))
            if rest and rest[0]:
                entry.sort_by = tuple(rest[0])
            if len(rest) > 1 and rest[1]:
                entry.row_group_bytes = int(rest[1])
            prepared.append((trace_id, df, entry))
        for df in outputs.values():
            validate_columns(df.dtypes, "zset", ())
        dfs = [df for _, df, _ in prepared] + list(outputs.values())
        if len(dfs) < 2 or not slots_compatible(dfs):
            for trace_id, df, entry in prepared:
                self.append(trace_id, df, kind=entry.kind, keys=entry.keys, sort_by=entry.sort_by,
                            row_group_bytes=entry.row_group_bytes)
            for view, df in outputs.items():
                self.write_output(view, df)
            return
        s = self.store
        batch = s.layout.new_batch_dir(self.timestep)
        self._written.append(batch)
        write_slots(dfs, s.fs.spark_uri(s.layout.abs(batch)))
        for i, (trace_id, df, entry) in enumerate(prepared):
            self._traces[trace_id] = entry
            rel = f"{batch}/{slot_dir(i)}"
            path = s.layout.abs(rel)
            if not s.fs.exists(path):  # no rows for this trace: Spark wrote no folder
                continue
            stat = dir_stats(s.fs, path, lambda: s.spark, s.fs.spark_uri(path))
            if stat.rows:
                entry.deltas.append((self.timestep, rel))
                entry.files[rel] = stat
                entry.schema = df.schema.json()
                self._touched.add(trace_id)
        for i, (view, df) in enumerate(outputs.items(), start=len(prepared)):
            vt = self._open_output(view)
            src = s.layout.abs(f"{batch}/{slot_dir(i)}")
            if not s.fs.exists(src):  # an empty delta: nothing to move
                continue
            rel = s.layout.new_output_dir(view, self.timestep)
            s.fs.rename(src, s.layout.abs(rel))
            self._written.append(rel)
            path = s.layout.abs(rel)
            self._record_output(view, vt, rel, dir_stats(s.fs, path, lambda: s.spark, s.fs.spark_uri(path)),
                                df.schema.json())
        failpoint("after_state_write")

    def write_deltas(self, appends: Sequence[tuple], outputs: Mapping[str, "DataFrame"], *, batched: bool) -> None:
        """A timestep's state deltas (``(trace_id, df, kind, keys, sort_by)`` each) and view deltas:
        with ``batched`` (a delta-sized step) all of them in one Spark write job (``append_many``),
        else one write each (a load or a large change: each may need several files)."""
        if batched:
            self.append_many(appends, outputs)
            return
        for trace_id, df, kind, keys, sort_by, *rest in appends:
            self.append(trace_id, df, kind=kind, keys=keys, sort_by=sort_by, row_group_bytes=rest[0] if rest else 0)
        for view, df in outputs.items():
            self.write_output(view, df)

    def replace(self, trace_id: str, df: "DataFrame", *, kind: str = "zset",
                keys: Sequence[str] = (), sort_by: Sequence[str] = (),
                rows: int | None = None, row_group_bytes: int = 0) -> None:
        """Make ``df`` the trace's whole value (a new base); earlier files stop being listed
        from this timestep on (older manifests still list them until GC)."""
        self._check_open()
        keys = tuple(keys)
        validate_columns(df.dtypes, kind, keys)
        old = self._traces.get(trace_id)
        entry = TraceEntry(kind=kind, keys=keys, sort_by=tuple(sort_by) or (
            old.sort_by if old is not None and old.kind == kind else ()),
            row_group_bytes=row_group_bytes or (old.row_group_bytes if old is not None else 0))
        if rows != 0:
            rel = self.store.layout.new_trace_dir(trace_id, self.timestep)
            stat = self._write(rel, df, sort_by=entry.sort_by, keys=keys, rows=rows,
                               row_group_bytes=entry.row_group_bytes)
            if stat is not None:
                entry.base = [rel]
                entry.files[rel] = stat
                entry.schema = df.schema.json()
        if old is not None:
            for rel in old.dirs:
                self._discard(rel)
        self._traces[trace_id] = entry

    def drop(self, trace_id: str) -> None:
        """Stop listing a trace from this timestep on."""
        self._check_open()
        old = self._traces.pop(trace_id, None)
        for rel in old.dirs if old else []:
            self._discard(rel)

    def write_output(self, view: str, df: "DataFrame", *, rows: int | None = None) -> None:
        """Record the view's consolidated delta (a Z-set) for this timestep, and append the
        same directory to trace ``view:<view>`` (one write serves both)."""
        self._check_open()
        validate_columns(df.dtypes, "zset", ())
        vt = self._open_output(view)
        if rows == 0:
            return
        rel = self.store.layout.new_output_dir(view, self.timestep)
        self._record_output(view, vt, rel, self._write(rel, df, rows=rows), df.schema.json())

    def _open_output(self, view: str) -> TraceEntry:
        """Start (or restart: the last write wins) this timestep's delta of ``view``: no delta
        yet; returns the view's trace entry."""
        vt_id = view_trace_id(view)
        vt = self._entry_for_append(vt_id, "zset", ())
        prev = self._outputs.get(view)
        if prev is not None and prev.delta:  # written twice: the last write wins
            vt.deltas = [(t, d) for t, d in vt.deltas if d != prev.delta]
            vt.files.pop(prev.delta, None)
            self._discard(prev.delta)
        self._traces[vt_id] = vt
        self._outputs[view] = OutputEntry(delta=None)
        return vt

    def _record_output(self, view: str, vt: TraceEntry, rel: str, stat: FileStat | None, schema_json: str,
                       totals: tuple[int, int] | None = None) -> None:
        """List a written view delta (``stat`` None: it had no rows) in outputs and the view trace;
        ``totals``: its (inserted, deleted) weights, when known without reading it."""
        if stat is None or not stat.rows:
            return
        s = self.store
        path = s.layout.abs(rel)
        ins, dels = totals or weight_totals(s.fs, path, lambda: s.spark, s.fs.spark_uri(path))
        self._outputs[view] = OutputEntry(rel, ins, dels, stat.rows, stat.bytes)
        vt.deltas.append((self.timestep, rel))
        vt.files[rel] = stat
        vt.schema = schema_json
        self._touched.add(view_trace_id(view))

    # ---- in-process writes (pyarrow tables; the same layout Spark writes) -------------------
    def index_bags(self, trace_ids: Sequence[str]) -> None:
        """Give the files pyarrow writes for these traces (the integrals only the bag check reads)
        a digest sidecar each (``bag_index``), on a local store: the check then reads 32 bytes a
        row instead of decoding the rows."""
        if sidecars_apply(self.store.fs):
            self._bag_indexed.update(trace_ids)

    def _sidecars(self, trace_id: str | None) -> "Callable[[str, pa.Table], None] | None":
        if trace_id is None or trace_id not in self._bag_indexed:
            return None
        from spark_jobs.state import bag_index

        key = bag_index.secret(self.store.layout.root, create=True)
        return None if key is None else (lambda path, rows: bag_index.write_sidecar(path, rows, key) and None)

    def _write_table(self, rel: str, table: "pa.Table", sort_by: Sequence[str] = (),
                     row_group_bytes: int = 0, trace_id: str | None = None,
                     compression: str | None = None) -> FileStat | None:
        """Write one new directory with pyarrow; returns its FileStat, or None if it held no rows.
        ``compression``: a sorted write's codec other than the policy's (``sorted_compression``)."""
        if table.num_rows == 0:
            return None
        self._written.append(rel)
        policy = self._policy(row_group_bytes)
        if compression is not None:
            policy = replace(policy, sorted_compression=compression)
        stat = arrow_trace.write_dir(self.store.fs, self.store.layout.abs(rel), table, policy,
                                     sort_by=sort_by, each_file=self._sidecars(trace_id))
        failpoint("after_state_write")
        return stat

    def append_table(self, trace_id: str, table: "pa.Table", *, kind: str = "zset", keys: Sequence[str] = (),
                     sort_by: Sequence[str] = (), row_group_bytes: int = 0) -> None:
        """``append`` of a pyarrow table: a new delta of the trace (into an empty sorted trace,
        its base). Written sorted on the trace's ``sort_by``, as Spark's ``append`` writes it: an
        unsorted delta is one row group that every later lookup decodes whole (after a 100k-row
        W1 step, 80k line items at each lookup until the next compaction); sorted, a lookup
        reads the groups its keys fall in."""
        self._check_open()
        keys = tuple(keys)
        validate_columns(arrow_trace.dtypes(table.schema), kind, keys)
        entry = self._entry_for_append(trace_id, kind, keys)
        if sort_by:
            entry.sort_by = tuple(sort_by)
        if row_group_bytes:
            entry.row_group_bytes = row_group_bytes
        self._traces[trace_id] = entry
        as_base = bool(entry.sort_by) and not entry.dirs
        rel = self.store.layout.new_trace_dir(trace_id, self.timestep)
        stat = self._write_table(rel, table, entry.sort_by, entry.row_group_bytes, trace_id)
        if stat is None:
            return
        if as_base:
            entry.base = [rel]
        else:
            entry.deltas.append((self.timestep, rel))
        entry.files[rel] = stat
        entry.schema = arrow_trace.spark_schema_json(table.schema)
        self._touched.add(trace_id)

    def replace_table(self, trace_id: str, table: "pa.Table", *, kind: str = "zset", keys: Sequence[str] = (),
                      sort_by: Sequence[str] = (), row_group_bytes: int = 0) -> None:
        """``replace`` with a pyarrow table: it becomes the trace's whole value."""
        self._check_open()
        keys = tuple(keys)
        validate_columns(arrow_trace.dtypes(table.schema), kind, keys)
        old = self._traces.get(trace_id)
        entry = TraceEntry(kind=kind, keys=keys, sort_by=tuple(sort_by) or (
            old.sort_by if old is not None and old.kind == kind else ()),
            row_group_bytes=row_group_bytes or (old.row_group_bytes if old is not None else 0))
        rel = self.store.layout.new_trace_dir(trace_id, self.timestep)
        stat = self._write_table(rel, table, entry.sort_by, entry.row_group_bytes, trace_id)
        if stat is not None:
            entry.base = [rel]
            entry.files[rel] = stat
            entry.schema = arrow_trace.spark_schema_json(table.schema)
        if old is not None:
            for d in old.dirs:
                self._discard(d)
        self._traces[trace_id] = entry

    def write_output_table(self, view: str, table: "pa.Table") -> None:
        """``write_output`` of a pyarrow table: the view's consolidated delta at this timestep."""
        self._check_open()
        validate_columns(arrow_trace.dtypes(table.schema), "zset", ())
        vt = self._open_output(view)
        rel = self.store.layout.new_output_dir(view, self.timestep)
        # sorted on its columns, in small row groups: the quality gate looks the previous view up
        # by a delta's tuples in these files (``view:<view>``), and the load's delta, unsorted,
        # was one row group that every step's gate decoded whole (121k rows of W1's view at SF10);
        # snappy as before: view deltas are history kept on disk, read whole by publishing
        stat = self._write_table(rel, table, [c for c in table.column_names if c != arrow_trace.WEIGHT],
                                 compression="snappy")
        if stat is not None:
            self._record_output(view, vt, rel, stat, arrow_trace.spark_schema_json(table.schema),
                                arrow_trace.weight_totals(table))

    def consume(self, input_name: str, files: list[dict[str, Any]]) -> None:
        """Record input files read at this timestep (kept cumulatively in the manifest).

        A record is identified by its ``name`` (the file's path below its input's folder, never
        an absolute path: a moved store must still know what it consumed); a record of a name
        already consumed replaces the old one. Each record notes the timestep that consumed it.
        """
        self._check_open()
        consumed = self._inputs.setdefault(input_name, {}).setdefault("consumed", [])
        at = {rec.get("name"): i for i, rec in enumerate(consumed)}
        for f in files:
            if "name" not in f:
                raise ValueError(f"consumed file record needs a 'name': {f!r}")
            rec = _json_value("consumed file record", {**dict(f), "timestep": self.timestep})
            if rec["name"] in at:
                consumed[at[rec["name"]]] = rec
            else:
                at[rec["name"]] = len(consumed)
                consumed.append(rec)

    def set_consumed(self, input_name: str, records: list[dict[str, Any]]) -> None:
        """Replace the input's consumed records (migrated from an older format, or with times
        refreshed after a verified copy); ``consume`` then adds this timestep's. A record without
        a timestep (format 1) gets the previous one: it was consumed by then at the latest, so
        input retention, which measures a file's age by it, never removes it early."""
        self._check_open()
        self._inputs.setdefault(input_name, {})["consumed"] = [
            _json_value("consumed file record", {"timestep": self.timestep - 1, **dict(r)}) for r in records]

    def set_input_meta(self, input_name: str, key: str, value: Any) -> None:
        """Per-input metadata carried to later manifests (e.g. a snapshot source's cursor)."""
        self._check_open()
        if key == "consumed":
            raise ValueError("'consumed' is managed by consume()")
        self._inputs.setdefault(input_name, {})[key] = _json_value(f"input meta {key!r}", value)

    def set_meta(self, key: str, value: Any) -> None:
        """Free metadata of this timestep only (not carried over)."""
        self._check_open()
        self._meta[key] = _json_value(f"meta {key!r}", value)

    def consumed(self, input_name: str) -> list[dict[str, Any]]:
        """Input files consumed up to now, including this transaction's."""
        return list(self._inputs.get(input_name, {}).get("consumed", []))

    def read_trace(self, trace_id: str) -> "DataFrame | None":
        """The trace as this transaction has it so far (its own writes included)."""
        return self.store._read_entry(self._traces.get(trace_id))

    def trace_files(self, trace_id: str) -> "TraceFiles | None":
        """The trace's files as this transaction has them so far (its own writes included), for
        pyarrow lookups: what a sub-step of a chunked step reads (``runtime/chunks.py``)."""
        return self.store._entry_files(self._traces.get(trace_id))

    def bound(self, trace_id: str, below: Sequence[tuple[str, int]], every_us: int = 0) -> None:
        """Rows of ``trace_id`` whose every ``column`` is below its ``us`` (µs since the epoch)
        are dead: no later timestep can read them (a state bound, ``ir/bounds.py``). Every
        rewrite of the trace drops them, and the trace is compacted when its bound has moved
        ``every_us`` (at least 1 µs) past the one its last compaction applied, so dropped rows
        leave the state even when its deltas are small."""
        self._check_open()
        self._bounds[trace_id] = (tuple((c, int(us)) for c, us in below), int(every_us))

    def _bound_moved(self, trace_id: str, entry: TraceEntry) -> bool:
        """Is a compaction due to drop the rows the trace's bound has passed?"""
        below, every = self._bounds[trace_id]
        if not entry.dirs:
            return False
        old = dict(entry.dropped_below)
        if set(old) != {c for c, _ in below}:
            return True
        return any(us - old[c] >= max(every, 1) for c, us in below)

    # ---- commit ----------------------------------------------------------------------------
    def _rewrite(self, r: "_Rewrite") -> None:
        """Write ``r``'s directories as one consolidated directory (same value, fewer files)."""
        df = r.value(self.store)
        rel = self.store.layout.new_trace_dir(r.trace_id, self.timestep)
        stat = self._write(rel, df, sort_by=r.entry.sort_by if r.sorted else (), keys=r.entry.keys, rows=r.rows,
                           row_group_bytes=r.entry.row_group_bytes)
        r.apply(rel, stat, self.timestep)

    def _rewrite_in_process(self, r: "_Rewrite") -> bool:
        """``_rewrite`` with pyarrow when the rewrite is small enough; False: not done (Spark will)."""
        import pyarrow as pa

        s = self.store
        if r.rows > s.policy.inprocess_rewrite_rows or not r.entry.schema:
            return False
        try:
            table = arrow_trace.read_dirs(s.fs, [s.layout.abs(d) for d in r.dirs], arrow_schema(r.entry.schema))
            # a merge of deltas nets out only what can cancel (``settle``); a compaction's new base
            # is written whole-consolidated (one row per tuple, as readers of a base expect)
            fold = arrow_trace.consolidate if r.whole else arrow_trace.settle
            value = arrow_trace.drop_below(fold(table, r.entry.kind, r.entry.keys), r.below)
        except pa.ArrowException:  # a type pyarrow cannot group by: Spark rewrites it
            return False
        rel = s.layout.new_trace_dir(r.trace_id, self.timestep)
        # a merge of deltas is written sorted too (as ``append_table`` writes a delta): one
        # pyarrow sort, where Spark's batch job for small merges would have to sort each slot
        sort_by = r.entry.sort_by if r.sorted or not r.whole else ()
        r.apply(rel, self._write_table(rel, value, sort_by, r.entry.row_group_bytes, r.trace_id), self.timestep)
        return True

    def _rewrite_many(self, rewrites: Sequence["_Rewrite"]) -> bool:
        """``_rewrite`` several small unsorted rewrites with one Spark job (one batch folder, a
        slot each); False, having written nothing, when their columns cannot share one write."""
        dfs = [r.value(self.store) for r in rewrites]
        if not slots_compatible(dfs):
            return False
        s = self.store
        batch = s.layout.new_batch_dir(self.timestep)
        self._written.append(batch)
        write_slots(dfs, s.fs.spark_uri(s.layout.abs(batch)))
        for i, r in enumerate(rewrites):
            rel = f"{batch}/{slot_dir(i)}"
            path = s.layout.abs(rel)
            r.apply(rel, dir_stats(s.fs, path, lambda: s.spark, s.fs.spark_uri(path)) if s.fs.exists(path) else None,
                    self.timestep)
        failpoint("after_state_write")
        return True

    def _rewrites_due(self) -> list["_Rewrite"]:
        """Per trace this step appended to: a compaction into a new base when its deltas outweigh
        ``compact_fraction`` of the base, else a merge of one full tier of its deltas, if any;
        in-process, the merges spread over steps (``_merges_now``)."""
        out, merges = [], []
        policy = self.store.policy
        moved = {tid for tid in self._bounds if tid in self._traces and self._bound_moved(tid, self._traces[tid])}
        for tid in sorted(self._touched | moved):
            entry = self._traces[tid]
            below = self._bounds.get(tid, ((), 0))[0]
            if tid in moved or needs_compaction(entry, policy.compact_fraction):
                out.append(_Rewrite(tid, entry, entry.dirs, True, policy.sort_min_rows, below))
            elif dirs := delta_merge(entry, policy.delta_fanout):
                merges.append(_Rewrite(tid, entry, dirs, False, policy.sort_min_rows, below))
        return out + (self._merges_now(merges) if self.in_process else merges)

    def _merges_now(self, merges: list["_Rewrite"]) -> list["_Rewrite"]:
        """The tier merges this in-process step does: the most deltas first, then the smallest,
        up to ``merge_rows_per_row`` rows per row the step appended (at least one; a tier of
        ``2 x delta_fanout`` deltas always). Every trace of a circuit gets a delta each step, so
        their tiers fill together and one step paid every trace's merge; the others wait a step
        or two, one more small delta for lookups to read. On Spark merges share one job: all due."""
        policy = self.store.policy
        budget = policy.merge_rows_per_row * self._appended_rows()
        now, spent = [], 0
        for r in sorted(merges, key=lambda r: (-len(r.dirs), r.rows, r.trace_id)):
            if not now or spent + r.rows <= budget or len(r.dirs) >= 2 * policy.delta_fanout:
                now.append(r)
                spent += r.rows
        return now

    def _appended_rows(self) -> int:
        """Rows of the deltas this transaction appended (so far) to its traces."""
        rows = 0
        for tid in self._touched:
            e = self._traces[tid]
            rows += sum(e.files[d].rows for t, d in e.deltas if t == self.timestep and d in e.files)
        return rows

    def _next_timeline(self, now: datetime, committed_at: str) -> list[tuple[int, str]]:
        """Commit times to carry: while an age-based retention is set, this one and the earlier
        ones it may still measure (back to the newest that is already older than the longest
        age); none otherwise."""
        span = self.store.track_commit_times_us
        if span is None:
            return []
        times = [(t, at) for t, at in self._timeline if t < self.timestep] + [(self.timestep, committed_at)]
        cutoff = now - timedelta(microseconds=span)
        old = [i for i, (_, at) in enumerate(times) if parse_time(at) <= cutoff]
        return times[old[-1]:] if old else times

    def commit(self, *, collect: bool = True) -> Manifest:
        """Compact, then publish the manifest atomically (the commit point), then GC (or, with
        ``collect=False``, leave it to ``StateStore.collect_garbage``)."""
        self._check_open()
        s = self.store
        due = self._rewrites_due()
        if self.in_process:
            due = [r for r in due if not self._rewrite_in_process(r)]
        small = [r for r in due if not r.sorted and r.rows <= s.policy.rows_per_file]
        batched = {r.trace_id for r in small} if len(small) > 1 and self._rewrite_many(small) else set()
        for r in due:
            if r.trace_id not in batched:
                self._rewrite(r)
        paths = [s.layout.abs(rel) for rel in self._written]
        for rel, path in zip(self._written, paths):
            if not s.fs.exists(path):
                raise ConcurrentCommit(
                    f"{rel} written by timestep {self.timestep} has vanished (another run of "
                    f"{s.circuit!r} cleaned this store?); not committing")
        s.fs.sync_trees(paths)
        failpoint("before_manifest")
        if s.lease is not None:  # the files checked above cannot vanish while this holds
            s.lease.check()
        last = s.last_committed()
        if last != self.timestep - 1:
            raise ConcurrentCommit(
                f"cannot commit timestep {self.timestep}: timestep {last} is already "
                f"committed (another run of {s.circuit!r} is writing the same state?)")
        now = datetime.now(timezone.utc)
        committed_at = now.isoformat(timespec="milliseconds")
        manifest = Manifest(
            circuit=s.circuit, fingerprint=s.fingerprint, timestep=self.timestep, committed_at=committed_at,
            traces=self._traces, outputs=self._outputs, inputs=self._inputs, meta=self._meta,
            timeline=self._next_timeline(now, committed_at))
        text = manifest.to_json()
        try:
            s.fs.publish_text(s.layout.manifest_path(self.timestep), text, L.TMP_PREFIX, exclusive=True)
        except FileExistsError as exc:  # lost a race the check above could not see
            raise ConcurrentCommit(f"cannot commit timestep {self.timestep}: {exc}") from exc
        self._state = "published"
        manifest = Manifest.from_json(text)  # detach from this transaction
        s._cache[self.timestep] = manifest
        failpoint("after_manifest")
        if collect:
            s._collect_garbage(self.timestep, self._written)
        else:
            s._uncollected = list(self._written)
        self._state = "committed"
        return manifest

    def abort(self) -> None:
        """Delete what this transaction wrote. A published commit is kept (it is durable)."""
        if self._state != "open":
            return
        for rel in list(self._written):
            self.store.fs.remove_tree(self.store.layout.abs(rel))
        self._written.clear()
        self._state = "aborted"


@dataclass(frozen=True)
class _Rewrite:
    """Some directories of a trace rewritten as one consolidated directory: all of them (a
    compaction: the result is the new base) or one tier of its deltas (a merge: a new delta)."""

    trace_id: str
    entry: TraceEntry
    dirs: list[str]
    whole: bool
    sort_min_rows: int  # a compaction writes a sorted base from this many rows (StatePolicy)
    below: tuple[tuple[str, int], ...] = ()  # the trace's bound: rows below it are dropped

    @property
    def rows(self) -> int:
        return sum(self.entry.files[d].rows for d in self.dirs if d in self.entry.files)

    @property
    def sorted(self) -> bool:
        """Written sorted: a key-sorted trace's new base, unless it is small. On Spark a merge of
        deltas is not, nor is a base of fewer than ``sort_min_rows`` rows (a lookup reads it whole
        in milliseconds): those rewrites share one batch job; in-process, a merge is written
        sorted (``_rewrite_in_process``)."""
        return self.whole and bool(self.entry.sort_by) and self.rows >= self.sort_min_rows

    def value(self, store: StateStore) -> "DataFrame":
        df = store._read_rels(self.dirs, self.entry.schema)
        assert df is not None, f"trace {self.trace_id!r}: nothing to rewrite"
        return drop_below(consolidate(df, self.entry.kind, self.entry.keys), self.below)

    def apply(self, rel: str, stat: FileStat | None, timestep: int) -> None:
        """Point the entry at ``rel`` (None/0 rows: the rewritten value was empty) instead of ``dirs``."""
        e, gone = self.entry, set(self.dirs)
        kept = stat if stat is not None and stat.rows else None
        for d in gone:
            e.files.pop(d, None)
        if self.whole:
            e.base, e.deltas = ([rel] if kept else []), []
            if self.below:
                e.dropped_below = self.below
        else:
            e.deltas = [(t, d) for t, d in e.deltas if d not in gone] + ([(timestep, rel)] if kept else [])
        if kept:
            e.files[rel] = kept


__all__ = ["StateStore", "Transaction", "FingerprintMismatch", "TimestepNotRetained",
           "ConcurrentCommit", "TransactionClosed", "view_trace_id"]
