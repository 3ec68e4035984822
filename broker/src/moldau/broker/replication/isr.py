"""ISR changes sent to the controller (Kafka's AlterPartitionManager), one in flight per
partition.

The leader proposes an ISR; until the controller answers, the proposal is "pending" (see
Partition.maximal_isr). Transient failures (no controller, timeouts) are retried with a
growing back-off while the proposal still stands. The answer, committed record or error, is
handed back to the owner, which applies it only if the partition has not moved on.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from moldau.broker.metadata.records import PartitionRecord
from moldau.broker.replication.partition import Partition
from moldau.errors import ErrorCode, KafkaError

log = logging.getLogger("moldau.broker.replication")

# (topic id, partition, leader epoch, partition epoch, new ISR) -> the committed record.
AlterPartition = Callable[[uuid.UUID, int, int, int, tuple[int, ...]],
                          Awaitable[PartitionRecord]]
# (partition, proposal, outcome): called once per proposal on the event loop.
Outcome = PartitionRecord | KafkaError
OnOutcome = Callable[[Partition, "Proposal", Outcome], None]

RETRIABLE = frozenset({ErrorCode.not_controller, ErrorCode.request_timed_out,
                       ErrorCode.network_exception, ErrorCode.broker_not_available,
                       ErrorCode.unknown_server_error})
INITIAL_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0


class Proposal:
    __slots__ = ("isr", "leader_epoch", "partition_epoch")

    def __init__(self, isr: tuple[int, ...], leader_epoch: int, partition_epoch: int) -> None:
        self.isr = isr
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch

    def still_current(self, partition: Partition) -> bool:
        return (partition.is_leader and partition.pending_isr == self.isr
                and partition.leader_epoch == self.leader_epoch
                and partition.partition_epoch == self.partition_epoch)

    def __repr__(self) -> str:
        return (f"Proposal(isr={list(self.isr)}, leader_epoch={self.leader_epoch}, "
                f"partition_epoch={self.partition_epoch})")


class IsrChanger:
    def __init__(self, alter: AlterPartition, on_outcome: OnOutcome) -> None:
        self._alter = alter
        self._on_outcome = on_outcome
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, partition: Partition, new_isr: tuple[int, ...]) -> bool:
        """Propose `new_isr`; False when a proposal of this partition is still in flight."""
        if partition.alter_in_flight:
            return False
        proposal = Proposal(new_isr, partition.leader_epoch, partition.partition_epoch)
        partition.pending_isr = new_isr
        partition.alter_in_flight = True
        log.info("%s-%d: proposing ISR %s (was %s)", partition.topic, partition.index,
                 list(new_isr), list(partition.isr))
        task = asyncio.get_running_loop().create_task(
            self._send(partition, proposal), name=f"alter-partition-{partition.topic}-"
                                                  f"{partition.index}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _send(self, partition: Partition, proposal: Proposal) -> None:
        backoff = INITIAL_BACKOFF_S
        outcome: Outcome
        try:
            while True:
                try:
                    outcome = await self._alter(partition.record.topic_id, partition.index,
                                                proposal.leader_epoch,
                                                proposal.partition_epoch, proposal.isr)
                    break
                except KafkaError as exc:
                    if exc.code not in RETRIABLE:
                        outcome = exc
                        break
                    reason = exc.code.name
                except Exception as exc:  # the channel to the controller failed
                    reason = str(exc) or type(exc).__name__
                if not proposal.still_current(partition):
                    # The partition moved on (new metadata); nothing left to propose.
                    outcome = KafkaError(ErrorCode.operation_not_attempted)
                    break
                log.debug("%s-%d: AlterPartition failed (%s); retrying in %.0f ms",
                          partition.topic, partition.index, reason, backoff * 1000)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
        finally:
            partition.alter_in_flight = False
        self._on_outcome(partition, proposal, outcome)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
