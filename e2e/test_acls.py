"""ACLs seen by real clients: a broker with StandardAuthorizer and SASL PLAIN users, driven by
confluent-kafka and kafka-python as different users. A user without ACLs is refused with
Kafka's errors; ACLs granted by a super user let it work; prefixed ACLs, DENY over ALLOW, hosts,
allow.everyone.if.no.acl.found, Metadata hiding topics, transactions, and ACLs kept across a
restart from the metadata log and from a snapshot."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from e2e.conftest import _ACTIVE, Broker
from e2e.support import free_port, kp_produce, make_records, unique

pytestmark = pytest.mark.timeout(300)

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
USERS = ("admin", "alice", "bob", "carol")
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" '
        + " ".join(f'user_{user}="{user}-secret"' for user in USERS) + ";")
ANY_HOST = "*"


def settings(port: int, **extra: object) -> dict[str, object]:
    return {"listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
            "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin",
            "group.initial.rebalance.delay.ms": 0, **extra}


def start(directory: Path, **extra: object) -> Broker:
    port = free_port()
    broker = Broker(directory, settings(port, **extra), port=port)
    _ACTIVE.append(broker)
    return broker.start()


def close(broker: Broker) -> None:
    """Stop the broker and drop the clients kept for it (they would retry it forever)."""
    for key in [key for key in _ADMINS if key[0] == broker.bootstrap]:
        del _ADMINS[key]
    broker.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    instance = start(tmp_path_factory.mktemp("acl-broker"))
    yield instance
    close(instance)


def ck(broker: Broker, user: str, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN", "sasl.username": user,
            "sasl.password": f"{user}-secret", **extra}


def kp(user: str) -> dict[str, object]:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
            "sasl_plain_username": user, "sasl_plain_password": f"{user}-secret"}


_ADMINS: dict[tuple[str, str], AdminClient] = {}


def admin(broker: Broker, user: str = "admin") -> AdminClient:
    """One AdminClient per broker and user: a client must outlive the futures it returns."""
    key = (broker.bootstrap, user)
    if key not in _ADMINS:
        _ADMINS[key] = AdminClient(ck(broker, user))
    return _ADMINS[key]


def create_topic(broker: Broker, name: str) -> None:
    admin(broker).create_topics([NewTopic(name, 1, 1)])[name].result(30)


def grant(broker: Broker, user: str, resource: ResourceType, name: str,
          *operations: AclOperation, pattern: ResourcePatternType = ResourcePatternType.LITERAL,
          permission: AclPermissionType = AclPermissionType.ALLOW,
          host: str = ANY_HOST) -> None:
    bindings = [AclBinding(resource, name, pattern, f"User:{user}", host, operation,
                           permission) for operation in operations]
    for future in admin(broker).create_acls(bindings).values():
        assert future.result(30) is None


def delivery(broker: Broker, user: str, topic: str, **extra: object) -> KafkaError | None:
    """Produce one record with librdkafka as `user`: None, or the delivery error."""
    producer = Producer(ck(broker, user, **{"message.timeout.ms": 10000, **extra}))
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"value", on_delivery=lambda error, _: outcome.append(error))
    producer.flush(20)
    assert outcome, "no delivery report"
    return outcome[0]


def consume_error(consumer: Consumer, timeout: float = 20) -> KafkaError | None:
    """The first error a consumer reports, or None once it has read a record."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        return message.error()
    raise AssertionError("the consumer neither read a record nor reported an error")


def group_consumer(broker: Broker, user: str, group: str, topic: str) -> Consumer:
    consumer = Consumer(ck(broker, user, **{"group.id": group,
                                            "auto.offset.reset": "earliest",
                                            "enable.auto.commit": False}))
    consumer.subscribe([topic])
    return consumer


