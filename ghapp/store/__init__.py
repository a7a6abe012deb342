"""The ledger stores: append-only facts and their projections, one transaction each.

- ``base``: ``Store``, ``Tx``, ``SqlTx`` (the shared SQL),
  ``StoreError``, ``DuplicateFact``, ``migrate``, ``rebuild_records``
- ``sqlite``: ``SqliteStore``, the embedded default (WAL, ``synchronous=FULL``)
- ``postgres``: ``PostgresStore``, for replicas sharing one database
- ``open``: ``open_store(url)``, the ledger a URL names

Every backend passes one contract suite (``tests/ghapp/store/test_store_contract.py``).
Nothing is imported here: ``open_store`` loads only the backend its URL names.
"""
