"""Transactional ids rebuilt from `__transaction_state` records (run off the event loop)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from moldau.broker.coordinators.group.replay import CANCEL_CHECK_INTERVAL
from moldau.broker.coordinators.topic import Entry, TxnEnd
from moldau.broker.coordinators.transaction.metadata import TxnMetadata
from moldau.broker.coordinators.transaction.records import decode_key, decode_value


def replay(entries: Iterable[Entry],
           cancelled: Callable[[], bool] = lambda: False) -> dict[str, TxnMetadata]:
    """The ids that `entries` (in log order) leave: the last value of each wins, a
    tombstone removes it."""
    loaded: dict[str, TxnMetadata] = {}
    for count, entry in enumerate(entries):
        if count % CANCEL_CHECK_INTERVAL == 0 and cancelled():
            break
        if isinstance(entry, TxnEnd):
            continue  # no transaction writes into __transaction_state
        key, value = entry.key, entry.value
        transactional_id = decode_key(key)
        if transactional_id is None:
            continue
        if value is None:
            loaded.pop(transactional_id, None)
        else:
            loaded[transactional_id] = TxnMetadata.from_value(transactional_id,
                                                              decode_value(value))
    return loaded
