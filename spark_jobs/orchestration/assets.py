"""Airflow Assets of circuits: what a commit updates, and what a circuit's schedule waits for.

- Every view is an Asset named ``<circuit>.<view>`` (URI: the view's published location,
  ``<data_root>/views/<circuit>/<view>``); the DAG's ``commit`` task lists them as outlets and
  attaches the timestep and rows inserted/deleted to each event.
- Every input is an Asset named ``<circuit>.input.<input>`` (URI: its folder). When a schedule
  names an input, the asset gets a watcher: ``watch.InputFilesTrigger`` (run by Airflow's
  triggerer) emits an event when files the circuit has not consumed land in the folder.
- ``schedule`` of the YAML becomes the DAG's schedule: a cron string or preset; assets (any
  one of them updated starts a run); or both (``{cron: ..., assets: [...]}``).

Nothing here imports pyspark: the DAG parser calls it.
"""
from __future__ import annotations

import os
from typing import Any, Iterable

from spark_jobs.config import Config
from spark_jobs.spec import CircuitSpec
from spark_jobs.state.arrow_fs import is_local, strip_file_scheme, uri_join

VIEWS_DIR = "views"  # published views: <data_root>/views/<circuit>/<view>
POLL_ENV = "DBSP_WATCH_POLL_SECONDS"
DEFAULT_POLL_SECONDS = 5.0


def _uri(path: str) -> str:
    return "file://" + os.path.abspath(strip_file_scheme(path)) if is_local(path) else path


def view_asset_name(circuit: str, view: str) -> str:
    return f"{circuit}.{view}"


def input_asset_name(circuit: str, name: str) -> str:
    return f"{circuit}.input.{name}"


def view_asset(config: Config, circuit: str, view: str):
    from airflow.sdk import Asset

    location = uri_join(config.data_root, VIEWS_DIR, circuit, view)
    return Asset(name=view_asset_name(circuit, view), uri=_uri(location), group="dbsp")


def poll_seconds() -> float:
    return float(os.environ.get(POLL_ENV) or DEFAULT_POLL_SECONDS)


def input_asset(config: Config, spec: CircuitSpec, path: str, name: str):
    """The input's folder as an Asset, watched for new files by the triggerer."""
    from airflow.sdk import Asset, AssetWatcher

    from spark_jobs.orchestration.watch import InputFilesTrigger

    source = spec.inputs[name].source.path  # type: ignore[union-attr]
    folder = source if "://" in source or os.path.isabs(source) else uri_join(config.data_root, source)
    trigger = InputFilesTrigger(circuit_path=os.path.abspath(path), input_name=name,
                                config_path=config.path, data_root=config.data_root,
                                poll_seconds=poll_seconds())
    watcher = AssetWatcher(name=f"dbsp_watch_{spec.name}_{name}", trigger=trigger)
    return Asset(name=input_asset_name(spec.name, name), uri=_uri(folder), group="dbsp", watchers=[watcher])


class UnknownAsset(ValueError):
    """A schedule names ``<circuit>.<view>`` that no circuit of the folder publishes."""


def schedule_of(config: Config, spec: CircuitSpec, path: str, views: dict[str, Iterable[str]] | None) -> Any:
    """The DAG ``schedule`` for a circuit: None, a cron string, an asset condition, or both.

    ``views`` maps each circuit of the folder to its view names, to check references (None: not
    checked, in a task's own process where the DAG processor checked them already)."""
    if not spec.schedule_assets:
        return spec.schedule
    from airflow.sdk import AssetAny

    assets = []
    for ref in spec.schedule_assets:
        circuit, dot, view = ref.partition(".")
        if not dot:
            assets.append(input_asset(config, spec, path, ref))
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
    """What a view's asset event carries: the timestep, the mode, rows inserted and deleted."""
    change = (summary.get("views") or {}).get(view) or {}
    return {"timestep": summary.get("timestep"), "mode": summary.get("mode"),
            "rows_inserted": int(change.get("inserted") or 0), "rows_deleted": int(change.get("deleted") or 0)}
