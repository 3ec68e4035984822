"""Turn recorded traffic into the targets' seed inputs, small and deduplicated.

- frames: the request frames clients sent, at most PER_GROUP per (API, version, client,
  and for Produce the codec and transactional flag of its batch), plus one request for
  each API version the broker advertises that no client sent, so every version is seeded:
  a request a client sent in another version of that API, rebuilt in the missing one (every
  field at its default when no client used the API).
- batches: each partition's records of every Produce request (grouped as above, and by
  idempotence), and the control batches (transaction markers) the broker served in Fetch
  responses, each behind the mode byte of deep validation on the newest Produce version
  with CRCs resealed (batches.py).
- sasl: each SASL exchange (mechanism, handshake version, tokens); a SCRAM client-final
  message gets the harness's fixed server nonce in place of the one the broker chose.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from kio.serial import entity_reader

import moldau.broker.handlers.apis  # noqa: F401  (every handler registers its API)
from fuzz.capture.proxy import TO_BROKER, Frame
from fuzz.targets import batches as batches_target
from fuzz.targets import sasl as sasl_target
from moldau.broker.handlers.registry import APIS
from moldau.protocol.build import build
from moldau.protocol.messages import (
    MalformedRequest,
    decode_request,
    encode_request,
    is_flexible_request,
    parse_header,
    parse_header_prefix,
    request_class,
    response_class,
)
from moldau.records.batch import COMPRESSION_MASK, HEADER_SIZE, TRANSACTIONAL_FLAG
from moldau.records.batch import parse_header as batch_header
from moldau.records.codec import iter_batches

PRODUCE, FETCH, SASL_HANDSHAKE, SASL_AUTHENTICATE = 0, 1, 17, 36
PER_GROUP = 2
MAX_FRAME_BYTES = 32 * 1024
MAX_CONTROL_BATCHES = 8
# Deep validation on Produce v12, CRCs resealed after each mutation.
BATCH_MODE = batches_target.DEEP | batches_target.RESEAL


class Seeds:
    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.batches: list[bytes] = []
        self.sasl: list[bytes] = []


def client_family(client_id: str | None) -> str:
    """A client id without its counters (producer-3 and producer-7 are the same client)."""
    return re.sub(r"\d+", "#", client_id or "")


def _decoded(frame: bytes) -> tuple[Any, Any] | None:
    try:
        api_key, version, _ = parse_header_prefix(frame)
        entry = APIS.get(api_key)
        if entry is None or not entry.min_version <= version <= entry.max_version:
            return None
        header = parse_header(frame, is_flexible_request(api_key, version))
        return header, decode_request(api_key, version, frame, header.size)
    except (MalformedRequest, KeyError, StopIteration):
        return None


def _first_batch_kind(records: bytes | None) -> tuple[int, bool, bool]:
    """(codec, transactional, idempotent) of the first batch of a partition's records."""
    if not records or len(records) < HEADER_SIZE:
        return -1, False, False
    h = batch_header(records)
    return (h.attributes & COMPRESSION_MASK, bool(h.attributes & TRANSACTIONAL_FLAG),
            h.producer_id >= 0)


