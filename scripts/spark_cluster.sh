#!/usr/bin/env bash
# A Spark standalone cluster on this machine (loopback only), from the pip-installed pyspark.
#
#   scripts/spark_cluster.sh start [--workers N]   master + N workers (default 2); waits until
#                                                  all N are registered; no-op if already up
#   scripts/spark_cluster.sh stop                  stop workers, master and any executor left;
#                                                  checks that no process is left behind
#   scripts/spark_cluster.sh status                exit 0 if the master is up, 3 if not
#   scripts/spark_cluster.sh stop-worker I         stop worker I (1-based) gracefully (SIGTERM)
#   scripts/spark_cluster.sh kill-worker I         kill worker I and its executors with SIGKILL
#                                                  (simulates a lost machine)
#   scripts/spark_cluster.sh start-worker I        (re)start worker I and wait until it registers
#
# Jobs then use master spark://127.0.0.1:7077 (profile config/cluster.yaml, DBSP_CONFIG=cluster).
# The master's web UI is http://127.0.0.1:8081 (8080 is Airflow's); worker I's is 8081+I.
#
# The pip package has no start-master.sh/start-worker.sh: we call sbin/spark-daemon.sh directly,
# with SPARK_LOG_DIR, SPARK_PID_DIR and the workers' work dirs under a run dir. Daemons run with
# the run dir as their working directory, so every process of this cluster (including executors,
# whose cwd is the worker's work dir) can be found by its cwd when stopping.
#
# Environment (all optional):
#   SPARK_CLUSTER_RUN_DIR       logs, pids, work dirs (default: <repo>/.run/spark-cluster)
#   SPARK_CLUSTER_WORKERS       default number of workers (2)
#   SPARK_MASTER_HOST           bind address of all daemons (127.0.0.1)
#   SPARK_MASTER_PORT           master RPC port (7077)
#   SPARK_MASTER_WEBUI_PORT     master web UI (8081)
#   SPARK_WORKER_WEBUI_PORT     web UI of worker 1; worker I uses this + I - 1 (8082)
#   SPARK_WORKER_CORES          cores each worker offers (1)
#   SPARK_WORKER_MEMORY         memory each worker offers to executors (1g)
#   SPARK_DAEMON_MEMORY         heap of the master and worker daemons themselves (512m)
#   SPARK_CLUSTER_START_TIMEOUT seconds to wait for the master / worker registration (90)
#   SPARK_CLUSTER_STOP_TIMEOUT  seconds between SIGTERM and SIGKILL (20)
#   DBSP_PYTHON                 python with pyspark (default <repo>/.venv/bin/python)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MASTER_CLASS="org.apache.spark.deploy.master.Master"
WORKER_CLASS="org.apache.spark.deploy.worker.Worker"
RUN_DIR="$(realpath -m "${SPARK_CLUSTER_RUN_DIR:-$ROOT/.run/spark-cluster}")"
WORKERS="${SPARK_CLUSTER_WORKERS:-2}"
HOST="${SPARK_MASTER_HOST:-127.0.0.1}"
MPORT="${SPARK_MASTER_PORT:-7077}"
MUI="${SPARK_MASTER_WEBUI_PORT:-8081}"
WUI="${SPARK_WORKER_WEBUI_PORT:-8082}"
CORES="${SPARK_WORKER_CORES:-1}"
MEMORY="${SPARK_WORKER_MEMORY:-1g}"
START_TIMEOUT="${SPARK_CLUSTER_START_TIMEOUT:-90}"
STOP_TIMEOUT="${SPARK_CLUSTER_STOP_TIMEOUT:-20}"
PY="${DBSP_PYTHON:-$ROOT/.venv/bin/python}"
MASTER_URL="spark://$HOST:$MPORT"
JSON_URL="http://$HOST:$MUI/json/"

export SPARK_IDENT_STRING=dbsp
export SPARK_LOG_DIR="$RUN_DIR/logs"
export SPARK_PID_DIR="$RUN_DIR/pids"
export SPARK_LOCAL_IP="$HOST"                # the web UIs bind to SPARK_LOCAL_IP (loopback)
export SPARK_DAEMON_MEMORY="${SPARK_DAEMON_MEMORY:-512m}"
export PYSPARK_PYTHON="$PY"
# Spark reads these from the environment too; the command-line flags below win, but unset them
# so that a stale value from the caller's shell cannot disagree with what this script prints.
unset SPARK_WORKER_WEBUI_PORT SPARK_WORKER_PORT SPARK_WORKER_DIR SPARK_WORKER_INSTANCES

