"""The checker of the transactional workload (txn_workload.py), after Jepsen's Kafka checker.

Each transaction reads with a read_committed consumer, writes unique values to several
partitions, commits its consumer offsets with them, and commits or aborts. Its outcome is
`committed`, `aborted` (no commit was ever asked for: whatever happened next, it cannot have
committed) or `unknown` (a commit was asked for and not confirmed). A final read_committed
read of every partition follows the healing; an unknown transaction counts as committed when
its values are there, as aborted when they are not.

Anomalies:
- G1a (aborted read): a value read (by a transaction or the final read) whose transaction
  aborted, or whose unknown transaction left nothing in the final read;
- precommitted-read: a transaction read a value it wrote itself (read_committed may only
  return committed records);
- lost: a value of a committed transaction missing from the final read;
- non-atomic: some values of a transaction in the final read and others not;
- duplicate: one value at two positions (partition, offset), in the final read or in reads;
- G1c (cyclic information flow): a cycle of write-read dependencies among the transactions
  that took effect, T1 -> T2 when T2 read a value T1 wrote. Under read_committed a read sees
  only transactions that committed before it, so every such edge goes from an earlier commit
  to a later one. Write-write dependencies (T1 -> T2 when T2's value follows T1's in a
  partition) are left out by default, as Jepsen's Kafka checker leaves them out for Kafka:
  Kafka orders concurrent transactions' records per partition only, so T1 may write before
  T2 in one partition and after it in another (G0), or write before T2 and read T2's commit
  later; both are allowed. `ww_deps=True` adds them (summary() counts those cycles);
- unexpected: a value read that no transaction wrote;
- hanging-transaction: a partition whose last stable offset stayed below its high watermark
  (a transaction open, its marker never written) after the faults healed and every
  transaction had timed out.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import pairwise

from e2e.chaos.checker import Anomaly

COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"


@dataclass(frozen=True)
class Txn:
    id: str
    reads: tuple[tuple[int, int, str], ...]  # (partition, offset, value)
    writes: tuple[tuple[int, str], ...]  # (partition, value)
    outcome: str
    error: str = ""
    started: float = 0.0  # wall-clock seconds, to match against the brokers' logs
    ended: float = 0.0


@dataclass
class TxnHistory:
    txns: list[Txn] = field(default_factory=list)
    final: dict[int, list[tuple[int, str]]] = field(default_factory=dict)  # read_committed
    # What librdkafka reported for each value sent: "partition:offset", or the error (for
    # the record; the checker goes by the reads).
    deliveries: dict[str, str] = field(default_factory=dict)
    # Partitions with a transaction still open before the final read: (LSO, high watermark).
    open_at_end: dict[int, tuple[int, int]] = field(default_factory=dict)


def check(history: TxnHistory, ww_deps: bool = False) -> list[Anomaly]:
    writer = {value: txn for txn in history.txns for _, value in txn.writes}
    final = {value for records in history.final.values() for _, value in records}
    anomalies: list[Anomaly] = []
    reads = [(txn.id, read) for txn in history.txns for read in txn.reads]
    reads += [("final read", (partition, offset, value))
              for partition, records in history.final.items() for offset, value in records]
    positions: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for reader, (partition, offset, value) in reads:
        positions[value].add((partition, offset))
        source = writer.get(value)
        where = f"{value} at {partition}:{offset}"
        if source is None:
            anomalies.append(Anomaly("unexpected", f"{reader} read {where}, never written"))
        elif source.id == reader:
            anomalies.append(Anomaly("precommitted-read", f"{reader} read its own write "
                                                          f"{where} before committing"))
        elif source.outcome == ABORTED:
            anomalies.append(Anomaly("G1a", f"{reader} read {where}, written by {source.id}, "
                                            "which aborted"))
        elif source.outcome == UNKNOWN and not took_effect(source, final):
            anomalies.append(Anomaly("G1a", f"{reader} read {where}, written by {source.id} "
                                            "(unknown), none of whose values were kept"))
    anomalies += [Anomaly("hanging-transaction", f"partition {partition}: a transaction open "
                          f"at {stable} (high watermark {high}) once healed and settled")
                  for partition, (stable, high) in sorted(history.open_at_end.items())]
    anomalies += [Anomaly("duplicate", f"{value} at {sorted(where)}")
                  for value, where in positions.items() if len(where) > 1]
    for txn in history.txns:
        seen = [value for _, value in txn.writes if value in final]
        missing = [value for _, value in txn.writes if value not in final]
        if txn.outcome == COMMITTED and missing:
            anomalies.append(Anomaly("lost", f"{txn.id} committed {missing}, missing from "
                                             "the final read"))
        elif txn.outcome == UNKNOWN and seen and missing:
            anomalies.append(Anomaly("non-atomic", f"{txn.id} (unknown): {seen} in the final "
                                                   f"read, not {missing}"))
    anomalies += [Anomaly("G1c", "cycle of " + _edge_kinds(ww_deps) + ": "
                          + " -> ".join(cycle)) for cycle in cycles(history, ww_deps)]
    return anomalies


def took_effect(txn: Txn, final: set[str]) -> bool:
    """Committed, or unknown with its values in the final read (all of them, or the check
    reports it as non-atomic)."""
    return txn.outcome == COMMITTED or (
        txn.outcome == UNKNOWN and any(value in final for _, value in txn.writes))


def _edge_kinds(ww_deps: bool) -> str:
    return "write-read/write-write dependencies" if ww_deps else "write-read dependencies"


def cycles(history: TxnHistory, ww_deps: bool = False) -> list[list[str]]:
    """One cycle (its transaction ids, the first repeated at the end) per strongly connected
    component with more than one transaction of the dependency graph among the transactions
    that took effect: write-read edges, and with `ww_deps` write-write edges from each
    partition's order in the final read."""
    final = {value for records in history.final.values() for _, value in records}
    writer = {value: txn.id for txn in history.txns if took_effect(txn, final)
              for _, value in txn.writes}
    edges: dict[str, set[str]] = defaultdict(set)
    for txn in history.txns:
        if not took_effect(txn, final):
            continue
        for _, _, value in txn.reads:
            source = writer.get(value)
            if source is not None and source != txn.id:
                edges[source].add(txn.id)
    if ww_deps:
        for records in history.final.values():
            order = [writer[value] for _, value in sorted(records) if value in writer]
            for before, after in pairwise(order):
                if before != after:
                    edges[before].add(after)
    return [_cycle_in(component, edges) for component in _components(edges)
            if len(component) > 1]


def _components(edges: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    nodes = set(edges) | {n for targets in edges.values() for n in targets}
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    found.append(component)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def _cycle_in(component: set[str], edges: dict[str, set[str]]) -> list[str]:
    """A cycle through the component's smallest member (breadth-first, so a short one)."""
    start = min(component)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(edges.get(node, ())):
                if child not in component:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [*reversed(path), start]
                if child not in parent:
                    parent[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError("a strongly connected component without a cycle")


def summary(history: TxnHistory, anomalies: list[Anomaly]) -> str:
    outcomes = Counter(txn.outcome for txn in history.txns)
    kinds = Counter(anomaly.kind for anomaly in anomalies)
    reads = sum(len(txn.reads) for txn in history.txns)
    allowed = len(cycles(history, ww_deps=True))
    return (f"{len(history.txns)} transactions ({outcomes[COMMITTED]} committed, "
            f"{outcomes[ABORTED]} aborted, {outcomes[UNKNOWN]} unknown), {reads} reads, "
            f"{sum(len(r) for r in history.final.values())} records in the final read, "
            f"{allowed} cycle(s) with write-write edges (allowed); anomalies: "
            + (", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "none"))
