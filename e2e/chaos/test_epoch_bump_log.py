"""The queue workload's reading of librdkafka's `eos` debug log into epoch bumps: the reasons
the producer gave for draining, and each batch a broker refused as out of order behind a
failed one. The lines are librdkafka 2.16's, as confluent-kafka hands them to the logger, from
a replay of seed 197: producer id 1000's sequence 133 on partition 0 was refused
NOT_ENOUGH_REPLICAS, and its sequence 134 then OUT_OF_ORDER_SEQUENCE_NUMBER."""

from __future__ import annotations

import logging

from e2e.chaos.checker import EpochBump, SequenceGap
from e2e.chaos.workload import EpochBumpLog

BROKER = "[thrd:10.213.19.12:9094/2]: "
SKIPPED = (
    "ERRSEQ [rdkafka#producer-2] " + BROKER + "10.213.19.12:9094/2: ProduceRequest for "
    "queue-197 [0] with 1 message(s) failed due to skipped sequence numbers "
    "(PID{Id:1000,Epoch:0}, base seq 134 > next seq 132) caused by previous failed request "
    "(NOT_ENOUGH_REPLICAS, actions Retry,MsgNotPersisted, base seq 133..133, base msgid 134, "
    "1174ms ago): recovering and retrying")
DRAIN = ("DRAIN [rdkafka#producer-2] " + BROKER + "Beginning partition drain in state Assigned "
         "for PID{{Id:1000,Epoch:{epoch}}} epoch bump for 2 partition(s) with in-flight "
         "requests: {reason}")
BUMPED = ("DRAIN [rdkafka#producer-2] " + BROKER + "All partitions drained, bumped epoch to "
          "PID{{Id:1000,Epoch:{epoch}}}")
OTHER = ("DRAIN [rdkafka#producer-2] " + BROKER + "queue-197 [0] beginning partition drain: "
         "drain before retrying")


def read(lines: list[str]) -> list[EpochBump]:
    bumps: list[EpochBump] = []
    handler = EpochBumpLog(0, bumps.append)
    for line in lines:
        handler.emit(logging.LogRecord("rdkafka", logging.DEBUG, __file__, 0, "%s", (line,),
                                       None))
    return bumps


def test_a_refusal_of_skipped_sequences_goes_with_its_bump() -> None:
    assert read([OTHER, SKIPPED, DRAIN.format(epoch=0, reason="skipped sequence numbers"),
                 SKIPPED.replace("[0]", "[2]").replace("base seq 134", "base seq 40"),
                 DRAIN.format(epoch=0, reason="skipped sequence numbers"),
                 BUMPED.format(epoch=1)]) == [
        EpochBump(0, 1000, 1, ("skipped sequence numbers",),
                  (SequenceGap(0, 0, 134), SequenceGap(2, 0, 40)))]


def test_each_bump_has_every_reason_given_since_the_previous_one() -> None:
    timed_out = "3 message(s) timed out on queue-197 [1]"
    assert read([DRAIN.format(epoch=0, reason=timed_out),
                 DRAIN.format(epoch=0, reason="skipped sequence numbers"), SKIPPED,
                 BUMPED.format(epoch=1),
                 DRAIN.format(epoch=1, reason="message sequence gap"),
                 BUMPED.format(epoch=2)]) == [
        EpochBump(0, 1000, 1, (timed_out, "skipped sequence numbers"),
                  (SequenceGap(0, 0, 134),)),
        EpochBump(0, 1000, 2, ("message sequence gap",))]
