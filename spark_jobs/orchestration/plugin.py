"""The dbsp Airflow plugin (registered as an ``airflow.plugins`` entry point in pyproject.toml).

- **Run notes**: a listener writes each finished dbsp run's note (``run_note.py``): the timestep,
  its mode and the rows each view gained and lost, or why nothing was committed. It runs in the
  scheduler, inside the session that ends the run (notes cannot be set from a task in Airflow 3).
- **Pages** under ``/dbsp`` on the API server (same origin and login as the UI):
  ``/dbsp/docs/<dag>-<hash>.svg`` (the circuit pictures the DAG docs show, drawn at parse time)
  and ``/dbsp/quality/<dag_id>/`` (the circuit's quality reports: ``index.html`` and the
  per-timestep JSON files), and ``/dbsp/views/<dag_id>/`` (the views' asset events with their
  timestep and row counts unfolded: the DAG page's "Views" tab, ``view_events.py``).
- The **Quality report** extra link of the DAGs' tasks (``links.py``).

Keep imports light: every Airflow process loads plugins.
"""
from __future__ import annotations

import logging
import os
import re

from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin

from spark_jobs.orchestration.links import QualityReportLink

log = logging.getLogger(__name__)
TAG = "dbsp"
_DAG_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SVG = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*-[0-9a-f]{12}\.svg$")
_REPORT = re.compile(r"^(index\.html|t\d{12}\.json)$")


# ---- run notes --------------------------------------------------------------------------------
def _xcoms(session, dag_run) -> dict[tuple[str, str], object]:
    from sqlalchemy import select

    from airflow.models.xcom import XComModel

    rows = session.scalars(select(XComModel).where(XComModel.dag_id == dag_run.dag_id,
                                                   XComModel.run_id == dag_run.run_id,
                                                   XComModel.task_id.in_(("plan", "commit", "timestep"))))
    return {(x.task_id, x.key): XComModel.deserialize_value(x) for x in rows}


def _is_dbsp(session, dag_run) -> bool:
    from sqlalchemy import select

    from airflow.models.dag import DagTag

    tags = session.scalars(select(DagTag.name).where(DagTag.dag_id == dag_run.dag_id))
    return TAG in set(tags)


def annotate(dag_run, succeeded: bool) -> str | None:
    """Set the note of a finished run of a dbsp DAG; returns it (None: not a dbsp run)."""
    from sqlalchemy.orm import object_session

    from spark_jobs.orchestration import run_note
    from spark_jobs.orchestration.tasks import FAILED_PHASE_XCOM_KEY, PLAN_XCOM_KEY

    session = object_session(dag_run)
    if session is None or not _is_dbsp(session, dag_run) or dag_run.note:
        return None  # a note a person wrote stays
    found = _xcoms(session, dag_run)
    whole = found.get(("timestep", "return_value"))  # per_step: one task returns every phase
    whole = whole if isinstance(whole, dict) else {}
    plan = (found.get(("plan", "return_value")) or found.get(("plan", PLAN_XCOM_KEY)) or whole.get("plan")
            or found.get(("timestep", PLAN_XCOM_KEY)))
    plan = plan if isinstance(plan, dict) else None
    if succeeded:
        commit = found.get(("commit", "return_value")) or whole.get("commit")
        note = run_note.success_note(dag_run.dag_id, commit if isinstance(commit, dict) else None, plan)
    else:
        failed = sorted(ti.task_id for ti in dag_run.get_task_instances(state=["failed", "upstream_failed"],
                                                                        session=session)
                        if ti.state == "failed")
        phase = found.get(("timestep", FAILED_PHASE_XCOM_KEY))
        note = run_note.failure_note(dag_run.dag_id, plan, failed, phase if isinstance(phase, str) else None)
    if note:
        dag_run.note = note
    return note


