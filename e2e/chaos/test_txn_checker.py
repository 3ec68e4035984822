"""The transactional checker on hand-made histories: a valid one passes, and each anomaly,
put in on its own, is reported."""

from __future__ import annotations

from dataclasses import replace

import pytest

from e2e.chaos.txn_checker import (
    ABORTED,
    COMMITTED,
    UNKNOWN,
    Txn,
    TxnHistory,
    check,
    cycles,
    summary,
)


def valid() -> TxnHistory:
    """t1 writes a, b; t2 reads a and writes c; t3 aborts d; t4's outcome is unknown and its
    e, f were not stored; t5 reads c. Offsets 1 and 3 of partition 0 hold markers."""
    txns = [Txn("t1", (), ((0, "a"), (1, "b")), COMMITTED),
            Txn("t2", ((0, 0, "a"),), ((0, "c"),), COMMITTED),
            Txn("t3", ((0, 0, "a"), (0, 2, "c")), ((1, "d"),), ABORTED),
            Txn("t4", (), ((0, "e"), (1, "f")), UNKNOWN, "timed out"),
            Txn("t5", ((0, 2, "c"),), (), COMMITTED)]
    return TxnHistory(txns, {0: [(0, "a"), (2, "c")], 1: [(0, "b")]})


def kinds(history: TxnHistory) -> list[str]:
    return sorted({anomaly.kind for anomaly in check(history)})


def test_a_valid_history_has_no_anomaly() -> None:
    assert check(valid()) == []
    stored = valid()  # the unknown transaction took effect: all of it, and t5 read it
    stored.final[0].append((4, "e"))
    stored.final[1].append((2, "f"))
    stored.txns[4] = replace(stored.txns[4], reads=((0, 2, "c"), (1, 2, "f")))
    assert check(stored) == []
    assert summary(valid(), []) == (
        "5 transactions (3 committed, 1 aborted, 1 unknown), 4 reads, 3 records in the "
        "final read, 0 cycle(s) with write-write edges (allowed); anomalies: none")


def with_txn(index: int, **changes) -> TxnHistory:
    history = valid()
    history.txns[index] = replace(history.txns[index], **changes)
    return history


def with_final(partition: int, *records: tuple[int, str]) -> TxnHistory:
    history = valid()
    history.final[partition] = sorted([*history.final[partition], *records])
    return history


@pytest.mark.parametrize("history, kind", [
    (with_txn(4, reads=((1, 1, "d"),)), "G1a"),  # read an aborted write
    (with_final(1, (1, "d")), "G1a"),  # the final read holds an aborted write
    (with_txn(4, reads=((0, 4, "e"),)), "G1a"),  # read t4's e, which was never kept
    (with_txn(0, reads=((0, 0, "a"),)), "precommitted-read"),
    (with_txn(1, writes=((0, "c"), (2, "g"))), "lost"),
    (with_final(0, (4, "e")), "non-atomic"),  # t4's e without its f
    (with_final(1, (2, "b")), "duplicate"),  # b at 1:0 and 1:2
    (with_txn(4, reads=((0, 3, "c"),)), "duplicate"),  # c read at 0:3, stored at 0:2
    (with_txn(4, reads=((0, 5, "never"),)), "unexpected"),
    (with_txn(0, reads=((0, 2, "c"),)), "G1c"),  # t1 -> t2 -> t1
])
def test_each_anomaly_is_found(history: TxnHistory, kind: str) -> None:
    assert kinds(history) == [kind]


def test_a_transaction_left_open_is_reported() -> None:
    history = valid()
    history.open_at_end = {1: (1, 3)}
    assert [str(a) for a in check(history)] == [
        "hanging-transaction: partition 1: a transaction open at 1 (high watermark 3) once "
        "healed and settled"]


def test_the_cycle_is_named() -> None:
    longer = valid()  # t1 -> t2 -> t5 -> t1
    longer.txns[0] = replace(longer.txns[0], reads=((9, 0, "x"),))
    longer.txns[4] = replace(longer.txns[4], writes=((9, "x"),))
    longer.final[9] = [(0, "x")]
    found = [str(a) for a in check(longer)]
    assert found == ["G1c: cycle of write-read dependencies: t1 -> t2 -> t5 -> t1"]


def test_write_write_edges_only_with_ww_deps() -> None:
    """t6 writes before t2 in partition 0 and reads t2's c: t6 -ww-> t2 -wr-> t6, which
    Kafka allows (its transactions interleave per partition), so only ww_deps reports it."""
    history = valid()
    history.txns.append(Txn("t6", ((0, 3, "c"),), ((0, "g"), (1, "h")), COMMITTED))
    history.final = {0: [(0, "a"), (1, "g"), (3, "c")], 1: [(0, "b"), (1, "h")]}
    history.txns[1] = replace(history.txns[1], reads=())
    history.txns[2] = replace(history.txns[2], reads=())
    history.txns[4] = replace(history.txns[4], reads=())
    assert check(history) == []
    assert [str(a) for a in check(history, ww_deps=True)] == [
        "G1c: cycle of write-read/write-write dependencies: t2 -> t6 -> t2"]
    assert cycles(history, ww_deps=True) == [["t2", "t6", "t2"]]
    assert "1 cycle(s) with write-write edges" in summary(history, [])


def test_an_aborted_reader_makes_no_dependency() -> None:
    """t3 aborted: its reads do not count, so no cycle goes through it."""
    history = valid()
    history.txns[0] = replace(history.txns[0], reads=((1, 9, "d"),))  # G1a, not G1c
    assert kinds(history) == ["G1a"]
