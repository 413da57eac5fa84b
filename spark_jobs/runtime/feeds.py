"""Change files of views for other circuits (``outputs.<view>: {feed: true}``).

After a timestep commits, the change of each such view is written to
``<data_root>/feeds/<circuit>/<view>/t<timestep>.parquet``: the view's columns plus ``_weight``,
the layout of a ``kind: changes`` input. Another circuit chains on the view with
``source: {kind: changes, path: feeds/<circuit>/<view>, format: parquet}`` (and, to run when it
changes, ``schedule: {assets: [<circuit>.<view>]}``). Only committed changes are written, each
under a hidden name first and renamed into place, so a reader never sees a partial or an
uncommitted change; writing is idempotent (a retried commit writes what is missing). The files
are copies read from the committed delta with pyarrow: no Spark job. Like input files, feed
files are never deleted by the engine.
"""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq

from spark_jobs.runtime.circuit import CircuitRuntime
from spark_jobs.spec import output_columns
from spark_jobs.spec.model import WEIGHT
from spark_jobs.state.arrow_fs import is_local, locate, strip_file_scheme, uri_join

FEEDS_DIR = "feeds"


def feed_dir(data_root: str, circuit: str, view: str) -> str:
    """Where the changes of ``circuit``'s ``view`` land (a `changes` source path: feeds/<c>/<v>)."""
    if is_local(data_root):
        return os.path.join(strip_file_scheme(data_root), FEEDS_DIR, circuit, view)
    return uri_join(data_root, FEEDS_DIR, circuit, view)


def feed_file_name(timestep: int) -> str:
    return f"t{timestep:012d}.parquet"


def _delta_table(rt: CircuitRuntime, rel: str, columns: list[str]) -> pa.Table:
    store = rt.committed
    tables = []
    for full, _ in store.fs.data_files(store.layout.abs(rel)):
        with store.fs.open_read(full) as fh:
            tables.append(pq.read_table(fh, columns=columns))
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def publish_feeds(rt: CircuitRuntime, manifest) -> list[str]:
    """Write the feed files of ``manifest``'s timestep that are missing; returns their paths."""
    feeds = [v for v, out in rt.compiled.spec.outputs.items() if out.feed]
    if not feeds or manifest is None:
        return []
    columns = output_columns(rt.compiled.spec)
    written = []
    for view in feeds:
        entry = (manifest.outputs or {}).get(view)
        if entry is None or not entry.delta:
            continue  # no change of this view at this timestep
        target = uri_join(feed_dir(rt.config.data_root, rt.name, view), feed_file_name(manifest.timestep))
        loc = locate(target)
        if loc.fs.get_file_info(loc.inner).type != 0:  # FileType.NotFound == 0: already written
            continue
        table = _delta_table(rt, entry.delta, [*columns[view], WEIGHT])
        parent, name = loc.inner.rsplit("/", 1)
        loc.fs.create_dir(parent, recursive=True)
        hidden = f"{parent}/.{name}"
        with loc.fs.open_output_stream(hidden) as out:
            pq.write_table(table, out)
        loc.fs.move(hidden, loc.inner)
        written.append(target)
    return written
