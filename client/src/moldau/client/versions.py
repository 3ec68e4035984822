"""API keys and the request versions this client can speak (those kio has schemas for)."""

from __future__ import annotations

from enum import IntEnum
from functools import cache

from kio.schema.index import api_key_map, schema_name_map


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    DESCRIBE_CLUSTER = 60
    UNREGISTER_BROKER = 64


# Versions whose meaning this client does not implement, though kio has their schemas:
# Produce v13 names topics by id only.
_CLIENT_MAX = {ApiKey.PRODUCE: 12}

# The last versions of the transaction requests without KIP-890's transaction version 2
# semantics (partitions added explicitly, EndTxn not bumping the epoch), which transactional
# producers and the admin's EndTxn send.
TXN_V1_MAX = {ApiKey.ADD_PARTITIONS_TO_TXN: 3, ApiKey.END_TXN: 4,
              ApiKey.TXN_OFFSET_COMMIT: 4, ApiKey.PRODUCE: 11}


@cache
def client_versions(api_key: int) -> tuple[int, int] | None:
    """(min, max) request versions the client can send for `api_key`, or None."""
    name = api_key_map.get(api_key)
    if name is None or name not in schema_name_map:
        return None
    versions = schema_name_map[name]
    low, high = min(versions), max(versions)
    return low, min(high, _CLIENT_MAX.get(api_key, high))


def negotiate(broker_versions: dict[int, tuple[int, int]]) -> dict[int, int]:
    """For each API both sides know, the highest version both support."""
    chosen: dict[int, int] = {}
    for api_key, (broker_min, broker_max) in broker_versions.items():
        ours = client_versions(api_key)
        if ours is None:
            continue
        low, high = max(ours[0], broker_min), min(ours[1], broker_max)
        if low <= high:
            chosen[api_key] = high
    return chosen
