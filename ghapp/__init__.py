"""The shell: one folder per concept, layered commands > web > github > runtime > store.

- ``store``: the ledger stores (SQLite by default, PostgreSQL for replicas)
- ``runtime``: the hub, the ledger loop, ingest, workers, turns, budget, redaction, logs
- ``github``: the GitHub client, auth, wire helpers, retries, executor, channel, sweeper
- ``web``: the HTTP face (``create_app``)
- ``commands``: the ``autoloop`` command line and what it wires together

A folder imports only from the folders below it (an import-linter contract). Nothing is
imported here, so ``autoloop status`` never loads the HTTP server.
"""