class RunNotes:
    """Listener hooks (pluggy): called by the scheduler when a run's state is final."""

    @hookimpl
    def on_dag_run_success(self, dag_run, msg: str) -> None:
        self._safely(dag_run, True)

    @hookimpl
    def on_dag_run_failed(self, dag_run, msg: str) -> None:
        self._safely(dag_run, False)

    @staticmethod
    def _safely(dag_run, succeeded: bool) -> None:
        try:
            from sqlalchemy.orm import object_session

            if object_session(dag_run) is not None:
                annotate(dag_run, succeeded)
                return
            # `airflow dags test` (dag.test()) hands the listener a run no session holds: annotate
            # the same run read in a session of its own, committed when it closes
            from airflow.models.dagrun import DagRun
            from airflow.utils.session import create_session

            with create_session() as session:
                run = session.get(DagRun, dag_run.id)
                if run is not None:
                    annotate(run, succeeded)
        except Exception:  # noqa: BLE001 - a note must never break the scheduler
            log.exception("dbsp: could not write the note of run %s", getattr(dag_run, "run_id", "?"))


# ---- pages --------------------------------------------------------------------------------------
def _app():
    from fastapi import Depends, FastAPI, HTTPException
    from fastapi.responses import FileResponse, HTMLResponse, Response

    from airflow.api_fastapi.core_api.security import get_user, requires_access_dag

    app = FastAPI(title="dbsp", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/docs/{name}", dependencies=[Depends(get_user)])
    def circuit_picture(name: str):
        from spark_jobs.orchestration.docs import docs_dir

        if not _SVG.match(name):
            raise HTTPException(404, "no such picture")
        path = os.path.join(docs_dir(), name)
        if not os.path.isfile(path):
            raise HTTPException(404, "no such picture (it is drawn when the DAG is parsed)")
        return FileResponse(path, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})

    @app.get("/quality/{dag_id}/", dependencies=[Depends(requires_access_dag("GET"))])
    def quality_index(dag_id: str):
        return _report(dag_id, "index.html", HTMLResponse, HTTPException)

    @app.get("/quality/{dag_id}/{name}", dependencies=[Depends(requires_access_dag("GET"))])
    def quality_file(dag_id: str, name: str):
        kind = HTMLResponse if name.endswith(".html") else (lambda body: Response(body, media_type="application/json"))
        return _report(dag_id, name, kind, HTTPException)

    @app.get("/views/{dag_id}/", dependencies=[Depends(requires_access_dag("GET"))])
    def view_events_page(dag_id: str):
        from airflow.utils.session import create_session

        from spark_jobs.orchestration import view_events

        if not _DAG_ID.match(dag_id):
            raise HTTPException(404, "no such DAG")
        with create_session() as session:
            events = view_events.load(session, dag_id)
        return HTMLResponse(view_events.render(dag_id, events))

    return app


def _report(dag_id: str, name: str, respond, http_error):
    """A file of the circuit's quality folder (names checked: no path leaves the folder)."""
    from spark_jobs.config import load_config
    from spark_jobs.runtime.circuit import state_root
    from spark_jobs.state.fs import filesystem_for

    if not _DAG_ID.match(dag_id) or not _REPORT.match(name):
        raise http_error(404, "no such report")
    root = state_root(load_config(), dag_id)
    fs = filesystem_for(root)
    path = fs.join(fs.normalize(root), "quality", name)
    if not fs.exists(path):
        raise http_error(404, f"no quality report yet for {dag_id} (one is written at each checked timestep)")
    return respond(fs.read_text(path))


class _AppsWhenServed(list):
    """The plugin's FastAPI app, built when the API server asks for it (it alone iterates this
    list): other processes that load plugins do not import the API server's modules."""

    def __iter__(self):
        if not super().__len__():
            self.append({"name": "dbsp", "app": _app(), "url_prefix": "/dbsp"})
        return super().__iter__()


class DbspPlugin(AirflowPlugin):
    name = "dbsp"
    listeners = [RunNotes()]
    operator_extra_links = [QualityReportLink()]
    fastapi_apps = _AppsWhenServed()
    # a tab on every DAG's page (Airflow fills in {DAG_ID}): the views' events, unfolded
    external_views = [{"name": "Views", "href": "/dbsp/views/{DAG_ID}/", "destination": "dag",
                       "url_route": "dbsp-views"}]
