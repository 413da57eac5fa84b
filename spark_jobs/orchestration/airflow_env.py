"""The environment of an isolated local Airflow (scripts/airflow_local.sh and the e2e tests).

One place says how a local Airflow is set up: its own AIRFLOW_HOME with SQLite and the
LocalExecutor, loopback only, few parallel tasks (each local worker costs ~50 MB, a local Spark
driver far more), this repo's dags/, and what the Spark profile needs (a Spark Connect server or
a standalone cluster to start, a ``spark`` connection for ``spark-submit`` tasks).

    python -m spark_jobs.orchestration.airflow_env exports --home .airflow --port 8080
    python -m spark_jobs.orchestration.airflow_env wait --port 8080 --pid 1234 --timeout 120
    python -m spark_jobs.orchestration.airflow_env password --home .airflow

Nothing here imports Airflow or Spark: the launcher calls it before either runs.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from spark_jobs.config import PROJECT_ROOT, Config, load_config

HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_PARALLELISM = 4
PASSWORD_FILE = "simple_auth_manager_passwords.json.generated"
MARKER_ENV = "DBSP_AIRFLOW_LOCAL"  # set on every process of one launcher run: finds leftovers
HEALTHY_PARTS = ("metadatabase", "scheduler", "dag_processor")
IDLE_SLEEP_SECONDS = 0.25
# Airflow 3.3's trigger dialog always draws a "Backfill" choice, greyed out for a DAG that cannot
# be backfilled (every circuit's: a timestep is the next change, not a logical date). The UI's
# theme hides the choice where it is greyed out, so a circuit's dialog offers a run and nothing
# else; a DAG that can be backfilled keeps it. The same JSON is in docker/docker-compose.yml.
UI_THEME = json.dumps({"globalCss": {"[role=radiogroup]:has(input[value=backfill]:disabled)":
                                     {"display": "none !important"}}}, separators=(",", ":"))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    import socket

    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def venv_bin() -> str:
    return os.path.dirname(sys.executable)


def pyspark_bin() -> str | None:
    """The folder of ``spark-submit`` inside the pip-installed pyspark (not imported: slow)."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = os.path.join(list(spec.submodule_search_locations)[0], "bin")
    return folder if os.path.isdir(folder) else None


