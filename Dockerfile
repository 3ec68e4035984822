# Moldau's images, one target each. Build with e2e/images/build.sh (make images), which puts
# the wheels of Moldau and of its dependencies into wheels/ first: nothing is fetched here.
#   podman build --format docker --target broker -t moldau-broker .
#   podman build --format docker --target operator -t moldau-operator .
#   podman build --format docker --target spark -t moldau-spark .
ARG BASE_IMAGE=python:3.11-slim
# The Spark jobs' base: Debian 12 with Java 17, python3 (3.11) and tini (e2e/kube/deps.sh).
ARG SPARK_BASE_IMAGE=localhost/moldau-bookworm-jre:17-1

# Everything the images share: a virtual environment of Moldau's client and the runtime user.
FROM ${BASE_IMAGE} AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="Moldau" \
      org.opencontainers.image.description="A Kafka-compatible streaming platform" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
# A venv without pip: Debian's python3 refuses system-wide installs (PEP 668) and its
# base image has no ensurepip; pip runs from its own wheel, which stays out of the image.
RUN python3 -m venv --without-pip /opt/moldau \
    && useradd --uid 1001 --home-dir /var/lib/moldau --shell /usr/sbin/nologin moldau \
    && mkdir -p /var/lib/moldau && chown moldau /var/lib/moldau
ENV PATH=/opt/moldau/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1

# The broker: `moldau broker --container` as PID 1 (it stops cleanly on SIGTERM).
FROM runtime AS broker
# The digest of Moldau's wheels: a changed wheel must not reuse the cached install layer.
ARG MOLDAU_WHEELS=none
RUN --mount=type=bind,source=wheels,target=/wheels \
    /opt/moldau/bin/python /wheels/pip/pip.whl/pip install --no-cache-dir --no-compile \
        --no-index --find-links /wheels moldau-broker
USER 1001
WORKDIR /var/lib/moldau
# 9092: Kafka clients; 9404: /metrics, /livez and /readyz (where Strimzi's scrape configs look).
EXPOSE 9092 9404
VOLUME ["/var/lib/moldau"]
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:9404/livez', timeout=2)"]
ENTRYPOINT ["moldau", "broker", "--container"]

# The operator: `moldau operator` as PID 1 (it stops cleanly on SIGTERM). It needs no volume.
FROM runtime AS operator
ARG MOLDAU_WHEELS=none
RUN --mount=type=bind,source=wheels,target=/wheels \
    /opt/moldau/bin/python /wheels/pip/pip.whl/pip install --no-cache-dir --no-compile \
        --no-index --find-links /wheels moldau-operator
USER 1001
WORKDIR /var/lib/moldau
# 8080: /metrics and /healthz.
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
ENTRYPOINT ["moldau", "operator"]

# The Spark jobs: PySpark with moldau-spark (format("moldau")), Spark's own Kafka connector and
# the example jobs of spark/jobs/, for spark-submit --master k8s://... and Kubeflow's Spark
# operator. The entrypoint speaks Spark's Kubernetes container protocol (driver / executor),
# under tini as PID 1; the user is Spark's usual uid 185.
FROM ${SPARK_BASE_IMAGE} AS spark
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="Moldau Spark jobs" \
      org.opencontainers.image.description="PySpark with the Moldau source and sink, Spark's Kafka connector and example jobs" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN python3 -m venv --without-pip /opt/moldau \
    && useradd --system --uid 185 --home-dir /opt/spark/work-dir --shell /usr/sbin/nologin spark \
    && mkdir -p /opt/spark/work-dir && chown spark /opt/spark/work-dir
# pip's SPARK_HOME: bin/spark-submit, jars/ (the Kubernetes backend among them).
ENV PATH=/opt/moldau/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    SPARK_HOME=/opt/moldau/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/moldau/bin/python3 PYSPARK_DRIVER_PYTHON=/opt/moldau/bin/python3
# PySpark and the other locked dependencies first, in a layer of their own that a change of
# Moldau's code does not rebuild (SPARK_DEPS is the digest of their pins). Compiled: Spark starts
# Python processes (the driver, each executor's workers) that import PySpark, pandas and pyarrow.
ARG SPARK_DEPS=none
RUN --mount=type=bind,target=/context \
    /opt/moldau/bin/python /context/wheels/pip/pip.whl/pip install --no-cache-dir \
        --no-index --find-links /context/wheels -r /context/requirements-spark.txt
ARG MOLDAU_WHEELS=none
RUN --mount=type=bind,source=wheels,target=/wheels \
    /opt/moldau/bin/python /wheels/pip/pip.whl/pip install --no-cache-dir --no-compile \
        --no-index --find-links /wheels moldau-spark
# Spark's Kafka connector, for format("kafka") without --packages: the jars of its resolution
# that pip's PySpark does not ship.
COPY spark/jars/ ${SPARK_HOME}/jars/
COPY spark/jobs/ /opt/spark/jobs/
COPY spark/entrypoint.sh /opt/entrypoint.sh
USER 185
WORKDIR /opt/spark/work-dir
ENTRYPOINT ["/opt/entrypoint.sh"]
