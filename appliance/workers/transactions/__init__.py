"""The transaction coordinator (KIP-98, KIP-360): transactional ids, their producer ids and
epochs, and the state of their transactions, kept in ``__transaction_state``."""
