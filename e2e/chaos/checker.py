"""The checker of Jepsen's Kafka queue workload, over a recorded history.

A history holds every send (its producer, its place in that producer's order, the value,
the partition and the outcome: `ok` with the acknowledged offset, `fail` (certainly not
written) or `info` (indeterminate: timed out or an error after which it may be stored)),
every poll of the consumers (grouped by consumer and assignment generation: a rebalance may
legitimately rewind a consumer to its group's committed offset), and a final read of every
partition from the beginning, taken after the faults were healed.

Every value is unique, so each of these is an anomaly:
- lost: acknowledged, but not in the final read;
- duplicate: one value at two (partition, offset) positions in the reads, unless the stored
  batches show the client re-sent it under a new producer epoch (see `resent`);
- inconsistent-offset: two values at one (partition, offset), across reads and acks;
- reorder: one producer's values in a partition's log out of its send order;
- nonmonotonic-send: one producer's acknowledged offsets in a partition not increasing;
- nonmonotonic-poll: a consumer's offsets in a partition going back within a generation;
- poll-skip: a consumer skipping over records of the log within a generation;
- unexpected: a value read that was never sent, or whose send certainly failed;
- replica-divergence: a replica in the ISR at the end has stored records below the high
  watermark that differ from what the clients read.

A broker deduplicates an idempotent producer's retries by (producer id, epoch, sequence), and
only within one epoch, as Kafka does. librdkafka bumps its epoch and renumbers the messages it
has not had acknowledged when a message fails for good (a sequence gap, e.g. INVALID_TIMESTAMP
from a broker whose clock is behind), times out, or is refused as out of order because an
earlier request of the producer failed without being stored (its sequence numbers were
skipped); a message whose first send may already be stored (NOT_ENOUGH_REPLICAS_AFTER_APPEND,
a lost connection) is then written again, and no broker can tell. Such a duplicate is
`resent`, not an anomaly, only when the stored batches prove it: every copy written by the
same producer id under a higher epoch than the copy before, and the producer logged each bump
in between for one of those client-side reasons; for skipped sequence numbers, the stored
batches of the refused batch's partition must lack the sequence right before it (the broker's
refusal was right).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

OK, FAIL, INFO = "ok", "fail", "info"
Position = tuple[int, int]  # (partition, offset)
# librdkafka's reasons for an epoch bump that come from the client's own bookkeeping: a message
# failed for good (a hole in the sequence) or timed out. A bump after a broker's
# UNKNOWN_PRODUCER_ID does not excuse a duplicate.
CLIENT_BUMP_REASONS = ("message sequence gap", "timed out")
# librdkafka's reason after a broker's OUT_OF_ORDER_SEQUENCE_NUMBER for a batch behind one that
# failed: it excuses a duplicate only when the stored batches show the broker was right.
SKIPPED_SEQUENCES = "skipped sequence numbers"


@dataclass(frozen=True)
class Send:
    producer: int
    seq: int  # the send's place in its producer's order
    value: str
    partition: int
    status: str  # OK, FAIL or INFO
    offset: int = -1  # acknowledged offset (OK only; -1: acknowledged without one)
    error: str = ""


@dataclass(frozen=True)
class Poll:
    consumer: int
    generation: int  # bumped on every assignment change of the consumer
    records: tuple[tuple[int, int, str], ...]  # (partition, offset, value)


@dataclass(frozen=True)
class SequenceGap:
    """A batch a broker refused as out of order under `epoch`, which librdkafka took for
    sequence numbers skipped by an earlier failed request of the producer."""

    partition: int
    epoch: int
    base_sequence: int


@dataclass(frozen=True)
class EpochBump:
    """A producer's librdkafka bumped its epoch (to `epoch`) for `reasons` (every reason it
    gave for draining since the previous bump), after the broker refused `gaps`."""

    producer: int
    producer_id: int
    epoch: int
    reasons: tuple[str, ...]
    gaps: tuple[SequenceGap, ...] = ()


@dataclass(frozen=True)
class Writer:
    """Who wrote a stored record: its batch's producer id and epoch, and its sequence."""

    partition: int
    offset: int
    producer_id: int
    epoch: int
    sequence: int


