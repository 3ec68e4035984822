"""One transactional id's state, and the transitions Kafka's TransactionMetadata allows.

Changes are prepared, written to `__transaction_state`, and applied only once the write is
acknowledged; while one is in flight the id has a pending state, and other requests for it
get CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from moldau.broker.coordinators.transaction.records import TxnState, TxnValue

Empty, Ongoing = TxnState.EMPTY, TxnState.ONGOING
PrepareCommit, PrepareAbort = TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT
CompleteCommit, CompleteAbort = TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT
Dead, PrepareEpochFence = TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE

# The states each state may be reached from.
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    Empty: frozenset({Empty, CompleteCommit, CompleteAbort}),
    Ongoing: frozenset({Ongoing, Empty, CompleteCommit, CompleteAbort}),
    PrepareCommit: frozenset({Ongoing}),
    PrepareAbort: frozenset({Ongoing, PrepareEpochFence}),
    CompleteCommit: frozenset({PrepareCommit}),
    CompleteAbort: frozenset({PrepareAbort}),
    Dead: frozenset({Empty, CompleteCommit, CompleteAbort}),
    PrepareEpochFence: frozenset({Ongoing}),
}
# With no transaction open: a new one may begin, the id may be re-initialised or expire.
IDLE = frozenset({Empty, CompleteCommit, CompleteAbort})
PREPARED = frozenset({PrepareCommit, PrepareAbort})

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Kafka bumps to a new producer id rather than reach Short.MAX_VALUE, which it reserves.
MAX_EPOCH = 2**15 - 2


class IllegalTransition(Exception):
    """A bug: the coordinator asked for a transition the state machine forbids."""


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = Empty
    partitions: dict[str, set[int]] = field(default_factory=dict)
    start_ms: int = -1
    last_update_ms: int = -1
    # The producer id and epoch before the last bump, so a retried InitProducerId of the
    # producer that asked for it (KIP-360) gets the same answer instead of being fenced.
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    pending: TxnState | None = None  # the state being written

    @classmethod
    def from_value(cls, transactional_id: str, value: TxnValue) -> TxnMetadata:
        return cls(transactional_id, value.producer_id, value.producer_epoch, value.timeout_ms,
                   value.state, {topic: set(parts) for topic, parts in value.partitions.items()},
                   value.start_ms, value.last_update_ms)

    @property
    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= MAX_EPOCH

    def partition_list(self) -> list[tuple[str, int]]:
        return [(topic, partition) for topic, parts in sorted(self.partitions.items())
                for partition in sorted(parts)]

    def has_partitions(self, wanted: dict[str, set[int]]) -> bool:
        return all(parts <= self.partitions.get(topic, set()) for topic, parts in wanted.items())


@dataclass(frozen=True)
class Transition:
    """A prepared change: what is written, and what the id becomes once it is."""

    state: TxnState
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    partitions: dict[str, set[int]]
    start_ms: int
    update_ms: int
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH

    def value(self) -> TxnValue:
        return TxnValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                        {topic: tuple(sorted(parts))
                         for topic, parts in sorted(self.partitions.items())},
                        self.update_ms, self.start_ms)


def prepare(meta: TxnMetadata, state: TxnState, now_ms: int, **changes: object) -> Transition:
    """The transition of `meta` to `state` (fields not named in `changes` carry over), and
    mark it pending. Raises IllegalTransition when the state machine forbids it."""
    if meta.pending is not None:
        raise IllegalTransition(f"{meta.transactional_id} already has a pending change to "
                                f"{meta.pending.display}")
    if meta.state not in VALID_PREVIOUS[state]:
        raise IllegalTransition(f"{meta.transactional_id}: {meta.state.display} cannot go to "
                                f"{state.display}")
    base = Transition(state, meta.producer_id, meta.producer_epoch, meta.timeout_ms,
                      {topic: set(parts) for topic, parts in meta.partitions.items()},
                      meta.start_ms, now_ms, meta.last_producer_id, meta.last_producer_epoch)
    if state in (Empty, CompleteCommit, CompleteAbort, Dead):
        base = replace(base, partitions={})
    transition = replace(base, **changes)  # type: ignore[arg-type]
    meta.pending = state
    return transition


def apply(meta: TxnMetadata, transition: Transition) -> None:
    """The transition was written: the id takes it on."""
    meta.state = transition.state
    meta.producer_id, meta.producer_epoch = transition.producer_id, transition.producer_epoch
    meta.timeout_ms = transition.timeout_ms
    meta.partitions = transition.partitions
    meta.start_ms, meta.last_update_ms = transition.start_ms, transition.update_ms
    meta.last_producer_id = transition.last_producer_id
    meta.last_producer_epoch = transition.last_producer_epoch
    meta.pending = None