def test_a_user_is_refused_until_granted_its_acls(broker: Broker) -> None:
    topic, group = unique("orders"), unique("billing")
    create_topic(broker, topic)
    # No ACLs: librdkafka and kafka-python get Kafka's authorization errors.
    error = delivery(broker, "alice", topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    from kafka.errors import TopicAuthorizationFailedError
    with pytest.raises(TopicAuthorizationFailedError):
        kp_produce(broker.bootstrap, topic, make_records(1), **kp("alice"),
                   max_block_ms=5000)
    consumer = group_consumer(broker, "alice", group, topic)
    try:
        error = consume_error(consumer)
        assert error is not None and error.code() in (
            KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED), error
    finally:
        consumer.close()

    grant(broker, "alice", ResourceType.TOPIC, topic, AclOperation.WRITE, AclOperation.READ)
    grant(broker, "alice", ResourceType.GROUP, group, AclOperation.READ)
    assert delivery(broker, "alice", topic) is None
    assert kp_produce(broker.bootstrap, topic, make_records(2), **kp("alice")) == [1, 2]
    consumer = group_consumer(broker, "alice", group, topic)
    try:
        assert consume_error(consumer) is None  # a record, no error
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    # kafka-python in the same group reads on from the committed offset.
    from kafka import KafkaConsumer
    kp_consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                auto_offset_reset="earliest", consumer_timeout_ms=10000,
                                **kp("alice"))
    try:
        assert [message.offset for message in kp_consumer][:2] == [1, 2]
    finally:
        kp_consumer.close()
    # Still nothing for bob.
    error = delivery(broker, "bob", topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_prefixed_acls_cover_every_name_with_the_prefix(broker: Broker) -> None:
    prefix = unique("team-a") + "."
    grant(broker, "bob", ResourceType.TOPIC, prefix, AclOperation.WRITE, AclOperation.CREATE,
          pattern=ResourcePatternType.PREFIXED)
    # CREATE on the prefix lets Metadata auto-create a topic with it.
    assert delivery(broker, "bob", prefix + "new") is None
    assert delivery(broker, "bob", prefix + "other") is None
    error = delivery(broker, "bob", unique("team-b") + ".new")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_deny_wins_over_allow_and_hosts_count(broker: Broker) -> None:
    prefix = unique("p") + "-"
    public, secret = prefix + "public", prefix + "secret"
    for topic in (public, secret):
        create_topic(broker, topic)
    grant(broker, "carol", ResourceType.TOPIC, prefix, AclOperation.WRITE,
          pattern=ResourcePatternType.PREFIXED)
    grant(broker, "carol", ResourceType.TOPIC, secret, AclOperation.WRITE,
          permission=AclPermissionType.DENY)
    assert delivery(broker, "carol", public) is None
    error = delivery(broker, "carol", secret)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # An ACL for another host does not apply to this client (it connects from 127.0.0.1).
    elsewhere = unique("hosts")
    create_topic(broker, elsewhere)
    grant(broker, "carol", ResourceType.TOPIC, elsewhere, AclOperation.WRITE, host="10.9.9.9")
    error = delivery(broker, "carol", elsewhere)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(broker, "carol", ResourceType.TOPIC, elsewhere, AclOperation.WRITE, host="127.0.0.1")
    assert delivery(broker, "carol", elsewhere) is None


def test_super_users_ignore_even_a_deny_of_everything(broker: Broker) -> None:
    topic = unique("super")
    create_topic(broker, topic)
    grant(broker, "admin", ResourceType.TOPIC, topic, AclOperation.ALL,
          permission=AclPermissionType.DENY)
    assert delivery(broker, "admin", topic) is None


def test_metadata_lists_only_the_topics_a_user_may_describe(broker: Broker) -> None:
    visible, hidden = unique("visible"), unique("hidden")
    for topic in (visible, hidden):
        create_topic(broker, topic)
    grant(broker, "alice", ResourceType.TOPIC, visible, AclOperation.READ)  # implies DESCRIBE
    listed = admin(broker, "alice").list_topics(timeout=10).topics
    assert visible in listed and hidden not in listed
    assert {visible, hidden} <= set(admin(broker).list_topics(timeout=10).topics)
    # Named, the hidden topic is refused whether it exists or not.
    named = admin(broker, "alice").list_topics(hidden, timeout=10).topics[hidden]
    assert named.error is not None
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    from kafka import KafkaAdminClient
    kp_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, **kp("alice"))
    try:
        assert visible in kp_admin.list_topics() and hidden not in kp_admin.list_topics()
    finally:
        kp_admin.close()


