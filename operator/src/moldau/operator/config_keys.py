"""Which broker `config` keys a KafkaCluster may set.

Kafka's own broker settings come from the list that ships with moldau-client (generated from
the pinned Kafka release, the same list the broker checks); Moldau's few settings of its own
are named here (tests/operator/test_config_keys.py keeps them in step with the broker). Keys
that fix a node's identity and addresses belong to the operator.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from moldau.config import REPLICATION_THROTTLE_RATES, kafka_broker_keys

# Settings the broker defines that Kafka's broker config list does not.
MOLDAU_ONLY_KEYS = frozenset({"http.listener", "leader.imbalance.per.broker.percentage",
                              # the StandardAuthorizer's, which Kafka's broker list lacks
                              "super.users", "allow.everyone.if.no.acl.found"}
                             # Kafka's dynamic-only broker settings (its quota configs)
                             ) | REPLICATION_THROTTLE_RATES
# The operator writes these from the spec (node pools, listeners, storage).
OPERATOR_KEYS = frozenset({
    "node.id", "broker.id", "process.roles", "controller.quorum.voters",
    "controller.quorum.bootstrap.servers", "controller.listener.names", "listeners",
    "advertised.listeners", "listener.security.protocol.map", "inter.broker.listener.name",
    "log.dirs", "log.dir", "metadata.log.dir", "http.listener", "broker.rack",
})


def known_keys() -> frozenset[str]:
    return kafka_broker_keys() | MOLDAU_ONLY_KEYS


def config_problems(config: Mapping[str, object]) -> list[str]:
    """One message per key the user may not set, naming a close known key when there is one."""
    problems = []
    for key in sorted(config):
        if key in OPERATOR_KEYS:
            problems.append(f"config {key!r} is set by the operator from the spec")
        elif key not in known_keys():
            close = difflib.get_close_matches(key, sorted(known_keys()), n=1, cutoff=0.8)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"config {key!r} is not a Kafka broker setting{hint}")
    return problems
