"""A small client of Airflow 3's REST API (``/api/v2``, token from ``/auth/token``) and of the
local launcher, for the tests, the benchmark and scripts: no Airflow import needed.

    api = LocalAirflow(home, env).start()          # scripts/airflow_local.sh start --detach
    run_id = api.trigger("my_view"); api.wait_for_run("my_view", run_id, home)
"""
from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from spark_jobs.config import PROJECT_ROOT
from spark_jobs.orchestration.airflow_env import HOST, PASSWORD_FILE, free_port

TIMEOUT = 60.0  # seconds per request
READ_ATTEMPTS = 3  # a GET that times out is asked again


class AirflowAPI:
    """The few calls of Airflow 3's REST API (/api/v2) the tests need; token from /auth/token."""

    def __init__(self, port: int, user: str, password: str) -> None:
        self.base = f"http://{HOST}:{port}"
        body = self._raw("POST", "/auth/token", {"username": user, "password": password}, token=None)
        self.token = body["access_token"]

    def _raw(self, method: str, path: str, body: Any = None, token: str | None = "self") -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if token == "self":
            req.add_header("Authorization", f"Bearer {self.token}")
        attempts = READ_ATTEMPTS if method == "GET" else 1  # only a read is safe to ask again
        for attempt in range(attempts):
            try:
                with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
                    return json.loads(resp.read() or b"null")
            except (TimeoutError, ConnectionResetError):
                if attempt + 1 == attempts:
                    raise
                time.sleep(1 + attempt)  # a busy API server (one worker, a loaded machine)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            return self._raw(method, path, body)
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{method} {path} -> {exc.code}: {exc.read().decode(errors='replace')}") from None

    def wait_for_dag(self, dag_id: str, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._raw("GET", f"/api/v2/dags/{dag_id}")
            except urllib.error.HTTPError as exc:
                if exc.code != 404 or time.monotonic() > deadline:
                    raise AssertionError(f"DAG {dag_id} not parsed after {timeout:.0f} s") from None
            time.sleep(1)

    def unpause(self, dag_id: str) -> None:
        self.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def trigger(self, dag_id: str, conf: dict | None = None) -> str:
        run = self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})
        return run["dag_run_id"]

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        return self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100")["task_instances"]

    def import_errors(self) -> list[dict]:
        return self.call("GET", "/api/v2/importErrors")["import_errors"]

    def wait_for_run(self, dag_id: str, run_id: str, home: Path, timeout: float = 240,
                     expect: str = "success", poll: float = 1.0, since: float | None = None) -> float:
        """Wait until the run ends; on an unexpected end or a timeout, fail with the task logs.
        Returns the seconds since ``since`` (a ``time.monotonic()``; default: now)."""
        start = time.monotonic() if since is None else since
        state = None
        while time.monotonic() - start < timeout:
            state = self.run_state(dag_id, run_id)
            if state in ("success", "failed"):
                break
            time.sleep(poll)
        if state != expect:
            raise AssertionError(f"run {run_id} of {dag_id} ended {state!r} (expected {expect!r}) after "
                                 f"{time.monotonic() - start:.0f} s\n{self.describe(dag_id, run_id, home)}")
        return time.monotonic() - start

    def describe(self, dag_id: str, run_id: str, home: Path, tail: int = 60) -> str:
        """Task states, plus the log tail of every task that did not succeed."""
        lines = []
        for ti in sorted(self.task_instances(dag_id, run_id), key=lambda t: t["task_id"]):
            lines.append(f"  {ti['task_id']}: {ti['state']} (try {ti['try_number']})")
            if ti["state"] != "success":
                lines += [f"    | {line}" for line in task_log(home, dag_id, run_id, ti["task_id"])[-tail:]]
        return "\n".join(lines)




def task_log(home: Path, dag_id: str, run_id: str, task_id: str) -> list[str]:
    """The task's log lines from $AIRFLOW_HOME/logs (all tries), messages only."""
    out: list[str] = []
    for path in sorted((home / "logs").glob(f"dag_id={dag_id}/run_id={run_id}/task_id={task_id}/**/*.log")):
        out.append(f"== {path.name}")
        for raw in path.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(raw)
            except ValueError:
                out.append(raw)
                continue
            out += f"{rec.get('level', '')}: {rec.get('event', '')}".splitlines()
            for exc in rec.get("error_detail") or []:
                frames = [f"{f['filename']}:{f['lineno']} in {f['name']}" for f in exc.get("frames", [])[-4:]]
                out += [f"  {exc.get('exc_type')}: {exc.get('exc_value')}", *(f"    at {f}" for f in frames)]
    return out


class LocalAirflow:
    """``scripts/airflow_local.sh start --detach`` in an isolated home; ``stop`` leaves nothing.

    ``root`` is the project whose launcher runs (a copy of the project, in the walkthrough test).
    """

    def __init__(self, home: Path, env: dict[str, str], port: int | None = None, root: Path = PROJECT_ROOT) -> None:
        self.home = home
        self.root = root
        self.port = port or free_port()
        self.env = dict(env, AIRFLOW_HOME=str(home), AIRFLOW_PORT=str(self.port))
        self.api: AirflowAPI | None = None
        self.start_output = ""

    def _launcher(self, *args: str, timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(self.root / "scripts" / "airflow_local.sh"), *args], env=self.env,
                              cwd=self.root, capture_output=True, text=True, timeout=timeout)

    def start(self, timeout: float = 300) -> AirflowAPI:
        proc = self._launcher("start", "--detach", timeout=timeout)
        if proc.returncode != 0:
            self.stop()
            raise AssertionError(f"airflow_local.sh start failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        self.start_output = proc.stdout
        return self.connect()

    def connect(self) -> AirflowAPI:
        """A client logged in as admin (the password the simple auth manager generated)."""
        password = json.loads((self.home / PASSWORD_FILE).read_text())["admin"]
        self.api = AirflowAPI(self.port, "admin", password)
        return self.api

    def stop(self) -> str:
        proc = self._launcher("stop", timeout=180)
        return proc.stdout + proc.stderr

    def leftovers(self) -> list[str]:
        """Processes still carrying this instance's marker, or naming its home on the command line."""
        from spark_jobs.orchestration.airflow_env import leftover_pids

        pids = set(leftover_pids(str(self.home.resolve())))
        ps = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
        for line in ps.splitlines():
            pid, _, args = line.strip().partition(" ")
            if str(self.home) in args and int(pid) != os.getpid():
                pids.add(int(pid))
        return [line for line in ps.splitlines() if line.strip() and int(line.split()[0]) in pids]
