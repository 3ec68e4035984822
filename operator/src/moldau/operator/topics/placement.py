"""Where a topic's replicas go when its replication factor changes: every partition keeps the
replicas it has (its data stays where it is), growing adds the brokers holding the fewest of
the topic's replicas, shrinking keeps the first ones (the preferred leader first)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from moldau.client.errors import ErrorCode, KafkaError, error_for


def too_few_brokers(factor: int, brokers: int) -> KafkaError:
    """Kafka's own refusal of a replication factor above the registered brokers."""
    return error_for(ErrorCode.invalid_replication_factor,
                     f"Unable to replicate the partition {factor} time(s): The target "
                     f"replication factor of {factor} cannot be reached because only "
                     f"{brokers} broker(s) are registered.")


def replica_targets(current: Mapping[int, Sequence[int]], factor: int,
                    brokers: Sequence[int]) -> dict[int, tuple[int, ...]]:
    """The new replica list of each partition whose count differs from `factor`. Raises
    InvalidReplicationFactorError when there are fewer brokers than `factor`."""
    if factor < 1:
        raise error_for(ErrorCode.invalid_replication_factor,
                        "Replication factor must be larger than 0.")
    if factor > len(brokers):
        raise too_few_brokers(factor, len(brokers))
    order = sorted(brokers)
    load = Counter(broker for replicas in current.values() for broker in replicas)
    targets: dict[int, tuple[int, ...]] = {}
    for partition in sorted(current):
        replicas = list(current[partition])
        if len(replicas) > factor:
            targets[partition] = tuple(replicas[:factor])
            continue
        while len(replicas) < factor:
            # Ties go round the brokers from the partition's own offset, so partitions of
            # an evenly loaded topic do not all pick the same broker.
            choice = min((b for b in order if b not in replicas),
                         key=lambda b: (load[b], (order.index(b) - partition) % len(order)))
            replicas.append(choice)
            load[choice] += 1
        if len(replicas) != len(current[partition]):
            targets[partition] = tuple(replicas)
    return targets
