"""Formatting of CLI results: step summaries, status tables, and views as table/CSV/JSON."""
from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
from typing import Any

from spark_jobs.spec.model import WEIGHT


def step_report(report) -> str:
    lines = [f"{report.circuit}: committed timestep {report.timestep} in {report.seconds:.1f}s"]
    engine = getattr(report, "engine", "")
    if engine:
        where = "in-process (Arrow)" if engine == "arrow" else "Spark"
        lines.append(f"  engine: {where}" + (f": {report.engine_reason}" if report.engine_reason else ""))
    if getattr(report, "mode_reason", ""):  # incremental or recomputed, and why (the cost model)
        lines.append(f"  mode: {report.mode}: {report.mode_reason}")
    for inp in report.inputs:
        if inp.files:
            lines.append(f"  input {inp.name}: +{inp.inserted} -{inp.deleted} rows ({inp.note})")
        else:
            lines.append(f"  input {inp.name}: {inp.note}")
    for view, (ins, dele) in report.views.items():
        lines.append(f"  view  {view}: +{ins} -{dele} rows")
    if getattr(report, "quality", ""):
        lines.append("  " + report.quality.replace("\n", "\n  "))
    if getattr(report, "published", None) is not None:
        lines.append("  " + report.published.summary().replace("\n", "\n  "))
    lines += [f"  note: {n}" for n in getattr(report, "notes", [])]  # quarantined rows, refreshed views, retention
    return "\n".join(lines)


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def status(rt, tables: list[tuple[str, str, str]] = ()) -> str:
    """The committed state of a circuit; ``tables``: (view, location, state) of its published tables."""
    store = rt.committed
    info = store.status()
    last = info.get("last_committed", 0)
    lines = [f"circuit {rt.name} (fingerprint {rt.compiled.fingerprint})",
             f"data root: {rt.config.data_root}",
             f"last committed timestep: {last if last else 'none'}",
             f"writer: {_writer(rt)}"]
    manifest = store.manifest() if last else None
    for name, meta in sorted((manifest.inputs if manifest else {}).items()):
        if meta.get("unknown_keys"):
            lines.append(f"input {name}: {meta['unknown_keys']} change(s) to unknown keys ignored so far "
                         f"(unknown_key: count)")
    quarantined = ((manifest.meta or {}).get("quarantined") if manifest else None) or {}
    for name, q in sorted(quarantined.items()):
        lines.append(f"quarantined at timestep {last}: input {name}: {q.get('rows')} deleted row(s) of "
                     f"{q.get('tuples')} tuple(s) -> {q.get('path')}")
    traces = info.get("traces", {})
    if traces:
        rows = [("state", "kind", "files", "rows", "bytes")]
        for trace_id, t in sorted(traces.items()):
            rows.append((trace_id, str(t.get("kind", "")), str(t.get("files", "")), str(t.get("rows", "")),
                         _human_bytes(int(t.get("bytes", 0)))))
        lines.append(_table(rows))
    if tables:
        lines.append(_table([("published view", "table", "timestep")] + list(tables)))
    return "\n".join(lines)


def _writer(rt) -> str:
    """Who holds the circuit's lease now (the writer of a step or DAG run in progress)."""
    from spark_jobs.runtime.writer import lease_for

    _n, rec = lease_for(rt, "status").current()
    return "none" if rec is None else rec.describe()


def _cell(value: Any) -> Any:
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def _display(value: Any) -> str:
    """Table cells: NULL for null, floats without binary noise (12 significant digits)."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.12g}"
    return str(_cell(value))


def _sorted(rows: list[tuple]) -> list[tuple]:
    return sorted(rows, key=lambda r: tuple((v is None, str(type(v)), v if v is not None else 0) for v in r))


def collect_consolidated(df, columns: tuple[str, ...]) -> list[tuple]:
    """One row per distinct tuple with its summed weight (zero weights dropped), sorted (Spark)."""
    if df is None:
        return []
    from pyspark.sql import functions as F

    cols = list(columns)
    grouped = df.groupBy(*[F.col(f"`{c}`") for c in cols]).agg(F.sum(WEIGHT).alias(WEIGHT))
    return _sorted([tuple(r) for r in grouped.where(F.col(WEIGHT) != 0).collect()])


def table_rows(table, columns: tuple[str, ...]) -> list[tuple]:
    """``collect_consolidated`` of a consolidated pyarrow Table (``state.arrow_read``): no Spark.
    Timestamps are shown as Spark shows them: naive, in UTC."""
    if table is None or table.num_rows == 0:
        return []
    names = list(columns) + [WEIGHT]
    values = [_naive(_python_values(table.column(c))) for c in names]
    return _sorted(list(zip(*values)))


def _python_values(column) -> list:
    """The column's values; a date or timestamp Python cannot hold (year 10000, year 0: refused
    at input since, but state written before may hold one) as its ISO text, not a traceback."""
    try:
        return column.to_pylist()
    except (OverflowError, ValueError):
        import numpy as np
        import pyarrow as pa

        t = column.type
        if not (pa.types.is_timestamp(t) or pa.types.is_date(t)):
            raise
        unit = t.unit if pa.types.is_timestamp(t) else ("D" if pa.types.is_date32(t) else "ms")
        raw = column.cast(pa.int64() if not pa.types.is_date32(t) else pa.int32()).to_pylist()
        return [None if r is None else str(np.datetime64(r, unit)) for r in raw]


def _naive(values: list) -> list:
    return [v.astimezone(dt.timezone.utc).replace(tzinfo=None) if isinstance(v, dt.datetime) and v.tzinfo else v
            for v in values]


def rows(data: list[tuple], columns: list[str], fmt: str, limit: int | None = None) -> str:
    header = columns + [WEIGHT]
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(header)
        for r in data:
            writer.writerow(["" if v is None else _cell(v) for v in r])
        return buf.getvalue()
    if fmt == "json":
        return json.dumps([dict(zip(header, map(_cell, r))) for r in data], indent=1, default=str) + "\n"
    shown = data if limit is None else data[:limit]
    table = [tuple(header)] + [tuple(_display(v) for v in r) for r in shown]
    more = f"\n({len(data) - len(shown)} more rows)" if len(shown) < len(data) else ""
    return _table(table) + f"\n({len(data)} rows){more}\n"


def _table(rows: list[tuple]) -> str:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    out = []
    for i, r in enumerate(rows):
        out.append("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)
