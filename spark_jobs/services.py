"""Start, stop and probe the local Spark services (for tests, the CLI and the Airflow launcher).

Thin wrappers around ``scripts/spark_connect.sh`` and ``scripts/spark_cluster.sh`` with
timeouts and clear errors; the scripts do the work and stay usable by hand. Every function takes
an optional ``run_dir`` (logs, pids, work dirs) and ``env`` (extra environment, e.g. ports: see
the scripts' headers), so a test can run its own instance.

    python -m spark_jobs.services start-cluster --workers 2
    python -m spark_jobs.services probe cluster        # a small job through config/cluster.yaml
    python -m spark_jobs.services stop-cluster
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from spark_jobs.config import PROJECT_ROOT
from spark_jobs.errors import DbspError, EXIT_FAILED

log = logging.getLogger(__name__)

SCRIPTS = PROJECT_ROOT / "scripts"
CONNECT_SCRIPT = SCRIPTS / "spark_connect.sh"
CLUSTER_SCRIPT = SCRIPTS / "spark_cluster.sh"
DEFAULT_CONNECT_RUN_DIR = PROJECT_ROOT / ".run" / "spark-connect"
DEFAULT_CLUSTER_RUN_DIR = PROJECT_ROOT / ".run" / "spark-cluster"
CONNECT_URL = "sc://127.0.0.1:15002"
MASTER_URL = "spark://127.0.0.1:7077"
MASTER_JSON = "http://127.0.0.1:8081/json/"


class ServiceError(DbspError, RuntimeError):
    """A service script failed or timed out; the message carries the script's output."""
    exit_code = EXIT_FAILED


def _run(script: Path, args: list[str], timeout: float, run_dir_var: str,
         run_dir: str | os.PathLike[str] | None, env: dict[str, str] | None) -> str:
    full_env = dict(os.environ)
    full_env.setdefault("DBSP_PYTHON", sys.executable)
    if run_dir is not None:
        full_env[run_dir_var] = str(run_dir)
    full_env.update(env or {})
    cmd = ["bash", str(script), *args]
    try:
        proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        raise ServiceError(f"{' '.join(cmd[1:])} did not finish within {timeout:.0f} s\n{out}") from exc
    out = proc.stdout + proc.stderr
    for line in out.splitlines():
        log.info("%s", line)
    if proc.returncode not in (0, 3) or (proc.returncode == 3 and args[0] != "status"):
        raise ServiceError(f"{' '.join(cmd[1:])} failed with exit code {proc.returncode}:\n{out}")
    return out


# --- Spark Connect -------------------------------------------------------------------------------

def start_connect(timeout: float = 150, run_dir=None, env: dict[str, str] | None = None) -> str:
    """Start the Spark Connect server (no-op if running); return its ``sc://`` URL."""
    try:
        _run(CONNECT_SCRIPT, ["start"], timeout, "SPARK_CONNECT_RUN_DIR", run_dir, env)
    except ServiceError:
        stop_connect(run_dir=run_dir, env=env, check=False)
        raise
    port = (env or {}).get("SPARK_CONNECT_PORT", os.environ.get("SPARK_CONNECT_PORT", "15002"))
    return f"sc://127.0.0.1:{port}"


def stop_connect(timeout: float = 60, run_dir=None, env: dict[str, str] | None = None,
                 check: bool = True) -> None:
    """Stop the Spark Connect server (no-op if not running)."""
    try:
        _run(CONNECT_SCRIPT, ["stop"], timeout, "SPARK_CONNECT_RUN_DIR", run_dir, env)
    except ServiceError:
        if check:
            raise


def connect_running(run_dir=None, env: dict[str, str] | None = None) -> bool:
    out = _run(CONNECT_SCRIPT, ["status"], 30, "SPARK_CONNECT_RUN_DIR", run_dir, env)
    return "running" in out and "not running" not in out


# --- standalone cluster ----------------------------------------------------------------------------

def start_cluster(workers: int = 2, timeout: float = 180, run_dir=None,
                  env: dict[str, str] | None = None) -> str:
    """Start a master and ``workers`` workers, wait until all registered; return the master URL."""
    try:
        _run(CLUSTER_SCRIPT, ["start", "--workers", str(int(workers))], timeout,
             "SPARK_CLUSTER_RUN_DIR", run_dir, env)
    except ServiceError:
        stop_cluster(run_dir=run_dir, env=env, check=False)
        raise
    port = (env or {}).get("SPARK_MASTER_PORT", os.environ.get("SPARK_MASTER_PORT", "7077"))
    return f"spark://127.0.0.1:{port}"


def stop_cluster(timeout: float = 90, run_dir=None, env: dict[str, str] | None = None,
                 check: bool = True) -> None:
    """Stop workers, master and leftover executors; the script fails if a process survives."""
    try:
        _run(CLUSTER_SCRIPT, ["stop"], timeout, "SPARK_CLUSTER_RUN_DIR", run_dir, env)
    except ServiceError:
        if check:
            raise


