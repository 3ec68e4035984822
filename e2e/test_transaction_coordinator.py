"""The transaction coordinator against real transactional producers (librdkafka here; the
Java client in e2e/java/test_java_transactions.py): commits and aborts as read_committed and
read_uncommitted consumers see them, fencing of a producer by a newer one with the same
transactional id, and the state the coordinator keeps in `__transaction_state`."""

from __future__ import annotations

import pytest

from e2e import wire
from e2e.support import ck_admin, ck_consumer, ck_create_topic, unique, wait_until
from e2e.test_transactions import TIMEOUT, ck_read

pytestmark = pytest.mark.timeout(180)
# The broker's own max (900000) is Kafka's; a small one shows the check. Timed-out
# transactions are looked for every half second instead of every 10 s.
BROKER_OVERRIDES = {"transaction.max.timeout.ms": 120000,
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}


def ck_txn_producer(bootstrap: str, transactional_id: str, **config: object):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60000, **config})
    producer.init_transactions(TIMEOUT)
    return producer


def send_in_txn(producer, topic: str, values: list[bytes], *, commit: bool) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=0)
    producer.flush(TIMEOUT)
    if commit:
        producer.commit_transaction(TIMEOUT)
    else:
        producer.abort_transaction(TIMEOUT)


def values(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    """Every value a librdkafka consumer with `isolation` reads up to the log end."""
    from confluent_kafka import TopicPartition

    probe = ck_consumer(bootstrap)
    try:
        end = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)[1]
    finally:
        probe.close()
    return ck_read(bootstrap, topic, isolation, end)


def test_commit_and_abort_as_consumers_see_them(module_broker) -> None:
    bootstrap = module_broker.bootstrap
    topic = unique("ck-txn")
    ck_create_topic(bootstrap, topic)
    producer = ck_txn_producer(bootstrap, unique("ck-txn-id"))
    send_in_txn(producer, topic, [b"c1", b"c2"], commit=True)
    send_in_txn(producer, topic, [b"a1", b"a2", b"a3"], commit=False)
    send_in_txn(producer, topic, [b"c3"], commit=True)
    producer.flush(TIMEOUT)
    assert values(bootstrap, topic, "read_committed") == [b"c1", b"c2", b"c3"]
    assert values(bootstrap, topic, "read_uncommitted") == \
        [b"c1", b"c2", b"a1", b"a2", b"a3", b"c3"]


def test_a_second_producer_with_the_same_id_fences_the_first(module_broker) -> None:
    from confluent_kafka import KafkaException

    bootstrap = module_broker.bootstrap
    topic = unique("ck-txn-fence")
    ck_create_topic(bootstrap, topic)
    transactional_id = unique("ck-txn-fenced")
    first = ck_txn_producer(bootstrap, transactional_id)
    first.begin_transaction()
    first.produce(topic, b"zombie", partition=0)
    first.flush(TIMEOUT)
    # The newer producer aborts what the first left open, then takes the id over.
    second = ck_txn_producer(bootstrap, transactional_id)
    send_in_txn(second, topic, [b"live"], commit=True)
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(TIMEOUT)
    error = raised.value.args[0]
    assert error.fatal(), error
    assert "fenced" in error.str().lower(), error.str()
    assert values(bootstrap, topic, "read_committed") == [b"live"]
    assert values(bootstrap, topic, "read_uncommitted") == [b"zombie", b"live"]


