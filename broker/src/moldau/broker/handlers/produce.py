"""Produce: validate batches, append them, answer with offsets (or nothing for acks=0).

With acks=all the answer waits (up to the request's timeout) until the in-sync replicas have
the records; that wait is Deferred, so it does not hold a request handler.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING, Any

from moldau.broker.handlers.authz import TOPIC, TRANSACTIONAL_ID, allowed
from moldau.broker.handlers.registry import Deferred, Result, api, respond
from moldau.broker.network.channel import Request
from moldau.broker.network.connection import CloseConnection
from moldau.broker.network.response import Response
from moldau.broker.replication.appends import Guards
from moldau.broker.replication.manager import ProduceResult
from moldau.broker.replication.txn_verification import produce_error
from moldau.broker.security.acl import Operation
from moldau.errors import ErrorCode
from moldau.protocol.build import millis
from moldau.protocol.messages import MalformedRequest
from moldau.records.batch import HEADER_SIZE, parse_header

if TYPE_CHECKING:
    from moldau.broker.server import Broker

log = logging.getLogger("moldau.broker.transactions")


def decode_legacy_produce(version: int, frame: bytes, pos: int) -> list[tuple[str, list[int]]]:
    """Produce v0-2 (message format v0/v1, removed in Kafka 4): only the topic-partitions
    are read, to answer each with UNSUPPORTED_VERSION. Kafka 4 still advertises these
    versions because some librdkafka releases need to see them.

    Every length is checked against the frame as Kafka's parser checks it: a negative topic
    name length or count, or a field past the end, is a malformed request (a negative name
    length once made this loop stand still for up to 2**31 topics).
    """
    try:
        pos += 6  # acks int16, timeout int32
        topic_count, pos = _legacy_count(frame, pos, "topic")
        topics = []
        for _ in range(topic_count):
            (length,) = struct.unpack_from(">h", frame, pos)
            pos += 2
            if length < 0 or pos + length > len(frame):
                raise MalformedRequest(f"malformed Produce v{version}: topic name length "
                                       f"{length} at byte {pos - 2}")
            name = frame[pos:pos + length].decode()
            pos += length
            partition_count, pos = _legacy_count(frame, pos, "partition")
            partitions = []
            for _ in range(partition_count):
                index, size = struct.unpack_from(">ii", frame, pos)
                pos += 8
                if size < -1 or pos + size > len(frame):  # -1: null records
                    raise MalformedRequest(f"malformed Produce v{version}: records size "
                                           f"{size} at byte {pos - 4}")
                partitions.append(index)
                pos += max(size, 0)
            topics.append((name, partitions))
    except (struct.error, UnicodeDecodeError) as exc:
        raise MalformedRequest(f"malformed Produce v{version}: {exc}") from None
    return topics


def _legacy_count(frame: bytes, pos: int, what: str) -> tuple[int, int]:
    """An array length: never negative (these arrays are not nullable), and no larger than
    the bytes left could hold (each element takes at least 6)."""
    (count,) = struct.unpack_from(">i", frame, pos)
    pos += 4
    if count < 0 or count * 6 > len(frame) - pos:
        raise MalformedRequest(f"malformed Produce request: {what} count {count} at byte "
                               f"{pos - 4}")
    return count, pos


def _legacy_response(request: Request, topics: list[tuple[str, list[int]]]) -> Response:
    version = request.header.api_version
    out = [struct.pack(">ii", request.header.correlation_id, len(topics))]
    for name, partitions in topics:
        raw = name.encode()
        out.append(struct.pack(">h", len(raw)) + raw + struct.pack(">i", len(partitions)))
        for index in partitions:
            out.append(struct.pack(">ihq", index, ErrorCode.unsupported_version.value, -1))
            if version >= 2:
                out.append(struct.pack(">q", -1))
    if version >= 1:
        out.append(struct.pack(">i", 0))
    return Response.framed(out)


@api(0, "Produce", 3, 12, legacy_decoder=decode_legacy_produce, legacy_max_version=2)
async def handle_produce(broker: Broker, request: Request) -> Result:
    if request.header.api_version <= 2:
        return _legacy_response(request, request.body)
    body = request.body
    acks = body.acks
    timeout_ms = millis(body.timeout)
    entries = [(topic.name, partition.index, partition.records)
               for topic in body.topic_data for partition in topic.partition_data]
    if acks not in (-1, 0, 1):
        return _respond(request, entries, None)
    transactional_id = body.transactional_id
    checked = broker.authorizer.enabled
    # As Kafka: transactional records need the request's transactional id and the right to
    # write for it; without them every partition gets the error.
    if (transactional_id is None or checked) \
            and any(_transactional(r) for _, _, r in entries) \
            and (transactional_id is None or not allowed(
                broker, request, Operation.WRITE, TRANSACTIONAL_ID, transactional_id)):
        denied = ErrorCode.transactional_id_authorization_failed
        return _respond(request, entries, [ProduceResult(error=denied) for _ in entries])
    failed: dict[int, ProduceResult] = {}
    if checked:
        refused = {name for name in {name for name, _, _ in entries}
                   if not allowed(broker, request, Operation.WRITE, TOPIC, name)}
        failed = {position: ProduceResult(error=ErrorCode.topic_authorization_failed)
                  for position, (name, _, _) in enumerate(entries) if name in refused}
    verified = None
    if transactional_id is not None \
            and broker.config["transaction.partition.verification.enable"]:
        verified = await _verify_transactions(broker, transactional_id, entries, failed,
                                              request.header.api_version)
    writable = [entry for position, entry in enumerate(entries) if position not in failed] \
        if failed else entries
    replicas = broker.replicas
    results = await replicas.append(writable, acks=acks, timeout_ms=timeout_ms, wait=False,
                                    produce_version=request.header.api_version,
                                    verified=verified)
    broker.topic_stats.record_produce(writable, results)
    if failed:
        appended = iter(results)
        results = [failed[position] if position in failed else next(appended)
                   for position in range(len(entries))]
    if acks == 0:
        if any(r.error is not ErrorCode.none for r in results):
            # The client expects no answer, so an error can only be signalled by closing.
            raise CloseConnection("acks=0 produce failed")
        return None
    if acks == -1:
        if replicas.replication_pending(entries, results):
            return Deferred(_respond_when_replicated(broker, request, entries, results,
                                                     timeout_ms))
        await replicas.wait_for_replication(entries, results, timeout_ms)  # no suspension
    return _respond(request, entries, results)


async def _verify_transactions(broker: Broker, transactional_id: str, entries: list[Any],
                               failed: dict[int, ProduceResult], produce_version: int
                               ) -> Guards:
    """Ask the transaction coordinator about the partitions where the request's producer
    would start a transaction (once per producer, partition and transaction: afterwards its
    transaction is ongoing there). Refused partitions join `failed`; the guards of the
    others are returned for the append (see replication/txn_verification.py)."""
    guards: Guards = {}
    positions: dict[tuple[str, int], int] = {}
    producer = None
    for position, (name, index, records) in enumerate(entries):
        if position in failed or records is None or len(records) < HEADER_SIZE:
            continue
        header = parse_header(records)
        if not header.is_transactional:
            continue
        guard = broker.replicas.verification_guard(name, index, header.producer_id,
                                                   header.producer_epoch)
        if guard is not None:
            guards[(name, index)] = guard
            positions[(name, index)] = position
            producer = (header.producer_id, header.producer_epoch)
    if producer is None:
        return guards
    answers = await broker.txn_verifier.verify(transactional_id, *producer, list(guards))
    for key, error in answers.items():
        if error is not ErrorCode.none:
            code, message = produce_error(error, produce_version)
            log.info("Produce to %s-%d for transactional id %s refused: %s (%s)", *key,
                     transactional_id, code.name, error.name)
            failed[positions[key]] = ProduceResult(error=code, message=message)
            del guards[key]
    return guards


def _transactional(records: bytes | None) -> bool:
    """Whether the first batch is transactional (Kafka looks at the first batch only)."""
    return (records is not None and len(records) >= HEADER_SIZE
            and parse_header(records).is_transactional)


async def _respond_when_replicated(broker: Broker, request: Request, entries: list[Any],
                                   results: list[ProduceResult], timeout_ms: int) -> Response:
    await broker.replicas.wait_for_replication(entries, results, timeout_ms)
    return _respond(request, entries, results)


def _respond(request: Request, entries: list[Any],
             results: list[ProduceResult] | None) -> Response:
    responses: dict[str, list[dict[str, Any]]] = {}
    for position, (topic, index, _) in enumerate(entries):
        partition: dict[str, Any] = {"index": index}
        if results is None:
            partition.update(error_code=ErrorCode.invalid_required_acks, base_offset=-1)
        else:
            result = results[position]
            partition.update(error_code=result.error, base_offset=result.base_offset,
                             log_append_time=result.log_append_time,
                             log_start_offset=result.log_start_offset,
                             error_message=result.message,
                             record_errors=[{"batch_index": i, "batch_index_error_message": m}
                                            for i, m in result.record_errors])
        responses.setdefault(topic, []).append(partition)
    return respond(request, {"responses": [
        {"name": name, "partition_responses": partitions}
        for name, partitions in responses.items()]})
