#!/usr/bin/env bash
# Spark Connect server from the pip-installed pyspark, bound to loopback.
#
#   scripts/spark_connect.sh start     start it (no-op if already running), wait for the port
#   scripts/spark_connect.sh stop      stop it (SIGTERM, then SIGKILL after a grace period)
#   scripts/spark_connect.sh status    exit 0 if running, 3 if not
#   scripts/spark_connect.sh restart
#
# Clients then use `SparkSession.builder.remote("sc://127.0.0.1:15002")`, or the profile
# config/connect.yaml (DBSP_CONFIG=connect).
#
# The pip package has no sbin/start-connect-server.sh, so we do what that script does:
# `sbin/spark-daemon.sh submit org.apache.spark.sql.connect.service.SparkConnectServer 1 ...`
# (the class is in jars/spark-connect_2.13-<version>.jar).
#
# Environment (all optional):
#   SPARK_CONNECT_RUN_DIR        logs, pid file and the server's working dir (default: <repo>/.run/spark-connect)
#   SPARK_CONNECT_HOST           bind address (default 127.0.0.1)
#   SPARK_CONNECT_PORT           gRPC port (default 15002)
#   SPARK_CONNECT_MASTER         where the server runs its jobs (default local[2];
#                                e.g. spark://127.0.0.1:7077 after scripts/spark_cluster.sh start)
#   SPARK_CONNECT_DRIVER_MEMORY  server (driver) heap (default 1g)
#   SPARK_CONNECT_UI_PORT        server web UI on loopback (default 4045; "off" disables it)
#   SPARK_CONNECT_EXTRA_CONF     extra "k=v" Spark confs, space separated
#   SPARK_CONNECT_START_TIMEOUT  seconds to wait for the port (default 90)
#   SPARK_CONNECT_STOP_TIMEOUT   seconds between SIGTERM and SIGKILL (default 20)
#   DBSP_PYTHON                  python with pyspark (default <repo>/.venv/bin/python)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLASS="org.apache.spark.sql.connect.service.SparkConnectServer"
RUN_DIR="$(realpath -m "${SPARK_CONNECT_RUN_DIR:-$ROOT/.run/spark-connect}")"
HOST="${SPARK_CONNECT_HOST:-127.0.0.1}"
PORT="${SPARK_CONNECT_PORT:-15002}"
MASTER="${SPARK_CONNECT_MASTER:-local[2]}"
DRIVER_MEMORY="${SPARK_CONNECT_DRIVER_MEMORY:-1g}"
UI_PORT="${SPARK_CONNECT_UI_PORT:-4045}"
START_TIMEOUT="${SPARK_CONNECT_START_TIMEOUT:-90}"
STOP_TIMEOUT="${SPARK_CONNECT_STOP_TIMEOUT:-20}"
PY="${DBSP_PYTHON:-$ROOT/.venv/bin/python}"

export SPARK_IDENT_STRING=dbsp
export SPARK_LOG_DIR="$RUN_DIR/logs"
export SPARK_PID_DIR="$RUN_DIR/pids"
export SPARK_LOCAL_IP="$HOST"
PID_FILE="$SPARK_PID_DIR/spark-$SPARK_IDENT_STRING-$CLASS-1.pid"

log() { echo "[spark_connect] $*"; }
die() { echo "[spark_connect] ERROR: $*" >&2; exit 1; }

spark_home() {
  [ -x "$PY" ] || die "python not found at $PY (run 'make install' or set DBSP_PYTHON)"
  "$PY" -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))' \
    || die "cannot import pyspark with $PY"
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; }

# pid of the server if its pid file names a live java process, else nothing
live_pid() {
  [ -f "$PID_FILE" ] || return 1
  local pid; pid="$(cat "$PID_FILE" 2>/dev/null)" || return 1
  [[ "$(ps -p "$pid" -o comm= 2>/dev/null)" == *java* ]] || return 1
  alive "$pid" || return 1
  echo "$pid"
}

log_file() { ls -t "$SPARK_LOG_DIR"/spark-"$SPARK_IDENT_STRING"-"$CLASS"-1-*.out 2>/dev/null | head -n 1; }

show_log_tail() {
  local f; f="$(log_file)"
  [ -n "$f" ] || return 0
  echo "[spark_connect] last lines of $f:" >&2
  tail -n 25 "$f" | sed 's/^/    /' >&2
}

