"""One hosted partition's replication state (Kafka's Partition and Replica).

The leader keeps, per follower, the offset it last fetched from (its log end) and when it
was last caught up. From those follow the high watermark (lowest log end in the ISR, the
leader's included, never decreasing) and which followers may join or must leave the ISR.
Everything here runs on the event loop; the log does its own locking.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from moldau.broker.log.log import PartitionLog
from moldau.broker.metadata.records import PartitionRecord

UNKNOWN_OFFSET = -1


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower replica."""

    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    # The leader's log end and the time at the follower's previous fetch.
    last_fetch_leader_end_offset: int = UNKNOWN_OFFSET
    last_fetch_ms: int = 0

    def on_fetch(self, fetch_offset: int, log_start_offset: int, now_ms: int,
                 leader_end_offset: int) -> None:
        """Kafka's lastCaughtUpTime rule: a fetch from the leader's log end means caught up
        now; a fetch from at least the log end seen at the previous fetch means the follower
        was caught up when it sent that previous fetch."""
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_end_offset = leader_end_offset
        self.last_fetch_ms = now_ms

    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        return (self.log_end_offset == leader_end_offset
                or now_ms - self.last_caught_up_ms <= max_lag_ms)


@dataclass(eq=False)
class Partition:
    topic: str
    index: int
    record: PartitionRecord
    log: PartitionLog
    local_id: int = -1
    is_leader: bool = False
    # Leader only: remote replicas of the assignment, and where this leadership began.
    followers: dict[int, FollowerState] = field(default_factory=dict)
    leader_epoch_start_offset: int = UNKNOWN_OFFSET
    # An ISR sent to the controller and not yet answered (Kafka's pending ISR state).
    pending_isr: tuple[int, ...] | None = None
    alter_in_flight: bool = False
    # Bumped whenever fetching for this partition (re)starts or stops, so that writes of an
    # earlier fetcher round are abandoned.
    fetch_generation: int = 0

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.index

    @property
    def leader_epoch(self) -> int:
        return self.record.leader_epoch

    @property
    def partition_epoch(self) -> int:
        return self.record.partition_epoch

    @property
    def isr(self) -> tuple[int, ...]:
        """The committed ISR: what min.insync.replicas is checked against."""
        return self.record.isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The committed ISR plus a pending expansion: a replica being added already counts
        for the high watermark, a replica being removed still does."""
        if self.pending_isr is None:
            return frozenset(self.record.isr)
        return frozenset(self.record.isr) | frozenset(self.pending_isr)

    # --- transitions --------------------------------------------------------------------

    def reset_followers(self, now_ms: int, new_leader: bool) -> None:
        """A new leader epoch: forget where followers were (they fetch again soon); those in
        the ISR count as caught up now, so they are not shrunk out before their first fetch."""
        end = self.log.log_end_offset
        states: dict[int, FollowerState] = {}
        for replica in self.record.replicas:
            if replica == self.local_id:
                continue
            caught_up_ms = now_ms if replica in self.record.isr else 0
            old = self.followers.get(replica)
            if new_leader or old is None:
                states[replica] = FollowerState(last_caught_up_ms=caught_up_ms)
            else:  # same leader, new epoch: what the followers fetched is still true
                states[replica] = FollowerState(old.log_end_offset, old.log_start_offset,
                                                caught_up_ms, end, now_ms)
        self.followers = states

    def sync_assignment(self) -> None:
        """Keep follower states in step with the replica set (reassignment)."""
        wanted = [r for r in self.record.replicas if r != self.local_id]
        for replica in list(self.followers):
            if replica not in wanted:
                del self.followers[replica]
        for replica in wanted:
            self.followers.setdefault(replica, FollowerState())

    def resign(self) -> None:
        self.is_leader = False
        self.followers = {}
        self.pending_isr = None
        self.leader_epoch_start_offset = UNKNOWN_OFFSET

    # --- leader rules -------------------------------------------------------------------

    def high_watermark_candidate(self) -> int:
        """Lowest log end over the (maximal) ISR, the leader's own included."""
        candidate = self.log.log_end_offset
        for replica in self.maximal_isr:
            if replica == self.local_id:
                continue
            state = self.followers.get(replica)
            end = state.log_end_offset if state is not None else UNKNOWN_OFFSET
            candidate = min(candidate, end)
        return candidate

    def maybe_increment_high_watermark(self) -> bool:
        """Move the high watermark up if the ISR allows; True when it moved."""
        if not self.is_leader:
            return False
        candidate = self.high_watermark_candidate()
        if candidate > self.log.high_watermark:
            self.log.high_watermark = candidate
            return True
        return False

    def is_follower_in_sync(self, replica: int) -> bool:
        """Kafka's ISR expansion test: the follower has everything up to the high watermark,
        and at least everything written before this leadership began."""
        state = self.followers.get(replica)
        if state is None:
            return False
        return (state.log_end_offset >= self.log.high_watermark
                and state.log_end_offset >= self.leader_epoch_start_offset >= 0)

    def expansion_candidate(self, replica: int) -> tuple[int, ...] | None:
        """The ISR to propose with `replica` added, or None when not (yet) applicable."""
        if (not self.is_leader or self.alter_in_flight or self.pending_isr is not None
                or replica in self.record.isr or replica not in self.record.replicas
                or not self.is_follower_in_sync(replica)):
            return None
        return (*self.record.isr, replica)

    def out_of_sync_replicas(self, now_ms: int, max_lag_ms: int) -> list[int]:
        """ISR followers not caught up for longer than replica.lag.time.max.ms."""
        end = self.log.log_end_offset
        lagging = []
        for replica in self.record.isr:
            if replica == self.local_id:
                continue
            state = self.followers.get(replica)
            if state is None or not state.is_caught_up(end, now_ms, max_lag_ms):
                lagging.append(replica)
        return lagging
