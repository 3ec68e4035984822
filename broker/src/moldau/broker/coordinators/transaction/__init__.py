"""The transaction coordinator (KIP-98): transactional ids, their producer ids and epochs,
and the two-phase end of each transaction, kept in `__transaction_state`."""
