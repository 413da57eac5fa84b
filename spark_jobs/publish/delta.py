"""A view's change applied to its Delta table as ONE Delta commit per timestep (``deltalake``).

Why one commit: a Delta reader sees versions, never a half-written one, so a timestep is either
in the table or not. Each commit records its timestep twice: as the Delta transaction
(``txn``) of the view's app id, which is how the next publish knows where the table stands (the
Delta protocol's own mechanism for idempotent writers), and in the commit metadata
(``dbsp.timestep``), which readers use to find the version of a timestep. Tables are created with
the change data feed on, so ``load_cdf`` (or Spark's ``readChangeFeed``) gives each timestep's
change as delete/insert/update rows.

How a change becomes table rows:
- a view **with a key** (``outputs.<view>.key``): MERGE by the key; a key whose new row is in the
  change is upserted, a key that only lost its row is deleted;
- a view **without a key** is a bag: a tuple of weight n is n identical rows (what a SQL reader
  of the view expects). A tuple whose weight grows gets the extra copies appended; one whose
  weight shrinks has its copies deleted and the remaining ones re-inserted, in the same MERGE.
  Its old weight is counted in the table itself (a filtered read of the table's files).
"""
from __future__ import annotations

import datetime
import math
import shutil
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.errors import DbspError, EXIT_FAILED
from spark_jobs.publish.targets import Target
from spark_jobs.state.float_keys import canonical_value
from spark_jobs.state.trace import WEIGHT

TIMESTEP_KEY = "dbsp.timestep"
ACTION = "__dbsp_action"  # a source column of the MERGE (never a view column: views are checked)
# The change feed on; files of at most 8 MiB: Delta without deletion vectors (deltalake writes
# none) is copy-on-write, so a MERGE rewrites every file holding a changed row, and files whose
# min/max statistics exclude the change are skipped (a 1M-row table of 1 MiB files: one file
# rewritten for one changed key, 0.7 s; of 100 MiB files: the whole table).
TABLE_CONFIG = {"delta.enableChangeDataFeed": "true", "delta.targetFileSize": str(8 * 1024 * 1024)}


class PublishError(DbspError, RuntimeError):
    """A view's change cannot be published (the state is committed; the table stays as it was)."""
    exit_code = EXIT_FAILED


class Unpublishable(PublishError):
    """A timestep's change holds what the table cannot take (a bag of more copies than
    ``MAX_COPIES``, a value Delta cannot write): a later timestep whose view no longer holds it
    is published by rebuilding the table from that view (``publish._catch_up``)."""


# A keyless view is published as one table row per copy: a tuple of weight n is n rows. Beyond
# this many copies in one timestep's change the publish is refused instead (a weight of 2^31 - 1
# would be 2^31 rows, 16 GiB for one long column); declare a key or `publish: false`.
MAX_COPIES = 10_000_000


def _dl():
    import deltalake  # imported where used: its Rust core is not needed by commands that read state

    return deltalake


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _commit(target: Target, t: int):
    dl = _dl()
    return dl.CommitProperties(custom_metadata={TIMESTEP_KEY: str(t), "dbsp.circuit": target.circuit,
                                                "dbsp.view": target.view},
                               app_transactions=[dl.Transaction(target.app_id, t)], max_commit_retries=0)


def open_table(target: Target):
    """The target's table, or None when there is none. A Delta table there that this circuit's
    view did not create is left alone (``PublishError``)."""
    dl = _dl()
    if not dl.DeltaTable.is_deltatable(target.uri, storage_options=target.storage_options or None):
        return None
    table = dl.DeltaTable(target.uri, storage_options=target.storage_options or None)
    if table.transaction_version(target.app_id) is None:
        from spark_jobs.publish.ownership import owner_of

        raise PublishError(f"{target.uri} holds {owner_of(target.uri, target.storage_options)}, not the table "
                           f"of view {target.view!r} of circuit {target.circuit!r}; move it, or set "
                           f"outputs.{target.view}.publish.path to another place")
    return table


def published_timestep(table, target: Target) -> int:
    """The last timestep committed to the table (its Delta transaction version for the view)."""
    return int(table.transaction_version(target.app_id))


def table_schema(schema: pa.Schema) -> pa.Schema:
    """The table's columns: the view's data columns, all nullable (view deltas' nullability varies)."""
    return pa.schema([pa.field(f.name, f.type, nullable=True) for f in schema if f.name != WEIGHT])


def create(target: Target, schema: pa.Schema, view: pa.Table | None = None, t: int = 0):
    """A new table in one commit: empty at version 0 = timestep 0 (so version t is timestep t as
    a rule), or, for a view a change of the circuit started at timestep ``t``, holding ``view``
    (its whole value) as version 0 = timestep t, its first and only commit so far."""
    dl = _dl()
    options = target.storage_options or None
    if view is None:
        return dl.DeltaTable.create(target.uri, table_schema(schema), mode="error", configuration=TABLE_CONFIG,
                                    storage_options=options, commit_properties=_commit(target, 0))
    columns = table_schema(schema)
    rows = rows_of(view.select(columns.names + [WEIGHT]), target, t).cast(columns)
    dl.write_deltalake(target.uri, rows, mode="error", configuration=TABLE_CONFIG, storage_options=options,
                       commit_properties=_commit(target, t))
    return dl.DeltaTable(target.uri, storage_options=options)


