"""One admin client per Kafka cluster, shared by every Topic resource of that cluster (and
the KafkaCluster's own reads), with the batcher that gathers their work."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from moldau.client.admin import AsyncAdmin
from moldau.operator.metrics import TOPIC_BATCH_SECONDS, TOPIC_BATCH_SIZE
from moldau.operator.topics.batcher import Batcher
from moldau.operator.topics.model import DeleteResult, DesiredTopic, TopicResult
from moldau.operator.topics.reconciler import TopicReconciler

# Seconds one admin call may take before the cluster counts as unreachable.
API_TIMEOUT = 15.0
LINGER = 0.2
MAX_BATCH = 1000

WorkKey = tuple[str, str]  # (kind, resource uid)
Outcome = TopicResult | DeleteResult


@dataclass(frozen=True)
class Work:
    kind: str  # apply | delete
    desired: DesiredTopic
    # Every resource naming the same topic, as the caller knows them.
    claimants: tuple[DesiredTopic, ...] = ()

    @property
    def key(self) -> WorkKey:
        return self.kind, self.desired.ref.uid


def admin_for(bootstrap: Sequence[str], timeout: float = API_TIMEOUT,
              security: Mapping[str, str] | None = None) -> AsyncAdmin:
    """`security`: client settings for a secured cluster (TLS with the operator's
    certificate)."""
    millis = int(timeout * 1000)
    return AsyncAdmin({"bootstrap.servers": list(bootstrap), "client.id": "moldau-operator",
                       "default.api.timeout.ms": millis, "request.timeout.ms": millis,
                       **(security or {})})


class ClusterClient:
    """The admin client, reconciler and batcher of one cluster."""

    def __init__(self, name: str, bootstrap: Sequence[str], *, linger: float = LINGER,
                 max_batch: int = MAX_BATCH, timeout: float = API_TIMEOUT,
                 security: Mapping[str, str] | None = None) -> None:
        self.bootstrap = tuple(bootstrap)
        self.security = dict(security or {})
        self.admin = admin_for(bootstrap, timeout, security)
        self.reconciler = TopicReconciler(self.admin, name, timeout)
        self.batcher: Batcher[WorkKey, Work, Outcome] = Batcher(
            self._run, lambda work: work.key, linger=linger, max_items=max_batch)

    async def _run(self, batch: list[Work]) -> dict[WorkKey, Outcome]:
        TOPIC_BATCH_SIZE.observe(len(batch))
        with TOPIC_BATCH_SECONDS.time():
            return await self._run_batch(batch)

    async def _run_batch(self, batch: list[Work]) -> dict[WorkKey, Outcome]:
        claims: dict[str, dict[str, DesiredTopic]] = {}
        for work in batch:
            for claimant in (*work.claimants, work.desired):
                claims.setdefault(claimant.topic_name, {})[claimant.ref.uid] = claimant
        named = {name: list(found.values()) for name, found in claims.items()}
        deletes = [w.desired for w in batch if w.kind == "delete"]
        going = {d.ref for d in deletes}
        applies = [w.desired for w in batch if w.kind == "apply" and w.desired.ref not in going]
        out: dict[WorkKey, Outcome] = {}
        if deletes:
            deleted = await self.reconciler.delete(deletes, named)
            out.update({("delete", ref.uid): result for ref, result in deleted.items()})
        if applies:
            applied = await self.reconciler.reconcile(applies, named)
            out.update({("apply", ref.uid): result for ref, result in applied.items()})
        for work in batch:
            if work.kind == "apply" and work.desired.ref in going:
                out[work.key] = TopicResult(False, "Deleting", "the resource is being deleted")
        return out

    async def apply(self, desired: DesiredTopic, claimants: Iterable[DesiredTopic] = ()
                    ) -> TopicResult:
        result = await self.batcher.submit(Work("apply", desired, tuple(claimants)))
        assert isinstance(result, TopicResult)
        return result

    async def delete(self, desired: DesiredTopic, claimants: Iterable[DesiredTopic] = ()
                     ) -> DeleteResult:
        result = await self.batcher.submit(Work("delete", desired, tuple(claimants)))
        assert isinstance(result, DeleteResult)
        return result

    async def close(self) -> None:
        await self.batcher.close()
        await self.admin.close()


class ClusterClients:
    """ClusterClient per cluster key, made on first use, replaced when the cluster's
    bootstrap address or security settings change, closed when the cluster goes. The
    security settings come from the KafkaCluster's reconcile (its certificates); the Topic
    handlers ask without them and get the client as last configured."""

    def __init__(self, *, linger: float = LINGER, max_batch: int = MAX_BATCH,
                 timeout: float = API_TIMEOUT) -> None:
        self.linger = linger
        self.max_batch = max_batch
        self.timeout = timeout
        self._clients: dict[Hashable, ClusterClient] = {}
        self._security: dict[Hashable, dict[str, str]] = {}

    async def get(self, key: Hashable, name: str, bootstrap: Sequence[str],
                  security: Mapping[str, str] | None = None) -> ClusterClient:
        if security is not None:
            self._security[key] = dict(security)
        wanted = self._security.get(key, {})
        client = self._clients.get(key)
        if client is not None and (client.bootstrap != tuple(bootstrap)
                                   or client.security != wanted):
            await client.close()
            client = None
        if client is None:
            client = ClusterClient(name, bootstrap, linger=self.linger,
                                   max_batch=self.max_batch, timeout=self.timeout,
                                   security=wanted)
            self._clients[key] = client
        return client

    async def drop(self, key: Hashable) -> None:
        """Close the client of a cluster that went."""
        client = self._clients.pop(key, None)
        self._security.pop(key, None)
        if client is not None:
            await client.close()

    async def close(self) -> None:
        await asyncio.gather(*(self.drop(key) for key in list(self._clients)))
