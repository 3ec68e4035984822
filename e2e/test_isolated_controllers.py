"""Kafka's isolated mode: three controller-only nodes (process.roles=controller) form the
quorum and two broker-only nodes serve clients, driven by librdkafka."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from e2e.conftest import Broker, free_port
from e2e.support import wait_until


def test_controller_only_quorum_serves_broker_only_nodes(tmp_path: Path) -> None:
    ports = [free_port() for _ in range(3)]
    voters = ",".join(f"{node}@127.0.0.1:{port}" for node, port in enumerate(ports, 1))
    nodes = [Broker(tmp_path / f"controller-{node}", {
        "node.id": node, "process.roles": "controller", "controller.quorum.voters": voters,
        "listeners": f"CONTROLLER://127.0.0.1:{port}"}) for node, port in enumerate(ports, 1)]
    for node in nodes:
        node.start()
    brokers = [Broker(tmp_path / f"broker-{node}", {
        "node.id": node, "process.roles": "broker", "controller.quorum.voters": voters,
        "offsets.topic.replication.factor": 2}) for node in (4, 5)]
    try:
        for broker in brokers:
            broker.start()
        bootstrap = ",".join(broker.bootstrap for broker in brokers)
        admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
        admin.create_topics([NewTopic("isolated", 2, 2)])["isolated"].result(30)
        metadata = admin.list_topics("isolated", timeout=10)
        assert sorted(metadata.brokers) == [4, 5]  # controllers are not brokers
        assert all(sorted(p.replicas) == [4, 5]
                   for p in metadata.topics["isolated"].partitions.values())
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                             "enable.idempotence": True})
        for number in range(100):
            producer.produce("isolated", str(number).encode(), partition=number % 2)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": brokers[1].bootstrap, "group.id": "iso",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["isolated"])
        seen: list[int] = []
        for _ in range(60):
            seen += [int(m.value()) for m in consumer.consume(100, timeout=0.5)
                     if m.error() is None]
            if len(seen) >= 100:
                break
        consumer.close()
        assert sorted(seen) == list(range(100))
    finally:
        for node in [*brokers, *nodes]:
            node.stop()


def test_a_broker_waiting_for_its_controllers_stops_on_sigterm(tmp_path: Path) -> None:
    """No controller ever answers: start-up waits, and SIGTERM still stops the process."""
    voters = f"1@127.0.0.1:{free_port()}"
    broker = Broker(tmp_path / "broker", {"node.id": 2, "process.roles": "broker",
                                          "controller.quorum.voters": voters})
    proc = subprocess.Popen(broker.command(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        # The listener opens after the signal handlers are set: from then on SIGTERM is the
        # broker's own, however long the interpreter took to start on a busy machine.
        wait_until(lambda: proc.poll() is not None or port_open(broker.port), 60,
                   "the broker's listener")
        time.sleep(1)
        assert proc.poll() is None, "the broker should still be waiting for a controller"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err[-2000:]
        assert "moldau broker ready" not in out
        assert "Stopping during start-up" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_brokers_of_a_single_controller_keep_their_isr(tmp_path: Path) -> None:
    """One controller-only node and two broker-only nodes (a KafkaCluster's smallest shape):
    the brokers replicate as any others do: a replica added by reassignment joins the ISR
    once caught up, and one killed leaves it."""
    from moldau.client import Admin, TopicPartition

    port = free_port()
    voters = f"1@127.0.0.1:{port}"
    controller = Broker(tmp_path / "controller", {
        "node.id": 1, "process.roles": "controller", "controller.quorum.voters": voters,
        "listeners": f"CONTROLLER://127.0.0.1:{port}"})
    controller.start()
    brokers = [Broker(tmp_path / f"broker-{node}", {
        "node.id": node, "process.roles": "broker", "controller.quorum.voters": voters,
        "replica.lag.time.max.ms": 3000}) for node in (4, 5)]
    try:
        for broker in brokers:
            broker.start()
        admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})

        def isr() -> list[int]:
            metadata = admin.list_topics("grown", timeout=10)
            return sorted(metadata.topics["grown"].partitions[0].isrs)

        admin.create_topics([NewTopic("grown", 1, replica_assignment=[[4]])])["grown"].result(30)
        producer = Producer({"bootstrap.servers": brokers[0].bootstrap, "acks": "all"})
        for number in range(50):
            producer.produce("grown", str(number).encode(), partition=0)
        assert producer.flush(30) == 0
        with Admin({"bootstrap.servers": brokers[0].bootstrap}) as moldau_admin:
            moldau_admin.alter_partition_reassignments({TopicPartition("grown", 0): [4, 5]})
        wait_until(lambda: isr() == [4, 5], 60, "broker 5 in the ISR")
        brokers[1].kill()
        wait_until(lambda: isr() == [4], 60, "broker 5 out of the ISR")
    finally:
        for broker in brokers:
            broker.close()
        controller.stop()
