"""Where a new partition's replicas go, as Kafka places them (KIP-36).

Without racks: the first replica of partition p goes to broker (start + p) mod n, and the
followers follow it at a shift that grows by one after every n partitions, so leaders and
followers both spread evenly and no two partitions share the same replica list too often.

With racks (`broker.rack` set on every broker): brokers are first ordered rack by rack
alternately (a1, b1, c1, a2, b2, ...), the leader walks that list, and each follower is the
next broker, from the shifted position on, whose rack holds no replica of the partition yet
(until every rack has one) and which holds no replica yet, so replicas span as many racks as
they can. Brokers without a rack while others have one are an error, as in Kafka.

`start` and `shift` are random in Kafka; they are parameters here so callers and tests can
pin them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from moldau.errors import ErrorCode, KafkaError


def place_replicas(partitions: int, factor: int, brokers: Sequence[tuple[int, str | None]], *,
                   first_partition: int = 0, start: int | None = None,
                   shift: int | None = None) -> dict[int, list[int]]:
    """Replica lists (leader first) for partitions first_partition .. +partitions-1.

    `brokers` are (broker id, rack or None)."""
    if factor <= 0:
        raise KafkaError(ErrorCode.invalid_replication_factor,
                         "Replication factor must be larger than 0.")
    if factor > len(brokers):
        raise KafkaError(ErrorCode.invalid_replication_factor,
                         f"Replication factor: {factor} larger than available brokers: "
                         f"{len(brokers)}.")
    ordered = sorted(brokers)
    racks = [rack for _, rack in ordered]
    if any(rack is not None for rack in racks):
        if any(rack is None for rack in racks):
            raise KafkaError(ErrorCode.invalid_replica_assignment,
                             "Not all brokers have rack information for replica rack aware "
                             "assignment.")
        ids = _rack_alternated(ordered)
        rack_of = dict(ordered)
        return _place(partitions, factor, ids, first_partition, start, shift, rack_of)
    return _place(partitions, factor, [broker for broker, _ in ordered], first_partition,
                  start, shift, None)


def _rack_alternated(brokers: Sequence[tuple[int, str | None]]) -> list[int]:
    """Brokers taken one rack at a time in rack order: a1, b1, c1, a2, b2, ..."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in brokers:
        by_rack.setdefault(rack or "", []).append(broker)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    out: list[int] = []
    depth = 0
    while len(out) < len(brokers):
        for queue in queues:
            if depth < len(queue):
                out.append(queue[depth])
        depth += 1
    return out


def _place(partitions: int, factor: int, ids: list[int], first_partition: int,
           start: int | None, shift: int | None, rack_of: dict[int, str | None] | None
           ) -> dict[int, list[int]]:
    count = len(ids)
    start = random.randrange(count) if start is None else start % count
    shift = random.randrange(count) if shift is None else shift
    rack_count = len(set(rack_of.values())) if rack_of is not None else 0
    out: dict[int, list[int]] = {}
    current = first_partition
    for _ in range(partitions):
        if current > 0 and current % count == 0:
            shift += 1
        first = (current + start) % count
        leader = ids[first]
        replicas = [leader]
        if rack_of is None:
            for j in range(factor - 1):
                replicas.append(ids[_follower_index(first, j, shift, count)])
        else:
            racks = {rack_of[leader]}
            taken = {leader}
            k = 0
            while len(replicas) < factor:
                broker = ids[_follower_index(first, k, shift, count)]
                k += 1
                rack = rack_of[broker]
                # A rack already used is skipped until every rack has a replica; a broker
                # already used is skipped unless every broker already has one.
                if (rack not in racks or len(racks) == rack_count) and \
                        (broker not in taken or len(taken) == count):
                    replicas.append(broker)
                    racks.add(rack)
                    taken.add(broker)
        out[current] = replicas
        current += 1
    return out


def _follower_index(first: int, j: int, shift: int, count: int) -> int:
    return (first + 1 + (shift + j) % (count - 1)) % count if count > 1 else first
