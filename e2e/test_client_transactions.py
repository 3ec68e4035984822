"""The Moldau client's transactional producer against a real broker, checked with real
consumers (librdkafka, kafka-python and Moldau's, read_committed and read_uncommitted).

Every test runs against Apache Kafka's broker and against Moldau's. Moldau's case is
skipped while its broker has no transaction coordinator, which it tells by refusing
InitProducerId for a transactional id with TRANSACTIONAL_ID_AUTHORIZATION_FAILED; once the
coordinator answers, the same tests run against it.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from e2e import wire
from e2e.conftest import moldau_executable
from e2e.kafka_dist import KafkaBroker, ensure_artifacts
from e2e.support import ck_create_topic, unique, wait_until
from e2e.test_transactions import ck_read, kp_read, moldau_read
from moldau.client import (
    Admin,
    AsyncProducer,
    Consumer,
    PreparedTransaction,
    Producer,
    TopicPartition,
)
from moldau.client.errors import (
    IllegalStateError,
    ProducerFencedError,  # type: ignore[attr-defined]
    TransactionAbortableError,  # type: ignore[attr-defined]
    TransactionAbortedError,
)

pytestmark = pytest.mark.timeout(300)

SETTINGS: dict[str, object] = {"group.initial.rebalance.delay.ms": 0}
BROKER_OVERRIDES = SETTINGS
TIMEOUT = 60.0
NO_COORDINATOR = "the transaction coordinator is not merged yet"


def _require_coordinator(bootstrap: str) -> None:
    """Skip when the broker refuses every transactional id (no coordinator)."""
    with wire.Conn(bootstrap, timeout=30) as conn:
        error, _, _ = wire.init_producer_id(conn, 1, unique("probe"))
    if error == wire.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        pytest.skip(NO_COORDINATOR)


@pytest.fixture(scope="module", params=["kafka", "moldau"])
def bootstrap(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[str]:
    """One broker per module and kind; tests use unique topics, groups and ids."""
    if request.param == "moldau":
        address = request.getfixturevalue("module_broker").bootstrap
        _require_coordinator(address)
        yield address
        return
    ensure_artifacts()
    kafka = KafkaBroker(tmp_path_factory.mktemp("kafka-broker"), SETTINGS)
    try:
        kafka.start()
        yield kafka.bootstrap
    finally:
        kafka.stop()


def producer(bootstrap: str, transactional_id: str, **settings: object) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id},
                    **settings)


def assert_reads(bootstrap: str, topic: str, end: int, committed: list[bytes],
                 everything: list[bytes]) -> None:
    for read in (ck_read, kp_read, moldau_read):
        assert read(bootstrap, topic, "read_committed", end) == committed, read.__name__
        assert read(bootstrap, topic, "read_uncommitted", end) == everything, read.__name__


def test_committed_records_are_visible_and_aborted_ones_never(bootstrap: str) -> None:
    topic = unique("txn-client")
    ck_create_topic(bootstrap, topic)
    with producer(bootstrap, unique("txn")) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"c1")
        p.send(topic, b"c2")
        p.commit_transaction()  # c1 c2 at 0-1, the marker at 2

        p.begin_transaction()
        sent = p.send(topic, b"a1")
        p.flush()
        assert sent.get(10).offset == 3  # written, then aborted (marker at 4)
        p.abort_transaction()

        p.begin_transaction()
        p.send(topic, b"c3")
        p.commit_transaction()  # 5, the marker at 6
    assert_reads(bootstrap, topic, 7, [b"c1", b"c2", b"c3"], [b"c1", b"c2", b"a1", b"c3"])


def test_calls_in_the_wrong_state_raise_clear_errors(bootstrap: str) -> None:
    topic = unique("txn-state")
    ck_create_topic(bootstrap, topic)
    with producer(bootstrap, unique("txn"), max_block_ms=20000) as p:
        with pytest.raises(IllegalStateError, match="before completing a call to "
                                                    "init_transactions"):
            p.send(topic, b"x")
        with pytest.raises(IllegalStateError, match="from state UNINITIALIZED to state "
                                                    "IN_TRANSACTION"):
            p.begin_transaction()
        p.init_transactions()
        with pytest.raises(IllegalStateError, match="from state READY to state "
                                                    "COMMITTING_TRANSACTION"):
            p.commit_transaction()
        with pytest.raises(IllegalStateError, match=r"Cannot send offsets if a transaction "
                                                    r"is not in progress \(currentState= "
                                                    r"READY\)"):
            p.send_offsets_to_transaction({TopicPartition(topic, 0): 1}, "some-group")
        with pytest.raises(IllegalStateError, match="call begin_transaction"):
            p.send(topic, b"x")
        p.begin_transaction()
        with pytest.raises(IllegalStateError, match="from state IN_TRANSACTION to state "
                                                    "IN_TRANSACTION"):
            p.begin_transaction()
        p.abort_transaction()  # nothing was sent: nothing to end on the coordinator
    with Producer({"bootstrap.servers": bootstrap}) as plain, \
            pytest.raises(IllegalStateError, match="non-transactional producer"):
        plain.begin_transaction()


def test_a_second_producer_with_the_same_id_fences_the_first(bootstrap: str) -> None:
    topic = unique("txn-fenced")
    ck_create_topic(bootstrap, topic)
    transactional_id = unique("txn")

    async def scenario() -> None:
        async with AsyncProducer({"bootstrap.servers": bootstrap,
                                  "transactional.id": transactional_id}) as first:
            await first.init_transactions()
            first.begin_transaction()
            await first.send_and_wait(topic, b"zombie")
            with producer(bootstrap, transactional_id) as second:
                # Fences the first and aborts its open transaction.
                second.init_transactions()
                with pytest.raises(ProducerFencedError):
                    await first.commit_transaction()
                # Fatal: every later call raises it again.
                for call in (first.begin_transaction, first.abort_transaction,
                             lambda: first.send(topic, b"again")):
                    with pytest.raises(ProducerFencedError):
                        result = call()
                        if asyncio.iscoroutine(result):
                            await result
                second.begin_transaction()
                second.send(topic, b"winner")
                second.commit_transaction()

    asyncio.run(scenario())
    # zombie at 0, its abort marker at 1, winner at 2, its commit marker at 3.
    assert_reads(bootstrap, topic, 4, [b"winner"], [b"zombie", b"winner"])


def test_a_failed_send_makes_the_transaction_abortable_and_abort_recovers(bootstrap: str
                                                                          ) -> None:
    topic = unique("txn-abortable")
    ck_create_topic(bootstrap, topic, configs={"max.message.bytes": "1024"})
    with producer(bootstrap, unique("txn"), linger_ms=1000) as p:  # one batch for both
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"fits")
        too_large = p.send(topic, b"x" * 4096)  # the broker refuses it: MESSAGE_TOO_LARGE
        with pytest.raises(TransactionAbortableError, match="must be aborted"):
            p.commit_transaction()
        assert too_large.exception() is not None
        with pytest.raises(TransactionAbortableError):
            p.send(topic, b"more")
        tm = p.async_producer.transaction_manager
        assert tm is not None
        producer_id, epoch = tm.producer_id, tm.producer_epoch
        p.abort_transaction()
        # The failed batch took sequence numbers: the coordinator gives the next epoch.
        assert (tm.producer_id, tm.producer_epoch) == (producer_id, epoch + 1)
        p.begin_transaction()
        p.send(topic, b"after")
        p.commit_transaction()
    # The refused batch left nothing: the abort marker, "after" and its commit marker (which
    # the coordinator writes after answering EndTxn).
    wait_until(lambda: _end_offset(bootstrap, topic) == 3, TIMEOUT, "the commit marker")
    assert ck_read(bootstrap, topic, "read_committed", 3) == [b"after"]


def test_abort_fails_records_not_yet_sent(bootstrap: str) -> None:
    topic = unique("txn-unsent")
    ck_create_topic(bootstrap, topic)
    with producer(bootstrap, unique("txn"), linger_ms=60000, batch_size=1 << 20) as p:
        p.init_transactions()
        p.begin_transaction()
        pending = p.send(topic, b"lingering")  # held back by linger.ms
        p.abort_transaction()
        assert isinstance(pending.exception(), TransactionAbortedError)


def test_close_aborts_an_open_transaction(bootstrap: str) -> None:
    topic = unique("txn-close")
    ck_create_topic(bootstrap, topic)
    # A long transaction timeout: only the producer's abort can end it within the test.
    with producer(bootstrap, unique("txn"), transaction_timeout_ms=600000) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"unfinished")
        p.flush()
    wait_until(lambda: _end_offset(bootstrap, topic) == 2, TIMEOUT, "the abort marker")
    assert ck_read(bootstrap, topic, "read_committed", 2) == []


def prepared_in_a_closed_producer(bootstrap: str, topic: str, transactional_id: str,
                                  values: list[bytes]) -> PreparedTransaction:
    """A transaction with `values` prepared by a producer that is then closed."""
    with producer(bootstrap, transactional_id, transaction_timeout_ms=600000) as p:
        p.init_transactions()
        p.begin_transaction()
        for value in values:
            p.send(topic, value)
        prepared = p.prepare_transaction()
        with pytest.raises(IllegalStateError, match="from state PREPARED_TRANSACTION to state "
                                                    "COMMITTING_TRANSACTION"):
            p.commit_transaction()
        with pytest.raises(IllegalStateError, match="in state PREPARED_TRANSACTION"):
            p.send(topic, b"more")
    assert prepared.transactional_id == transactional_id
    return prepared


@pytest.mark.parametrize("commit", [True, False])
def test_another_client_ends_a_prepared_transaction(bootstrap: str, commit: bool) -> None:
    topic = unique("txn-prepared")
    ck_create_topic(bootstrap, topic)
    prepared = prepared_in_a_closed_producer(bootstrap, topic, unique("txn"), [b"p1", b"p2"])
    # Closing left it open: read_committed sees nothing, the last stable offset stays at 0.
    assert ck_read(bootstrap, topic, "read_uncommitted", 2) == [b"p1", b"p2"]
    assert _last_stable_offset(bootstrap, topic) == 0
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.complete_transactions([prepared], commit=commit)
        admin.complete_transactions([prepared], commit=commit)  # a retry: already done
    wait_until(lambda: _end_offset(bootstrap, topic) == 3, TIMEOUT, "the marker")
    assert_reads(bootstrap, topic, 3, [b"p1", b"p2"] if commit else [], [b"p1", b"p2"])


def test_a_prepared_transaction_fenced_since_cannot_be_committed(bootstrap: str) -> None:
    topic = unique("txn-prepared-fenced")
    ck_create_topic(bootstrap, topic)
    transactional_id = unique("txn")
    fenced = prepared_in_a_closed_producer(bootstrap, topic, transactional_id, [b"old"])
    other = prepared_in_a_closed_producer(bootstrap, topic, unique("txn"), [b"other"])
    with producer(bootstrap, transactional_id) as successor:
        successor.init_transactions()  # aborts the prepared transaction, fencing its epoch
    with Admin({"bootstrap.servers": bootstrap}) as admin, \
            pytest.raises(ProducerFencedError, match=f"EndTxn for transactional id "
                                                     f"{transactional_id} .*fenced"):
        admin.complete_transactions([fenced, other])
    # The other transaction was committed all the same.
    wait_until(lambda: _last_stable_offset(bootstrap, topic) == 4, TIMEOUT, "both markers")
    assert ck_read(bootstrap, topic, "read_committed", 4) == [b"other"]


def test_an_empty_transaction_cannot_be_prepared(bootstrap: str) -> None:
    with producer(bootstrap, unique("txn")) as p:
        p.init_transactions()
        p.begin_transaction()
        with pytest.raises(IllegalStateError, match="without records or offsets"):
            p.prepare_transaction()
        p.abort_transaction()


def _committed(bootstrap: str, group: str, tp: TopicPartition) -> int | None:
    with Consumer({"bootstrap.servers": bootstrap, "group.id": group}) as reader:
        found = reader.committed([tp], timeout=30).get(tp)
    return None if found is None else found.offset


def test_consume_transform_produce_moves_offsets_only_on_commit(bootstrap: str) -> None:
    source, sink, group = unique("txn-in"), unique("txn-out"), unique("txn-group")
    ck_create_topic(bootstrap, source)
    ck_create_topic(bootstrap, sink)
    with Producer({"bootstrap.servers": bootstrap}) as plain:
        for i in range(6):
            plain.send(source, b"in-%d" % i, key=b"k-%d" % i)
    source_tp = TopicPartition(source, 0)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    try:
        consumer.subscribe([source])
        records: list = []
        wait_until(lambda: records.extend(consumer.poll(0.5)) or len(records) >= 6, TIMEOUT,
                   "the input records")
        metadata = consumer.group_metadata()
        assert metadata.group_id == group and metadata.generation_id >= 1
        assert metadata.member_id
        with producer(bootstrap, unique("txn")) as p:
            p.init_transactions()
            for commit in (False, True):
                p.begin_transaction()
                for record in records:
                    p.send(sink, record.value.upper(), key=record.key)
                p.send_offsets_to_transaction({source_tp: records[-1].offset + 1}, metadata)
                if commit:
                    p.commit_transaction()
                else:
                    p.abort_transaction()
                    assert _committed(bootstrap, group, source_tp) is None
        assert _committed(bootstrap, group, source_tp) == 6
    finally:
        consumer.close()
    # Six aborted, the abort marker, six committed, the commit marker.
    output = ck_read(bootstrap, sink, "read_committed", 14)
    assert output == [r.value.upper() for r in records]


def _cli_producer(bootstrap: str, topic: str, transactional_id: str) -> subprocess.Popen:
    return subprocess.Popen([moldau_executable(), "produce", "--bootstrap-server", bootstrap,
                             "--topic", topic, "--transactional-id", transactional_id],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def test_cli_commits_a_run_in_one_transaction_and_ctrl_c_aborts(bootstrap: str) -> None:
    topic = unique("txn-cli")
    ck_create_topic(bootstrap, topic)
    done = subprocess.run([moldau_executable(), "produce", "--bootstrap-server", bootstrap,
                           "--topic", topic, "--transactional-id", unique("cli")],
                          input=b"one\ntwo\nthree\n", capture_output=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, b"")
    assert ck_read(bootstrap, topic, "read_committed", 4) == [b"one", b"two", b"three"]

    proc = _cli_producer(bootstrap, topic, unique("cli"))
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"left\nopen\n")
        proc.stdin.flush()
        # Both records are written (read_uncommitted sees them) inside the open transaction.
        wait_until(lambda: _end_offset(bootstrap, topic) == 6, TIMEOUT,
                   "the open transaction's records")
        proc.send_signal(signal.SIGINT)  # stdin stays open: the run is still reading
        proc.wait(timeout=120)
        assert proc.stderr is not None
        err = proc.stderr.read()
    finally:
        proc.stdin.close()
        if proc.poll() is None:
            proc.kill()
    assert (proc.returncode, err) == (130, b"Interrupted: the transaction was aborted.\n")
    # The abort marker at 6: read_committed sees nothing new, and is not held up.
    assert ck_read(bootstrap, topic, "read_committed", 7) == [b"one", b"two", b"three"]


def test_cli_aborts_the_transaction_on_a_bad_line(bootstrap: str) -> None:
    topic = unique("txn-cli-bad")
    ck_create_topic(bootstrap, topic)
    proc = subprocess.run([moldau_executable(), "produce", "--bootstrap-server", bootstrap,
                           "--topic", topic, "--transactional-id", unique("cli"),
                           "--property", "parse.key=true", "--property", "key.separator=:",
                           "--sync"],  # the good line is written before the bad one is read
                          input=b"k1:good\nno separator\n", capture_output=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (
        1, b"Error: No key separator found on line number 2: 'no separator'\n")
    # The good line was sent, then aborted: its record at 0, the abort marker at 1.
    wait_until(lambda: _end_offset(bootstrap, topic) == 2, TIMEOUT, "the abort marker")
    assert ck_read(bootstrap, topic, "read_committed", 2) == []
    assert ck_read(bootstrap, topic, "read_uncommitted", 2) == [b"good"]


def _end_offset(bootstrap: str, topic: str, isolation: int = wire.READ_UNCOMMITTED
                ) -> int | None:
    """The log end offset of partition 0, or with READ_COMMITTED its last stable offset
    (None while its leader is not ready)."""
    with wire.Conn(bootstrap, timeout=30) as conn:
        error, _, offset = wire.list_offset(conn, 1, topic, 0, wire.LATEST_TIMESTAMP,
                                            isolation)
    return offset if error == wire.NONE else None


def _last_stable_offset(bootstrap: str, topic: str) -> int | None:
    return _end_offset(bootstrap, topic, wire.READ_COMMITTED)


def test_cli_rejects_a_transactional_id_with_idempotence_off() -> None:
    started = time.monotonic()
    # Refused before any connection: the address is never used.
    proc = subprocess.run([moldau_executable(), "produce", "--bootstrap-server", "127.0.0.1:9",
                           "--topic", unique("txn-cli"), "--transactional-id", "x",
                           "--request-required-acks", "1"],
                          input=b"one\n", capture_output=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.decode() == ("Error: Cannot set a transactional.id without also "
                                    "enabling idempotence.\n")
    assert time.monotonic() - started < 30


def _committed_count(bootstrap: str, topic: str, expected: int) -> int:
    """Records a read_committed Moldau consumer gets from the start, once it has
    `expected` of them or has waited TIMEOUT seconds."""
    tp = TopicPartition(topic, 0)
    got = 0
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
                   "isolation.level": "read_committed"}) as reader:
        reader.assign([tp])
        deadline = time.monotonic() + TIMEOUT
        while got < expected and time.monotonic() < deadline:
            got += len(list(reader.poll(0.5)))
    return got


def test_perf_produce_sends_in_transactions_of_the_given_duration(bootstrap: str) -> None:
    topic = unique("txn-perf")
    ck_create_topic(bootstrap, topic)
    proc = subprocess.run([moldau_executable(), "perf", "produce", "--bootstrap-server",
                           bootstrap, "--topic", topic, "--num-records", "3000",
                           "--record-size", "50", "--throughput", "2000",
                           "--transactional-id", unique("perf"),
                           "--transaction-duration-ms", "300"],
                          capture_output=True, timeout=180)
    assert (proc.returncode, proc.stderr) == (0, b""), proc.stdout
    assert b"3000 records sent" in proc.stdout
    assert _committed_count(bootstrap, topic, 3000) == 3000
    # At 2000 records/s, 300 ms transactions: several commit markers after the records.
    wait_until(lambda: (_end_offset(bootstrap, topic) or 0) - 3000 >= 3, TIMEOUT,
               "several commit markers")


def test_perf_produce_refuses_a_transaction_duration_of_zero() -> None:
    proc = subprocess.run([moldau_executable(), "perf", "produce", "--bootstrap-server",
                           "127.0.0.1:9", "--topic", "t", "--num-records", "1",
                           "--record-size", "1", "--throughput", "-1",
                           "--transaction-duration-ms", "0"], capture_output=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (
        1, b"Error: --transaction-duration-ms should be greater than zero.\n")