log() { echo "[spark_cluster] $*"; }
die() { echo "[spark_cluster] ERROR: $*" >&2; exit 1; }

spark_home() {
  [ -x "$PY" ] || die "python not found at $PY (run 'make install' or set DBSP_PYTHON)"
  "$PY" -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))' \
    || die "cannot import pyspark with $PY"
}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }
pid_file() { echo "$SPARK_PID_DIR/spark-$SPARK_IDENT_STRING-$1-$2.pid"; }
log_file() { ls -t "$SPARK_LOG_DIR"/spark-"$SPARK_IDENT_STRING"-"$1"-"$2"-*.out 2>/dev/null | head -n 1; }

# pid of daemon <class> <instance> if its pid file names a live java process
live_pid() {
  local f pid; f="$(pid_file "$1" "$2")"
  [ -f "$f" ] || return 1
  pid="$(cat "$f" 2>/dev/null)" || return 1
  [[ "$(ps -p "$pid" -o comm= 2>/dev/null)" == *java* ]] || return 1
  alive "$pid" || return 1
  echo "$pid"
}

show_log_tail() {
  local f; f="$(log_file "$1" "$2")"
  [ -n "$f" ] || return 0
  echo "[spark_cluster] last lines of $f:" >&2
  tail -n 25 "$f" | sed 's/^/    /' >&2
}

