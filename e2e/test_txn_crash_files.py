"""A broker killed with transactions open, checked on its files: after kill -9 and a restart
the partition's `.txnindex` holds exactly the aborted transaction (Kafka's 34-byte entry), the
last stable offset stops at the transaction still open, and in `__consumer_offsets` the
offsets committed in an unfinished transaction stay pending (no marker follows them on disk)
while those of a committed one are final; ending the open transactions afterwards moves the
LSO and makes the offsets visible.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from e2e import wire
from e2e.support import ck_create_topic, segment_batches, unique
from e2e.test_transactions import (  # a broker that does not verify: Scenario coordinates
    Scenario,
    unverified_broker,  # noqa: F401
)
from e2e.test_txn_offsets import Txn
from e2e.txn_wire import UNSTABLE_OFFSET_COMMIT
from moldau.broker.coordinators.group.records import OFFSETS_TOPIC
from moldau.records.control import read_end_txn_marker

pytestmark = pytest.mark.timeout(180)
# version int16, producer id int64, first offset, last offset, last stable offset (int64 each)
TXN_INDEX_ENTRY = struct.Struct(">hqqqq")
OPEN = [b"o1", b"o2"]


def txn_index_entries(data_dir: Path, topic: str) -> list[tuple[int, int, int, int, int]]:
    entries = []
    for path in sorted((data_dir / f"{topic}-0").glob("*.txnindex")):
        data = path.read_bytes()
        assert len(data) % TXN_INDEX_ENTRY.size == 0, f"{path.name}: {len(data)} bytes"
        entries += [TXN_INDEX_ENTRY.unpack_from(data, position)
                    for position in range(0, len(data), TXN_INDEX_ENTRY.size)]
    return entries


def offsets_log(data_dir: Path, partition: int, producers: set[int]
                ) -> list[tuple[int, str]]:
    """What `producers` left in a `__consumer_offsets` partition's segments, in order: their
    offset-commit batches ("offsets") and their markers ("COMMIT" / "ABORT")."""
    found = []
    for header, batch in segment_batches(data_dir, OFFSETS_TOPIC, partition):
        if header.producer_id in producers:
            marker = read_end_txn_marker(batch, header) if header.is_control else None
            found.append((header.producer_id,
                          marker.control_type.name if marker else "offsets"))
    return found


def test_a_killed_broker_comes_back_with_its_transactions(broker) -> None:
    topic = unique("txn-files")
    ck_create_topic(broker.bootstrap, topic)
    # plain-0 at 0, P1's c1-c2 at 1-2, P2's a1-a3 at 3-5, plain-1 at 6, COMMIT P1 at 7,
    # ABORT P2 at 8; then P3 opens a transaction at 9-10 and is left open.
    run = Scenario(broker.bootstrap, topic)
    run.produce_all()
    assert run.end(run.p1, commit=True) == wire.NONE
    assert run.end(run.p2, commit=False) == wire.NONE
    p3 = Scenario(broker.bootstrap, topic)  # a connection and producer ids of its own
    p3.produce(p3.txn_batch(p3.p1, OPEN), "txn-three")
    run.conn.close()
    # Offsets of two transactions: one committed, one left pending.
    offsets = Txn(broker.bootstrap, topic, unique("txn-files-group"))
    committed, pending = offsets.producer(), offsets.producer()
    assert offsets.commit_offsets(committed, 4) == wire.NONE
    assert offsets.end(committed, commit=True) == wire.NONE
    assert offsets.commit_offsets(pending, 9) == wire.NONE
    offsets.conn.close()

    broker.kill()
    broker.start()
    p3.conn = wire.Conn(broker.bootstrap, timeout=30)
    assert p3.latest(wire.READ_COMMITTED) == 9, "the open transaction no longer holds the LSO"
    assert p3.latest(wire.READ_UNCOMMITTED) == 11
    p3.conn.close()
    offsets = Txn(broker.bootstrap, topic, offsets.group)
    assert offsets.fetch(require_stable=False) == (4, wire.NONE)
    assert offsets.fetch(require_stable=True) == (-1, UNSTABLE_OFFSET_COMMIT)
    offsets.conn.close()
    broker.stop()  # the files as the recovered broker leaves them

    assert txn_index_entries(broker.log_dir, topic) == [(0, run.p2, 3, 8, 9)]
    assert offsets_log(broker.log_dir, offsets.offsets_partition, {committed, pending}) == [
        (committed, "offsets"), (committed, "COMMIT"), (pending, "offsets")]

    broker.start()
    p3.conn = wire.Conn(broker.bootstrap, timeout=30)
    assert p3.end(p3.p1, commit=False) == wire.NONE
    assert p3.latest(wire.READ_COMMITTED) == 12
    p3.conn.close()
    offsets = Txn(broker.bootstrap, topic, offsets.group)
    assert offsets.end(pending, commit=True) == wire.NONE
    assert offsets.fetch(require_stable=True) == (9, wire.NONE)
    offsets.conn.close()
    broker.stop()
    assert txn_index_entries(broker.log_dir, topic) == [(0, run.p2, 3, 8, 9),
                                                        (0, p3.p1, 9, 11, 12)]