def kill_worker(i: int, hard: bool = True, timeout: float = 60, run_dir=None,
                env: dict[str, str] | None = None) -> None:
    """Take worker ``i`` (1-based) away: ``hard`` = SIGKILL it and its executors (a lost
    machine), else a graceful SIGTERM."""
    _run(CLUSTER_SCRIPT, ["kill-worker" if hard else "stop-worker", str(int(i))], timeout,
         "SPARK_CLUSTER_RUN_DIR", run_dir, env)


def start_worker(i: int, timeout: float = 120, run_dir=None, env: dict[str, str] | None = None) -> None:
    """(Re)start worker ``i`` and wait until it is registered."""
    _run(CLUSTER_SCRIPT, ["start-worker", str(int(i))], timeout, "SPARK_CLUSTER_RUN_DIR", run_dir, env)


def cluster_running(run_dir=None, env: dict[str, str] | None = None) -> bool:
    out = _run(CLUSTER_SCRIPT, ["status"], 30, "SPARK_CLUSTER_RUN_DIR", run_dir, env)
    return "master running" in out


def alive_workers(json_url: str = MASTER_JSON, timeout: float = 3) -> int:
    """ALIVE workers reported by the master's JSON page; -1 if the master does not answer."""
    try:
        with urllib.request.urlopen(json_url, timeout=timeout) as resp:  # loopback only
            data = json.load(resp)
    except OSError:
        return -1
    return sum(1 for w in data.get("workers", []) if w.get("state") == "ALIVE")


# --- process checks ----------------------------------------------------------------------------------

def processes_under(run_dir: str | os.PathLike[str]) -> list[int]:
    """Java/Python processes whose working directory is ``run_dir`` or below it: the daemons,
    executors and Python workers the scripts started there (they run from their run dir)."""
    root = os.path.realpath(run_dir)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
            with open(f"/proc/{entry}/comm", encoding="utf-8") as fh:
                comm = fh.read().strip()
        except OSError:
            continue
        if (cwd == root or cwd.startswith(root + os.sep)) and (comm == "java" or comm.startswith("python")):
            found.append(int(entry))
    return sorted(found)


def spark_daemon_processes(markers: tuple[str, ...] = ("org.apache.spark.deploy.master.Master",
                                                       "org.apache.spark.deploy.worker.Worker",
                                                       "CoarseGrainedExecutorBackend",
                                                       "SparkConnectServer")) -> list[str]:
    """Command lines of running Spark daemons (masters, workers, executors, Connect servers).
    Plain local sessions (org.apache.spark.deploy.SparkSubmit ... pyspark-shell) do not count."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    return [line.strip() for line in out.splitlines() if any(m in line for m in markers)]


# --- probe -------------------------------------------------------------------------------------------

def probe(profile: str, data_dir: str | None = None) -> dict[str, float]:
    """Open a session through ``profile`` and run a small job (aggregate + Parquet round trip
    under ``data_dir``). Returns timings in seconds. Meant to run in its own process."""
    from spark_jobs.config import load_config
    from spark_jobs.executor.spark.session import get_spark

    t0 = time.perf_counter()
    spark = get_spark(load_config(profile))
    t1 = time.perf_counter()
    groups = spark.range(100_000).selectExpr("id % 7 AS k", "id").groupBy("k").count().collect()
    t2 = time.perf_counter()
    result: dict[str, float] = {"session_s": t1 - t0, "first_query_s": t2 - t1, "groups": len(groups)}
    if data_dir:
        path = os.path.join(os.path.abspath(data_dir), "probe.parquet")
        spark.range(1000).write.mode("overwrite").parquet(path)
        result["parquet_rows"] = spark.read.parquet(path).count()
        result["parquet_s"] = time.perf_counter() - t2
    if load_config(profile).spark.mode == "cluster":
        result["executors"] = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    spark.stop()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m spark_jobs.services", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("start-connect")
    sub.add_parser("stop-connect")
    p = sub.add_parser("start-cluster")
    p.add_argument("--workers", type=int, default=2)
    sub.add_parser("stop-cluster")
    p = sub.add_parser("kill-worker")
    p.add_argument("index", type=int)
    p.add_argument("--graceful", action="store_true", help="SIGTERM instead of SIGKILL")
    p = sub.add_parser("probe", help="run a small job through a profile and print timings as JSON")
    p.add_argument("profile", help="local | connect | cluster | path to a profile")
    p.add_argument("--data-dir", help="also write and read a small Parquet file here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.cmd == "start-connect":
            print(start_connect())
        elif args.cmd == "stop-connect":
            stop_connect()
        elif args.cmd == "start-cluster":
            print(start_cluster(args.workers))
        elif args.cmd == "stop-cluster":
            stop_cluster()
        elif args.cmd == "kill-worker":
            kill_worker(args.index, hard=not args.graceful)
        elif args.cmd == "probe":
            print(json.dumps(probe(args.profile, args.data_dir)))
    except ServiceError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