@dataclass(frozen=True)
class SequenceEnd:
    """The highest sequence any replica of `partition` stores for `producer_id` under `epoch`
    (-1: none)."""

    partition: int
    producer_id: int
    epoch: int
    last_sequence: int


@dataclass
class History:
    sends: list[Send] = field(default_factory=list)
    polls: list[Poll] = field(default_factory=list)
    final: dict[int, list[tuple[int, str]]] = field(default_factory=dict)  # partition ->
    epoch_bumps: list[EpochBump] = field(default_factory=list)
    # The stored writers of the records read more than once (filled from the segment files).
    writers: list[Writer] = field(default_factory=list)
    # The highest stored sequence of each producer id and epoch on the partition of a batch
    # refused for skipped sequence numbers (likewise).
    sequence_ends: list[SequenceEnd] = field(default_factory=list)

    def reads(self) -> Iterable[tuple[int, int, str]]:
        """Every (partition, offset, value) read, by the consumers and the final read."""
        for poll in self.polls:
            yield from poll.records
        for partition, records in self.final.items():
            for offset, value in records:
                yield partition, offset, value


@dataclass(frozen=True)
class Anomaly:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


def check(history: History) -> list[Anomaly]:
    """Every anomaly of the history (empty: the history is valid)."""
    return [*lost(history), *duplicates(history), *inconsistent_offsets(history),
            *reorders(history), *nonmonotonic_sends(history), *nonmonotonic_polls(history),
            *poll_skips(history), *unexpected(history)]


def lost(history: History) -> list[Anomaly]:
    finally_read = {value for records in history.final.values() for _, value in records}
    return [Anomaly("lost", f"{send.value} acknowledged at {send.partition}:{send.offset}, "
                            "not in the final read")
            for send in history.sends if send.status == OK and send.value not in finally_read]


def duplicated(history: History) -> dict[str, set[Position]]:
    """Every value read at more than one position, with those positions."""
    positions: dict[str, set[Position]] = defaultdict(set)
    for partition, offset, value in history.reads():
        positions[value].add((partition, offset))
    return {value: where for value, where in positions.items() if len(where) > 1}


def duplicates(history: History) -> list[Anomaly]:
    return [Anomaly("duplicate", f"{value} at {_positions(where)}")
            for value, where in duplicated(history).items()
            if _resend_reason(history, where) is None]


def resent(history: History) -> list[str]:
    """The duplicates the client wrote under a new epoch (not anomalies), with the proof."""
    out = []
    for value, where in duplicated(history).items():
        reason = _resend_reason(history, where)
        if reason is not None:
            out.append(f"{value} at {_positions(where)}: {reason}")
    return out


def _resend_reason(history: History, where: set[Position]) -> str | None:
    """Why the copies at `where` are a client's re-send under a new epoch, or None when the
    stored writers and the logged epoch bumps do not prove it."""
    writers = {(w.partition, w.offset): w for w in history.writers}
    if not all(position in writers for position in where):
        return None
    copies = [writers[position] for position in sorted(where)]
    pid = copies[0].producer_id
    if len({(w.partition, w.producer_id) for w in copies}) > 1 or any(
            later.epoch <= earlier.epoch
            for earlier, later in zip(copies, copies[1:], strict=False)):
        return None
    bumps = {b.epoch: b for b in history.epoch_bumps if b.producer_id == pid}
    needed = [bumps.get(epoch) for epoch in range(copies[0].epoch + 1, copies[-1].epoch + 1)]
    whys = [None if bump is None else _client_bump(history, bump) for bump in needed]
    if any(why is None for why in whys):
        return None
    epochs = ", ".join(f"{w.offset}: epoch {w.epoch} sequence {w.sequence}" for w in copies)
    return (f"producer id {pid} wrote it again under a new epoch ({epochs}); bumped to "
            f"epoch {copies[-1].epoch} for {whys[-1]}")


