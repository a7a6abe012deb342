"""The SQLite ledger checkpoints its write-ahead log in a thread of its own, so that no
commit (and no webhook waiting for one) pays for copying the log into the database
file; SQLite's own checkpoint at commit stays only as a backstop."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from ghapp.store.sqlite import BACKSTOP_PAGES, SqliteStore


def _fill(store: SqliteStore, rows: int) -> None:
    for n in range(rows):
        with store.write() as tx:
            tx.cur.execute(
                "INSERT INTO ledger_info (k, v) VALUES (?, ?)", (f"test-{n}", "x" * 2000)
            )


def _threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "ledger-checkpoint"]


def test_commits_leave_the_checkpoint_to_the_thread(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    store = SqliteStore(f"sqlite:///{db}", checkpoint_s=0.05)
    try:
        with store.read() as tx:
            tx.cur.execute("PRAGMA wal_autocheckpoint")
            assert int(tx.cur.fetchone()[0]) == BACKSTOP_PAGES
        size = db.stat().st_size
        _fill(store, 50)  # ~100 pages of log: far below the backstop
        assert store.commits >= 50
        deadline = time.monotonic() + 10
        while db.stat().st_size <= size + 50 * 2000:  # the rows reached the file itself
            assert time.monotonic() < deadline, "the checkpoint thread copied nothing"
            time.sleep(0.02)
        log, copied = store.checkpoint()
        assert log == copied  # nothing left behind
    finally:
        store.close()


def test_without_the_thread_a_commit_never_copies_the_log(tmp_path: Path) -> None:
    """What the thread takes over: with it switched off (checkpoint_s=None) and the log
    below the backstop, the database file does not grow however much is committed."""
    db = tmp_path / "l.db"
    store = SqliteStore(f"sqlite:///{db}", checkpoint_s=None)
    try:
        size = db.stat().st_size
        _fill(store, 50)
        assert db.stat().st_size == size
        log, copied = store.checkpoint()  # an explicit one still works
        assert log > 0 and log == copied
        assert db.stat().st_size > size + 50 * 2000
    finally:
        store.close()


def test_closing_the_store_stops_its_checkpoint_thread(tmp_path: Path) -> None:
    before = len(_threads())
    store = SqliteStore(f"sqlite:///{tmp_path / 'l.db'}", checkpoint_s=0.05)
    assert len(_threads()) == before + 1
    _fill(store, 3)
    store.close()
    assert len(_threads()) == before
