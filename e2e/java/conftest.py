"""The broker fixture of the Java oracle tests: every test runs once against Moldau and once
against Apache Kafka, so a test that fails only against Moldau points at a Moldau bug, and a
test that fails against both is a wrong test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.conftest import _ACTIVE, Broker
from e2e.java.acl_bed import AclBed, acl_bed
from e2e.java.oracle import BROKER_SETTINGS, Target
from e2e.kafka_dist import KafkaBroker, ensure_artifacts

_KAFKA: list[KafkaBroker] = []


@pytest.fixture(scope="module", params=["moldau", "kafka"])
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Target]:
    """One running broker per module and kind: tools start a JVM per command, so brokers are
    shared to keep the suite short; tests use unique topic and group names."""
    ensure_artifacts()
    if request.param == "moldau":
        overrides = getattr(request.module, "BROKER_OVERRIDES", None)
        assert overrides == BROKER_SETTINGS, (
            "a Java oracle test module sets BROKER_OVERRIDES = BROKER_SETTINGS so that both "
            "brokers run with the same settings")
        broker = request.getfixturevalue("module_broker")
        yield Target("moldau", broker.bootstrap, broker.log_dir)
        return
    kafka = KafkaBroker(tmp_path_factory.mktemp("kafka-broker"), BROKER_SETTINGS)
    _KAFKA.append(kafka)
    try:
        kafka.start()
        yield Target("kafka", kafka.bootstrap, kafka.log_dir)
    finally:
        _KAFKA.remove(kafka)
        kafka.stop()


@pytest.fixture(scope="module", params=["moldau", "kafka"])
def acls_target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[AclBed]:
    """A broker of either kind with ACLs and SASL users (acl_bed.py), one per module; a
    module adds settings of both brokers in ACL_BED_EXTRA."""
    workdir = tmp_path_factory.mktemp(f"acls-{request.param}")
    started: list[Broker] = []

    def moldau(overrides: dict[str, object], port: int) -> None:
        broker = Broker(workdir / "moldau", overrides, port=port)
        started.append(broker)
        _ACTIVE.append(broker)
        broker.start()

    try:
        yield from acl_bed(request.param, workdir, moldau,
                           getattr(request.module, "ACL_BED_EXTRA", None))
    finally:
        for broker in started:
            broker.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for kafka in _KAFKA:
            report.sections.append((f"kafka broker :{kafka.port}", kafka.tail()))
