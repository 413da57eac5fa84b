"""The "Views" tab of a circuit's DAG page: its views' asset events, one row each, with the
timestep and the rows each view gained and lost in plain sight.

Airflow 3.3 shows an asset event's ``extra`` folded (one click per event) and has no other text
field that can carry it (a partition key would stop the runs of circuits scheduled on the view),
so the plugin serves this page and registers it as a tab of every DAG (``external_views``).
"""
from __future__ import annotations

import datetime as _dt
import html
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from spark_jobs.quality.report import PAGE_STYLE

MAX_EVENTS = 500  # newest first; older events stay in Airflow's Assets pages


@dataclass(frozen=True)
class ViewEvent:
    """One asset event of a view, as the page shows it."""
    when: _dt.datetime | None
    view: str
    run_id: str
    extra: dict[str, Any]


def load(session: Any, dag_id: str, limit: int = MAX_EVENTS) -> list[ViewEvent]:
    """The asset events the DAG's runs emitted, newest first."""
    from sqlalchemy import select

    from airflow.models.asset import AssetEvent, AssetModel

    rows = session.execute(
        select(AssetEvent.timestamp, AssetModel.name, AssetEvent.source_run_id, AssetEvent.extra)
        .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
        .where(AssetEvent.source_dag_id == dag_id)
        .order_by(AssetEvent.timestamp.desc(), AssetEvent.id.desc()).limit(limit))
    return [ViewEvent(when, name, run_id or "", extra if isinstance(extra, dict) else {})
            for when, name, run_id, extra in rows]


def _cell(value: Any) -> str:
    return "" if value is None else html.escape(str(value))


# the page opens in the DAG page's side panel: narrow, so a small heading and short cells
_NARROW = "body { margin: 0.6em; } h1 { font-size: 1.2em; } td.n { white-space: nowrap; text-align: right; }"


def render(dag_id: str, events: list[ViewEvent]) -> str:
    """The page: one row per event (timestep, view, rows in and out, mode, time, the run)."""
    rows = []
    for e in events:
        when = e.when.strftime("%Y-%m-%d %H:%M:%S") if e.when else ""
        run = (f'<a target="_top" title="{_cell(e.run_id)}" href="/dags/{quote(dag_id)}/runs/'
               f'{quote(e.run_id, safe="")}">run</a>') if e.run_id else ""
        rows.append(f"<tr><td class=n>{_cell(e.extra.get('timestep'))}</td><td>{_cell(e.view.split('.', 1)[-1])}</td>"
                    f"<td class=n>+{_cell(e.extra.get('rows_inserted', 0))}</td>"
                    f"<td class=n>-{_cell(e.extra.get('rows_deleted', 0))}</td>"
                    f"<td>{_cell(e.extra.get('mode'))}</td><td>{_cell(when)}</td><td>{run}</td></tr>")
    body = ("<table><thead><tr><th>timestep</th><th>view</th><th>rows in</th><th>rows out</th>"
            "<th>mode</th><th>published (UTC)</th><th></th></tr></thead><tbody>\n"
            + "\n".join(rows) + "\n</tbody></table>") if rows else "<p>No view has been published yet.</p>"
    more = f"<p>The newest {MAX_EVENTS} events; older ones are on Airflow's Assets pages.</p>" \
        if len(events) >= MAX_EVENTS else ""
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Views of "
            f"{_cell(dag_id)}</title><style>{PAGE_STYLE}{_NARROW}</style></head><body>\n"
            f"<h1>Views of {_cell(dag_id)}</h1>\n<p>Each committed timestep publishes an asset event "
            "per view with what the view gained and lost.</p>\n" + body + more + "</body></html>\n")