# a pid is alive if it exists and is not a zombie waiting to be reaped
alive() {
  local st
  st="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

# SIGTERM, wait up to STOP_TIMEOUT, then SIGKILL
terminate() {
  local pid=$1 waited=0
  kill "$pid" 2>/dev/null || return 0
  while alive "$pid"; do
    if [ "$waited" -ge "$((STOP_TIMEOUT * 10))" ]; then
      log "pid $pid still alive after ${STOP_TIMEOUT}s: SIGKILL"
      kill -9 "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.1; waited=$((waited + 1))
  done
  while alive "$pid"; do sleep 0.1; done
}

cmd_status() {
  local pid
  if pid="$(live_pid)"; then
    if port_open; then
      log "running: pid $pid, sc://$HOST:$PORT (logs in $SPARK_LOG_DIR)"
    else
      log "starting: pid $pid, port $HOST:$PORT not open yet"
    fi
    return 0
  fi
  log "not running (run dir $RUN_DIR)"
  return 3
}

cmd_start() {
  local pid t0 sh
  t0=$(date +%s.%N)
  if pid="$(live_pid)"; then
    if port_open; then
      log "already running: pid $pid, sc://$HOST:$PORT"
      return 0
    fi
    log "pid $pid is running but the port is not open yet: waiting"
  else
    rm -f "$PID_FILE"
    if port_open; then
      die "port $HOST:$PORT is already in use by a process this script did not start (no live pid in $PID_FILE).
  Stop that process, or choose another port with SPARK_CONNECT_PORT=..."
    fi
    sh="$(spark_home)"
    compgen -G "$sh/jars/spark-connect_*.jar" >/dev/null \
      || die "no jars/spark-connect_*.jar in $sh: this pyspark has no Spark Connect server"
    mkdir -p "$SPARK_LOG_DIR" "$SPARK_PID_DIR"
    local conf=(
      --conf "spark.connect.grpc.binding.address=$HOST"
      --conf "spark.connect.grpc.binding.port=$PORT"
      --conf "spark.driver.host=$HOST"
      --conf "spark.driver.bindAddress=$HOST"
      --conf "spark.pyspark.python=$PY"
      # generated-class cache: Spark's default (100) is smaller than one step's classes, so
      # every step would recompile them all (spark_jobs/executor/session.py ENGINE_STATIC_CONF)
      --conf spark.sql.codegen.cache.maxEntries=2000
      # local files without Hadoop's checksum layer, which cannot open a file named a:b.parquet
      # (spark_jobs/executor/session.py ENGINE_STATIC_CONF)
      --conf spark.hadoop.fs.file.impl=org.apache.hadoop.fs.RawLocalFileSystem
      # clients read this static setting from the server: on (Spark's default), every PySpark
      # call of a client walks its Python stack to report call sites (spark_jobs/executor/session.py)
      --conf spark.python.sql.dataFrameDebugging.enabled=false
    )
    if [ "$UI_PORT" = "off" ]; then
      conf+=(--conf spark.ui.enabled=false)
    else
      conf+=(--conf "spark.ui.port=$UI_PORT")
    fi
    local kv
    for kv in ${SPARK_CONNECT_EXTRA_CONF:-}; do conf+=(--conf "$kv"); done
    log "starting Spark Connect server on $HOST:$PORT (master $MASTER, driver memory $DRIVER_MEMORY)"
    # Run from the run dir: spark-warehouse/, metastore_db/ and derby.log land there, not in the repo.
    (
      cd "$RUN_DIR"
      export SPARK_HOME="$sh" PYSPARK_PYTHON="$PY" PYSPARK_DRIVER_PYTHON="$PY"
      "$sh/sbin/spark-daemon.sh" submit "$CLASS" 1 --name "Spark Connect server" \
        --master "$MASTER" --driver-memory "$DRIVER_MEMORY" "${conf[@]}" >/dev/null
    ) || { show_log_tail; die "spark-daemon.sh failed to launch the server"; }
    pid="$(live_pid)" || { show_log_tail; die "the server process died right after launch"; }
  fi
  local deadline=$(( $(date +%s) + START_TIMEOUT ))
  until port_open; do
    if ! kill -0 "$pid" 2>/dev/null; then
      show_log_tail; rm -f "$PID_FILE"
      die "the Spark Connect server (pid $pid) exited before opening $HOST:$PORT"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      show_log_tail
      log "stopping pid $pid"
      terminate "$pid"; rm -f "$PID_FILE"
      die "timed out after ${START_TIMEOUT}s waiting for $HOST:$PORT to accept connections"
    fi
    sleep 0.2
  done
  log "ready: sc://$HOST:$PORT (pid $pid) after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s; logs: $(log_file)"
}

cmd_stop() {
  local pid
  if pid="$(live_pid)"; then
    log "stopping Spark Connect server (pid $pid)"
    terminate "$pid"
    rm -f "$PID_FILE"
    log "stopped"
  else
    rm -f "$PID_FILE"
    log "not running"
  fi
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  restart) cmd_stop; cmd_start ;;
  *) echo "usage: $0 start|stop|status|restart   (see the header of this file for the environment knobs)" >&2; exit 2 ;;
esac
