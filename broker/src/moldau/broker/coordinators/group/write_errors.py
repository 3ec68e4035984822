"""What a client is told when the coordinator's append to `__consumer_offsets` fails.

The append is the replica manager's, so its errors describe a partition; the client asked
about a group. Kafka's group coordinator translates them so that clients retry or look for
the coordinator again instead of failing.
"""

from __future__ import annotations

from moldau.errors import ErrorCode

# The partition cannot take the write now: the coordinator is briefly unavailable.
_UNAVAILABLE = frozenset({
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas_after_append,
    ErrorCode.request_timed_out,
})
# This node no longer leads the partition (or cannot use its disk): find the coordinator.
_MOVED = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error})
# The records could never be appended: a client error for commits, a bug otherwise.
_TOO_LARGE = frozenset({
    ErrorCode.message_too_large,
    ErrorCode.record_list_too_large,
    ErrorCode.invalid_fetch_size,
})


def store_error(code: ErrorCode, *, offsets: bool) -> ErrorCode:
    """The error for a failed append of offset commits (`offsets`) or group metadata."""
    if code in _UNAVAILABLE:
        return ErrorCode.coordinator_not_available
    if code in _MOVED:
        return ErrorCode.not_coordinator
    if code in _TOO_LARGE:
        return ErrorCode.invalid_commit_offset_size if offsets else \
            ErrorCode.unknown_server_error
    return code
