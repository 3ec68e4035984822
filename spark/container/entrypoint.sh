#!/bin/bash
# The entrypoint of the Spark jobs image (the Dockerfile's `spark` target): the container side
# of Spark's Kubernetes backend, which starts driver pods with the arguments
# `driver --properties-file ... --class ... <app> <args>` and executor pods with `executor`
# and the SPARK_* environment it sets. Anything else runs as given. tini is PID 1 in every
# case: it passes SIGTERM on to Spark and reaps the Python workers Spark forks.
#
#   entrypoint.sh driver ARGS...     spark-submit in client mode inside the driver pod
#   entrypoint.sh executor           an executor of the driver at SPARK_DRIVER_URL
#   entrypoint.sh COMMAND ARGS...    COMMAND itself (spark-submit, python3, bash ...)
set -euo pipefail

die() { echo "entrypoint: $*" >&2; exit 1; }

# Spark's JVM looks up the name of its uid (Hadoop's user login): a uid without an entry in
# /etc/passwd fails deep inside Spark, so it is refused here in one line.
uid=$(id -u)
getent passwd "$uid" >/dev/null \
  || die "uid $uid has no entry in /etc/passwd; Spark needs a user name: run as uid 185 (spark)"

[ $# -gt 0 ] || die "no command: driver, executor, or a command to run (e.g. spark-submit)"

# require NAME...: each must be set and not empty (the backend sets them on its pods).
require() {
  local name
  for name in "$@"; do
    [ -n "${!name:-}" ] || die "$role: $name is not set (Spark's Kubernetes backend sets it on the pods it starts)"
  done
}

# The executor's classpath as Spark builds it: the configuration directory first, then Spark's
# jars (the Kafka connector's among them), then what the job adds.
classpath() {
  local cp="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:$SPARK_HOME/jars/*"
  [ -z "${SPARK_CLASSPATH:-}" ] || cp+=":$SPARK_CLASSPATH"
  [ -z "${SPARK_EXTRA_CLASSPATH:-}" ] || cp+=":$SPARK_EXTRA_CLASSPATH"
  echo "$cp"
}

# The executor's JVM options arrive as SPARK_JAVA_OPT_0, _1, ...: in that order, one option each.
java_options() {
  local name
  for name in $(compgen -e | sed -n 's/^SPARK_JAVA_OPT_\([0-9][0-9]*\)$/\1/p' | sort -n); do
    name="SPARK_JAVA_OPT_$name"
    printf '%s\0' "${!name}"
  done
}

role=$1
case "$role" in
  driver)
    shift
    require SPARK_DRIVER_BIND_ADDRESS
    command=("$SPARK_HOME/bin/spark-submit" --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS"
             --deploy-mode client "$@")
    ;;
  executor)
    shift
    require SPARK_DRIVER_URL SPARK_EXECUTOR_ID SPARK_EXECUTOR_CORES SPARK_EXECUTOR_MEMORY \
      SPARK_APPLICATION_ID SPARK_EXECUTOR_POD_IP SPARK_RESOURCE_PROFILE_ID SPARK_EXECUTOR_POD_NAME
    mapfile -d '' options < <(java_options)
    # spark.executor.extraLibraryPath
    if [ -n "${SPARK_EXECUTOR_LIBRARY_PATH:-}" ]; then
      export LD_LIBRARY_PATH="$SPARK_EXECUTOR_LIBRARY_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    command=("${JAVA_HOME:+$JAVA_HOME/bin/}java" "${options[@]}"
             "-Xms$SPARK_EXECUTOR_MEMORY" "-Xmx$SPARK_EXECUTOR_MEMORY" -cp "$(classpath)"
             org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend
             --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID"
             --cores "$SPARK_EXECUTOR_CORES" --app-id "$SPARK_APPLICATION_ID"
             --hostname "$SPARK_EXECUTOR_POD_IP" --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID"
             --podName "$SPARK_EXECUTOR_POD_NAME")
    ;;
  *)
    command=("$@")
    ;;
esac

exec /usr/bin/tini -s -- "${command[@]}"
