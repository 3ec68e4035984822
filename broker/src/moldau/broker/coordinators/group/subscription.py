"""Reading the topics out of a consumer's subscription (ConsumerProtocolSubscription)."""

from __future__ import annotations

import struct


def topics_of(metadata: bytes) -> set[str] | None:
    """Topics in the subscription: version int16, then an array of strings (every version
    starts so). None when the bytes are not a consumer subscription."""
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", metadata, pos)
        pos += 4
        topics = set()
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if length < 0 or pos + length > len(metadata):
                return None
            topics.add(metadata[pos:pos + length].decode())
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
