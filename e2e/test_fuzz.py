"""A bounded, seeded protocol fuzz: mutated frames must never take the broker down or hang it."""

from __future__ import annotations

import random
import struct
import time

import pytest

from e2e import wire
from e2e.support import kp_consume_all, kp_create_topic, kp_produce, make_records, unique
from e2e.wire import Closed, Conn

pytestmark = pytest.mark.timeout(150)

SEED = 20240611
MAX_FRAMES = 10000
TIME_BUDGET = 30.0
PROBE_TIMEOUT = 3.0
PROBE_BASE = 0x7F000000


def seed_frames(topic: str) -> list[bytes]:
    """Valid requests of several APIs; their payloads (without the size) are mutated."""
    batch = wire.record_batch([b"fuzz-%d" % i for i in range(3)], keys=[b"k", None, b""])
    gzipped = wire.record_batch([b"zipped %d " % i * 20 for i in range(4)], gzip_records=True)
    return [
        wire.api_versions_request(0, 1),
        wire.api_versions_request(3, 2),
        wire.api_versions_request(4, 3),
        wire.metadata_request(4, None),
        wire.metadata_request(5, [topic, "other"], allow_auto_create=False),
        wire.produce_request(6, topic, 0, batch, acks=1),
        wire.produce_request(7, topic, 0, batch, acks=-1),
        wire.produce_request(13, topic, 1, gzipped, acks=1),
        wire.list_offsets_request(8, topic, 0, wire.EARLIEST_TIMESTAMP),
        wire.list_offsets_request(9, topic, 0, 1_700_000_000_000),
        wire.describe_configs_request(10, topic),
        wire.describe_cluster_request(11),
        wire.init_producer_id_request(12),
    ]


EXTREMES = [b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00", b"\x00\x00\x00\x00",
            b"\x00\x00\x00\x01", b"\xff\xff", b"\x7f\xff", b"\x80\x00", b"\xff", b"\x00"]


def mutate(rng: random.Random, seeds: list[bytes]) -> tuple[str, bytes, bool]:
    """(kind, frame bytes, well_framed). A well-framed frame has a truthful size prefix.

    Frames that turn into Fetch requests are drawn again: a Fetch may rightly wait up to its
    (mutated) max wait time before answering, which is not a hang.
    """
    while True:
        kind, data, well_framed = _mutate_once(rng, seeds)
        if len(data) < 6 or struct.unpack(">h", data[4:6])[0] != wire.FETCH:
            return kind, data, well_framed


def _mutate_once(rng: random.Random, seeds: list[bytes]) -> tuple[str, bytes, bool]:
    payload = bytearray(rng.choice(seeds)[4:])
    kind = rng.choice(["flip", "flip", "truncate", "extend", "api_key", "api_version",
                       "extreme", "extreme", "random", "splice", "bad_size"])
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            payload[rng.randrange(len(payload))] = rng.randrange(256)
    elif kind == "truncate":
        payload = payload[:rng.randrange(len(payload))]
    elif kind == "extend":
        payload += rng.randbytes(rng.randint(1, 64))
    elif kind == "api_key":
        payload[0:2] = struct.pack(">h", rng.choice([rng.randint(-32768, 32767),
                                                     rng.randint(0, 80)]))
    elif kind == "api_version":
        payload[2:4] = struct.pack(">h", rng.choice([rng.randint(-32768, 32767),
                                                     rng.randint(-1, 20)]))
    elif kind == "extreme":
        value = rng.choice(EXTREMES)
        at = rng.randrange(max(1, len(payload) - len(value)))
        payload[at:at + len(value)] = value
    elif kind == "random":
        payload = bytearray(rng.randbytes(rng.randint(0, 200)))
    elif kind == "splice":
        other = rng.choice(seeds)[4:]
        cut = rng.randrange(len(payload))
        payload = payload[:cut] + other[rng.randrange(len(other)):]
    if kind == "bad_size":
        size = rng.choice([-1, -2**31, len(payload) + rng.randint(1, 1000),
                           rng.randint(0, max(0, len(payload) - 1)), 2**31 - 1])
        return kind, struct.pack(">i", size) + bytes(payload), False
    return kind, wire.frame(bytes(payload)), True


def test_fuzz_broker_survives_and_still_serves(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("fuzz")
    kp_create_topic(bootstrap, topic, partitions=2)
    seeds = seed_frames(topic)
    # Every seed is a valid request: answered on an open connection, produces succeed.
    with Conn(bootstrap) as conn:
        for seed in seeds:
            conn.send(seed)
            corr = struct.unpack(">i", conn.recv_frame()[:4])[0]
            assert corr == struct.unpack(">i", seed[8:12])[0]
    with Conn(bootstrap) as conn:
        assert wire.list_offset(conn, 1, topic, 1, wire.LATEST_TIMESTAMP) == (wire.NONE, -1, 4)
    rng = random.Random(SEED)
    stats = {"answered": 0, "closed": 0, "silent": 0, "unprobed": 0}
    stalls = []
    conn: Conn | None = None
    started = time.monotonic()
    sent = 0
    try:
        while sent < MAX_FRAMES and time.monotonic() - started < TIME_BUDGET:
            kind, data, well_framed = mutate(rng, seeds)
            sent += 1
            if conn is None:
                conn = Conn(bootstrap, timeout=PROBE_TIMEOUT)
            try:
                if not well_framed:
                    conn.send(data)
                    stats["unprobed"] += 1
                    conn.close()
                    conn = None
                    continue
                probe = PROBE_BASE + sent
                conn.send(data + wire.api_versions_request(0, probe))
                answers = 0
                while True:
                    corr = struct.unpack(">i", conn.recv_frame()[:4])[0]
                    if corr == probe:
                        break
                    answers += 1
                    assert answers == 1, f"{kind}: more than one response to one request"
                    assert len(data) >= 12 and corr == struct.unpack(">i", data[8:12])[0], (
                        f"{kind}: response correlation id {corr} matches no request; "
                        f"frame {data[:64].hex()}")
                stats["answered" if answers else "silent"] += 1
            except (Closed, BrokenPipeError, ConnectionResetError):
                stats["closed"] += 1
                conn.close()
                conn = None
            except TimeoutError:
                stalls.append((kind, data[:80].hex()))
                conn.close()
                conn = None
    finally:
        if conn is not None:
            conn.close()
    elapsed = time.monotonic() - started
    print(f"fuzz: {sent} frames in {elapsed:.1f} s: {stats}, {len(stalls)} stalls")

    assert module_broker.alive, "broker process died during the fuzz\n" + module_broker.tail()
    assert not stalls, (
        f"{len(stalls)} well-framed requests got neither a response nor a close within "
        f"{PROBE_TIMEOUT} s (first: {stalls[:3]})")
    assert sent >= 200, f"only {sent} frames in {TIME_BUDGET} s"
    assert stats["answered"] > 0 and stats["closed"] > 0

    # A real client still produces and consumes.
    fresh = unique("after-fuzz")
    kp_create_topic(bootstrap, fresh, partitions=1)
    records = make_records(30, seed=5)
    offsets = kp_produce(bootstrap, fresh, records)
    assert offsets == list(range(30))
    got = kp_consume_all(bootstrap, fresh)
    assert [(r.offset, r.key, r.value) for r in got] == [
        (i, r.key, r.value) for i, r in enumerate(records)]
