"""Airflow Assets of circuits: what a commit updates, and what a circuit's schedule waits for.

- Every view is an Asset named ``<circuit>.<view>`` (URI: the view's published location,
  ``<data_root>/views/<circuit>/<view>``); the DAG's ``commit`` task lists them as outlets and
  attaches the timestep and rows inserted/deleted to each event.
- The input folders a schedule names are one Asset per circuit, ``<circuit>.inputs``, with a
  watcher: ``watch.InputFilesTrigger`` (run by Airflow's triggerer) emits an event when files
  the circuit has not consumed land in one of them.
- ``schedule`` of the YAML becomes the DAG's schedule: a cron string or preset; assets (any
  one of them updated starts a run); or both (``{cron: ..., assets: [...]}``).

Nothing here imports pyspark: the DAG parser calls it.
"""
from __future__ import annotations

import os
from typing import Any, Iterable

from spark_jobs.config import VIEWS_DIR, Config
from spark_jobs.errors import DbspError
from spark_jobs.spec import CircuitSpec
from spark_jobs.state.arrow_fs import is_local, strip_file_scheme, uri_join

POLL_ENV = "DBSP_WATCH_POLL_SECONDS"
DEFAULT_POLL_SECONDS = 3.0


def _uri(path: str) -> str:
    return "file://" + os.path.abspath(strip_file_scheme(path)) if is_local(path) else path


def view_asset_name(circuit: str, view: str) -> str:
    return f"{circuit}.{view}"


def inputs_asset_name(circuit: str) -> str:
    return f"{circuit}.inputs"


def view_asset(config: Config, circuit: str, view: str):
    from airflow.sdk import Asset

    location = uri_join(config.data_root, VIEWS_DIR, circuit, view)
    return Asset(name=view_asset_name(circuit, view), uri=_uri(location), group="dbsp")


def poll_seconds() -> float:
    return float(os.environ.get(POLL_ENV) or DEFAULT_POLL_SECONDS)


def inputs_asset(config: Config, spec: CircuitSpec, path: str, names: list[str]):
    """The circuit's input folders named in its schedule, as one Asset watched by the triggerer.

    One asset (and one trigger) for all of them: a batch that lands in several folders at once
    starts one run, not one per folder. Its URI is the circuit's own place under the state root
    (Airflow wants a URI per asset, and two circuits may read one folder)."""
    from airflow.sdk import Asset, AssetWatcher

    from spark_jobs.orchestration.watch import InputFilesTrigger

    trigger = InputFilesTrigger(circuit_path=os.path.abspath(path), input_names=list(names),
                                config_path=config.path, data_root=config.data_root,
                                poll_seconds=poll_seconds())
    watcher = AssetWatcher(name=f"dbsp_watch_{spec.name}", trigger=trigger)
    location = uri_join(config.resolved_state_root, spec.name, "inputs")
    return Asset(name=inputs_asset_name(spec.name), uri=_uri(location), group="dbsp", watchers=[watcher])


class UnknownAsset(DbspError, ValueError):
    """A schedule names ``<circuit>.<view>`` that no circuit of the folder publishes."""


def schedule_of(config: Config, spec: CircuitSpec, path: str, views: dict[str, Iterable[str]] | None) -> Any:
    """The DAG ``schedule`` for a circuit: None, a cron string, an asset condition, or both.

    ``views`` maps each circuit of the folder to its view names, to check references (None: not
    checked, in a task's own process where the DAG processor checked them already)."""
    if not spec.schedule_assets:
        return spec.schedule
    from airflow.sdk import AssetAny

    watched = [ref for ref in spec.schedule_assets if "." not in ref]
    assets = [inputs_asset(config, spec, path, watched)] if watched else []
    for ref in spec.schedule_assets:
        circuit, dot, view = ref.partition(".")
        if not dot:
            continue
        if views is not None and view not in set(views.get(circuit, ())):
            known = sorted(f"{c}.{v}" for c, vs in views.items() if c != spec.name for v in vs)
            raise UnknownAsset(f"schedule asset '{ref}': no circuit in the folder publishes view '{view}' "
                               f"of circuit '{circuit}' (views of the other circuits: {', '.join(known) or 'none'})")
        assets.append(view_asset(config, circuit, view))
    condition = AssetAny(*assets)
    if spec.schedule is None:
        return condition
    from airflow.timetables.assets import AssetOrTimeSchedule
    from airflow.timetables.trigger import CronTriggerTimetable

    return AssetOrTimeSchedule(timetable=CronTriggerTimetable(_cron(spec.schedule), timezone="UTC"),
                               assets=condition)


_PRESETS = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@weekly": "0 0 * * 0",
            "@monthly": "0 0 1 * *", "@quarterly": "0 0 1 */3 *", "@yearly": "0 0 1 1 *",
            "@annually": "0 0 1 1 *", "@midnight": "0 0 * * *"}


def _cron(schedule: str) -> str:
    """A preset as the cron string CronTriggerTimetable needs (it takes no presets)."""
    if schedule in _PRESETS:
        return _PRESETS[schedule]
    if schedule.startswith("@"):
        raise ValueError(f"schedule '{schedule}' cannot be combined with assets; use a cron string")
    return schedule


def commit_extra(summary: dict, view: str) -> dict:
    """What a view's asset event carries: the timestep, the mode, rows inserted and deleted, and
    first all of it as one line (``summary``). Airflow 3.3 shows an event's ``extra`` folded
    (one click opens it, the summary on top); its only unfolded text field, the partition key,
    cannot carry it: an event with one no longer starts the runs of circuits scheduled on the
    view (they are not partitioned)."""
    change = (summary.get("views") or {}).get(view) or {}
    inserted, deleted = int(change.get("inserted") or 0), int(change.get("deleted") or 0)
    return {"summary": f"timestep {summary.get('timestep')} ({summary.get('mode')}): +{inserted} / -{deleted} rows",
            "timestep": summary.get("timestep"), "mode": summary.get("mode"),
            "rows_inserted": inserted, "rows_deleted": deleted}
