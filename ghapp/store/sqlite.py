"""The embedded default ledger: one SQLite file, WAL, ``synchronous=FULL``.

Writers take the database's write lock with ``BEGIN IMMEDIATE``, so several processes
(a server, a worker, a CLI) can share one file safely. Facts are append-only: triggers
refuse any UPDATE or DELETE on the facts table and on their extra keys (``fact_keys``).

Checkpoints (copying the write-ahead log back into the database file, with an fsync of
its own) run in a thread of their own with a second connection, every
``checkpoint_s`` while there were commits, so a commit, and the webhook waiting for
it, never pays for one. SQLite's own checkpoint at commit stays as a backstop at
``BACKSTOP_PAGES`` of log, for a load so steady that the log never catches up.

For simulations and tests only, ``durable=False`` or the URL query ``?sync=off``
(``sqlite:///PATH?sync=off``) sets ``synchronous=OFF``: commits no longer wait for the
disk, so a power cut may lose the last transactions. Never use it for a real ledger;
the default stays ``FULL``.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs

from ghapp.store.base import SqlTx, StoreError, migrate

SCHEMA = """
CREATE TABLE IF NOT EXISTS facts (
    seq INTEGER PRIMARY KEY,  -- facts are never deleted (triggers below): max + 1 each time
    at TEXT NOT NULL,
    type TEXT NOT NULL,
    v INTEGER NOT NULL,
    fkey TEXT UNIQUE,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS fact_keys (
    fkey TEXT PRIMARY KEY,  -- a fact's unique keys besides facts.fkey (kernel.facts.extra_keys)
    seq INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS records (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    matter TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL DEFAULT '',
    due TEXT NOT NULL DEFAULT '',
    data TEXT NOT NULL,
    PRIMARY KEY (kind, id)
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    matter TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL DEFAULT '',
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS queued (
    matter TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (matter, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS records_by_state ON records (kind, state, due);
CREATE INDEX IF NOT EXISTS records_by_matter ON records (kind, matter);
CREATE TABLE IF NOT EXISTS ledger_info (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TRIGGER IF NOT EXISTS facts_append_only_u BEFORE UPDATE ON facts
BEGIN SELECT RAISE(ABORT, 'facts are append-only'); END;
CREATE TRIGGER IF NOT EXISTS facts_append_only_d BEFORE DELETE ON facts
BEGIN SELECT RAISE(ABORT, 'facts are append-only'); END;
CREATE TRIGGER IF NOT EXISTS fact_keys_append_only_u BEFORE UPDATE ON fact_keys
BEGIN SELECT RAISE(ABORT, 'facts are append-only'); END;
CREATE TRIGGER IF NOT EXISTS fact_keys_append_only_d BEFORE DELETE ON fact_keys
BEGIN SELECT RAISE(ABORT, 'facts are append-only'); END;
"""


SYNC_MODES = {"full": True, "off": False}
BACKSTOP_PAGES = 4_000  # 16 MB of log at 4 KB pages: then a commit checkpoints itself
READERS_KEPT = 8  # idle read connections kept open for the next reads


def sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:`` ledger URL; None for another backend or an in-memory one."""
    if not url.startswith("sqlite:"):
        return None
    path, _ = _split_url(url)
    return None if path in ("", ":memory:") else Path(path)


def file_damage(path: Path) -> str | None:
    """What SQLite's quick check finds wrong with the ledger file (read only: nothing is
    written, and a running server goes on writing meanwhile), or None. About a second
    for a gigabyte whose pages are cached."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error as exc:
        return str(exc)
    try:
        # one line: an item may hold several ("*** in database main ***" and a newline)
        found = [" ".join(str(row[0]).split()) for row in conn.execute("PRAGMA quick_check(3)")]
    except sqlite3.Error as exc:
        return str(exc)
    finally:
        conn.close()
    return None if found == ["ok"] else "; ".join(found)[:300]


def refuse_damaged(url: str) -> None:
    """For a long-running process (serve, work) before it opens its ledger (opening may
    write: a migration, the ledger's name): a SQLite ledger that is damaged is refused in
    one line (written into, the damage spreads, and what it holds may be read wrong),
    rather than found by a later write. Another backend, or no file yet: nothing to do."""
    try:
        path = sqlite_file(url)
    except StoreError:  # a URL the store refuses says so itself when it is opened
        return
    if path is None or not path.exists():
        return
    damage = file_damage(path)
    if damage is not None:
        raise StoreError(
            f"the ledger at {path} is damaged ({damage}): restore ledger.db from a "
            "backup (see docs/deploy.md); 'autoloop doctor' checks it"
        )


def _create_private(path: Path) -> None:
    """Create a new ledger file readable by its owner alone (SQLite gives its log and
    shared-memory files the mode of the database): events hold issue text and names
    that the home's other files keep private. An existing file is left as it is
    (``autoloop doctor`` says when it is open to others)."""
    if str(path) in ("", ":memory:") or path.exists():
        return
    with contextlib.suppress(FileExistsError):  # another process made it first
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _split_url(url: str) -> tuple[str, bool | None]:
    """The file path of a ``sqlite:`` URL and its ``sync`` query (None when absent)."""
    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else url
    path = path.removeprefix("sqlite:")
    path, _, query = path.partition("?")
    if not query:
        return path, None
    params = parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(params) - {"sync"})
    if unknown:
        raise StoreError(
            f"unknown option {unknown[0]!r} in the ledger URL {url!r}: "
            "the only one is sync=full|off (off is for simulations and tests)"
        )
    value = params["sync"][-1].lower()
    if value not in SYNC_MODES:
        raise StoreError(
            f"sync={value!r} in the ledger URL {url!r} is not valid: use sync=full "
            "(the default) or sync=off (simulations and tests only)"
        )
    return path, SYNC_MODES[value]


class SqliteStore:
    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 30.0,
        durable: bool = True,
        checkpoint_s: float | None = 0.5,
    ) -> None:
        self.url = url
        path, sync = _split_url(url)
        self.durable = durable if sync is None else (durable and sync)
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _create_private(self.path)
            self._conn = sqlite3.connect(
                str(self.path), timeout=timeout_s, isolation_level=None, check_same_thread=False
            )
            try:
                self._setup(timeout_s)
            except BaseException:
                self._conn.close()
                raise
        except (sqlite3.Error, OSError) as exc:
            if "locked" in str(exc):  # waited timeout_s for another process's write
                raise StoreError(
                    f"cannot open the ledger at {self.path}: another process held it locked "
                    f"for {timeout_s:g} s (a long write, a copy made without SQLite's backup, "
                    "a process stopped in a transaction): try again once it is done"
                ) from exc
            raise StoreError(
                f"cannot open the ledger at {self.path}: {exc}; check AUTOLOOP_HOME/AUTOLOOP_DB"
            ) from exc
        self._lock = threading.RLock()
        self._timeout_s = timeout_s
        # Reads run on connections of their own (WAL: a reader sees the last commit and
        # never waits for a writer's fsync); a read inside a write uses the writer's own.
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._writing = threading.local()
        self._closed = False
        self.commits = 0
        self._checkpointer = (
            _Checkpointer(self.path, checkpoint_s, self) if checkpoint_s is not None else None
        )

    def _setup(self, timeout_s: float) -> None:
        """Pragmas and schema. Some of these answer "locked" at once, without waiting for
        the busy timeout, while another process opens or checkpoints the same file: they
        are tried again until ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute(f"PRAGMA synchronous={'FULL' if self.durable else 'OFF'}")
                self._conn.execute("PRAGMA foreign_keys=ON")
                self._conn.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")
                self._conn.executescript(SCHEMA)
                cur = self._conn.cursor()
                cur.execute("BEGIN IMMEDIATE")
                try:
                    migrate(cur, "?")
                except BaseException:
                    cur.execute("ROLLBACK")
                    raise
                cur.execute("COMMIT")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @contextlib.contextmanager
    def write(self, *, durable: bool = True, long: bool = False) -> Iterator[SqlTx]:
        """A write transaction. ``durable=False`` commits without waiting for the disk
        (``synchronous=NORMAL`` for this one commit): it becomes durable with the next
        durable commit of this file or :meth:`sync_log`, whichever comes first (the log
        is written in order). The webhook inbox decides this way, and deletes its rows
        only after :meth:`sync_log`."""
        with self._lock:
            depth = getattr(self._writing, "depth", 0)
            self._writing.depth = depth + 1
            relaxed = not durable and self.durable
            if relaxed:
                self._conn.execute("PRAGMA synchronous=NORMAL")
            cur = self._conn.cursor()
            try:
                try:
                    cur.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError as exc:
                    if "readonly" in str(exc).lower():  # (it said "locked; retry")
                        raise StoreError(
                            f"the ledger cannot be written ({exc}): give this user write "
                            f"access to {self.path} and its folder"
                        ) from exc
                    raise StoreError(f"the ledger is locked ({exc}); retry in a moment") from exc
                try:
                    yield SqlTx(cur, "?")
                    cur.execute("COMMIT")
                except BaseException:
                    # SQLite has rolled back by itself after some errors (SQLITE_FULL: a
                    # full disk): a second ROLLBACK would fail and hide the error that matters.
                    if self._conn.in_transaction:
                        cur.execute("ROLLBACK")
                    raise
                else:
                    self.commits += 1
            finally:
                cur.close()
                if relaxed:
                    self._conn.execute("PRAGMA synchronous=FULL")
                self._writing.depth = depth

    def sync_log(self) -> None:
        """Make every commit so far durable, those made with ``durable=False`` too: the
        write-ahead log is flushed to the disk. Raises ``OSError`` when it cannot be."""
        if not self.durable:
            return
        try:
            fd = os.open(f"{self.path}-wal", os.O_RDONLY)
        except FileNotFoundError:
            return  # checkpointed into the database file (synced then) and removed
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def read(self) -> Iterator[SqlTx]:
        if getattr(self._writing, "depth", 0):  # inside this thread's write: see its changes
            with self._lock:
                cur = self._conn.cursor()
                try:
                    yield SqlTx(cur, "?")
                finally:
                    cur.close()
            return
        conn = self._reader()
        cur = conn.cursor()
        try:
            cur.execute("BEGIN")
            try:
                yield SqlTx(cur, "?")
            finally:
                cur.execute("ROLLBACK")
        finally:
            cur.close()
            self._give_back(conn)

    def _reader(self) -> sqlite3.Connection:
        with self._readers_lock:
            if self._closed:
                raise StoreError(f"the ledger at {self.path} is closed")
            if self._readers:
                return self._readers.pop()
        try:
            conn = sqlite3.connect(
                str(self.path),
                timeout=self._timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the ledger at {self.path}: {exc}") from exc
        conn.execute("PRAGMA query_only=ON")
        # The same settings as the writer's (a reader never commits, but what it reports
        # of the ledger should be true of it).
        conn.execute(f"PRAGMA synchronous={'FULL' if self.durable else 'OFF'}")
        conn.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")
        return conn

    def _give_back(self, conn: sqlite3.Connection) -> None:
        with self._readers_lock:
            if not self._closed and len(self._readers) < READERS_KEPT:
                self._readers.append(conn)
                return
        conn.close()

    def checkpoint(self) -> tuple[int, int]:
        """Copy the log into the database file now, without waiting for writers:
        (frames in the log, frames copied). The checkpoint thread calls the same."""
        if self._checkpointer is None:
            with self._lock:
                return _passive_checkpoint(self._conn)
        return self._checkpointer.run_once()

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
        with self._readers_lock:
            self._closed = True
            readers, self._readers = self._readers, []
        for conn in readers:
            conn.close()
        with self._lock:
            self._conn.close()


class _Checkpointer:
    """A thread and a connection of their own that checkpoint the log (PASSIVE: never
    waits for a writer, nor makes one wait) every ``every_s`` while there were commits.
    A checkpoint that finds the file busy (another process checkpointing, a reader on
    an old snapshot) just tries again on the next round."""

    def __init__(self, path: Path, every_s: float, store: SqliteStore) -> None:
        self.every_s = every_s
        self.store = store
        self._conn = sqlite3.connect(
            str(path), timeout=0, isolation_level=None, check_same_thread=False
        )
        self._mutex = threading.Lock()
        self._halt = threading.Event()
        self._seen = store.commits
        self._thread = threading.Thread(target=self._run, name="ledger-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._halt.wait(self.every_s):
            if self.store.commits != self._seen:
                self._seen = self.store.commits
                with contextlib.suppress(sqlite3.Error):
                    self.run_once()

    def run_once(self) -> tuple[int, int]:
        with self._mutex:
            return _passive_checkpoint(self._conn)

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(timeout=10)
        with self._mutex:
            self._conn.close()


def _passive_checkpoint(conn: sqlite3.Connection) -> tuple[int, int]:
    """One PASSIVE checkpoint on ``conn``: (frames in the log, frames copied)."""
    row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(row[1]), int(row[2])
