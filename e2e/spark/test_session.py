"""The Spark fixture's set-up checks: what is missing is said in one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from e2e.spark.deps import STAMP
from e2e.spark.session import CONNECTOR, SparkSetupError, check_java
from e2e.support import REPO_ROOT


def fake_java(directory, banner: str) -> None:
    java = directory / "java"
    java.write_text(f"#!/bin/sh\necho '{banner}' >&2\n")
    java.chmod(0o755)


def test_no_java_is_named(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SparkSetupError) as caught:
        check_java()
    assert str(caught.value) == (
        "Spark needs Java 17 or newer: no java on PATH and JAVA_HOME is not set "
        "(e.g. apt-get install openjdk-17-jre-headless)")


@pytest.mark.parametrize(("banner", "major"), [('java version "1.8.0_392"', 8),
                                               ('openjdk version "11.0.22" 2024-01-16', 11)])
def test_old_java_is_named(tmp_path, monkeypatch, banner, major) -> None:
    fake_java(tmp_path, banner)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(SparkSetupError) as caught:
        check_java()
    assert str(caught.value) == f"Spark needs Java 17 or newer; {tmp_path}/java is Java {major}"


def test_java_17_passes(tmp_path, monkeypatch) -> None:
    fake_java(tmp_path, 'openjdk version "17.0.15" 2025-04-15')
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    check_java()


def run_deps(tmp_path, ivy, java_banner: str) -> subprocess.CompletedProcess:
    """`python -m e2e.spark.deps` with a fake java of `java_banner` and Ivy cache `ivy`."""
    fake_java(tmp_path, java_banner)
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env.update(PATH=f"{tmp_path}:/usr/bin:/bin", MOLDAU_SPARK_IVY=str(ivy))
    return subprocess.run([sys.executable, "-m", "e2e.spark.deps"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_deps_refuse_an_old_java_in_one_line(tmp_path) -> None:
    done = run_deps(tmp_path, tmp_path / "ivy", 'openjdk version "11.0.22" 2024-01-16')
    assert done.returncode == 1
    assert done.stderr == f"spark-deps: Spark needs Java 17 or newer; {tmp_path}/java is " \
                          f"Java 11\n"


def test_deps_start_nothing_while_the_cache_is_complete(tmp_path) -> None:
    ivy = tmp_path / "ivy"
    (ivy / "jars").mkdir(parents=True)
    (ivy / "jars" / "org.apache.spark_spark-sql-kafka-0-10_2.13-4.2.0.jar").write_bytes(b"")
    (ivy / STAMP).write_text("org.apache.spark_spark-sql-kafka-0-10_2.13-4.2.0.jar\n")
    # The fake java cannot start Spark: a run that tried would fail.
    done = run_deps(tmp_path, ivy, 'openjdk version "17.0.15" 2025-04-15')
    assert (done.returncode, done.stdout) == (0, f"spark-deps: {CONNECTOR} is in {ivy}\n")
    # A jar the stamp lists is gone: the cache is fetched again (and here Spark cannot start).
    (ivy / "jars" / "org.apache.spark_spark-sql-kafka-0-10_2.13-4.2.0.jar").unlink()
    done = run_deps(tmp_path, ivy, 'openjdk version "17.0.15" 2025-04-15')
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith(
        f"spark-deps: cannot start a local Spark session with {CONNECTOR} (Ivy cache {ivy})")


def test_a_second_fetch_waits_for_the_lock(tmp_path) -> None:
    lock, release = tmp_path / "ivy.lock", tmp_path / "release"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
         "from e2e.spark.deps import locked\n"
         "with locked(Path(sys.argv[1])):\n"
         "    print('held', flush=True)\n"
         "    while not Path(sys.argv[2]).exists(): time.sleep(0.05)\n",
         str(lock), str(release)], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        waiter = subprocess.Popen(
            [sys.executable, "-c", "import sys\nfrom pathlib import Path\n"
             "from e2e.spark.deps import locked\n"
             "with locked(Path(sys.argv[1])): print('got it', flush=True)\n", str(lock)],
            cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
        assert waiter.stdout.readline() == f"spark-deps: waiting for {lock} (another run is " \
                                           f"fetching)\n"
        assert holder.poll() is None  # still holding: the waiter cannot have it yet
        release.touch()
        assert waiter.stdout.readline() == "got it\n"
        assert waiter.wait(30) == 0 and holder.wait(30) == 0
    finally:
        holder.kill()