def rows_of(view: pa.Table, target: Target, t: int) -> pa.Table:
    """A consolidated Z-set as table rows: n copies of a tuple of weight n."""
    weights = view.column(WEIGHT).to_numpy(zero_copy_only=False)
    if (weights < 0).any():
        bad = view.filter(pc.less(view.column(WEIGHT), 0)).slice(0, 1).to_pylist()[0]
        raise PublishError(f"view {target.view!r} holds a row with a negative weight at timestep {t} "
                           f"({bad}); a table holds rows, so it cannot be published: fix the input "
                           f"(a delete of a row that was never inserted?) or set outputs.{target.view}."
                           f"publish: false")
    copies = int(weights.sum(dtype=object)) if len(weights) else 0
    if copies > MAX_COPIES:
        at = int(np.argmax(weights))
        row = view.drop_columns([WEIGHT]).slice(at, 1).to_pylist()[0]
        raise Unpublishable(f"view {target.view!r} at timestep {t} would be {copies} table rows (a keyless view is "
                            f"published as one row per copy; at most {MAX_COPIES} per timestep): e.g. {row!r:.200} "
                            f"has weight {int(weights[at])}; declare outputs.{target.view}.key, or set "
                            f"outputs.{target.view}.publish: false")
    data = view.drop_columns([WEIGHT])
    return data.take(pa.array(np.repeat(np.arange(view.num_rows), weights)))


def _tuples(table: pa.Table, columns: list[str]) -> list[tuple]:
    """The rows as tuples compared as Spark compares them (one NaN, -0.0 = 0.0: ``float_keys``)."""
    if not table.num_rows:
        return []
    return list(zip(*[map(canonical_value, table.column(c).to_pylist()) for c in columns]))


IN_LIST_MAX = 10_000  # more distinct values than this: the old copies are counted in a full read


def _sql_literal(value: Any) -> str | None:
    """``value`` as a DataFusion SQL literal, or None when it has no simple exact form."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return f"DATE '{value.isoformat()}'"
    return None


def _old_counts(table, delta: pa.Table, columns: list[str]) -> Counter:
    """How many copies of each tuple of ``delta`` the table holds now. Read through deltalake's
    query engine with a filter on the first column's values, so files whose statistics exclude
    them are skipped (pyarrow's dataset over these files cannot filter: deltalake writes string
    columns as string views)."""
    dl = _dl()
    first = columns[0]
    values = set(delta.column(first).to_pylist())
    literals = [_sql_literal(v) for v in values if v is not None]
    where = ""
    if len(values) <= IN_LIST_MAX and all(lit is not None for lit in literals):
        terms = ([f"{_quote(first)} IN ({', '.join(literals)})"] if literals else [])  # type: ignore[arg-type]
        terms += [f"{_quote(first)} IS NULL"] if None in values else []
        where = " WHERE " + " OR ".join(terms)
    query = dl.QueryBuilder().register("t", table)
    found = pa.table(query.execute(f"SELECT {', '.join(map(_quote, columns))} FROM t{where}").read_all())
    wanted = set(_tuples(delta, columns))
    return Counter(tup for tup in _tuples(found, columns) if tup in wanted)


def _bag_source(table, delta: pa.Table, target: Target, t: int) -> tuple[pa.Table, bool]:
    """The MERGE source of a keyless view's change, and whether it deletes anything."""
    columns = [c for c in delta.column_names if c != WEIGHT]
    w = delta.column(WEIGHT)
    grow = delta.filter(pc.greater(w, 0))
    shrink = delta.filter(pc.less(w, 0))
    parts = [rows_of(grow, target, t).append_column(ACTION, pa.repeat(pa.scalar("ins"), sum(grow.column(WEIGHT).to_pylist())))]
    if shrink.num_rows:
        old = _old_counts(table, shrink, columns)
        tuples = _tuples(shrink, columns)
        left = [old[tup] + int(d) for tup, d in zip(tuples, shrink.column(WEIGHT).to_pylist())]
        if any(n < 0 for n in left):
            raise PublishError(f"view {target.view!r}: timestep {t} removes more copies of a row than "
                               f"the table holds; the table is not the view at timestep {t - 1} (was it "
                               f"changed by hand?). Delete the table: the next publish rebuilds it")
        kept = shrink.set_column(shrink.schema.get_field_index(WEIGHT), WEIGHT, pa.array(left, pa.int64()))
        parts.append(shrink.drop_columns([WEIGHT]).append_column(ACTION, pa.repeat(pa.scalar("del"), shrink.num_rows)))
        parts.append(rows_of(kept, target, t).append_column(ACTION, pa.repeat(pa.scalar("ins"), sum(left))))
    return pa.concat_tables(parts), shrink.num_rows > 0


