"""The ledger stores: one contract for every backend, and SQLite's own behaviour."""
