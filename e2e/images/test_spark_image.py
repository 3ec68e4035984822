"""The Spark jobs image (Dockerfile target `spark`, e2e/images/build.sh spark): built offline
with podman; its entrypoint speaks Spark's Kubernetes container protocol under tini as PID 1,
as uid 185; the driver runs a PySpark job whose Python workers import pyarrow and
pyspark_moldau, with Spark's Kafka connector and the Moldau source both found."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from e2e.images.podman import build_image, podman
from e2e.support import unique

pytestmark = pytest.mark.kube

# Runs in the image's driver on local[1]: a pandas UDF (pyarrow in the Python workers) that
# imports the Moldau source, and both Kafka formats resolved (the connector's jars, the source).
SMOKE_JOB = """
from pyspark.sql import SparkSession, functions as F
from pyspark.sql.functions import pandas_udf

spark = SparkSession.builder.appName("smoke").getOrCreate()

@pandas_udf("string")
def tag(values):
    import pyarrow, pyspark_moldau
    return values.map(lambda v: f"{v}:{pyarrow.__name__}:{pyspark_moldau.__name__}")

print("ROWS", [r[0] for r in spark.range(3).select(tag(F.col("id").cast("string"))).collect()])
for fmt in ("kafka", "moldau"):
    frame = (spark.read.format(fmt).option("kafka.bootstrap.servers", "127.0.0.1:1")
             .option("subscribe", "t").load())
    print(fmt.upper(), ",".join(frame.columns))