def build_seeds(frames: Iterable[Frame]) -> Seeds:
    seeds = Seeds()
    frame_groups: dict[tuple, list[bytes]] = defaultdict(list)
    batch_groups: dict[tuple, list[bytes]] = defaultdict(list)
    sent_versions: set[tuple[int, int]] = set()
    examples: dict[int, Any] = {}  # per API key, the first request body a client sent
    # Per connection: correlation id -> (api key, version) of requests awaiting an answer,
    # and the SASL exchange in progress.
    pending: dict[int, dict[int, tuple[int, int]]] = defaultdict(dict)
    exchanges: dict[int, list[Any]] = {}
    control: list[bytes] = []
    for frame in frames:
        if frame.direction != TO_BROKER:
            _take_control_batches(frame, pending[frame.connection], control)
            continue
        decoded = _decoded(frame.data)
        if decoded is None:
            continue
        header, body = decoded
        key, version = header.api_key, header.api_version
        pending[frame.connection][header.correlation_id] = (key, version)
        sent_versions.add((key, version))
        examples.setdefault(key, body)
        family = client_family(header.client_id)
        group: tuple = (key, version, family)
        if key == PRODUCE:
            parts = [(partition.records, _first_batch_kind(partition.records))
                     for topic in body.topic_data for partition in topic.partition_data]
            group += tuple(kind[:2] for _, kind in parts[:1])
            for records, kind in parts:
                if records:
                    batch_groups[(family, version, kind)].append(
                        bytes([BATCH_MODE]) + bytes(records))
        elif key == SASL_HANDSHAKE:
            exchanges[frame.connection] = [body.mechanism, version]
        elif key == SASL_AUTHENTICATE and frame.connection in exchanges:
            exchanges[frame.connection].append(bytes(body.auth_bytes))
        if len(frame.data) <= MAX_FRAME_BYTES:
            frame_groups[group].append(frame.data)
    seeds.frames = _pick(frame_groups) + _missing_versions(sent_versions, examples)
    seeds.batches = _pick(batch_groups) + control[:MAX_CONTROL_BATCHES]
    seeds.sasl = sorted({_sasl_input(*exchange) for exchange in exchanges.values()
                         if len(exchange) > 2})
    return seeds


def _pick(groups: dict[tuple, list[bytes]]) -> list[bytes]:
    """The first PER_GROUP distinct members of each group."""
    out: list[bytes] = []
    for members in groups.values():
        out += list(dict.fromkeys(members))[:PER_GROUP]
    return out


def _missing_versions(sent: set[tuple[int, int]], examples: dict[int, Any]) -> list[bytes]:
    out = []
    for key, entry in sorted(APIS.items()):
        # Defaults are not always valid (an ACL filter of UNKNOWN elements is refused).
        data = dataclasses.asdict(examples[key]) if key in examples else {}
        for version in range(entry.min_version, entry.max_version + 1):
            if (key, version) not in sent:
                body = build(request_class(key, version), data)
                out.append(encode_request(key, version, 1, "fuzz-defaults", body)[4:])
    return out


def _take_control_batches(frame: Frame, pending: dict[int, tuple[int, int]],
                          out: list[bytes]) -> None:
    """The control batches of a Fetch response (what a consumer is served after a
    transaction ends)."""
    if len(frame.data) < 4:
        return
    correlation_id = int.from_bytes(frame.data[:4], "big", signed=True)
    key, version = pending.pop(correlation_id, (None, None))
    if key != FETCH:
        return
    cls = response_class(FETCH, version)
    offset = 4 + (1 if cls.__flexible__ else 0)  # response header v1: empty tagged fields
    body, _ = entity_reader(cls)(frame.data, offset)
    for topic in body.responses:
        for partition in topic.partitions:
            records = partition.records or b""
            for pos, h in iter_batches(records):
                if h.is_control:
                    batch = bytes([BATCH_MODE]) + bytes(records[pos:pos + h.size])
                    if batch not in out:
                        out.append(batch)


def _sasl_input(mechanism: str, version: int, *tokens: bytes) -> bytes:
    names = sasl_target.MECHANISM_NAMES
    mode = names.index(mechanism) if mechanism in names else len(names) - 1
    if version == 0:
        mode |= sasl_target.RAW_TOKENS
    parts = list(tokens)
    if mechanism.startswith("SCRAM") and len(parts) >= 2:
        parts[1] = _with_fixed_nonce(parts[0], parts[1])
    return sasl_target.encode(mode, parts)


def _with_fixed_nonce(client_first: bytes, client_final: bytes) -> bytes:
    client_nonce = re.search(rb"(?:^|,)r=([^,]*)", client_first)
    if client_nonce is None:
        return client_final
    combined = client_nonce.group(1) + sasl_target.SERVER_NONCE.encode()
    return re.sub(rb"(^|,)r=[^,]*", lambda m: m.group(1) + b"r=" + combined, client_final,
                  count=1)
