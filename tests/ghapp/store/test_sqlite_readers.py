"""Reads of the SQLite ledger run on connections of their own: a read never waits for
a commit in progress (its fsync included), sees only what was committed, and a read
made inside a write sees that write's own changes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from ghapp.store.sqlite import SqliteStore


def _value(store: SqliteStore, key: str) -> str | None:
    with store.read() as tx:
        tx.cur.execute("SELECT v FROM ledger_info WHERE k = ?", (key,))
        row = tx.cur.fetchone()
    return None if row is None else str(row[0])


def test_a_read_does_not_wait_for_a_write_in_progress(tmp_path: Path) -> None:
    store = SqliteStore(f"sqlite:///{tmp_path / 'l.db'}", checkpoint_s=None)
    inside, release = threading.Event(), threading.Event()

    def writer() -> None:
        with store.write() as tx:
            tx.cur.execute("INSERT INTO ledger_info (k, v) VALUES ('a', 'uncommitted')")
            inside.set()
            release.wait(10)

    with store.write() as tx:
        tx.cur.execute("INSERT INTO ledger_info (k, v) VALUES ('b', 'committed')")
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert inside.wait(10)
        started = time.monotonic()
        assert _value(store, "b") == "committed"
        assert _value(store, "a") is None  # not committed yet: not seen
        assert time.monotonic() - started < 1.0  # did not wait for the writer (held 10 s)
    finally:
        release.set()
        thread.join()
    assert _value(store, "a") == "uncommitted"  # seen once committed
    store.close()


def test_a_read_inside_a_write_sees_the_write(tmp_path: Path) -> None:
    store = SqliteStore(f"sqlite:///{tmp_path / 'l.db'}", checkpoint_s=None)
    with store.write() as tx:
        tx.cur.execute("INSERT INTO ledger_info (k, v) VALUES ('a', 'mine')")
        assert _value(store, "a") == "mine"
    assert _value(store, "a") == "mine"
    store.close()
