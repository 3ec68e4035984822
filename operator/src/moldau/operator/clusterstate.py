"""What a running cluster says about itself, asked over the Kafka protocol with moldau-client's
admin API, and whether that is the cluster the spec asks for.

`observe` sends DescribeCluster (registered, unfenced brokers; the cluster id) and
DescribeQuorum (the metadata quorum's leader, epoch, voters) through any broker. `assess`
compares it with the node ids the spec expects: pure, so the decision is tested without a
cluster and the reading against real broker processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from moldau.client.admin import AsyncAdmin
from moldau.client.errors import KafkaError

OBSERVE_TIMEOUT = 5.0


class ObserveError(Exception):
    """The cluster did not answer; the message says what was asked and why it failed."""


@dataclass(frozen=True)
class Expected:
    """The node ids the spec asks for."""

    brokers: frozenset[int]
    controllers: frozenset[int]


@dataclass(frozen=True)
class Observed:
    cluster_id: str | None
    brokers: frozenset[int]  # registered and unfenced
    leader_id: int  # -1: none
    leader_epoch: int
    voters: frozenset[int]
    observers: frozenset[int]


@dataclass(frozen=True)
class Assessment:
    ready: bool
    reason: str  # CamelCase, for conditions and events
    message: str


async def observe(bootstrap: Sequence[str], timeout: float = OBSERVE_TIMEOUT,
                  admin: AsyncAdmin | None = None) -> Observed:
    """Through `admin` (the cluster's shared client, left open) or a client of its own."""
    own = admin is None
    if admin is None:
        admin = AsyncAdmin({"bootstrap.servers": list(bootstrap),
                            "default.api.timeout.ms": int(timeout * 1000),
                            "request.timeout.ms": int(timeout * 1000),
                            "client.id": "moldau-operator"})
    try:
        await admin.start()
        cluster = await admin.describe_cluster(timeout=timeout)
        quorum = await admin.describe_metadata_quorum(timeout=timeout)
    except (KafkaError, OSError) as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise ObserveError(f"{','.join(bootstrap)}: {text}") from None
    finally:
        if own:
            await admin.close()
    return Observed(cluster.cluster_id, frozenset(node.node_id for node in cluster.nodes),
                    quorum.leader_id, quorum.leader_epoch,
                    frozenset(v.replica_id for v in quorum.voters),
                    frozenset(o.replica_id for o in quorum.observers))


def _ids(ids: frozenset[int]) -> str:
    return ", ".join(map(str, sorted(ids)))


def assess(expected: Expected, observed: Observed | None, error: str | None = None
           ) -> Assessment:
    """Ready when the quorum has a leader among the expected voters and every expected
    broker is registered; else the first thing missing, as a reason and a message."""
    if observed is None:
        return Assessment(False, "ClusterUnreachable", error or "no answer from the cluster")
    if observed.leader_id < 0:
        return Assessment(False, "NoQuorumLeader", "the metadata quorum has no leader")
    if observed.voters != expected.controllers:
        return Assessment(False, "VotersMismatch",
                          f"the quorum's voters are {_ids(observed.voters)}, the spec's "
                          f"controllers {_ids(expected.controllers)}")
    missing = expected.brokers - observed.brokers
    if missing:
        return Assessment(False, "BrokersNotRegistered",
                          f"brokers {_ids(missing)} are not registered")
    return Assessment(True, "Ready",
                      f"{len(expected.brokers)} brokers registered; quorum leader "
                      f"{observed.leader_id} in epoch {observed.leader_epoch}")
