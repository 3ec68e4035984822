"""The Spark fixture's set-up checks: what is missing is said in one line."""

from __future__ import annotations

import pytest

from e2e.spark.session import SparkSetupError, check_java


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