# Processes of this cluster: java or python processes whose cwd is <dir> or below it (daemons,
# executors, python workers). Shells that merely sit in the run dir are not touched.
pids_under() {
  local d pid cwd real comm
  real="$(cd "$1" 2>/dev/null && pwd -P)" || return 0
  for d in /proc/[0-9]*; do
    pid="${d#/proc/}"
    cwd="$(readlink "$d/cwd" 2>/dev/null)" || continue
    case "$cwd" in "$real"|"$real"/*) ;; *) continue ;; esac
    comm="$(cat "$d/comm" 2>/dev/null)" || continue
    case "$comm" in java|python*) echo "$pid" ;; esac
  done
}
cluster_pids() { pids_under "$RUN_DIR"; }

# a pid is alive if it exists and is not a zombie waiting to be reaped
alive() {
  local st
  st="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

# SIGTERM the given pids, wait up to STOP_TIMEOUT, then SIGKILL the survivors
terminate() {
  [ $# -gt 0 ] || return 0
  local pid waited=0
  local -a survivors
  kill "$@" 2>/dev/null || true
  while :; do
    survivors=()
    for pid in "$@"; do alive "$pid" && survivors+=("$pid"); done
    [ ${#survivors[@]} -eq 0 ] && return 0
    if [ "$waited" -ge "$((STOP_TIMEOUT * 10))" ]; then
      log "still alive after ${STOP_TIMEOUT}s, SIGKILL: ${survivors[*]}"
      kill -9 "${survivors[@]}" 2>/dev/null || true
      sleep 0.5
      return 0
    fi
    sleep 0.1; waited=$((waited + 1))
  done
}

# Number of ALIVE workers the master reports (its JSON page, loopback only); -1 if unreachable.
alive_workers() {
  local body
  body="$(curl -fsS --max-time 3 "$JSON_URL" 2>/dev/null)" || { echo -1; return 0; }
  printf '%s' "$body" | "$PY" -c '
import json, sys
try:
    d = json.load(sys.stdin)
except Exception:
    print(-1); sys.exit(0)
print(sum(1 for w in d.get("workers", []) if w.get("state") == "ALIVE"))
' 2>/dev/null || echo -1
}

daemon() {  # daemon start|stop <class> <instance> [args...]
  local action=$1; shift
  (
    cd "$RUN_DIR"
    SPARK_HOME="$SPARK_HOME_DIR" "$SPARK_HOME_DIR/sbin/spark-daemon.sh" "$action" "$@" >/dev/null
  )
}

start_master() {
  local pid t0; t0=$(now)
  if pid="$(live_pid "$MASTER_CLASS" 1)"; then
    log "master already running: pid $pid, $MASTER_URL"
    return 0
  fi
  rm -f "$(pid_file "$MASTER_CLASS" 1)"
  local p
  for p in "$MPORT" "$MUI"; do
    port_open "$p" && die "port $HOST:$p is already in use by a process this script did not start.
  Stop it (another Spark master?), or choose other ports with SPARK_MASTER_PORT / SPARK_MASTER_WEBUI_PORT."
  done
  log "starting master $MASTER_URL (web UI http://$HOST:$MUI)"
  daemon start "$MASTER_CLASS" 1 --host "$HOST" --port "$MPORT" --webui-port "$MUI" \
    || { show_log_tail "$MASTER_CLASS" 1; die "spark-daemon.sh could not start the master"; }
  pid="$(live_pid "$MASTER_CLASS" 1)" || { show_log_tail "$MASTER_CLASS" 1; die "the master died right after launch"; }
  # Workers give up quickly and retry only every 5-15 s if the master is not listening yet:
  # wait for its RPC port before starting them.
  local deadline=$(( $(date +%s) + START_TIMEOUT ))
  until port_open "$MPORT"; do
    kill -0 "$pid" 2>/dev/null || { show_log_tail "$MASTER_CLASS" 1; die "the master (pid $pid) exited during start"; }
    [ "$(date +%s)" -lt "$deadline" ] || { show_log_tail "$MASTER_CLASS" 1; cmd_stop; die "timed out after ${START_TIMEOUT}s waiting for the master to listen on $HOST:$MPORT"; }
    sleep 0.2
  done
  log "master listening on $MASTER_URL: pid $pid after $(since "$t0") s"
}

start_worker() {  # start_worker I (does not wait for registration)
  local i=$1 pid ui=$((WUI + $1 - 1))
  if pid="$(live_pid "$WORKER_CLASS" "$i")"; then
    log "worker $i already running: pid $pid"
    return 0
  fi
  rm -f "$(pid_file "$WORKER_CLASS" "$i")"
  port_open "$ui" && die "port $HOST:$ui (web UI of worker $i) is already in use. Set SPARK_WORKER_WEBUI_PORT to another base port."
  mkdir -p "$RUN_DIR/work/worker-$i"
  log "starting worker $i ($CORES core(s), $MEMORY, web UI http://$HOST:$ui)"
  daemon start "$WORKER_CLASS" "$i" --host "$HOST" --webui-port "$ui" --cores "$CORES" --memory "$MEMORY" \
    --work-dir "$RUN_DIR/work/worker-$i" "$MASTER_URL" \
    || { show_log_tail "$WORKER_CLASS" "$i"; die "spark-daemon.sh could not start worker $i"; }
  live_pid "$WORKER_CLASS" "$i" >/dev/null || { show_log_tail "$WORKER_CLASS" "$i"; die "worker $i died right after launch"; }
}

wait_workers() {  # wait_workers N: until the master reports N ALIVE workers
  local want=$1 t0 n; t0=$(now)
  local deadline=$(( $(date +%s) + START_TIMEOUT ))
  while :; do
    n="$(alive_workers)"
    [ "$n" -ge "$want" ] && break
    if [ "$(date +%s)" -ge "$deadline" ]; then
      local i
      for i in $(seq 1 "$want"); do show_log_tail "$WORKER_CLASS" "$i"; done
      die "timed out after ${START_TIMEOUT}s: the master reports $n of $want workers ALIVE ($JSON_URL)"
    fi
    sleep 0.5
  done
  log "$n worker(s) registered with $MASTER_URL after $(since "$t0") s"
}

running_workers() {  # indexes of live workers
  local f i
  for f in "$SPARK_PID_DIR"/spark-"$SPARK_IDENT_STRING"-"$WORKER_CLASS"-*.pid; do
    [ -e "$f" ] || continue
    i="${f##*-}"; i="${i%.pid}"
    live_pid "$WORKER_CLASS" "$i" >/dev/null && echo "$i"
  done | sort -n
}

check_index() {
  [[ "${1:-}" =~ ^[1-9][0-9]*$ ]] || die "worker index must be a positive integer (1 = first worker), got '${1:-}'"
}

cmd_start() {
  local t0 i; t0=$(now)
  [[ "$WORKERS" =~ ^[1-9][0-9]*$ ]] || die "--workers must be a positive integer, got '$WORKERS'"
  SPARK_HOME_DIR="$(spark_home)"
  mkdir -p "$SPARK_LOG_DIR" "$SPARK_PID_DIR" "$RUN_DIR/work"
  start_master
  # Start the workers side by side (spark-daemon.sh spends >= 2.5 s per launch).
  local jobs=() failed=0
  for i in $(seq 1 "$WORKERS"); do start_worker "$i" & jobs+=($!); done
  for i in "${jobs[@]}"; do wait "$i" || failed=1; done
  [ "$failed" = 0 ] || die "some workers failed to start (see above); '$0 stop' cleans up"
  wait_workers "$WORKERS"
  log "ready: $MASTER_URL with $WORKERS worker(s) in $(since "$t0") s (logs: $SPARK_LOG_DIR)"
}

cmd_stop() {
  local t0 pid i pids left; t0=$(now)
  SPARK_HOME_DIR="${SPARK_HOME_DIR:-}"
  pids=()
  for i in $(running_workers); do
    pid="$(live_pid "$WORKER_CLASS" "$i")" && { log "stopping worker $i (pid $pid)"; pids+=("$pid"); }
  done
  terminate "${pids[@]}"
  if pid="$(live_pid "$MASTER_CLASS" 1)"; then
    log "stopping master (pid $pid)"
    terminate "$pid"
  fi
  rm -f "$SPARK_PID_DIR"/spark-"$SPARK_IDENT_STRING"-*.pid 2>/dev/null || true
  # Executors and python workers normally exit with their worker; sweep what is left.
  mapfile -t left < <(cluster_pids)
  if [ ${#left[@]} -gt 0 ]; then
    log "cleaning up ${#left[@]} leftover process(es) under $RUN_DIR: ${left[*]}"
    terminate "${left[@]}"
  fi
  mapfile -t left < <(cluster_pids)
  [ ${#left[@]} -eq 0 ] || die "processes still running under $RUN_DIR: ${left[*]}"
  log "stopped in $(since "$t0") s; no process of this cluster is left"
}

cmd_status() {
  local pid n i
  if ! pid="$(live_pid "$MASTER_CLASS" 1)"; then
    log "not running (run dir $RUN_DIR)"
    return 3
  fi
  n="$(alive_workers)"
  log "master running: pid $pid, $MASTER_URL, web UI http://$HOST:$MUI, ALIVE workers: $n"
  for i in $(running_workers); do
    log "  worker $i: pid $(live_pid "$WORKER_CLASS" "$i"), web UI http://$HOST:$((WUI + i - 1))"
  done
  return 0
}

cmd_stop_worker() {  # cmd_stop_worker I hard(0|1)
  local i=$1 hard=$2 pid kids
  check_index "$i"
  if ! pid="$(live_pid "$WORKER_CLASS" "$i")"; then
    log "worker $i is not running"
    return 0
  fi
  if [ "$hard" = 1 ]; then
    # Executors of this worker run with cwd under its work dir: kill them with it (a lost machine).
    mapfile -t kids < <(pids_under "$RUN_DIR/work/worker-$i")
    log "killing worker $i (pid $pid) and ${#kids[@]} executor process(es) with SIGKILL"
    kill -9 "$pid" "${kids[@]}" 2>/dev/null || true
    while alive "$pid"; do sleep 0.1; done
  else
    log "stopping worker $i (pid $pid)"
    terminate "$pid"
  fi
  rm -f "$(pid_file "$WORKER_CLASS" "$i")"
}

cmd_start_worker() {
  local i=$1
  check_index "$i"
  SPARK_HOME_DIR="$(spark_home)"
  live_pid "$MASTER_CLASS" 1 >/dev/null || die "the master is not running: use '$0 start' first"
  mkdir -p "$SPARK_LOG_DIR" "$SPARK_PID_DIR"
  start_worker "$i"
  wait_workers "$(running_workers | wc -l)"
}

usage() {
  echo "usage: $0 start [--workers N] | stop | status | stop-worker I | kill-worker I | start-worker I" >&2
  exit 2
}

action="${1:-}"; [ $# -gt 0 ] && shift
case "$action" in
  start)
    while [ $# -gt 0 ]; do
      case "$1" in
        --workers) [ $# -ge 2 ] || usage; WORKERS="$2"; shift 2 ;;
        --workers=*) WORKERS="${1#*=}"; shift ;;
        *) usage ;;
      esac
    done
    cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  stop-worker) cmd_stop_worker "${1:-}" 0 ;;
  kill-worker) cmd_stop_worker "${1:-}" 1 ;;
  start-worker) cmd_start_worker "${1:-}" ;;
  *) usage ;;
esac
