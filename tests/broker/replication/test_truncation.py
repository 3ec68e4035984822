"""Where a follower truncates from an OffsetForLeaderEpoch answer (KIP-101, KIP-279), with
the follower's own epochs from a real leader epoch cache."""

from __future__ import annotations

from moldau.broker.log.leader_epoch import LeaderEpochCache
from moldau.broker.replication.truncation import Truncation, decide


def cache(tmp_path, *entries: tuple[int, int]) -> LeaderEpochCache:
    epochs = LeaderEpochCache(str(tmp_path))
    for epoch, start in entries:
        epochs.assign(epoch, start)
    return epochs


def test_same_epoch_keeps_what_both_have(tmp_path):
    epochs = cache(tmp_path, (0, 0), (2, 5))
    local = lambda e: epochs.end_offset_for(e, 9)  # noqa: E731
    # The leader's epoch 2 ends at 7: our records 7 and 8 are not on the leader.
    assert decide(2, 7, log_end_offset=9, high_watermark=4, local_end_for_epoch=local) == \
        Truncation(7, True)
    # The leader has more of epoch 2 than we do: nothing to cut.
    assert decide(2, 12, log_end_offset=9, high_watermark=4, local_end_for_epoch=local) == \
        Truncation(9, True)


def test_older_epoch_known_to_both_cuts_at_the_smaller_end(tmp_path):
    # KIP-101 double failover: we wrote offsets 5.. in epoch 2 that the new leader never got;
    # it answers our epoch 2 with its epoch 1, which ends at 6 on the leader and at 5 here.
    epochs = cache(tmp_path, (0, 0), (1, 3), (2, 5))
    local = lambda e: epochs.end_offset_for(e, 9)  # noqa: E731
    assert decide(1, 6, log_end_offset=9, high_watermark=9, local_end_for_epoch=local) == \
        Truncation(5, True)


def test_leader_epoch_unknown_here_cuts_and_asks_again(tmp_path):
    # KIP-279: the leader answers with epoch 3 (ending at 8); we never had epoch 3, only
    # 2 (ending at our log end 9 as our latest). Cut at the end of our largest epoch <= 3...
    epochs = cache(tmp_path, (0, 0), (2, 4), (4, 6))
    local = lambda e: epochs.end_offset_for(e, 9)  # noqa: E731
    # ... which is epoch 2, ending at 6 here (epoch 4 starts there): cut there, not done.
    assert decide(3, 8, log_end_offset=9, high_watermark=2, local_end_for_epoch=local) == \
        Truncation(6, False)


def test_undefined_answers(tmp_path):
    epochs = cache(tmp_path, (0, 0))
    local = lambda e: epochs.end_offset_for(e, 9)  # noqa: E731
    # The leader cannot place the epoch at all: only the high watermark is safe.
    assert decide(-1, -1, log_end_offset=9, high_watermark=4, local_end_for_epoch=local) == \
        Truncation(4, True)
    # An end offset without an epoch: take it as is.
    assert decide(-1, 6, log_end_offset=9, high_watermark=4, local_end_for_epoch=local) == \
        Truncation(6, True)
