"""The queue checker on hand-made histories: a valid one passes, and each anomaly, put in on
its own, is reported (so every check can fail)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from e2e.chaos.checker import (
    FAIL,
    INFO,
    OK,
    EpochBump,
    History,
    Poll,
    Send,
    SequenceEnd,
    SequenceGap,
    Writer,
    check,
    replica_divergence,
    resent,
    summary,
)


def valid() -> History:
    """Producer 0 sends a0..a3 to partition 0 (a3 indeterminate, never stored); producer 1
    sends b0, b1 to partition 0 between them; one consumer polls everything once."""
    sends = [Send(0, 0, "a0", 0, OK, 0), Send(1, 0, "b0", 0, OK, 1),
             Send(0, 1, "a1", 0, OK, 2), Send(1, 1, "b1", 0, OK, 3),
             Send(0, 2, "a2", 0, OK, 4), Send(0, 3, "a3", 0, INFO, error="timed out")]
    log = [(0, "a0"), (1, "b0"), (2, "a1"), (3, "b1"), (4, "a2")]
    polls = [Poll(7, 1, tuple((0, o, v) for o, v in log[:2])),
             Poll(7, 1, tuple((0, o, v) for o, v in log[2:]))]
    return History(sends, polls, {0: log})


def kinds(history: History) -> list[str]:
    return sorted({anomaly.kind for anomaly in check(history)})


def test_a_valid_history_has_no_anomaly() -> None:
    history = valid()
    assert check(history) == []
    assert summary(history, []) == ("6 sends (5 ok, 0 failed, 1 indeterminate), 2 polls, 5 "
                                    "records in the final read; anomalies: none")


def test_an_indeterminate_send_that_was_stored_is_fine() -> None:
    history = valid()
    history.final[0].append((5, "a3"))
    assert check(history) == []


def test_lost_write() -> None:
    history = valid()
    history.final[0] = [r for r in history.final[0] if r[1] != "b1"]
    history.polls = []
    assert kinds(history) == ["lost"]
    assert str(check(history)[0]) == "lost: b1 acknowledged at 0:3, not in the final read"


def test_duplicate() -> None:
    history = valid()
    history.final[0].append((5, "a0"))
    assert "duplicate" in kinds(history)
    assert "duplicate: a0 at 0:0, 0:5" in map(str, check(history))


def resend(bumps: list[EpochBump], epoch: int) -> History:
    """a2 is stored at offset 4 as sequence 2 of producer id 7 under epoch 0, but not
    acknowledged; after `bumps` librdkafka sends it again as sequence 0 of `epoch`, stored at
    5 and acknowledged there."""
    history = valid()
    history.sends[4] = replace(history.sends[4], offset=5)
    history.final[0].append((5, "a2"))
    history.epoch_bumps = bumps
    history.writers = [Writer(0, 4, 7, 0, 2), Writer(0, 5, 7, epoch, 0)]
    return history


def resend_after_bump(reason: str = "message sequence gap") -> History:
    """Seed 109's case: a message to another partition fails for good, and librdkafka bumps
    the producer to epoch 2 (two bumps)."""
    return resend([EpochBump(0, 7, 1, (reason,)), EpochBump(0, 7, 2, (reason,))], 2)


def test_a_resend_under_a_new_epoch_is_not_an_anomaly() -> None:
    history = resend_after_bump()
    assert check(history) == []
    assert resent(history) == [
        "a2 at 0:4, 0:5: producer id 7 wrote it again under a new epoch (4: epoch 0 sequence "
        "2, 5: epoch 2 sequence 0); bumped to epoch 2 for 'message sequence gap'"]
    assert summary(history, []).endswith(
        "anomalies: none; 1 duplicate(s) re-sent by the client under a new producer epoch")


def test_a_duplicate_within_one_epoch_is_the_brokers() -> None:
    history = resend_after_bump()
    history.writers = [Writer(0, 4, 7, 0, 2), Writer(0, 5, 7, 0, 2)]
    assert "duplicate: a2 at 0:4, 0:5" in map(str, check(history))
    assert resent(history) == []


@pytest.mark.parametrize("change", ["unknown writer", "other producer", "older epoch",
                                    "bump not logged", "broker's reason",
                                    "no reason logged"])
def test_a_resend_needs_the_whole_proof(change: str) -> None:
    history = resend_after_bump()
    if change == "unknown writer":
        history.writers = history.writers[:1]
    elif change == "other producer":
        history.writers[1] = replace(history.writers[1], producer_id=8)
    elif change == "older epoch":
        history.writers = [Writer(0, 4, 7, 2, 2), Writer(0, 5, 7, 0, 0)]
    elif change == "bump not logged":
        history.epoch_bumps = history.epoch_bumps[1:]
    elif change == "broker's reason":  # librdkafka's bump after UNKNOWN_PRODUCER_ID
        history = resend_after_bump("unknown producer id")
    else:
        history.epoch_bumps[1] = replace(history.epoch_bumps[1], reasons=())
    assert "duplicate: a2 at 0:4, 0:5" in map(str, check(history))


def resend_after_skipped_sequences() -> History:
    """Seeds 197 and 202: a2 is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrinks;
    the next batch on partition 0, sequence 3, is refused NOT_ENOUGH_REPLICAS (not stored);
    the one after it, sequence 4, is then refused OUT_OF_ORDER_SEQUENCE_NUMBER (3 is missing).
    librdkafka takes that for skipped sequence numbers and bumps the producer to epoch 1."""
    history = resend([EpochBump(0, 7, 1, ("skipped sequence numbers",),
                                (SequenceGap(0, 0, 4),))], 1)
    history.sequence_ends = [SequenceEnd(0, 7, 0, 2)]
    return history


def test_a_resend_after_a_true_sequence_gap_is_not_an_anomaly() -> None:
    history = resend_after_skipped_sequences()
    assert check(history) == []
    assert resent(history) == [
        "a2 at 0:4, 0:5: producer id 7 wrote it again under a new epoch (4: epoch 0 sequence "
        "2, 5: epoch 1 sequence 0); bumped to epoch 1 for 'skipped sequence numbers' "
        "(partition 0 refused sequence 4 of epoch 0, whose stored batches end at sequence 2)"]


@pytest.mark.parametrize("change", ["refused sequence stored", "refused batch followed",
                                    "refusal not logged", "stored batches not read",
                                    "other partition read", "a broker's reason as well"])
def test_a_resend_after_skipped_sequences_needs_the_gap_stored(change: str) -> None:
    """The broker's OUT_OF_ORDER_SEQUENCE_NUMBER excuses the bump only when the stored batches
    lack the sequence right before the refused one: otherwise the broker may have refused a
    batch that followed its log, and the duplicate may be its doing."""
    history = resend_after_skipped_sequences()
    bump = history.epoch_bumps[0]
    if change == "refused sequence stored":
        history.sequence_ends = [SequenceEnd(0, 7, 0, 4)]
    elif change == "refused batch followed":
        history.sequence_ends = [SequenceEnd(0, 7, 0, 3)]
    elif change == "refusal not logged":
        history.epoch_bumps = [replace(bump, gaps=())]
    elif change == "stored batches not read":
        history.sequence_ends = []
    elif change == "other partition read":
        history.sequence_ends = [SequenceEnd(1, 7, 0, 2)]
    else:
        history.epoch_bumps = [replace(bump, reasons=(*bump.reasons, "unknown producer id"))]
    assert "duplicate: a2 at 0:4, 0:5" in map(str, check(history))
    assert resent(history) == []


def test_inconsistent_offset_across_reads() -> None:
    history = valid()
    history.polls.append(Poll(8, 1, ((0, 2, "a3"),)))
    assert "inconsistent-offset" in kinds(history)
    assert "inconsistent-offset: 0:2 holds ['a1', 'a3']" in map(str, check(history))


def test_inconsistent_offset_against_an_acknowledgement() -> None:
    history = valid()
    history.sends[1] = replace(history.sends[1], offset=2)  # b0 acked at a1's offset
    assert "inconsistent-offset" in kinds(history)


def test_reorder_within_a_partition() -> None:
    history = valid()
    history.final[0] = [(0, "a0"), (1, "b0"), (2, "a2"), (3, "b1"), (4, "a1")]
    history.polls = []
    history.sends = [replace(s, offset={"a1": 4, "a2": 2}.get(s.value, s.offset))
                     for s in history.sends]
    assert "reorder" in kinds(history)
    assert ("reorder: partition 0: a1 (send #1) at offset 4 after a2 (send #2) at 2"
            in map(str, check(history)))


def test_nonmonotonic_send() -> None:
    history = valid()
    history.sends[4] = replace(history.sends[4], offset=1)  # a2 acked below a1
    assert "nonmonotonic-send" in kinds(history)


def test_nonmonotonic_poll_within_a_generation() -> None:
    history = valid()
    history.polls.append(Poll(7, 1, ((0, 1, "b0"),)))
    assert kinds(history) == ["nonmonotonic-poll"]


def test_a_new_generation_may_rewind() -> None:
    history = valid()
    history.polls.append(Poll(7, 2, ((0, 1, "b0"), (0, 2, "a1"))))
    assert check(history) == []


def test_poll_skip() -> None:
    history = valid()
    history.polls = [Poll(7, 1, ((0, 0, "a0"), (0, 3, "b1")))]
    assert kinds(history) == ["poll-skip"]
    assert str(check(history)[0]) == ("poll-skip: consumer 7 (generation 1), partition 0: "
                                      "polled 3 (b1) right after 0, skipping 2 record(s) of "
                                      "the log")


@pytest.mark.parametrize("status", [FAIL, None])
def test_unexpected_value(status: str | None) -> None:
    history = valid()
    if status is None:
        history.final[0].append((5, "zz"))
    else:
        history.sends[-1] = replace(history.sends[-1], status=status)
        history.final[0].append((5, "a3"))
    assert kinds(history) == ["unexpected"]


def test_replicas_agreeing_below_the_high_watermark() -> None:
    history = valid()
    log = history.final[0]
    replicas = {(1, 0): log, (2, 0): log + [(5, "a3")], (3, 0): log}
    assert replica_divergence(history, replicas, {0: 5}, {0: (1, 2, 3)}) == []


def test_replica_divergence() -> None:
    history = valid()
    log = history.final[0]
    forked = log[:3] + [(3, "a2"), (4, "b1")]
    short = log[:4]
    found = replica_divergence(history, {(1, 0): log, (2, 0): forked, (3, 0): short}, {0: 5},
                               {0: (1, 2, 3)})
    assert [str(a) for a in found] == [
        "replica-divergence: node 2, partition 0: 5 records below the high watermark 5, the "
        "read has 5; first difference at #3: stored [(3, 'a2')], read [(3, 'b1')]",
        "replica-divergence: node 3, partition 0: 4 records below the high watermark 5, the "
        "read has 5; first difference at #4: stored [], read [(4, 'a2')]"]


def test_a_replica_out_of_the_isr_may_lack_the_tail() -> None:
    """Schedule 121: a follower cut off by a ring fell out of the ISR just after recovery saw
    full ISRs; the leader and the other follower took the high watermark on without it. Its
    shorter log is allowed; the same log in an ISR member is not."""
    history = valid()
    log = history.final[0]
    replicas = {(1, 0): log, (2, 0): log, (3, 0): log[:3]}
    assert replica_divergence(history, replicas, {0: 5}, {0: (1, 2)}) == []
    assert [str(a) for a in replica_divergence(history, replicas, {0: 5}, {0: (2, 3)})] == [
        "replica-divergence: node 3, partition 0: 3 records below the high watermark 5, the "
        "read has 5; first difference at #3: stored [], read [(3, 'b1')]"]
    assert replica_divergence(history, replicas, {0: 5}, {}) == []  # no ISR read: none held


def test_an_acknowledgement_without_an_offset_is_still_checked_for_loss() -> None:
    history = valid()
    history.sends[1] = replace(history.sends[1], offset=-1)
    assert check(history) == []
    assert summary(history, []).startswith("6 sends (5 ok (1 without an offset), 0 failed")
    history.final[0] = [r for r in history.final[0] if r[1] != "b0"]
    history.polls = []
    assert kinds(history) == ["lost"]