def _client_bump(history: History, bump: EpochBump) -> str | None:
    """The client-side reasons of an epoch bump, or None when one of its reasons may be the
    broker's doing."""
    ends = {(e.partition, e.producer_id, e.epoch): e.last_sequence
            for e in history.sequence_ends}
    whys = []
    for reason in bump.reasons:
        if any(client in reason for client in CLIENT_BUMP_REASONS):
            whys.append(repr(reason))
            continue
        shown = [_gap_shown(ends, bump.producer_id, gap) for gap in bump.gaps]
        if reason != SKIPPED_SEQUENCES or not shown or None in shown:
            return None
        whys.append(f"{reason!r} ({'; '.join(str(why) for why in shown)})")
    return ", ".join(whys) if whys else None


def _gap_shown(ends: Mapping[tuple[int, int, int], int], producer_id: int,
               gap: SequenceGap) -> str | None:
    """How the stored batches show that the broker lacked the sequence right before the
    refused batch (so refusing it was right), or None."""
    end = ends.get((gap.partition, producer_id, gap.epoch))
    if end is None or end >= gap.base_sequence - 1:
        return None
    return (f"partition {gap.partition} refused sequence {gap.base_sequence} of epoch "
            f"{gap.epoch}, whose stored batches end at sequence {end}")


def inconsistent_offsets(history: History) -> list[Anomaly]:
    values: dict[Position, set[str]] = defaultdict(set)
    for partition, offset, value in history.reads():
        values[(partition, offset)].add(value)
    for send in history.sends:
        if send.status == OK and send.offset >= 0:
            values[(send.partition, send.offset)].add(send.value)
    return [Anomaly("inconsistent-offset", f"{p}:{o} holds {sorted(found)}")
            for (p, o), found in sorted(values.items()) if len(found) > 1]


def reorders(history: History) -> list[Anomaly]:
    sent = {send.value: send for send in history.sends}
    anomalies = []
    for partition, records in sorted(history.final.items()):
        last: dict[int, tuple[int, int, str]] = {}  # producer -> (seq, offset, value)
        for offset, value in records:
            send = sent.get(value)
            if send is None:
                continue
            before = last.get(send.producer)
            if before is not None and before[0] > send.seq:
                anomalies.append(Anomaly(
                    "reorder", f"partition {partition}: {value} (send #{send.seq}) at offset "
                               f"{offset} after {before[2]} (send #{before[0]}) at {before[1]}"))
            last[send.producer] = (send.seq, offset, value)
    return anomalies


def nonmonotonic_sends(history: History) -> list[Anomaly]:
    acked: dict[tuple[int, int], list[Send]] = defaultdict(list)
    for send in history.sends:
        if send.status == OK and send.offset >= 0:
            acked[(send.producer, send.partition)].append(send)
    anomalies = []
    for (producer, partition), sends in sorted(acked.items()):
        sends.sort(key=lambda s: s.seq)
        for before, after in zip(sends, sends[1:], strict=False):
            if after.offset <= before.offset:
                anomalies.append(Anomaly(
                    "nonmonotonic-send", f"producer {producer}, partition {partition}: "
                    f"{after.value} acknowledged at {after.offset}, after {before.value} at "
                    f"{before.offset}"))
    return anomalies


def _consumer_runs(history: History) -> dict[tuple[int, int, int], list[tuple[int, str]]]:
    """(consumer, generation, partition) -> the (offset, value)s polled, in poll order."""
    runs: dict[tuple[int, int, int], list[tuple[int, str]]] = defaultdict(list)
    for poll in history.polls:
        for partition, offset, value in poll.records:
            runs[(poll.consumer, poll.generation, partition)].append((offset, value))
    return runs


