"""``open_store(url)``: the ledger named by a URL, loading only the backend it names.

Apart from ``base``, so that ``base`` (which both backends build on) imports neither.
"""

from __future__ import annotations

from ghapp.store.base import Store, StoreError
from ghapp.store.urls import shown

__all__ = ["open_store"]


def open_store(url: str) -> Store:
    """Open the ledger named by ``url`` (``sqlite:///PATH`` or ``postgresql://...``)."""
    if url.startswith("sqlite:"):
        from ghapp.store.sqlite import SqliteStore  # noqa: PLC0415  # lazy: one backend

        return SqliteStore(url)
    if url.startswith(("postgresql:", "postgres:")):
        from ghapp.store.postgres import PostgresStore  # noqa: PLC0415  # lazy: psycopg

        return PostgresStore(url)
    raise StoreError(
        f"unsupported ledger URL {shown(url)!r}: use sqlite:///PATH or postgresql://USER@HOST/DB"
    )
