#!/usr/bin/env bash
# Run one Spark role in the foreground inside the dbsp Spark image (docker/Dockerfile.spark);
# docker-compose.yml picks the role with its `command:`.
#
#   spark-service.sh master    standalone master: RPC 7077, web UI 8081
#   spark-service.sh worker    a worker of $SPARK_MASTER_URL, advertising this container's IP
#                              (so `docker compose up --scale` works: replicas need no names)
#   spark-service.sh connect   Spark Connect server on 15002, running its jobs on $SPARK_MASTER_URL
#
# Environment: SPARK_MASTER_URL (spark://spark-master:7077), SPARK_MASTER_HOST (spark-master),
# SPARK_WORKER_CORES (1), SPARK_WORKER_MEMORY (1g), SPARK_CONNECT_DRIVER_MEMORY (1g),
# SPARK_EXECUTOR_MEMORY (512m), SPARK_CONNECT_EXTRA_CONF ("k=v k=v").
set -euo pipefail

SPARK_HOME="${SPARK_HOME:-/opt/spark}"
MASTER_URL="${SPARK_MASTER_URL:-spark://spark-master:7077}"

my_ip() { hostname -i | awk '{print $1}'; }

case "${1:-}" in
  master)
    echo "[spark-service] master on ${SPARK_MASTER_HOST:-spark-master}:7077, web UI :8081"
    exec "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
      --host "${SPARK_MASTER_HOST:-spark-master}" --port 7077 --webui-port 8081
    ;;
  worker)
    ip="$(my_ip)"
    echo "[spark-service] worker $ip (${SPARK_WORKER_CORES:-1} core(s), ${SPARK_WORKER_MEMORY:-1g}) -> $MASTER_URL"
    exec "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
      --host "$ip" --webui-port 8081 \
      --cores "${SPARK_WORKER_CORES:-1}" --memory "${SPARK_WORKER_MEMORY:-1g}" \
      --work-dir "${SPARK_WORKER_DIR:-/opt/dbsp/spark-work}" "$MASTER_URL"
    ;;
  connect)
    ip="$(my_ip)"
    extra=()
    for kv in ${SPARK_CONNECT_EXTRA_CONF:-}; do extra+=(--conf "$kv"); done
    echo "[spark-service] Spark Connect server on :15002 (driver $ip) -> $MASTER_URL"
    exec "$SPARK_HOME/bin/spark-submit" \
      --class org.apache.spark.sql.connect.service.SparkConnectServer \
      --name "Spark Connect server" \
      --master "$MASTER_URL" \
      --driver-memory "${SPARK_CONNECT_DRIVER_MEMORY:-1g}" \
      --conf spark.connect.grpc.binding.port=15002 \
      --conf "spark.driver.host=$ip" \
      --conf spark.driver.bindAddress=0.0.0.0 \
      --conf "spark.executor.memory=${SPARK_EXECUTOR_MEMORY:-512m}" \
      --conf spark.executor.cores=1 \
      --conf "spark.pyspark.python=${PYSPARK_PYTHON:-/opt/dbsp/venv/bin/python}" \
      --conf spark.sql.session.timeZone=UTC \
      --conf spark.sql.codegen.cache.maxEntries=2000 \
      --conf spark.hadoop.fs.file.impl=org.apache.hadoop.fs.RawLocalFileSystem \
      "${extra[@]}"
    ;;
  *)
    echo "usage: $0 master|worker|connect" >&2
    exit 2
    ;;
esac
