"""The moldau-client distribution stands alone: its wheel, installed by itself into a fresh
virtual environment, imports every module and produces and consumes against a real broker
without any broker code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
UV = Path(sys.executable).parent / "uv"

# Runs inside the fresh environment: import every module the wheel ships, then round-trip
# records through the broker, and report what was loaded.
CLIENT_SCRIPT = r"""
import importlib, json, sys
from importlib.metadata import distributions, files

modules = sorted(
    str(f.with_suffix("")).replace("/", ".") for f in files("moldau-client")
    if f.suffix == ".py" and f.parts[0] == "moldau")
modules = [m.removesuffix(".__init__") for m in modules]
for name in modules:
    importlib.import_module(name)

from moldau.client import Admin, Consumer, NewTopic, Producer

bootstrap, topic = sys.argv[1], sys.argv[2]
with Admin({"bootstrap.servers": bootstrap}) as admin:
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
with Producer({"bootstrap.servers": bootstrap}) as producer:
    for i in range(5):
        producer.send(topic, f"value-{i}".encode(), key=f"key-{i}".encode())
    producer.flush()
with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
               "group.id": "wheel-check"}) as consumer:
    consumer.subscribe([topic])
    seen = []
    for _ in range(50):
        seen += [(r.key.decode(), r.value.decode()) for r in consumer.poll(500)]
        if len(seen) >= 5:
            break
print(json.dumps({
    "modules": modules,
    "broker_loaded": sorted(m for m in sys.modules
                            if m.startswith(("moldau.broker", "moldau.cluster"))),
    "distributions": sorted(d.metadata["Name"] for d in distributions()
                            if d.metadata["Name"].startswith("moldau")),
    "records": seen,
}))
"""


def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def client_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment holding the moldau-client wheel and its dependencies only."""
    work = tmp_path_factory.mktemp("client-wheel")
    run([str(UV), "build", "--quiet", "--wheel", "--out-dir", str(work / "dist"),
         str(REPO_ROOT / "client")], env=_uv_env())
    wheels = list((work / "dist").glob("moldau_client-*.whl"))
    assert len(wheels) == 1, wheels
    run([str(UV), "venv", "--quiet", "--python", sys.executable, str(work / "venv")],
        env=_uv_env())
    python = work / "venv" / "bin" / "python"
    run([str(UV), "pip", "install", "--quiet", "--python", str(python), str(wheels[0])],
        env=_uv_env())
    return python


def _uv_env() -> dict[str, str]:
    return {**os.environ, "UV_SYSTEM_CERTS": "1"}


def test_client_wheel_alone_imports_everything_and_round_trips(client_env: Path,
                                                               broker) -> None:
    result = run([str(client_env), "-c", CLIENT_SCRIPT, broker.bootstrap, "wheel-check"],
                 cwd=client_env.parent)  # not the repository: nothing of it on sys.path
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["distributions"] == ["moldau-client"]
    assert "moldau.client.producer.producer" in report["modules"]
    assert "moldau.records.codec" in report["modules"]
    assert "moldau.protocol.messages" in report["modules"]
    assert report["broker_loaded"] == []
    assert report["records"] == [[f"key-{i}", f"value-{i}"] for i in range(5)]


def test_client_alone_offers_only_the_client_commands(client_env: Path) -> None:
    moldau = client_env.parent / "moldau"
    version = run([str(moldau), "--version"]).stdout.split()
    assert version == ["moldau-client", "0.1.0"]
    help_text = run([str(moldau), "--help"]).stdout
    assert "produce" in help_text and "topics" in help_text
    missing = subprocess.run([str(moldau), "broker"], capture_output=True, text=True,
                             timeout=60)
    assert missing.returncode == 2
    assert "invalid choice: 'broker'" in missing.stderr