def _keyed_source(delta: pa.Table, target: Target, t: int) -> pa.Table:
    """The MERGE source of a keyed view's change: one upsert or delete per changed key."""
    key = list(target.key)
    w = delta.column(WEIGHT).to_pylist()
    keys = _tuples(delta, key)
    new = [k for k, x in zip(keys, w) if x > 0]
    gone = [k for k, x in zip(keys, w) if x < 0]
    if any(abs(x) != 1 for x in w) or len(set(new)) < len(new) or len(set(gone)) < len(gone):
        dup = next((k for k in keys if new.count(k) > 1 or gone.count(k) > 1), keys[0])
        raise PublishError(f"view {target.view!r} declares key [{', '.join(key)}] but its change at "
                           f"timestep {t} has several rows of key {dup} (or a weight other than 1): the "
                           f"key does not identify its rows; fix outputs.{target.view}.key")
    upserted = set(new)
    action = ["upsert" if x > 0 else "delete" for x in w]
    keep = [x > 0 or k not in upserted for k, x in zip(keys, w)]
    source = delta.drop_columns([WEIGHT]).append_column(ACTION, pa.array(action, pa.string()))
    return source.filter(pa.array(keep))


def _null_safe(columns: list[str]) -> str:
    return " AND ".join(f"(t.{_quote(c)} IS NOT DISTINCT FROM s.{_quote(c)})" for c in columns)


def commit_change(table, target: Target, t: int, delta: pa.Table | None) -> None:
    """Apply the view's change of timestep t (consolidated; None or empty: no change) as one
    Delta commit; an empty change commits an empty version, so versions keep pace with timesteps."""
    dl = _dl()
    schema = pa.schema(table.schema().to_arrow())
    props = _commit(target, t)
    if delta is None or delta.num_rows == 0:
        dl.write_deltalake(table, schema.empty_table(), mode="append", commit_properties=props)
        return
    delta = delta.select(schema.names + [WEIGHT]).cast(pa.schema(list(schema) + [pa.field(WEIGHT, pa.int64())]))
    columns = schema.names
    quoted = {_quote(c): f"s.{_quote(c)}" for c in columns}
    action = f"s.{_quote(ACTION)}"
    if target.key:
        source = _keyed_source(delta, target, t)
        others = {_quote(c): f"s.{_quote(c)}" for c in columns if c not in target.key}
        merge = table.merge(source, predicate=_null_safe(list(target.key)), source_alias="s", target_alias="t",
                            commit_properties=props)
        if others:
            merge = merge.when_matched_update(updates=others, predicate=f"{action} = 'upsert'")
        (merge.when_matched_delete(predicate=f"{action} = 'delete'")
         .when_not_matched_insert(updates=quoted, predicate=f"{action} = 'upsert'").execute())
        return
    source, deletes = _bag_source(table, delta, target, t)
    if not deletes:  # only new copies: an append, no scan of the table
        dl.write_deltalake(table, source.drop_columns([ACTION]).cast(schema), mode="append", commit_properties=props)
        return
    (table.merge(source, predicate=f"{action} = 'del' AND {_null_safe(columns)}", source_alias="s",
                 target_alias="t", commit_properties=props)
     .when_matched_delete()
     .when_not_matched_insert(updates=quoted, predicate=f"{action} = 'ins'").execute())


def overwrite(target: Target, view: pa.Table, t: int) -> None:
    """Replace the table's rows by the whole view at timestep t (one commit): the table was
    ahead of the state (the state was reset), so its versions cannot be continued."""
    dl = _dl()
    dl.write_deltalake(target.uri, rows_of(view, target, t).cast(table_schema(view.schema)), mode="overwrite",
                       schema_mode="overwrite", configuration=TABLE_CONFIG, commit_properties=_commit(target, t),
                       storage_options=target.storage_options or None)


def version_timesteps(uri: str, storage_options: dict[str, str] | None = None) -> dict[int, int]:
    """Version -> timestep of every commit of a published table that carries one (from its history)."""
    dl = _dl()
    history: list[dict[str, Any]] = dl.DeltaTable(uri, storage_options=storage_options or None).history()
    return {int(h["version"]): int(h[TIMESTEP_KEY]) for h in history if TIMESTEP_KEY in h}


def remove(target: Target) -> bool:
    """Delete the target's table if this circuit's view published it; True if it did. A folder
    that holds another table too is not deleted (``PublishError``)."""
    if open_table(target) is None:
        return False
    from spark_jobs.publish.ownership import removal_problem

    if why := removal_problem(target.uri):
        raise PublishError(why)
    if "://" in target.uri:
        import pyarrow.fs as pafs

        fs, path = pafs.FileSystem.from_uri(target.uri)
        fs.delete_dir(path)
    else:
        shutil.rmtree(target.uri)
    return True
