"""A full disk inside a write transaction surfaces as SQLite's own "database or disk is
full", and the store stays usable: SQLite may have rolled the transaction back by itself,
and a second ROLLBACK must not replace that error with "no transaction is active"."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ghapp.store.sqlite import SqliteStore


def test_a_full_disk_mid_transaction_raises_sqlite_full_and_the_store_recovers(
    tmp_path: Path,
) -> None:
    store = SqliteStore(f"sqlite:///{tmp_path / 'l.db'}")
    try:
        with store.write() as tx:  # the writer's connection is the one that grows the file
            tx.cur.execute("PRAGMA page_count")
            (pages,) = tx.cur.fetchone()
            tx.cur.execute(f"PRAGMA max_page_count={pages}")  # no room to grow
        with pytest.raises(sqlite3.OperationalError) as caught, store.write() as tx:
            for n in range(20):
                tx.cur.execute(
                    "INSERT INTO ledger_info (k, v) VALUES (?, randomblob(3000))", (f"k{n}",)
                )
        assert str(caught.value) == "database or disk is full"
        with store.write() as tx:
            tx.cur.execute("PRAGMA max_page_count=1000000")  # space again
        with store.write() as tx:
            tx.cur.execute("INSERT INTO ledger_info (k, v) VALUES ('after', 'x')")
        with store.read() as tx:
            tx.cur.execute("SELECT k FROM ledger_info WHERE k LIKE 'k%' OR k = 'after'")
            assert tx.cur.fetchall() == [("after",)]
    finally:
        store.close()
