"""A view's changes written to a PostgreSQL table (``outputs.<view>.sink: {kind: postgres, ...}``).

Why a progress table: after a timestep commits, its view delta is applied to the target table
in ONE database transaction that also sets the view's row in ``<schema>.dbsp_progress`` (circuit,
view, timestep). A retried commit (a DAG task, the next step, ``dbsp publish``) reads that row
first and applies only the timesteps after it, so no delta is applied twice and none is skipped:
the target follows the manifest, never leads it, as the published Delta tables do.

- A **keyed** view (``outputs.<view>.key``) is upserted: for each key the change touches, its
  row is deleted and the new row (if any) inserted, in the same transaction.
- A **keyless** view is refused with a message: a SQL table without a key cannot say which copy
  of a duplicated row a delete removes (declare a key).
- The target table must exist with exactly the view's columns (any order, names equal); anything
  else is refused before the first write.
- When the deltas it needs are gone (retention), or the state was reset below the target's
  timestep, the target is rebuilt from the whole view in one transaction.
- A view a change of the circuit started again (``runtime/change.py``: new, or its columns
  changed) has its rows rewritten from the whole view at that timestep, in one transaction. Its
  table is not altered here (it is the user's: types, constraints, grants): while its columns are
  the old ones, the sink is refused with the columns to add and drop; once altered, the next
  step or ``dbsp publish`` rewrites it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pyarrow as pa

from spark_jobs.errors import DbspError, EXIT_FAILED, EXIT_REFUSED
from spark_jobs.connections import describe, password_of, redact, resolve
from spark_jobs.publish import restart_of
from spark_jobs.spec.model import CircuitSpec, OutputSpec
from spark_jobs.state.arrow_read import arrow_schema, read_delta, read_view
from spark_jobs.state.failpoints import failpoint
from spark_jobs.state.layout import safe_name
from spark_jobs.state.retention import Removed
from spark_jobs.state.trace import WEIGHT

PROGRESS = "dbsp_progress"


class SinkRefused(DbspError):
    """The target table cannot take the view (columns differ, no key)."""
    exit_code = EXIT_REFUSED
    retryable = False


class SinkFailed(DbspError, RuntimeError):
    """The database could not be written (retryable: the state is committed, the target behind)."""
    exit_code = EXIT_FAILED


@dataclass
class SinkResult:
    view: str
    table: str
    before: int = 0
    after: int = 0
    note: str = ""


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def qualified(table: str) -> str:
    """``schema.name`` quoted as two identifiers."""
    schema, _, name = table.partition(".")
    return f"{_ident(schema)}.{_ident(name)}"


def _progress_table(table: str) -> str:
    return f"{_ident(table.partition('.')[0])}.{_ident(PROGRESS)}"


def _columns(conn, table: str) -> list[str]:
    rows = conn.execute("SELECT a.attname FROM pg_attribute a WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 "
                        "AND NOT a.attisdropped ORDER BY a.attnum", (qualified(table),)).fetchall()
    return [r[0] for r in rows]


def _progress(conn, table: str, circuit: str, view: str) -> int:
    conn.execute(f"CREATE TABLE IF NOT EXISTS {_progress_table(table)} (circuit text NOT NULL, view text NOT NULL, "
                 f"target text NOT NULL, timestep bigint NOT NULL, PRIMARY KEY (circuit, view, target))")
    row = conn.execute(f"SELECT timestep FROM {_progress_table(table)} WHERE circuit = %s AND view = %s AND target = %s",
                       (circuit, view, table)).fetchone()
    return int(row[0]) if row else 0


def _set_progress(conn, table: str, circuit: str, view: str, t: int) -> None:
    conn.execute(f"INSERT INTO {_progress_table(table)} (circuit, view, target, timestep) VALUES (%s, %s, %s, %s) "
                 f"ON CONFLICT (circuit, view, target) DO UPDATE SET timestep = EXCLUDED.timestep",
                 (circuit, view, table, t))


def _apply(conn, table: str, key: list[str], change: pa.Table) -> None:
    """Upsert a keyed view's consolidated change: every touched key's row out, its new row in."""
    columns = [c for c in change.column_names if c != WEIGHT]
    rows = change.to_pylist()
    keys = {tuple(r[k] for k in key) for r in rows}
    where = " AND ".join(f"{_ident(k)} IS NOT DISTINCT FROM %s" for k in key)
    with conn.cursor() as cur:
        if keys:
            cur.executemany(f"DELETE FROM {qualified(table)} WHERE {where}", list(keys))
        new = [tuple(r[c] for c in columns) for r in rows if r[WEIGHT] > 0]
        if new:
            names = ", ".join(_ident(c) for c in columns)
            marks = ", ".join(["%s"] * len(columns))
            cur.executemany(f"INSERT INTO {qualified(table)} ({names}) VALUES ({marks})", new)


def _rewrite(conn, store, circuit: str, out: OutputSpec, t: int) -> None:
    """Replace the table's rows by the whole view at timestep ``t`` and set the progress to ``t``, in
    one transaction: a reader sees the old rows or the new ones, never a half-written table."""
    sink = out.sink
    assert sink is not None
    view = read_view(store, out.name, t)
    with conn.transaction():
        conn.execute(f"DELETE FROM {qualified(sink.table)}")
        if view is not None:
            _apply(conn, sink.table, list(out.key), view)
        failpoint("sink_before_commit")
        _set_progress(conn, sink.table, circuit, out.name, t)


def sink_view(circuit: str, out: OutputSpec, store, last: int, say: Callable[[str], None] | None = None) -> SinkResult:
    """Bring the output's target table to timestep ``last`` (see the module docstring)."""
    import psycopg

    sink = out.sink
    assert sink is not None
    result = SinkResult(out.name, sink.table)
    if not out.key:
        raise SinkRefused(f"view {out.name!r}: a PostgreSQL sink needs outputs.{out.name}.key (a keyless view's "
                          f"duplicate rows cannot be told apart in a SQL table)")
    schema = arrow_schema(store.view_schema(out.name))
    if schema is None:
        result.note = "no row committed yet"
        return result
    info = resolve(sink.connection)
    secret = password_of(info)
    try:
        conn = psycopg.connect(info, autocommit=True, connect_timeout=15)
    except psycopg.Error as exc:
        raise SinkFailed(f"view {out.name!r}: cannot connect to {sink.connection!r} ({describe(info)}): "
                         f"{redact(str(exc).strip(), (secret,))}") from None
    try:
        with conn:
            view_cols = [f.name for f in schema if f.name != WEIGHT]
            found = _columns(conn, sink.table)
            if sorted(found) != sorted(view_cols):
                before = _progress(conn, sink.table, circuit, out.name) if found else 0
                start = restart_of(store, out.name, before, last) if found else None
                if start is not None:
                    raise SinkRefused(_reshaped(out.name, sink.table, start, found, view_cols))
                raise SinkRefused(f"view {out.name!r}: the target table {sink.table} has columns "
                                  f"({', '.join(found) or 'none: it does not exist'}) but the view has "
                                  f"({', '.join(view_cols)}); create it with exactly the view's columns")
            result.before = result.after = _progress(conn, sink.table, circuit, out.name)
            start = restart_of(store, out.name, result.before, last)
            pruned = Removed.read(store).view_deltas_through.get(safe_name(out.name), 0)
            if result.before > last or pruned > (result.before if start is None else start):
                _rewrite(conn, store, circuit, out, last)
                result.after, result.note = last, f"rebuilt from the view at timestep {last}"
                return result
            if start is not None:  # a change of the circuit started the view again at `start`
                _rewrite(conn, store, circuit, out, start)
                result.after = start
                result.note = f"rewritten from the whole view at timestep {start} (a change of the circuit)"
            for t in range(result.after + 1, last + 1):
                delta = read_delta(store, out.name, t)
                with conn.transaction():
                    if delta is not None:
                        _apply(conn, sink.table, list(out.key), delta)
                    failpoint("sink_before_commit")
                    _set_progress(conn, sink.table, circuit, out.name, t)
                result.after = t
    except psycopg.Error as exc:
        raise SinkFailed(f"view {out.name!r}: writing {sink.table} failed at timestep {result.after + 1}: "
                         f"{redact(str(exc).strip(), (secret,))}") from None
    if say is not None and result.after != result.before:
        say(f"view {out.name}: PostgreSQL table {sink.table} at timestep {result.after}")
    return result


