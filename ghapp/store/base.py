"""The ledger store: an append-only facts table plus projection records, one transaction.

Every backend offers the same small interface, checked by one contract test suite
(``tests/test_store_contract.py``) run against SQLite and PostgreSQL:

- ``store.write()``: a transaction holding the ledger's write lock (one writer at a
  time, across processes and replicas). Facts and the records they changed are written
  together; the commit is the acknowledgement.
- ``store.read()``: a read-only view.

The SQL is shared (:class:`SqlStore`); a backend supplies the connection, the
placeholder style and the lock statement.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from kernel.codec import dump_fact, dump_record, load_fact, load_record
from kernel.facts import Fact, fact_key
from kernel.records import Record, index_of

SCHEMA_VERSION = 1


class StoreError(Exception):
    """The ledger could not be reached or is not usable; the message says what to do."""


class DuplicateFact(StoreError):
    """A fact with the same unique key is already stored (e.g. the same (source, id))."""

    def __init__(self, key: str) -> None:
        super().__init__(f"already recorded: {key}")
        self.key = key


class Tx(Protocol):
    def has_key(self, key: str) -> bool: ...

    def has_key_prefix(self, prefix: str) -> bool: ...

    def append(self, facts: Sequence[Fact], records: Iterable[Record]) -> list[int]: ...

    def get(self, kind: str, rid: str) -> Record | None: ...

    def query(
        self,
        kind: str,
        *,
        matter: str | None = None,
        states: Sequence[str] | None = None,
        due_before: str | None = None,
        limit: int | None = None,
    ) -> list[Record]: ...

    def facts(self, after: int = 0, limit: int | None = None) -> list[tuple[int, str, Fact]]: ...

    def fact_count(self) -> int: ...

    def records(self) -> Iterator[Record]: ...

    def replace_records(self, records: Iterable[Record]) -> None: ...

    def raw_records(self) -> list[tuple[str, str, str]]: ...

    def tamper(self, kind: str, rid: str, data: str) -> None: ...


class Store(Protocol):
    url: str

    def write(self) -> contextlib.AbstractContextManager[Tx]: ...

    def read(self) -> contextlib.AbstractContextManager[Tx]: ...

    def close(self) -> None: ...


class SqlTx:
    """Transaction operations over a DB-API cursor; ``ph`` is the placeholder."""

    def __init__(self, cur: Any, ph: str) -> None:
        self.cur = cur
        self.ph = ph

    def _q(self, sql: str) -> str:
        return sql.replace("?", self.ph)

    def has_key(self, key: str) -> bool:
        self.cur.execute(self._q("SELECT 1 FROM facts WHERE fkey = ?"), (key,))
        return self.cur.fetchone() is not None

    def has_key_prefix(self, prefix: str) -> bool:
        """True when a fact key starts with ``prefix`` (e.g. every event of one delivery)."""
        hi = prefix + "\U0010ffff"
        self.cur.execute(
            self._q("SELECT 1 FROM facts WHERE fkey >= ? AND fkey < ? LIMIT 1"), (prefix, hi)
        )
        return self.cur.fetchone() is not None

    def append(self, facts: Sequence[Fact], records: Iterable[Record]) -> list[int]:
        seqs: list[int] = []
        for fact in facts:
            key = fact_key(fact)
            at = str(getattr(fact, "at", "") or "")
            try:
                self.cur.execute(
                    self._q(
                        "INSERT INTO facts (at, type, v, fkey, data) VALUES (?, ?, ?, ?, ?) "
                        "RETURNING seq"
                    ),
                    (at, type(fact).__name__, 1, key, dump_fact(fact)),
                )
            except Exception as exc:
                # The unique index on fkey is the guard (one lookup fewer per fact);
                # the transaction is abandoned by the caller either way.
                if key is not None and _unique_violation(exc):
                    raise DuplicateFact(key) from exc
                raise
            seqs.append(int(self.cur.fetchone()[0]))
        self._upsert(records)
        return seqs

    def _upsert(self, records: Iterable[Record]) -> None:
        rows = []
        for rec in records:
            matter, state, due = index_of(rec)
            rows.append((rec.kind, rec.id, matter, state, due, dump_record(rec)))
        if rows:
            self.cur.executemany(
                self._q(
                    "INSERT INTO records (kind, id, matter, state, due, data) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (kind, id) DO UPDATE SET "
                    "matter = excluded.matter, state = excluded.state, due = excluded.due, "
                    "data = excluded.data"
                ),
                rows,
            )

    def get(self, kind: str, rid: str) -> Record | None:
        self.cur.execute(self._q("SELECT data FROM records WHERE kind = ? AND id = ?"), (kind, rid))
        row = self.cur.fetchone()
        return None if row is None else load_record(kind, row[0])

    def query(
        self,
        kind: str,
        *,
        matter: str | None = None,
        states: Sequence[str] | None = None,
        due_before: str | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        sql = "SELECT data FROM records WHERE kind = ?"
        args: list[Any] = [kind]
        if matter is not None:
            sql += " AND matter = ?"
            args.append(matter)
        if states:
            sql += " AND state IN (" + ", ".join("?" for _ in states) + ")"
            args.extend(states)
        if due_before is not None:
            sql += " AND due <> '' AND due <= ?"
            args.append(due_before)
        sql += " ORDER BY id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        self.cur.execute(self._q(sql), args)
        return [load_record(kind, r[0]) for r in self.cur.fetchall()]

    def facts(self, after: int = 0, limit: int | None = None) -> list[tuple[int, str, Fact]]:
        sql = "SELECT seq, at, data FROM facts WHERE seq > ? ORDER BY seq"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        self.cur.execute(self._q(sql), (after,))
        return [(int(s), str(a), load_fact(d)) for s, a, d in self.cur.fetchall()]

    def fact_count(self) -> int:
        self.cur.execute("SELECT count(*) FROM facts")
        return int(self.cur.fetchone()[0])

    def records(self) -> Iterator[Record]:
        self.cur.execute("SELECT kind, data FROM records ORDER BY kind, id")
        for kind, data in self.cur.fetchall():
            yield load_record(kind, data)

    def raw_records(self) -> list[tuple[str, str, str]]:
        self.cur.execute("SELECT kind, id, data FROM records ORDER BY kind, id")
        return [(str(k), str(i), str(d)) for k, i, d in self.cur.fetchall()]

    def replace_records(self, records: Iterable[Record]) -> None:
        self.cur.execute("DELETE FROM records")
        self._upsert(records)

    def tamper(self, kind: str, rid: str, data: str) -> None:
        """For tests and drills only: overwrite one projection row behind the fold's back."""
        self.cur.execute(
            self._q("UPDATE records SET data = ? WHERE kind = ? AND id = ?"), (data, kind, rid)
        )


def _unique_violation(exc: BaseException) -> bool:
    """A driver's unique-constraint error (sqlite3.IntegrityError, psycopg UniqueViolation)."""
    name = type(exc).__name__
    text = str(exc).lower()
    return name in ("IntegrityError", "UniqueViolation") and "unique" in text


def open_store(url: str) -> Store:
    """Open the ledger named by ``url`` (``sqlite:///PATH`` or ``postgresql://...``)."""
    if url.startswith("sqlite:"):
        from ghapp.store.sqlite import SqliteStore  # noqa: PLC0415  # lazy: one backend

        return SqliteStore(url)
    if url.startswith(("postgresql:", "postgres:")):
        from ghapp.store.postgres import PostgresStore  # noqa: PLC0415  # lazy: psycopg

        return PostgresStore(url)
    raise StoreError(
        f"unsupported ledger URL {url!r}: use sqlite:///PATH or postgresql://USER@HOST/DB"
    )
