"""The Kafka-side reconcile of one cluster's topics: a batch of wanted topics (many
resources) against what the cluster has, in a handful of requests whatever the batch's
size; deletions of topics whose resources go; and the topics no resource manages."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from moldau.client.admin import AsyncAdmin
from moldau.client.errors import ErrorCode, KafkaError
from moldau.operator.topics.kafka import TRANSPORT_ERRORS, Observation, apply, observe
from moldau.operator.topics.model import DeleteResult, DesiredTopic, TopicRef, TopicResult
from moldau.operator.topics.plan import CONFLICT, outcome, owner, plan_topic, reason_of

UNREACHABLE = "ClusterUnreachable"
UNMANAGED = "Unmanaged"
# Unmanaged topics named in a KafkaCluster's status, at most.
UNMANAGED_NAMES_LIMIT = 50

Claims = Mapping[str, Sequence[DesiredTopic]]


def _claimants(desired: DesiredTopic, claims: Claims | None,
               batch: Sequence[DesiredTopic]) -> list[DesiredTopic]:
    """Every resource naming the same topic: those the caller knows of, with the batch's
    own (fresher) entries in place of theirs."""
    found = {c.ref: c for c in (claims or {}).get(desired.topic_name, ())}
    found.update({d.ref: d for d in batch if d.topic_name == desired.topic_name})
    found[desired.ref] = desired
    return list(found.values())


def unmanaged(desired: DesiredTopic) -> TopicResult:
    return TopicResult(True, UNMANAGED, f"moldau.io/managed is false: topic "
                                        f"'{desired.topic_name}' is left alone")


def _text(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


@dataclass(frozen=True)
class Inventory:
    """A cluster's topics as the topic operator sees them (internal topics aside)."""

    managed: int
    unmanaged: int
    unmanaged_names: tuple[str, ...]  # sorted, the first UNMANAGED_NAMES_LIMIT


def inventory(topics: Collection[str], managed: Collection[str],
              limit: int = UNMANAGED_NAMES_LIMIT) -> Inventory:
    wanted = set(managed)
    outside = sorted(name for name in topics if name not in wanted)
    return Inventory(len(set(topics) & wanted), len(outside), tuple(outside[:limit]))


class TopicReconciler:
    """One cluster's topics through one admin client. `cluster` names the cluster in
    messages."""

    def __init__(self, admin: AsyncAdmin, cluster: str, timeout: float | None = None) -> None:
        self.admin = admin
        self.cluster = cluster
        self.timeout = timeout

    def _unreachable(self, exc: BaseException) -> str:
        return f"KafkaCluster {self.cluster} did not answer: {_text(exc)}"

    async def reconcile(self, batch: Sequence[DesiredTopic], claims: Claims | None = None
                        ) -> dict[TopicRef, TopicResult]:
        """Each resource's result. `claims` (topic name -> every resource naming it)
        decides who owns a topic two resources name; without it, the batch alone does."""
        results = {d.ref: unmanaged(d) for d in batch if not d.managed}
        managed = [d for d in batch if d.managed]
        if not managed:
            return results
        names = sorted({d.topic_name for d in managed})
        try:
            seen = await observe(self.admin, names, timeout=self.timeout)
        except TRANSPORT_ERRORS as exc:
            results.update({d.ref: TopicResult(False, UNREACHABLE, self._unreachable(exc))
                            for d in managed})
            return results
        plans = [plan_topic(d, owner(_claimants(d, claims, managed)),
                            seen.topics.get(d.topic_name), seen.configs.get(d.topic_name, {}),
                            bool(seen.moving.get(d.topic_name)), seen.brokers)
                 for d in managed]
        unreadable = {p.desired.ref: seen.errors[p.desired.topic_name] for p in plans
                      if p.desired.topic_name in seen.errors and not p.blocked}
        plans = [p for p in plans if p.desired.ref not in unreadable]
        applied = await apply(self.admin, plans, timeout=self.timeout)
        touched = sorted({p.desired.topic_name for p in plans
                          if p.create or p.grow_to or p.move})
        if touched:
            try:
                fresh = await observe(self.admin, touched, configs=False, timeout=self.timeout)
            except TRANSPORT_ERRORS:
                fresh = Observation()
            for name in touched:
                seen.topics.pop(name, None)
                seen.moving.pop(name, None)
            seen.topics.update(fresh.topics)
            seen.moving.update(fresh.moving)
        for plan in plans:
            ref, name = plan.desired.ref, plan.desired.topic_name
            results[ref] = outcome(plan, applied.errors.get(ref, []), seen.topics.get(name),
                                   seen.moving.get(name, {}), applied.changes.get(ref, []))
        for ref, error in unreadable.items():
            results[ref] = TopicResult(False, reason_of(error), str(error))
        return results

    async def delete(self, batch: Sequence[DesiredTopic], claims: Claims | None = None
                     ) -> dict[TopicRef, DeleteResult]:
        """Delete the topics of resources that go, when they own them; a topic another
        resource owns, or an unmanaged one, stays."""
        results: dict[TopicRef, DeleteResult] = {}
        doomed: dict[str, DesiredTopic] = {}
        for d in batch:
            owning = owner(_claimants(d, claims, batch))
            if not d.managed:
                results[d.ref] = DeleteResult(True, UNMANAGED, f"moldau.io/managed is false: "
                                                               f"topic '{d.topic_name}' is kept")
            elif owning != d.ref:
                results[d.ref] = DeleteResult(True, CONFLICT, f"topic '{d.topic_name}' is "
                                                              f"managed by {owning}: kept")
            else:
                doomed[d.topic_name] = d
        if not doomed:
            return results
        try:
            answers = await self.admin.delete_topics_each(doomed, timeout=self.timeout)
        except TRANSPORT_ERRORS as exc:
            results.update({d.ref: DeleteResult(False, UNREACHABLE, self._unreachable(exc))
                            for d in doomed.values()})
            return results
        for name, answer in answers.items():
            results[doomed[name].ref] = _deleted(name, answer)
        return results

    async def inventory(self, managed: Collection[str]) -> Inventory:
        """The cluster's topics against the ones Topic resources manage. Raises when the
        cluster does not answer."""
        return inventory(await self.admin.list_topics(timeout=self.timeout), managed)


def _deleted(name: str, answer: KafkaError | None) -> DeleteResult:
    if answer is None:
        return DeleteResult(True, "TopicDeleted", f"deleted topic '{name}'")
    if answer.code == ErrorCode.unknown_topic_or_partition:
        return DeleteResult(True, "TopicNotFound", f"topic '{name}' was not in Kafka")
    if answer.code == ErrorCode.topic_deletion_disabled:
        # Asking again will not help: the broker's delete.topic.enable is false.
        return DeleteResult(True, reason_of(answer), f"the brokers do not delete topics "
                                                     f"(delete.topic.enable=false): topic "
                                                     f"'{name}' is kept")
    return DeleteResult(False, reason_of(answer), str(answer))