def _reshaped(view: str, table: str, start: int, found: list[str], columns: list[str]) -> str:
    """What to do when a change of the circuit gave a sunk view other columns."""
    add = [c for c in columns if c not in found]
    drop = [c for c in found if c not in columns]
    todo = "; ".join(part for part in (f"add column(s) {', '.join(add)}" if add else "",
                                       f"drop column(s) {', '.join(drop)}" if drop else "") if part)
    return (f"view {view!r} changed its columns at timestep {start} (a change of the circuit) but its PostgreSQL "
            f"table {table} still has the old ones ({', '.join(found)}); the view now has ({', '.join(columns)}). "
            f"Alter the table ({todo}, with the types you want; ALTER TABLE {qualified(table)} ...): then the next "
            f"step or `dbsp publish` rewrites its rows from the whole view at timestep {start}, in one transaction")


def sink_views(spec: CircuitSpec, store, say: Callable[[str], None] | None = None) -> list[SinkResult]:
    """Every sink of the circuit brought to the last committed timestep."""
    last = store.last_committed()
    return [sink_view(spec.name, out, store, last, say) for out in spec.outputs.values() if out.sink is not None]


def describe_results(results: list[SinkResult]) -> list[str]:
    return [f"view {r.view}: PostgreSQL table {r.table} at timestep {r.after}" + (f" ({r.note})" if r.note else "")
            for r in results]


__all__ = ["SinkFailed", "SinkRefused", "SinkResult", "describe_results", "sink_view", "sink_views"]
