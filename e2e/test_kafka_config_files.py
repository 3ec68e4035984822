"""A Kafka user's server.properties starts Moldau: every key Kafka's broker defines is accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.conftest import READY_MARKER, Broker
from e2e.support import (
    assert_records_equal,
    kp_consume_all,
    kp_create_topic,
    kp_produce,
    make_records,
    unique,
    with_offsets,
)
from moldau.broker.config import BROKER_CONFIG, kafka_broker_keys

pytestmark = pytest.mark.timeout(120)

NOT_APPLIED = "Kafka settings accepted but not applied"


def _failure(broker: Broker) -> tuple[int, list[str]]:
    """Exit code and stderr lines of a start-up that must fail."""
    result = broker.run_to_exit()
    output = result.stderr.decode(errors="replace")
    assert READY_MARKER.encode() not in result.stdout
    assert "Traceback" not in output, output
    return result.returncode, output.strip().splitlines()


def test_every_setting_kafka_defines_is_accepted(broker_factory, tmp_path):
    kafka_only = sorted(kafka_broker_keys() - set(BROKER_CONFIG.keys))
    assert "controller.quorum.bootstrap.servers" in kafka_only
    config = tmp_path / "server.properties"
    # Values of settings Moldau does not apply are kept as text, not checked.
    config.write_text("".join(f"{name}=kafka value of {name}\n" for name in kafka_only)
                      + "num.partitions=2\n")
    broker = broker_factory(config_file=config)
    topic = unique("kafka-conf")
    kp_create_topic(broker.bootstrap, topic, partitions=2)
    records = make_records(10, partitions=2)
    kp_produce(broker.bootstrap, topic, records, acks="all")
    assert_records_equal(kp_consume_all(broker.bootstrap, topic, range(2)),
                         with_offsets(records))
    lines = [line for line in broker.stderr_path.read_text().splitlines()
             if NOT_APPLIED in line]
    assert len(lines) == 1, lines
    assert all(name in lines[0] for name in kafka_only)


def test_unknown_setting_suggests_the_close_one(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text("node.id=1\nlog.retention.hour=5\n")
    code, lines = _failure(Broker(tmp_path, config_file=config))
    assert code != 0
    assert lines == ["moldau broker: Unknown broker configuration 'log.retention.hour'; "
                     "did you mean 'log.retention.hours'?"]


def test_kafka_only_setting_still_needs_a_known_name(tmp_path):
    code, lines = _failure(Broker(tmp_path, {"no.such.setting": "1"}))
    assert code != 0
    assert lines == ["moldau broker: Unknown broker configuration 'no.such.setting'"]


def test_file_is_read_as_iso_8859_1_with_unicode_escapes(broker_factory, tmp_path):
    config = tmp_path / "server.properties"
    config.write_bytes(b"# caf\xe9 \xff\nbroker.rack = r\xe9gion-\\u00e9\\\n    t\\u00E9\n")
    broker = broker_factory(config_file=config)
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        racks = {b["rack"] for b in admin.describe_cluster()["brokers"]}
    finally:
        admin.close()
    assert racks == {"région-été"}


@pytest.mark.parametrize("content,where", [
    (b"node.id=1\n\n# x\nlog.dirs=/tmp/a\\u12G4\n", ":4: Malformed \\uxxxx encoding"),
    (b"node.id=1\nbroker.rack=a\\\n  b\\u00\n", ":2: Malformed \\uxxxx encoding"),
])
def test_broken_file_is_one_line_with_path_and_line(tmp_path, content, where):
    config = tmp_path / "server.properties"
    config.write_bytes(content)
    code, lines = _failure(Broker(tmp_path, config_file=config))
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith(f"moldau broker: {config}{where}"), lines


@pytest.mark.parametrize("name,reason", [("missing.properties", "No such file or directory"),
                                          (".", "Is a directory")])
def test_unreadable_file_is_one_line_with_path(tmp_path, name, reason):
    path = Path(tmp_path) / name
    code, lines = _failure(Broker(tmp_path / "b", config_file=path))
    assert code == 2
    assert lines == [f"moldau broker: Cannot read {path}: {reason}"]