spark.stop()
"""
KAFKA_COLUMNS = "key,value,topic,partition,offset,timestamp,timestampType"


@pytest.fixture(scope="module")
def image() -> str:
    started = time.monotonic()
    done = build_image("spark")
    assert done.returncode == 0, done.stdout + done.stderr
    print(done.stdout, f"build.sh spark: {time.monotonic() - started:.1f} s")
    tag = done.stdout.strip().splitlines()[-1]
    assert tag.startswith("localhost/moldau-spark:")
    return tag


def run(image: str, *command: str, options: tuple[str, ...] = (), check: bool = False,
        timeout: float = 120):
    """`podman run` of the image with `options`, the entrypoint given `command`."""
    return podman("run", "--rm", "--network=none", *options, image, *command, timeout=timeout,
                  check=check)


def test_without_a_command_it_says_what_to_run(image: str) -> None:
    done = run(image)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "entrypoint: no command: driver, executor, or a command to run (e.g. spark-submit)")


def test_an_executor_without_the_backends_environment_names_what_is_missing(image: str) -> None:
    done = run(image, "executor")
    assert done.returncode == 1
    assert done.stderr.strip() == ("entrypoint: executor: SPARK_DRIVER_URL is not set (Spark's "
                                   "Kubernetes backend sets it on the pods it starts)")
    done = run(image, "driver", "--class", "x")
    assert done.returncode == 1
    assert done.stderr.strip().startswith(
        "entrypoint: driver: SPARK_DRIVER_BIND_ADDRESS is not set")


def test_a_uid_without_a_name_is_refused_in_one_line(image: str) -> None:
    # As Kubernetes runs it: podman would otherwise add the uid to /etc/passwd itself.
    done = run(image, "driver", options=("--user", "4242", "--passwd=false"))
    assert done.returncode == 1
    assert done.stderr.strip() == ("entrypoint: uid 4242 has no entry in /etc/passwd; Spark "
                                   "needs a user name: run as uid 185 (spark)")


def test_runs_as_uid_185_under_tini(image: str) -> None:
    done = run(image, "sh", "-c", "id -un; id -u; cat /proc/1/comm; java -version 2>&1 | head -1",
               check=True)
    name, uid, pid1, java = done.stdout.strip().splitlines()
    assert (name, uid, pid1) == ("spark", "185", "tini")
    assert java.startswith('openjdk version "17.')


def test_the_executor_command_is_the_one_spark_expects(image: str, tmp_path: Path) -> None:
    """A stand-in `java` prints the command the entrypoint builds from the backend's
    environment: JVM options in SPARK_JAVA_OPT_<n> order (numeric), heap, classpath, the
    executor backend and its arguments."""
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\necho "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"\n')
    java.chmod(0o755)
    tmp_path.chmod(0o755)
    env = {"JAVA_HOME": "/fake", "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@d:7078",
           "SPARK_EXECUTOR_ID": "1", "SPARK_EXECUTOR_CORES": "1",
           "SPARK_EXECUTOR_MEMORY": "512m", "SPARK_APPLICATION_ID": "spark-123",
           "SPARK_EXECUTOR_POD_IP": "10.244.0.9", "SPARK_RESOURCE_PROFILE_ID": "0",
           "SPARK_EXECUTOR_POD_NAME": "job-exec-1", "SPARK_CONF_DIR": "/opt/spark/conf",
           "SPARK_JAVA_OPT_10": "-Dten", "SPARK_JAVA_OPT_2": "-Dtwo with space",
           "SPARK_JAVA_OPT_0": "-Dzero", "SPARK_EXECUTOR_LIBRARY_PATH": "/opt/native"}
    args = [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
    done = run(image, "executor", options=("-v", f"{tmp_path}:/fake:ro", *args), check=True)
    home = "/opt/moldau/lib/python3.11/site-packages/pyspark"
    assert done.stdout.splitlines() == [
        "-Dzero", "-Dtwo with space", "-Dten", "-Xms512m", "-Xmx512m",
        "-cp", f"/opt/spark/conf:{home}/jars/*",
        "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
        "--driver-url", "spark://CoarseGrainedScheduler@d:7078", "--executor-id", "1",
        "--cores", "1", "--app-id", "spark-123", "--hostname", "10.244.0.9",
        "--resourceProfileId", "0", "--podName", "job-exec-1",
        "LD_LIBRARY_PATH=/opt/native"]


def test_the_driver_runs_a_pyspark_job_with_both_kafka_formats(image: str,
                                                               tmp_path: Path) -> None:
    (tmp_path / "smoke.py").write_text(SMOKE_JOB)
    tmp_path.chmod(0o755)
    (tmp_path / "smoke.py").chmod(0o644)
    started = time.monotonic()
    done = run(image, "driver", "--master", "local[1]", "--conf", "spark.ui.enabled=false",
               "/job/smoke.py", timeout=300,
               options=("-v", f"{tmp_path}:/job:ro", "-e", "SPARK_DRIVER_BIND_ADDRESS=127.0.0.1",
                        "-e", "SPARK_LOCAL_IP=127.0.0.1"))
    print(f"local[1] job in the image: {time.monotonic() - started:.1f} s")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.split(" ")[0] in
             ("ROWS", "KAFKA", "MOLDAU")]
    assert lines == [
        "ROWS ['0:pyarrow:pyspark_moldau', '1:pyarrow:pyspark_moldau', "
        "'2:pyarrow:pyspark_moldau']",
        f"KAFKA {KAFKA_COLUMNS}", f"MOLDAU {KAFKA_COLUMNS}"]


def test_sigterm_reaches_the_command_through_tini(image: str) -> None:
    name = unique("moldau-spark-image")
    podman("run", "-d", "--name", name, "--network=none", image, "sleep", "600")
    try:
        started = time.monotonic()
        podman("stop", "--time", "30", name)
        took = time.monotonic() - started
        code = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        # 143: sleep ended by SIGTERM, which tini passed on.
        assert code == "143" and took < 10, f"exit {code} after {took:.1f} s"
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)


def test_the_image_size(image: str) -> None:
    size = int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout.strip())
    print(f"{image}: {size / 1e6:.0f} MB")
    # PySpark with its jars (~470 MB), pyarrow, pandas, numpy, the JRE and Debian.
    assert size < 1.5e9


def test_without_the_connectors_jars_the_build_says_what_to_run(tmp_path: Path) -> None:
    done = build_image("spark", env={**os.environ, "MOLDAU_SPARK_IVY": str(tmp_path / "ivy")})
    assert done.returncode == 1
    assert (f"images: Spark's Kafka connector is not in {tmp_path / 'ivy'}: run "
            "'make spark-deps'") in done.stderr.splitlines()