def test_transactions_need_their_acls(broker: Broker) -> None:
    source, sink = unique("txn-in"), unique("txn-out")
    group, txn = unique("txn-group"), unique("txn-id")
    for topic in (source, sink):
        create_topic(broker, topic)

    def producer() -> Producer:
        return Producer(ck(broker, "bob", **{"transactional.id": txn,
                                             "transaction.timeout.ms": 30000}))

    with pytest.raises(KafkaException) as refused:
        producer().init_transactions(15)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    grant(broker, "bob", ResourceType.TRANSACTIONAL_ID, txn, AclOperation.WRITE)
    grant(broker, "bob", ResourceType.TOPIC, sink, AclOperation.WRITE)
    grant(broker, "bob", ResourceType.TOPIC, source, AclOperation.READ)
    grant(broker, "bob", ResourceType.GROUP, group, AclOperation.READ)
    transactional = producer()
    transactional.init_transactions(30)
    transactional.begin_transaction()
    transactional.produce(sink, b"in a transaction")
    transactional.send_offsets_to_transaction(
        [TopicPartition(source, 0, 0)],
        group_consumer(broker, "bob", group, source).consumer_group_metadata(), 30)
    transactional.commit_transaction(30)
    reader = Consumer(ck(broker, "admin", **{"group.id": unique("reader"),
                                             "auto.offset.reset": "earliest",
                                             "isolation.level": "read_committed"}))
    reader.assign([TopicPartition(sink, 0, 0)])
    try:
        message = reader.poll(20)
        assert message is not None and message.value() == b"in a transaction"
    finally:
        reader.close()


def test_allow_everyone_if_no_acl_found(tmp_path: Path) -> None:
    broker = start(tmp_path / "open", **{"allow.everyone.if.no.acl.found": "true"})
    try:
        open_topic, guarded = unique("open"), unique("guarded")
        for topic in (open_topic, guarded):
            create_topic(broker, topic)
        assert delivery(broker, "bob", open_topic) is None  # no ACL names it
        grant(broker, "alice", ResourceType.TOPIC, guarded, AclOperation.WRITE)
        assert delivery(broker, "alice", guarded) is None
        # Any ACL on a resource ends the default for everyone else.
        error = delivery(broker, "bob", guarded)
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        close(broker)


def _described(broker: Broker) -> set[str]:
    found = admin(broker).describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(30)
    return {str(binding) for binding in found}


@pytest.mark.parametrize("crash", [False, True], ids=["stopped", "killed"])
def test_acls_survive_a_restart(tmp_path: Path, crash: bool) -> None:
    """The ACLs are metadata records: a restart, clean or after kill -9, replays them."""
    broker = start(tmp_path / "restarted")
    try:
        topic = unique("kept")
        create_topic(broker, topic)
        grant(broker, "alice", ResourceType.TOPIC, topic, AclOperation.WRITE)
        grant(broker, "bob", ResourceType.TOPIC, "kept", AclOperation.WRITE,
              pattern=ResourcePatternType.PREFIXED, permission=AclPermissionType.DENY)
        for number in range(5):
            grant(broker, "carol", ResourceType.GROUP, f"group-{number}", AclOperation.READ)
        removed = admin(broker).delete_acls([AclBindingFilter(
            ResourceType.GROUP, "group-0", ResourcePatternType.LITERAL, None, None,
            AclOperation.ANY, AclPermissionType.ANY)])
        assert [len(future.result(30)) for future in removed.values()] == [1]
        before = _described(broker)
        assert len(before) == 6
        if crash:
            broker.kill()
        broker.restart()
        assert _described(broker) == before
        assert delivery(broker, "alice", topic) is None
        error = delivery(broker, "bob", topic)
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        close(broker)