def airflow_settings(home: str, *, dags_folder: str | None = None, port: int = DEFAULT_PORT,
                     parallelism: int = DEFAULT_PARALLELISM) -> dict[str, str]:
    """AIRFLOW_* settings of a local, loopback-only Airflow in ``home``."""
    home = os.path.abspath(home)
    return {
        "AIRFLOW_HOME": home,
        "AIRFLOW__CORE__DAGS_FOLDER": os.path.abspath(dags_folder or PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__PARALLELISM": str(parallelism),
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(parallelism),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__API__HOST": HOST,
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://{HOST}:{port}/execution/",
        # log servers of the workers and the triggerer: Airflow's 8793/8794 at port 8080, moved
        # along with the port so that a second local Airflow (a test) does not collide
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(port + 713),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(port + 714),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        # the scheduler wakes up 4x a second when idle (default 1 s): a finished task's
        # downstream tasks start ~0.5 s sooner, at each of a run's task-to-task hops
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": str(IDLE_SLEEP_SECONDS),
        "AIRFLOW__API__THEME": UI_THEME,
    }


def _host_port(url: str, default_port: int) -> tuple[str, int]:
    parsed = urlparse(url)
    return parsed.hostname or "", parsed.port or default_port


def spark_settings(config: Config) -> dict[str, str]:
    """What the profile needs around Airflow: the service to start and the spark connection.

    ``DBSP_SPARK_SERVICE``: ``connect`` (a local Connect server), ``cluster`` (a local standalone
    cluster) or ``none``. A profile with ``spark.submit: spark-submit`` also gets
    ``AIRFLOW_CONN_<CONN_ID>`` (the SparkSubmitOperator's connection) and pyspark's bin on PATH.
    """
    from spark_jobs.orchestration.submission import submission_for

    out = {"DBSP_SPARK_SERVICE": "none", "DBSP_CONFIG": config.path, "SPARK_LOCAL_IP": HOST}
    s = config.spark
    if s.mode == "connect":
        host, port = _host_port(s.remote or "sc://127.0.0.1:15002", 15002)
        if host in (HOST, "localhost"):
            out.update(DBSP_SPARK_SERVICE="connect", SPARK_CONNECT_PORT=str(port))
    elif s.mode == "cluster" and s.master.startswith("spark://"):
        host, port = _host_port(s.master, 7077)
        if host in (HOST, "localhost"):
            out.update(DBSP_SPARK_SERVICE="cluster", SPARK_MASTER_PORT=str(port))
    sub = submission_for(config)
    if sub.kind == "spark_submit":
        out[f"AIRFLOW_CONN_{sub.conn_id.upper()}"] = spark_connection(s.master)
    return out


def spark_connection(master: str) -> str:
    """The Airflow connection (JSON form) the Spark provider reads as ``--master <master>``."""
    parsed = urlparse(master)
    if parsed.scheme == "spark" and parsed.port:
        return json.dumps({"conn_type": "spark", "host": f"spark://{parsed.hostname}", "port": parsed.port,
                           "extra": {"deploy-mode": "client"}})
    return json.dumps({"conn_type": "spark", "host": master, "extra": {"deploy-mode": "client"}})


def environment(home: str, *, config: Config | None = None, dags_folder: str | None = None,
                port: int = DEFAULT_PORT, parallelism: int = DEFAULT_PARALLELISM,
                base: dict[str, str] | None = None, force: bool = False) -> dict[str, str]:
    """The full environment: ``base`` (default os.environ) plus the settings above.

    Values already in ``base`` win unless ``force`` (tests force, to be isolated from the shell).
    PATH always gets the venv's bin first (``airflow standalone`` runs ``airflow`` from PATH).
    """
    env = dict(os.environ if base is None else base)
    wanted = airflow_settings(home, dags_folder=dags_folder, port=port, parallelism=parallelism)
    wanted.update(spark_settings(config or load_config()))
    wanted["PYSPARK_PYTHON"] = sys.executable
    for key, value in wanted.items():
        if force or key not in env or key in ("AIRFLOW_HOME", "DBSP_SPARK_SERVICE"):
            env[key] = value
    path = [venv_bin()]
    if any(k.startswith("AIRFLOW_CONN_") for k in wanted) and pyspark_bin():
        path.append(str(pyspark_bin()))
    env["PATH"] = os.pathsep.join(path + [p for p in env.get("PATH", "").split(os.pathsep) if p and p not in path])
    return env


# ---- the running Airflow -----------------------------------------------------------------------------
def base_url(port: int = DEFAULT_PORT) -> str:
    return f"http://{HOST}:{port}"


def health(port: int = DEFAULT_PORT, timeout: float = 5.0) -> dict | None:
    """``/api/v2/monitor/health`` as a dict, or None while the API server does not answer."""
    try:
        with urllib.request.urlopen(f"{base_url(port)}/api/v2/monitor/health", timeout=timeout) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def is_healthy(report: dict | None, parts: tuple[str, ...] = HEALTHY_PARTS) -> bool:
    return bool(report) and all((report.get(p) or {}).get("status") == "healthy" for p in parts)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def wait_healthy(port: int = DEFAULT_PORT, timeout: float = 180.0, pid: int | None = None) -> dict:
    """Poll the health endpoint until its parts are healthy; fail early if ``pid`` dies."""
    deadline = time.monotonic() + timeout
    report = None
    while time.monotonic() < deadline:
        report = health(port)
        if is_healthy(report):
            return report or {}
        if pid is not None and not _alive(pid):
            raise RuntimeError(f"airflow (pid {pid}) exited before it was healthy")
        time.sleep(1.0)
    raise TimeoutError(f"airflow on port {port} not healthy after {timeout:.0f} s; last report: {report}")


def admin_password(home: str, user: str = "admin") -> str | None:
    """The generated password of ``user`` (written by the simple auth manager at start)."""
    path = Path(home) / PASSWORD_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8")).get(user)
    except (OSError, ValueError):
        return None


def leftover_pids(marker: str) -> list[int]:
    """Processes whose environment carries ``MARKER_ENV=marker`` (this launcher run's processes)."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0") and _alive(int(entry)):
                    found.append(int(entry))
        except OSError:
            continue
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="helpers for scripts/airflow_local.sh")
    sub = parser.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("exports", help="print `export K=V` lines for the shell")
    ex.add_argument("--home", required=True)
    ex.add_argument("--port", type=int, default=DEFAULT_PORT)
    ex.add_argument("--parallelism", type=int, default=DEFAULT_PARALLELISM)
    ex.add_argument("--dags-folder")
    wt = sub.add_parser("wait", help="wait until /api/v2/monitor/health is healthy")
    wt.add_argument("--port", type=int, default=DEFAULT_PORT)
    wt.add_argument("--timeout", type=float, default=180.0)
    wt.add_argument("--pid", type=int)
    pw = sub.add_parser("password", help="print the generated admin password")
    pw.add_argument("--home", required=True)
    lo = sub.add_parser("leftovers", help="print pids of processes carrying the launcher's marker")
    lo.add_argument("--marker", required=True)
    args = parser.parse_args(argv)
    if args.cmd == "exports":
        env = environment(args.home, dags_folder=args.dags_folder, port=args.port, parallelism=args.parallelism)
        for key, value in sorted(env.items()):
            if os.environ.get(key) != value:
                print(f"export {key}={shlex.quote(value)}")
        return 0
    if args.cmd == "wait":
        try:
            report = wait_healthy(args.port, args.timeout, args.pid)
        except (RuntimeError, TimeoutError) as exc:
            print(f"[airflow_env] {exc}", file=sys.stderr)
            return 1
        print(json.dumps({k: (v or {}).get("status") for k, v in report.items()}))
        return 0
    if args.cmd == "password":
        password = admin_password(args.home)
        if password is None:
            return 1
        print(password)
        return 0
    print(" ".join(map(str, leftover_pids(args.marker))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
