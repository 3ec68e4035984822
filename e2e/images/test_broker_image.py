"""The broker image (Dockerfile, e2e/images/build.sh): built offline with podman, run with
its ports published on loopback, used by a real Kafka client, stopped with SIGTERM."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from e2e.images.podman import build_image, podman
from e2e.support import (
    assert_records_equal,
    ck_consume_all,
    ck_create_topic,
    ck_produce,
    free_port,
    make_records,
    unique,
    wait_until,
    with_offsets,
)

pytestmark = pytest.mark.kube


@pytest.fixture(scope="module")
def image() -> str:
    done = build_image()
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()[-1]


class Container:
    def __init__(self, name: str, kafka_port: int, http_port: int) -> None:
        self.name = name
        self.bootstrap = f"127.0.0.1:{kafka_port}"
        self.http = f"http://127.0.0.1:{http_port}"

    def status(self, path: str) -> int | None:
        try:
            with urllib.request.urlopen(self.http + path, timeout=5) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return None


@pytest.fixture
def broker(image: str) -> Iterator[Container]:
    kafka_port, http_port = free_port(), free_port()
    container = Container(unique("moldau-image"), kafka_port, http_port)
    podman("run", "-d", "--name", container.name,
           "-p", f"127.0.0.1:{kafka_port}:9092", "-p", f"127.0.0.1:{http_port}:9404",
           "-e", f"KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://{container.bootstrap}", image)
    try:
        wait_until(lambda: container.status("/readyz") == 200, 60, "/readyz to answer 200")
        yield container
    finally:
        podman("rm", "--force", "--time", "0", container.name, check=False)


def test_clients_produce_and_consume_through_the_published_port(broker: Container) -> None:
    topic = unique("image")
    ck_create_topic(broker.bootstrap, topic)
    records = make_records(20)
    ck_produce(broker.bootstrap, topic, records)
    assert_records_equal(ck_consume_all(broker.bootstrap, topic), with_offsets(records))


def test_runs_as_a_user_that_is_not_root(broker: Container) -> None:
    uid = podman("exec", broker.name, "id", "-u").stdout.strip()
    assert uid.isdigit() and uid != "0"


def test_healthcheck_answers_from_livez(broker: Container) -> None:
    assert podman("healthcheck", "run", broker.name).returncode == 0


def test_sigterm_stops_the_broker_cleanly(broker: Container) -> None:
    started = time.monotonic()
    # SIGTERM to PID 1 (`moldau broker` itself); podman would SIGKILL after 30 s.
    podman("stop", "--time", "30", broker.name)
    took = time.monotonic() - started
    print(f"podman stop took {took:.2f} s")
    assert podman("inspect", "--format", "{{.State.ExitCode}}", broker.name).stdout.strip() == "0"
    logs = podman("logs", broker.name)
    assert "Shut down cleanly" in logs.stdout + logs.stderr
    assert took < 25, f"stop took {took:.1f} s: SIGTERM was not handled"
