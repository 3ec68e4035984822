"""Transaction verification (KIP-890 part 1, `transaction.partition.verification.enable`).

Before a partition leader appends the first transactional batch of a producer that has no
transaction ongoing on the partition, it asks the producer's transaction coordinator whether
the partition is in that producer's ongoing transaction (AddPartitionsToTxn v5 with
VerifyOnly, or a direct call when this node coordinates the id). A write that arrives after
its transaction ended (a late retry of an aborted transaction's produce request) is refused
instead of opening a transaction that a later marker of the producer would end. The
leader's producer state holds a guard per producer while the question is out; a marker
replaces it, so an answer from before a transaction ended cannot be used after it.

Errors reach the producer as Kafka's ReplicaManager and AddPartitionsToTxnManager put them:
PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH, TRANSACTION_ABORTABLE becomes
INVALID_TXN_STATE for Produce v10 and older, and coordinator errors a producer may not retry
become NOT_ENOUGH_REPLICAS (retriable, with no metadata refresh).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from moldau.broker.coordinators.group.records import partition_for
from moldau.broker.coordinators.transaction.records import TRANSACTION_TOPIC
from moldau.broker.replication.peer_connections import PeerConnections
from moldau.client.security import ClientSecurity
from moldau.errors import ErrorCode, KafkaError
from moldau.protocol.build import build
from moldau.protocol.messages import request_class

if TYPE_CHECKING:
    from moldau.broker.coordinators.transaction.coordinator import TransactionCoordinator
    from moldau.broker.replication.manager import ReplicaManager

log = logging.getLogger("moldau.broker.transactions")

ADD_PARTITIONS_TO_TXN_KEY = 24
VERIFY_VERSION = 5  # the first version that may answer TRANSACTION_ABORTABLE
# Kafka's AddPartitionsToTxnManager waits request.timeout.ms for the coordinator.
REQUEST_TIMEOUT_MS = 30000
MAX_IN_FLIGHT = 20
# Produce v11 is the first to know TRANSACTION_ABORTABLE (KIP-890).
FIRST_ABORTABLE_PRODUCE_VERSION = 11
# Coordinator answers older producers may not retry on: asked to retry instead.
RETRY_AS_NOT_ENOUGH_REPLICAS = frozenset({
    ErrorCode.network_exception, ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
    ErrorCode.concurrent_transactions})
TopicPartition = tuple[str, int]


def produce_error(error: ErrorCode, produce_version: int) -> tuple[ErrorCode, str | None]:
    """The coordinator's answer for a partition, as the producer is told it."""
    if error is ErrorCode.producer_fenced:
        error = ErrorCode.invalid_producer_epoch
    elif error is ErrorCode.cluster_authorization_failed or (
            error is ErrorCode.transaction_abortable
            and produce_version < FIRST_ABORTABLE_PRODUCE_VERSION):
        error = ErrorCode.invalid_txn_state
    if error in RETRY_AS_NOT_ENOUGH_REPLICAS:
        return (ErrorCode.not_enough_replicas, "Unable to verify the partition has been "
                f"added to the transaction. Underlying error: {error.name.upper()}")
    if error is ErrorCode.invalid_txn_state:
        return error, "Partition was not added to the transaction"
    return error, None


class TransactionVerifier:
    """Kafka's AddPartitionsToTxnManager: asks transaction coordinators about partitions."""

    def __init__(self, node_id: int, replicas: ReplicaManager,
                 coordinator: Callable[[], TransactionCoordinator | None], *,
                 security: ClientSecurity | None = None) -> None:
        self.node_id = node_id
        self.replicas = replicas
        self._coordinator = coordinator  # this node's, once started
        self.peers = PeerConnections(node_id, replicas, purpose="txn-verification",
                                     request_timeout_ms=REQUEST_TIMEOUT_MS,
                                     max_in_flight=MAX_IN_FLIGHT, security=security)

    def coordinator_of(self, transactional_id: str) -> int:
        """The node coordinating the id now (the leader of its __transaction_state
        partition); -1 when there is none."""
        topic = self.replicas.image.topics.get(TRANSACTION_TOPIC)
        if topic is None or not topic.partitions:
            return -1
        record = topic.partitions.get(partition_for(transactional_id, len(topic.partitions)))
        return -1 if record is None else record.leader

    async def verify(self, transactional_id: str, producer_id: int, epoch: int,
                     partitions: Sequence[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """The coordinator's answer per partition: NONE when it is in the producer's ongoing
        transaction."""
        node = self.coordinator_of(transactional_id)
        if node < 0:
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        if node == self.node_id:
            coordinator = self._coordinator()
            if coordinator is None:
                return dict.fromkeys(partitions, ErrorCode.coordinator_load_in_progress)
            return coordinator.verify_partitions(transactional_id, producer_id, epoch,
                                                 partitions)
        try:
            return await self._ask(node, transactional_id, producer_id, epoch, partitions)
        except (KafkaError, OSError, TimeoutError) as exc:
            log.info("Cannot verify the transaction of %s with broker %d: %s",
                     transactional_id, node, exc)
            return dict.fromkeys(partitions, ErrorCode.network_exception)

    async def _ask(self, node: int, transactional_id: str, producer_id: int, epoch: int,
                   partitions: Sequence[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        topics: dict[str, list[int]] = {}
        for topic, index in partitions:
            topics.setdefault(topic, []).append(index)
        body = build(request_class(ADD_PARTITIONS_TO_TXN_KEY, VERIFY_VERSION), {
            "transactions": [{"transactional_id": transactional_id,
                              "producer_id": producer_id, "producer_epoch": epoch,
                              "verify_only": True,
                              "topics": [{"name": name, "partitions": indexes}
                                         for name, indexes in topics.items()]}]})
        response = await self.peers.send(node, ADD_PARTITIONS_TO_TXN_KEY, VERIFY_VERSION, body)
        if response.error_code != ErrorCode.none:
            return dict.fromkeys(partitions, ErrorCode(response.error_code))
        errors = {(topic.name, result.partition_index): ErrorCode(result.partition_error_code)
                  for txn in response.results_by_transaction
                  if txn.transactional_id == transactional_id
                  for topic in txn.topic_results for result in topic.results_by_partition}
        return {key: errors.get(key, ErrorCode.unknown_server_error) for key in partitions}

    def close(self) -> None:
        self.peers.close()
