"""The replication throttle around the operator's partition moves (spec.replicationThrottle),
set and cleared as `kafka-reassign-partitions --throttle` and `--verify` do it (KIP-73).

Before moves start, each broker taking part gets `leader.replication.throttled.rate` and
`follower.replication.throttled.rate` as its own dynamic config, and each topic lists the
moving partitions' current replicas in `leader.replication.throttled.replicas` and their new
ones in `follower.replication.throttled.replicas`, so only the copying is limited, not the
replication of the partitions that stay. Once nothing moves, what is set is deleted: the
cluster is read rather than remembered, so an operator restarted meanwhile clears it too.
A rate in the cluster-wide default (spec.config) is the user's and stays.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from moldau.client.admin import AlterConfigOp, AsyncAdmin, ConfigResource, ConfigSource

RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"

Assignment = Mapping[tuple[str, int], Sequence[int]]


def throttled_replicas(assignment: Assignment, targets: Assignment
                       ) -> dict[str, tuple[list[str], list[str]]]:
    """Per topic, the leader and follower lists for these moves: `partition:broker` of the
    replicas that have the data now, and of those that are to copy it."""
    lists: dict[str, tuple[list[str], list[str]]] = {}
    for (topic, partition), target in sorted(targets.items()):
        current = list(assignment.get((topic, partition), ()))
        adding = [broker for broker in target if broker not in current]
        if not adding:
            continue  # a reorder: no data moves
        leaders, followers = lists.setdefault(topic, ([], []))
        leaders += [f"{partition}:{broker}" for broker in current]
        followers += [f"{partition}:{broker}" for broker in adding]
    return lists


async def throttle_moves(admin: AsyncAdmin, assignment: Assignment, targets: Assignment,
                         rate: int | None, timeout: float) -> None:
    """Set the throttle for the moves about to start (nothing without a rate)."""
    if rate is None:
        return
    lists = throttled_replicas(assignment, targets)
    if not lists:
        return
    brokers = sorted({int(entry.split(":")[1]) for leaders, followers in lists.values()
                      for entry in leaders + followers})
    changes: dict[ConfigResource, list[AlterConfigOp]] = {
        ConfigResource.broker(broker): [AlterConfigOp.set(name, str(rate)) for name in RATES]
        for broker in brokers}
    for topic, (leaders, followers) in lists.items():
        changes[ConfigResource.topic(topic)] = [
            AlterConfigOp.set(LEADER_REPLICAS, ",".join(leaders)),
            AlterConfigOp.set(FOLLOWER_REPLICAS, ",".join(followers))]
    await admin.incremental_alter_configs(changes, timeout=timeout)


async def clear_throttle(admin: AsyncAdmin, brokers: Iterable[int], topics: Iterable[str],
                         timeout: float) -> int:
    """Delete the brokers' own throttle rates and the topics' throttled-replicas lists where
    set; how many resources changed."""
    changes: dict[ConfigResource, list[AlterConfigOp]] = {}
    for broker in sorted(set(brokers)):
        resource = ConfigResource.broker(broker)
        entries = (await admin.describe_configs([resource], timeout=timeout))[resource]
        own = [name for name in RATES if name in entries
               and entries[name].source is ConfigSource.DYNAMIC_BROKER_CONFIG]
        if own:
            changes[resource] = [AlterConfigOp.delete(name) for name in own]
    resources = [ConfigResource.topic(topic) for topic in sorted(set(topics))]
    if resources:
        described = await admin.describe_configs_each(resources, timeout=timeout)
        for resource, entries in described.items():
            if isinstance(entries, Exception):
                continue  # deleted meanwhile
            listed = [name for name in (LEADER_REPLICAS, FOLLOWER_REPLICAS)
                      if name in entries and entries[name].value]
            if listed:
                changes[resource] = [AlterConfigOp.delete(name) for name in listed]
    if changes:
        await admin.incremental_alter_configs(changes, timeout=timeout)
    return len(changes)
