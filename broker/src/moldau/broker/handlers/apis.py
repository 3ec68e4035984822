"""Every API handler, imported so that each registers itself in the API table."""

from moldau.broker.handlers import (  # noqa: F401
    acls,
    api_versions,
    client_quotas,
    cluster,
    configs,
    describe_producers,
    fetch,
    group_offsets,
    groups,
    metadata,
    offsets,
    partitions,
    produce,
    producer_ids,
    quorum,
    sasl,
    scram_users,
    topics,
    transactions,
    txn_markers,
)
