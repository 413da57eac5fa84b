#!/usr/bin/env bash
# A local Airflow (`airflow standalone`) running this repo's DAGs, on 127.0.0.1 only.
#
#   scripts/airflow_local.sh [start]          run in the foreground; Ctrl-C stops everything it started
#   scripts/airflow_local.sh start --detach   start in the background, return once healthy
#   scripts/airflow_local.sh stop             stop it (e.g. from another terminal)
#   scripts/airflow_local.sh status           exit 0 if running and healthy, 3 if not
#
# What it sets up (see spark_jobs/orchestration/airflow_env.py): AIRFLOW_HOME (default
# <repo>/.airflow), dags/ as the DAGs folder, SQLite + LocalExecutor, no examples, low
# parallelism, API server on 127.0.0.1; the Spark service the profile ($DBSP_CONFIG, default
# config/connect.yaml here) needs: a Spark Connect server (scripts/spark_connect.sh) for
# `connect`, so no task starts a JVM; a standalone cluster (scripts/spark_cluster.sh) for a
# `cluster` profile with a local master; and, for `spark.submit: spark-submit`, the connection
# AIRFLOW_CONN_SPARK_DBSP. Spark services that were already running are used and left running;
# the ones it starts, it stops. It also installs $AIRFLOW_HOME/config/airflow_local_settings.py
# (the scheduler preloads the task runtime: spark_jobs/orchestration/warm.py; SQLite's now() gets
# milliseconds, so a triggered run starts at once: sqlite_clock.py; a task's end is reported when
# its process ends, not up to 5 s later: task_exit.py) and writes
# $AIRFLOW_HOME/env.sh: `source .airflow/env.sh` gives a shell AIRFLOW_HOME, the venv's bin on
# PATH (`airflow`, `dbsp`) and the same settings as the running Airflow.
#
# Environment (all optional):
#   AIRFLOW_HOME            state, logs, SQLite DB, pid files (default <repo>/.airflow)
#   AIRFLOW_PORT            API server / UI port (default 8080)
#   AIRFLOW_PARALLELISM     task slots (default 4)
#   AIRFLOW_START_TIMEOUT   seconds to wait for /api/v2/monitor/health (default 180)
#   AIRFLOW_STOP_TIMEOUT    seconds between SIGTERM and SIGKILL (default 30)
#   DBSP_CONFIG             Spark profile (name or path; default connect); DBSP_DATA_ROOT, DBSP_CIRCUITS_DIR
#                           are passed on to the DAG parser and the tasks
#   DBSP_PYTHON             python of the venv (default <repo>/.venv/bin/python)
#   AIRFLOW__*              any Airflow setting; values already set win over the defaults above
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${DBSP_PYTHON:-$ROOT/.venv/bin/python}"
export DBSP_CONFIG="${DBSP_CONFIG:-connect}"  # tasks are Spark Connect clients: no JVM per task
export AIRFLOW_HOME="$(realpath -m "${AIRFLOW_HOME:-$ROOT/.airflow}")"
PORT="${AIRFLOW_PORT:-8080}"
PARALLELISM="${AIRFLOW_PARALLELISM:-4}"
START_TIMEOUT="${AIRFLOW_START_TIMEOUT:-180}"
STOP_TIMEOUT="${AIRFLOW_STOP_TIMEOUT:-30}"
PID_FILE="$AIRFLOW_HOME/airflow_local.pid"          # pid (= process group) of `airflow standalone`
SERVICES_FILE="$AIRFLOW_HOME/airflow_local.services" # Spark services this script started
ENV_FILE="$AIRFLOW_HOME/env.sh"                     # the environment: `stop` from another shell, the CLI
LOG="$AIRFLOW_HOME/airflow_local.log"
MARKER="$AIRFLOW_HOME"                               # DBSP_AIRFLOW_LOCAL: tags every process we start

log() { echo "[airflow_local] $*"; }
die() { echo "[airflow_local] ERROR: $*" >&2; exit 1; }

[ -x "$PY" ] || die "no python at $PY: run 'make install' first (or set DBSP_PYTHON)"
mkdir -p "$AIRFLOW_HOME"
cd "$ROOT"