def nonmonotonic_polls(history: History) -> list[Anomaly]:
    anomalies = []
    for (consumer, generation, partition), polled in sorted(_consumer_runs(history).items()):
        for (o1, v1), (o2, v2) in zip(polled, polled[1:], strict=False):
            if o2 <= o1:
                anomalies.append(Anomaly(
                    "nonmonotonic-poll", f"consumer {consumer} (generation {generation}), "
                    f"partition {partition}: offset {o2} ({v2}) polled after {o1} ({v1})"))
    return anomalies


def poll_skips(history: History) -> list[Anomaly]:
    in_log = {partition: sorted(offset for offset, _ in records)
              for partition, records in history.final.items()}
    anomalies = []
    for (consumer, generation, partition), polled in sorted(_consumer_runs(history).items()):
        offsets = in_log.get(partition, [])
        index = {offset: i for i, offset in enumerate(offsets)}
        for (o1, _), (o2, v2) in zip(polled, polled[1:], strict=False):
            if o1 in index and o2 in index and index[o2] - index[o1] > 1:
                anomalies.append(Anomaly(
                    "poll-skip", f"consumer {consumer} (generation {generation}), partition "
                    f"{partition}: polled {o2} ({v2}) right after {o1}, skipping "
                    f"{index[o2] - index[o1] - 1} record(s) of the log"))
    return anomalies


def unexpected(history: History) -> list[Anomaly]:
    status = {send.value: send.status for send in history.sends}
    seen: set[str] = set()
    anomalies = []
    for partition, offset, value in history.reads():
        if value in seen or status.get(value, FAIL) != FAIL:
            continue
        seen.add(value)
        why = "never sent" if value not in status else "its send failed"
        anomalies.append(Anomaly("unexpected", f"{value} read at {partition}:{offset}, {why}"))
    return anomalies


def replica_divergence(history: History,
                       replicas: Mapping[tuple[int, int], Sequence[tuple[Any, ...]]],
                       high_watermarks: dict[int, int],
                       in_sync: Mapping[int, Collection[int]]) -> list[Anomaly]:
    """Compare each in-sync replica's stored records below its partition's high watermark,
    `replicas[(node, partition)]` (tuples starting with offset and value), with the final read
    of that partition.

    `in_sync[partition]` is the ISR read back after the final read. Only its members must hold
    every record below the high watermark: a follower that left the ISR (it lagged longer than
    replica.lag.time.max.ms) may lack the tail, and the high watermark moved on without it."""
    anomalies = []
    for (node, partition), stored in sorted(replicas.items()):
        if node not in in_sync.get(partition, ()):
            continue
        high = high_watermarks[partition]
        mine = [(offset, value) for offset, value, *_ in stored if offset < high]
        read = [(offset, value) for offset, value in history.final.get(partition, [])
                if offset < high]
        if mine != read:
            first = next((i for i, (a, b) in enumerate(zip(mine, read, strict=False))
                          if a != b), min(len(mine), len(read)))
            anomalies.append(Anomaly(
                "replica-divergence", f"node {node}, partition {partition}: {len(mine)} "
                f"records below the high watermark {high}, the read has {len(read)}; first "
                f"difference at #{first}: stored {mine[first:first + 1]}, read "
                f"{read[first:first + 1]}"))
    return anomalies


def summary(history: History, anomalies: list[Anomaly]) -> str:
    resends = len(resent(history))
    statuses = Counter(send.status for send in history.sends)
    kinds = Counter(anomaly.kind for anomaly in anomalies)
    read = sum(len(records) for records in history.final.values())
    no_offset = sum(1 for send in history.sends if send.status == OK and send.offset < 0)
    text = (f"{len(history.sends)} sends ({statuses[OK]} ok"
            + (f" ({no_offset} without an offset)" if no_offset else "")
            + f", {statuses[FAIL]} failed, "
            f"{statuses[INFO]} indeterminate), {len(history.polls)} polls, {read} records in "
            f"the final read; anomalies: "
            + (", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items())) or "none")
            + (f"; {resends} duplicate(s) re-sent by the client under a new producer epoch"
               if resends else ""))
    return text


def _positions(where: set[Position]) -> str:
    return ", ".join(f"{p}:{o}" for p, o in sorted(where))