def test_a_transaction_past_its_timeout_is_aborted(module_broker) -> None:
    """The coordinator aborts it (read_committed consumers move past it) and fences its
    producer with a new epoch, so the late commit fails."""
    from confluent_kafka import KafkaException

    bootstrap = module_broker.bootstrap
    topic = unique("ck-txn-timeout")
    ck_create_topic(bootstrap, topic)
    producer = ck_txn_producer(bootstrap, unique("ck-txn-slow"),
                               **{"transaction.timeout.ms": 2000})
    producer.begin_transaction()
    producer.produce(topic, b"too-slow", partition=0)
    producer.flush(TIMEOUT)
    with wire.Conn(bootstrap, timeout=30) as conn:
        def stable() -> bool:
            committed = wire.list_offset(conn, 1, topic, 0, wire.LATEST_TIMESTAMP,
                                         wire.READ_COMMITTED)[2]
            return committed == 2  # the record and the abort marker
        wait_until(stable, TIMEOUT, "the timed-out transaction to be aborted")
    with pytest.raises(KafkaException):
        producer.commit_transaction(TIMEOUT)
    assert values(bootstrap, topic, "read_committed") == []
    assert values(bootstrap, topic, "read_uncommitted") == [b"too-slow"]


def test_init_producer_id_on_the_wire(module_broker) -> None:
    """Epochs grow with every InitProducerId of the id; the timeout is bounded by
    transaction.max.timeout.ms; the coordinator is found with key type TRANSACTION."""
    transactional_id = unique("wire-txn")
    with wire.Conn(module_broker.bootstrap, timeout=30) as conn:
        # The first ask creates __transaction_state: COORDINATOR_NOT_AVAILABLE until it has
        # leaders, then this broker (node 1) on its own port.
        found = wait_until(lambda: (lambda got: got if got[0] == wire.NONE else None)(
            wire.find_coordinator(conn, 0, transactional_id, wire.TRANSACTION_KEY)),
            TIMEOUT, "the transaction coordinator")
        assert found == (wire.NONE, 1, int(module_broker.bootstrap.rsplit(":", 1)[1]))

        def granted(correlation_id: int, timeout_ms: int = 60000):
            def attempt():
                got = wire.init_producer_id(conn, correlation_id, transactional_id,
                                            timeout_ms=timeout_ms)
                # Retried as clients do while the new partitions' logs are created and
                # loaded: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE.
                return None if got[0] in (14, 15, 16) else got
            return wait_until(attempt, TIMEOUT, "InitProducerId")

        error, producer_id, epoch = granted(1)
        assert (error, epoch) == (wire.NONE, 0)
        assert granted(2) == (wire.NONE, producer_id, 1)
        assert granted(3, timeout_ms=120001) == (wire.INVALID_TRANSACTION_TIMEOUT, -1, -1)
        # The producer of epoch 0 is fenced: PRODUCER_FENCED from EndTxn v2 on (KIP-588),
        # INVALID_PRODUCER_EPOCH before.
        assert wire.end_txn(conn, 5, 1, transactional_id, producer_id, 0, True) == \
            wire.INVALID_PRODUCER_EPOCH
        assert wire.end_txn(conn, 6, 3, transactional_id, producer_id, 0, True) == \
            wire.PRODUCER_FENCED
        # An idempotent producer on the same connection still gets a fresh id.
        error, other, epoch = wire.init_producer_id(conn, 4)
        assert error == wire.NONE and other != producer_id and epoch == 0


def assert_transaction_state_topic(bootstrap: str, name: str) -> None:
    """Kafka's settings of the topic on three brokers: 50 partitions of 3 replicas
    (transaction.state.log.replication.factor), compacted, min.insync.replicas 2
    (transaction.state.log.min.isr)."""
    from confluent_kafka.admin import ConfigResource

    admin = ck_admin(bootstrap)
    topic = admin.list_topics(name, timeout=15).topics[name]
    assert len(topic.partitions) == 50
    assert {len(partition.replicas) for partition in topic.partitions.values()} == {3}
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(15)
    assert (configs["cleanup.policy"].value, configs["min.insync.replicas"].value) == (
        "compact", "2")


