"""Where a follower cuts its log before fetching from a leader (KIP-101, KIP-279).

The follower asks the leader where its latest leader epoch ends (OffsetForLeaderEpoch), or
learns it from a fetch response's diverging epoch, and keeps only what both logs agree on.
When the leader answers with an older epoch than asked, the follower cuts at its own end of
that epoch and, if it has no entry for exactly that epoch, asks again from there: each round
asks about a strictly older epoch, so this ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

UNDEFINED = -1


class Truncation(NamedTuple):
    offset: int  # cut the log here (a no-op when at or past the log end)
    complete: bool  # False: ask the leader again with the follower's new latest epoch


def decide(leader_epoch: int, leader_end_offset: int, *, log_end_offset: int,
           high_watermark: int,
           local_end_for_epoch: Callable[[int], tuple[int, int]]) -> Truncation:
    """`local_end_for_epoch(e)` is the follower's own (largest epoch <= e, its end offset),
    (-1, -1) when it knows none."""
    if leader_end_offset == UNDEFINED:
        # The leader knows nothing of the epoch: only the high watermark is known committed.
        return Truncation(min(high_watermark, log_end_offset), True)
    if leader_epoch == UNDEFINED:
        return Truncation(min(leader_end_offset, log_end_offset), True)
    local_epoch, local_end = local_end_for_epoch(leader_epoch)
    if local_epoch == UNDEFINED or local_end == UNDEFINED:
        return Truncation(min(leader_end_offset, log_end_offset), True)
    if local_epoch != leader_epoch:
        # Our largest epoch below the leader's answer: everything after its end is ours alone.
        return Truncation(min(local_end, log_end_offset), False)
    return Truncation(min(leader_end_offset, local_end, log_end_offset), True)