alive() {  # a pid that exists and is not a zombie
  local st
  st="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

running_pid() {
  [ -f "$PID_FILE" ] || return 1
  local pid; pid="$(cat "$PID_FILE" 2>/dev/null)" || return 1
  [ -n "$pid" ] && alive "$pid" || return 1
  echo "$pid"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# SIGTERM to a process group, wait, then SIGKILL whatever is left of it
stop_group() {
  local pgid=$1 waited=0
  kill -TERM -- "-$pgid" 2>/dev/null || return 0
  while kill -0 -- "-$pgid" 2>/dev/null; do
    if [ "$waited" -ge "$((STOP_TIMEOUT * 10))" ]; then
      log "process group $pgid still alive after ${STOP_TIMEOUT}s: SIGKILL"
      kill -KILL -- "-$pgid" 2>/dev/null || true
      break
    fi
    sleep 0.1; waited=$((waited + 1))
  done
}

# processes that left the group (task processes, Spark drivers) but carry our marker
sweep_leftovers() {
  local pids
  pids="$("$PY" -m spark_jobs.orchestration.airflow_env leftovers --marker "$MARKER" 2>/dev/null || true)"
  [ -n "$pids" ] || return 0
  log "stopping leftover processes: $pids"
  kill -TERM $pids 2>/dev/null || true
  sleep 3
  pids="$("$PY" -m spark_jobs.orchestration.airflow_env leftovers --marker "$MARKER" 2>/dev/null || true)"
  [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
}

stop_services() {
  [ -f "$SERVICES_FILE" ] || return 0
  local svc
  # shellcheck disable=SC1090
  [ -f "$ENV_FILE" ] && source "$ENV_FILE"
  while read -r svc; do
    case "$svc" in
      connect) log "stopping the Spark Connect server it started"; bash "$ROOT/scripts/spark_connect.sh" stop || true ;;
      cluster) log "stopping the Spark cluster it started"; bash "$ROOT/scripts/spark_cluster.sh" stop || true ;;
    esac
  done < "$SERVICES_FILE"
  rm -f "$SERVICES_FILE"
}

cmd_stop() {
  local pid
  if pid="$(running_pid)"; then
    log "stopping airflow standalone (process group $pid)"
    stop_group "$pid"
  else
    log "airflow is not running (no live pid in $PID_FILE)"
  fi
  rm -f "$PID_FILE"
  sweep_leftovers
  stop_services
  log "stopped"
}

cmd_status() {
  local pid
  if pid="$(running_pid)"; then
    if "$PY" -m spark_jobs.orchestration.airflow_env wait --port "$PORT" --timeout 1 >/dev/null 2>&1; then
      log "running and healthy: pid $pid, http://127.0.0.1:$PORT (AIRFLOW_HOME=$AIRFLOW_HOME)"
      return 0
    fi
    log "running (pid $pid) but not healthy yet on port $PORT"
    return 3
  fi
  log "not running (AIRFLOW_HOME=$AIRFLOW_HOME)"
  return 3
}

start_spark_service() {
  case "${DBSP_SPARK_SERVICE:-none}" in
    connect)
      [ -f "$ROOT/scripts/spark_connect.sh" ] || { log "profile uses Spark Connect but scripts/spark_connect.sh is missing: start the server yourself"; return 0; }
      if bash "$ROOT/scripts/spark_connect.sh" status >/dev/null 2>&1; then
        log "Spark Connect server already running on port ${SPARK_CONNECT_PORT:-15002}: using it"
      else
        echo connect >> "$SERVICES_FILE"
        bash "$ROOT/scripts/spark_connect.sh" start
      fi ;;
    cluster)
      [ -f "$ROOT/scripts/spark_cluster.sh" ] || { log "scripts/spark_cluster.sh is missing: start the cluster yourself"; return 0; }
      if bash "$ROOT/scripts/spark_cluster.sh" status >/dev/null 2>&1; then
        log "Spark cluster already running: using it"
      else
        echo cluster >> "$SERVICES_FILE"
        bash "$ROOT/scripts/spark_cluster.sh" start
      fi ;;
  esac
}