def test_the_coordinators_broker_dies_mid_transaction(cluster) -> None:
    """A 3-node cluster: the broker coordinating the transactional id is killed while a
    transaction is open; the producer finds the new coordinator (which loaded the id from
    its replica of __transaction_state) and commits, and a read_committed consumer sees
    every committed record once and nothing aborted."""
    from e2e.test_cluster_failover import create_topic, partition_state
    from moldau.broker.coordinators.group.records import partition_for
    from moldau.broker.coordinators.transaction.records import TRANSACTION_TOPIC

    bootstrap = cluster.bootstrap_servers
    topic = unique("txn-failover")
    create_topic(bootstrap, topic, configs={"min.insync.replicas": "2"})
    transactional_id = unique("txn-failover-id")
    producer = ck_txn_producer(bootstrap, transactional_id)
    send_in_txn(producer, topic, [b"first-0", b"first-1"], commit=True)
    state_partition = partition_for(transactional_id, 50)
    coordinator, _ = partition_state(cluster, TRANSACTION_TOPIC, state_partition)
    wait_until(lambda: len(partition_state(cluster, TRANSACTION_TOPIC, state_partition)[1])
               == 3, TIMEOUT, "a full ISR of the transaction's state partition")
    assert_transaction_state_topic(bootstrap, TRANSACTION_TOPIC)

    producer.begin_transaction()
    for n in range(3):
        producer.produce(topic, f"second-{n}".encode(), partition=0)
    producer.flush(TIMEOUT)
    cluster.kill(coordinator)
    wait_until(lambda: partition_state(cluster, TRANSACTION_TOPIC, state_partition)[0]
               not in (-1, coordinator), TIMEOUT, "a new coordinator")
    producer.commit_transaction(TIMEOUT)
    send_in_txn(producer, topic, [b"aborted"], commit=False)
    send_in_txn(producer, topic, [b"third-0"], commit=True)
    assert values(bootstrap, topic, "read_committed") == [
        b"first-0", b"first-1", b"second-0", b"second-1", b"second-2", b"third-0"]


def test_markers_follow_the_partition_to_its_new_leader(cluster) -> None:
    """The data partition's leader (not the coordinator) dies with a transaction open: the
    commit's markers go to the new leader once the metadata names it."""
    from e2e.test_cluster_failover import create_topic, partition_state
    from moldau.broker.coordinators.group.records import partition_for
    from moldau.broker.coordinators.transaction.records import TRANSACTION_TOPIC

    bootstrap = cluster.bootstrap_servers
    topic = unique("txn-leader-moves")
    create_topic(bootstrap, topic, configs={"min.insync.replicas": "2"})
    wait_until(lambda: len(partition_state(cluster, topic)[1]) == 3, TIMEOUT, "a full ISR")
    leader, _ = partition_state(cluster, topic)
    ck_txn_producer(bootstrap, unique("txn-first"))  # creates __transaction_state
    transactional_id = next(
        f"{topic}-id-{n}" for n in range(200)
        if partition_state(cluster, TRANSACTION_TOPIC, partition_for(f"{topic}-id-{n}", 50))[0]
        != leader)  # coordinated by another broker than the partition's leader
    producer = ck_txn_producer(bootstrap, transactional_id)
    producer.begin_transaction()
    producer.produce(topic, b"survives", partition=0)
    producer.flush(TIMEOUT)
    cluster.kill(leader)
    producer.commit_transaction(TIMEOUT)
    wait_until(lambda: partition_state(cluster, topic)[0] not in (-1, leader), TIMEOUT,
               "a new leader")
    send_in_txn(producer, topic, [b"after"], commit=True)
    assert values(bootstrap, topic, "read_committed") == [b"survives", b"after"]


def test_the_state_survives_a_broker_crash(broker) -> None:
    """kill -9 with a transaction open: the restarted broker loads the id from
    __transaction_state, and the same producer commits."""
    topic = unique("txn-crash")
    ck_create_topic(broker.bootstrap, topic)
    producer = ck_txn_producer(broker.bootstrap, unique("txn-crash-id"))
    send_in_txn(producer, topic, [b"before"], commit=True)
    producer.begin_transaction()
    producer.produce(topic, b"across", partition=0)
    producer.flush(TIMEOUT)
    broker.kill()
    broker.start()
    producer.commit_transaction(TIMEOUT)
    assert values(broker.bootstrap, topic, "read_committed") == [b"before", b"across"]
