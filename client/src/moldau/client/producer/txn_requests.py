"""The transactional producer's requests to its coordinators.

The transaction coordinator (FindCoordinator with key type TRANSACTION and the transactional
id) gets InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn; the group's
coordinator gets TxnOffsetCommit. Each request is retried, as in Kafka's client, until it
succeeds or fails for good: a lost connection, NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE
look the coordinator up again; COORDINATOR_LOAD_IN_PROGRESS and CONCURRENT_TRANSACTIONS (the
previous transaction's markers are still being written) are retried after a backoff. Other
errors are raised as the transaction manager classifies them: fencing and authorization
failures are fatal, the rest make the transaction abortable.

The requests use the transaction protocol of Kafka clients before KIP-890's version 2
(partitions added explicitly, EndTxn not bumping the epoch), which every Kafka broker since
0.11 serves; the request versions are capped accordingly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from moldau.client.admin.types import OffsetAndMetadata
from moldau.client.coordinator import (
    COORDINATOR_ERRORS,
    CoordinatorType,
    coordinator_address,
    find_coordinator_request,
    parse_find_coordinator,
)
from moldau.client.errors import (
    CommitFailedError,
    DisconnectedError,
    KafkaError,
    error_for,
)
from moldau.client.network import ExponentialBackoff, NetworkClient
from moldau.client.producer.transaction_manager import FENCING_ERRORS, TransactionManager
from moldau.client.types import ConsumerGroupMetadata, Node, TopicPartition
from moldau.client.versions import TXN_V1_MAX, ApiKey
from moldau.errors import ErrorCode

log = logging.getLogger("moldau.client.producer")


# Retried where the coordinator is (after a backoff).
_RETRY = frozenset({ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions,
                    ErrorCode.unknown_topic_or_partition, ErrorCode.request_timed_out,
                    ErrorCode.operation_not_attempted})
# The transaction can still be aborted after these; with the first two, the producer id is
# unknown to the coordinator, so a new epoch is needed as well.
_NEEDS_BUMP = frozenset({ErrorCode.unknown_producer_id, ErrorCode.invalid_producer_id_mapping})
_ABORTABLE = _NEEDS_BUMP | {ErrorCode.transaction_abortable,
                            ErrorCode.topic_authorization_failed,
                            ErrorCode.group_authorization_failed, ErrorCode.unknown_member_id,
                            ErrorCode.illegal_generation, ErrorCode.fenced_instance_id}


class _Retry(Exception):
    """The request is to be sent again; `refind` when the coordinator may have moved."""

    def __init__(self, refind: bool) -> None:
        super().__init__()
        self.refind = refind


class TxnRequests:
    def __init__(self, tm: TransactionManager, network: NetworkClient, *,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1000,
                 request_timeout_ms: int = 30000) -> None:
        assert tm.transactional_id is not None
        self.tm = tm
        self.transactional_id: str = tm.transactional_id
        self.network = network
        self.backoff = ExponentialBackoff(retry_backoff_ms / 1000, retry_backoff_max_ms / 1000)
        self.request_timeout = request_timeout_ms / 1000
        # The connection id of each coordinator, by (key type, key).
        self._coordinators: dict[tuple[CoordinatorType, str], int] = {}
        self.closed = False

    # -------------------------------------------------------------------------- errors

    def check(self, code: int, what: str, message: str | None = None) -> None:
        """Raise for a non-zero code: _Retry for the retriable ones, else the error after
        recording it in the transaction manager as fatal or abortable."""
        code = ErrorCode(code)
        if code is ErrorCode.none:
            return
        if code in COORDINATOR_ERRORS and code is not ErrorCode.coordinator_load_in_progress:
            raise _Retry(refind=True)
        if code in _RETRY:
            raise _Retry(refind=False)
        text = f"{what}: {message or code.name.upper()}"
        if code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
            error: KafkaError = CommitFailedError(f"{text}; the consumer group rebalanced, "
                                                  f"so the transaction must be aborted")
        else:
            error = error_for(code, text)
        if code in _ABORTABLE:
            if code in _NEEDS_BUMP:
                self.tm.request_epoch_bump(code.name)
            self.tm.fail_abortable(error)
        else:
            self.tm.fail_fatal(error)
        raise self.tm.last_error if code in FENCING_ERRORS else error

    # -------------------------------------------------------------------------- sending

    async def _coordinator(self, key_type: CoordinatorType, key: str) -> int:
        known = self._coordinators.get((key_type, key))
        if known is not None:
            return known
        attempts = 0
        while True:
            node = self.network.least_loaded_node()
            if node is not None:
                try:
                    response = await self.network.request(
                        node, ApiKey.FIND_COORDINATOR, find_coordinator_request(key, key_type),
                        timeout=self.request_timeout)
                    code, node_id, message = parse_find_coordinator(response, key)
                    self.check(code, f"FindCoordinator for {key_type.name.lower()} {key}",
                               message)
                    address = coordinator_address(response, key)
                    if address is not None:
                        alias = self.network.alias(Node(node_id, *address))
                        self._coordinators[(key_type, key)] = alias
                        log.debug("%s coordinator for %s is node %d", key_type.name.lower(),
                                  key, node_id)
                        return alias
                except (_Retry, DisconnectedError) as exc:
                    log.debug("FindCoordinator for %s: %r", key, exc)
            await self._pause(attempts)
            attempts += 1

    async def _pause(self, attempts: int) -> None:
        if self.closed:
            raise DisconnectedError("The producer is closed")
        await asyncio.sleep(self.backoff.backoff(attempts))

    async def send(self, key_type: CoordinatorType, key: str, api_key: ApiKey,
                   body: Mapping[str, Any], handle: Callable[[Any], Any]) -> Any:
        """Send to the coordinator of `key` until `handle(response)` returns instead of
        raising _Retry."""
        attempts = 0
        while True:
            node = await self._coordinator(key_type, key)
            try:
                response = await self.network.request(node, api_key, body,
                                                      max_version=TXN_V1_MAX.get(api_key),
                                                      timeout=self.request_timeout)
                return handle(response)
            except (_Retry, DisconnectedError) as exc:
                if not isinstance(exc, _Retry) or exc.refind:
                    self._coordinators.pop((key_type, key), None)
                log.debug("%s for %s is retried: %r", api_key.name, key, exc)
            await self._pause(attempts)
            attempts += 1

    def _to_txn_coordinator(self, api_key: ApiKey, body: Mapping[str, Any],
                            handle: Callable[[Any], Any]) -> Any:
        return self.send(CoordinatorType.TRANSACTION, self.transactional_id, api_key,
                         {"transactional_id": self.transactional_id, **body}, handle)

    def _ids(self) -> dict[str, int]:
        return {"producer_id": self.tm.producer_id, "producer_epoch": self.tm.producer_epoch}

    # -------------------------------------------------------------------------- requests

    async def init_producer_id(self) -> None:
        def handle(response: Any) -> None:
            self.check(response.error_code, "InitProducerId")
            self.tm.set_producer_id(response.producer_id, response.producer_epoch)

        await self._to_txn_coordinator(ApiKey.INIT_PRODUCER_ID,
                                        self.tm.init_producer_id_request(), handle)

    async def add_partitions(self, partitions: list[TopicPartition]) -> None:
        topics: dict[str, list[int]] = {}
        for tp in partitions:
            topics.setdefault(tp.topic, []).append(tp.partition)
        body = {**self._ids(), "v3_and_below_transactional_id": self.transactional_id,
                "v3_and_below_producer_id": self.tm.producer_id,
                "v3_and_below_producer_epoch": self.tm.producer_epoch,
                "v3_and_below_topics": [{"name": t, "partitions": p}
                                        for t, p in topics.items()]}

        def handle(response: Any) -> None:
            results = getattr(response, "results_by_topic_v3_and_below", None) or ()
            for topic in results:
                for part in topic.results_by_partition:
                    self.check(part.partition_error_code,
                               f"AddPartitionsToTxn for {topic.name}-{part.partition_index}")
            self.check(getattr(response, "error_code", 0), "AddPartitionsToTxn")

        await self._to_txn_coordinator(ApiKey.ADD_PARTITIONS_TO_TXN, body, handle)

    async def add_offsets(self, group_id: str) -> None:
        def handle(response: Any) -> None:
            self.check(response.error_code, f"AddOffsetsToTxn for group {group_id}")

        await self._to_txn_coordinator(ApiKey.ADD_OFFSETS_TO_TXN,
                                        {**self._ids(), "group_id": group_id}, handle)

    async def commit_offsets(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                             group: ConsumerGroupMetadata) -> None:
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, om in offsets.items():
            topics.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "committed_offset": om.offset,
                "committed_leader_epoch": -1 if om.leader_epoch is None else om.leader_epoch,
                "committed_metadata": om.metadata or ""})
        body = {"transactional_id": self.transactional_id, "group_id": group.group_id,
                **self._ids(), "generation_id": group.generation_id,
                "member_id": group.member_id, "group_instance_id": group.group_instance_id,
                "topics": [{"name": t, "partitions": p} for t, p in topics.items()]}

        def handle(response: Any) -> None:
            for topic in response.topics:
                for part in topic.partitions:
                    self.check(part.error_code, f"TxnOffsetCommit for "
                                                f"{topic.name}-{part.partition_index}")

        await self.send(CoordinatorType.GROUP, group.group_id, ApiKey.TXN_OFFSET_COMMIT, body,
                        handle)

    async def end_transaction(self, commit: bool) -> None:
        def handle(response: Any) -> None:
            self.check(response.error_code, "EndTxn")

        await self._to_txn_coordinator(ApiKey.END_TXN, {**self._ids(), "committed": commit},
                                        handle)
