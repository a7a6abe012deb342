"""A relaxed commit (``write(durable=False)``) and ``sync_log``: what the webhook inbox
uses to decide without waiting for the disk, deleting its own copy only after a sync."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ghapp.store.sqlite import SqliteStore


def _synchronous(store: SqliteStore, *, durable: bool) -> int:
    with store.write(durable=durable) as tx:
        tx.cur.execute("PRAGMA synchronous")
        return int(tx.cur.fetchone()[0])


def test_a_relaxed_commit_waits_for_no_disk_and_the_next_one_does_again(tmp_path: Path) -> None:
    store = SqliteStore(f"sqlite:///{tmp_path / 'l.db'}", checkpoint_s=None)
    try:
        assert _synchronous(store, durable=True) == 2  # FULL
        assert _synchronous(store, durable=False) == 1  # NORMAL, for this commit only
        assert _synchronous(store, durable=True) == 2
        with store.write(durable=False) as tx:
            tx.cur.execute("INSERT INTO ledger_info (k, v) VALUES ('relaxed', 'yes')")
        with store.read() as tx:  # committed: every reader sees it
            tx.cur.execute("SELECT v FROM ledger_info WHERE k = 'relaxed'")
            assert tx.cur.fetchone() == ("yes",)
    finally:
        store.close()


def test_sync_log_flushes_the_write_ahead_log_of_this_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "l.db"
    store = SqliteStore(f"sqlite:///{db}", checkpoint_s=None)
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    try:
        with store.write(durable=False) as tx:
            tx.cur.execute("INSERT INTO ledger_info (k, v) VALUES ('relaxed', 'yes')")
        monkeypatch.setattr(os, "fsync", fsync)
        store.sync_log()
        assert synced == [f"{db}-wal"]
    finally:
        monkeypatch.undo()
        store.close()