print_access() {
  local password="" i
  for i in $(seq 1 30); do
    password="$("$PY" -m spark_jobs.orchestration.airflow_env password --home "$AIRFLOW_HOME" 2>/dev/null)" && break
    sleep 1
  done
  log "ready after $(( $(date +%s) - T0 )) s"
  echo
  echo "  Airflow UI:  http://127.0.0.1:$PORT"
  echo "  login:       admin / ${password:-<see $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated>}"
  echo "  DAGs:        $AIRFLOW__CORE__DAGS_FOLDER (one per circuit; new DAGs start paused)"
  echo "  profile:     $DBSP_CONFIG (Spark service: $DBSP_SPARK_SERVICE)"
  echo "  logs:        $LOG, task logs under $AIRFLOW_HOME/logs"
  echo "  CLI:         source $ENV_FILE   (AIRFLOW_HOME, .venv/bin on PATH), then e.g. airflow dags list"
  echo "  stop:        Ctrl-C here, or scripts/airflow_local.sh stop"
  echo "  PostgreSQL:  a circuit's connection NAME (source/sink kind: postgres) is the Airflow connection NAME:"
  echo "               airflow connections add shop --conn-uri 'postgresql://USER:PASSWORD@HOST:5432/DB'"
  echo "               (or export AIRFLOW_CONN_SHOP=... before starting; the CLI reads DBSP_CONN_SHOP)"
  echo
}

cmd_start() {
  local detach=${1:-}
  T0=$(date +%s)
  if pid="$(running_pid)"; then
    log "already running (pid $pid): http://127.0.0.1:$PORT; stop it with: scripts/airflow_local.sh stop"
    return 0
  fi
  if port_open "$PORT"; then
    die "port 127.0.0.1:$PORT is in use by another process; choose another with AIRFLOW_PORT=..."
  fi
  local exports
  exports="$("$PY" -m spark_jobs.orchestration.airflow_env exports --home "$AIRFLOW_HOME" --port "$PORT" \
    --parallelism "$PARALLELISM")" || die "cannot build the Airflow environment (is the profile valid?)"
  eval "$exports"
  {
    echo "# written by scripts/airflow_local.sh: \`source $ENV_FILE\` for the airflow and dbsp CLIs"
    printf 'export AIRFLOW_HOME=%q\n' "$AIRFLOW_HOME"
    printf 'export PATH=%q:"$PATH"\n' "$(dirname "$PY")"
    printf '%s\n' "$exports" | grep -v -E '^export (PATH|AIRFLOW_HOME)='
    export -p | grep -E '^declare -x (DBSP_|SPARK_CONNECT_|SPARK_CLUSTER_|SPARK_MASTER_|SPARK_WORKER_)' || true
  } > "$ENV_FILE"
  rm -f "$SERVICES_FILE"
  log "$("$PY" -c 'import sys; from spark_jobs.orchestration.warm import install; print(install(sys.argv[1]))' "$AIRFLOW_HOME")"

  log "starting airflow standalone (AIRFLOW_HOME=$AIRFLOW_HOME, port $PORT, log $LOG)"
  # its own session/process group: Ctrl-C here does not reach it half-way, stop kills all of it;
  # the marker in its environment (only there) finds its processes that leave the group
  DBSP_AIRFLOW_LOCAL="$MARKER" setsid "$(dirname "$PY")/airflow" standalone >> "$LOG" 2>&1 < /dev/null &
  local pid=$!
  echo "$pid" > "$PID_FILE"
  # the Spark service starts while Airflow boots (tasks need it only once a run starts)
  if ! start_spark_service; then
    cmd_stop
    die "the Spark service of profile $DBSP_CONFIG did not start"
  fi
  if ! "$PY" -m spark_jobs.orchestration.airflow_env wait --port "$PORT" --pid "$pid" --timeout "$START_TIMEOUT"; then
    log "last lines of $LOG:"; tail -n 30 "$LOG" | sed 's/^/    /' >&2
    cmd_stop
    die "airflow did not become healthy"
  fi
  print_access
  [ "$detach" = "--detach" ] && return 0

  trap 'echo; log "Ctrl-C: stopping"; cmd_stop; exit 0' INT TERM
  # returns when standalone exits (e.g. `airflow_local.sh stop` from elsewhere)
  wait "$pid" || true
  trap - INT TERM
  cmd_stop
}

case "${1:-start}" in
  start) cmd_start "${2:-}" ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) echo "usage: $0 [start [--detach]] | stop | status   (see the header of this file)" >&2; exit 2 ;;
esac
