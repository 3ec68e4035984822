"""A local Spark session with Spark's own Kafka connector, for the tests and the benchmark.

The connector's jars are resolved through `spark.jars.packages` into an Ivy cache outside the
repository, keyed by the connector's version (~/.cache/moldau/spark-ivy-<version>, or
$MOLDAU_SPARK_IVY): the first start downloads them (~20 s), later starts find them there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from e2e.support import moldau_cache_dir

# Spark's Kafka connector, matching the pinned pyspark 4.2.x (4.2.0 is the newest published).
CONNECTOR_VERSION = "4.2.0"
CONNECTOR = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{CONNECTOR_VERSION}"
MIN_JAVA = 17


class SparkSetupError(RuntimeError):
    """What a local Spark session is missing, in one line."""


def java_executable() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise SparkSetupError(f"Spark needs Java {MIN_JAVA} or newer: no java on PATH and "
                              "JAVA_HOME is not set (e.g. apt-get install openjdk-17-jre-headless)")
    return found


def java_major_version(java: str) -> int:
    banner = subprocess.run([java, "-version"], capture_output=True, text=True,
                            timeout=60).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', banner)
    if not match:
        raise SparkSetupError(f"cannot tell the version of {java}: {banner.strip()[:200]}")
    major = int(match.group(1))
    # Java 8 and older call themselves 1.x.
    return int(match.group(2) or 0) if major == 1 else major


def check_java() -> None:
    java = java_executable()
    major = java_major_version(java)
    if major < MIN_JAVA:
        raise SparkSetupError(f"Spark needs Java {MIN_JAVA} or newer; {java} is Java {major}")


def ivy_cache() -> Path:
    return moldau_cache_dir(f"spark-ivy-{CONNECTOR_VERSION}", "MOLDAU_SPARK_IVY")


def local_session(work_dir: Path, app_name: str = "moldau-tests", cores: int = 2,
                  task_attempts: int = 1, connector: bool = True,
                  conf: dict[str, str] | None = None):
    """A local[cores] SparkSession, its scratch files in work_dir: with Spark's Kafka connector
    unless `connector` is false, each task tried up to `task_attempts` times (local mode's
    spark.task.maxFailures), with `conf` on top."""
    check_java()
    # Python workers must be this interpreter (it has pyarrow and moldau-spark installed);
    # Spark binds its driver to loopback only.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    work_dir.mkdir(parents=True, exist_ok=True)
    master = f"local[{cores}]" if task_attempts == 1 else f"local[{cores},{task_attempts}]"
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", str(cores))
               .config("spark.local.dir", str(work_dir / "local"))
               .config("spark.sql.warehouse.dir", str(work_dir / "warehouse"))
               .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={work_dir}"))
    if connector:
        builder = builder.config("spark.jars.packages", CONNECTOR) \
            .config("spark.jars.ivy", str(ivy_cache()))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    try:
        return builder.getOrCreate()
    except Exception as exc:  # the JVM's own output (Ivy's errors) is on stderr already
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SparkSetupError(f"cannot start a local Spark session with {CONNECTOR} "
                              f"(Ivy cache {ivy_cache()}): {first}") from None


def spark_submit(script: Path, args: list[str], work_dir: Path, connector: bool = False,
                 timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `spark-submit` (pyspark's own) on local[2] as a user would, the Python workers in
    this interpreter; with `connector`, Spark's Kafka connector from the Ivy cache."""
    check_java()
    work_dir.mkdir(parents=True, exist_ok=True)
    command = [str(Path(sys.executable).with_name("spark-submit")), "--master", "local[2]",
               "--conf", "spark.ui.enabled=false",
               "--conf", "spark.sql.shuffle.partitions=2",
               "--conf", f"spark.local.dir={work_dir / 'local'}",
               "--conf", f"spark.driver.extraJavaOptions=-Dderby.system.home={work_dir}"]
    if connector:
        command += ["--packages", CONNECTOR, "--conf", f"spark.jars.ivy={ivy_cache()}"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.run([*command, str(script), *args], env=env, cwd=work_dir,
                          capture_output=True, text=True, timeout=timeout)
