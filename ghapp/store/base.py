"""The ledger store: an append-only facts table plus projection records, one transaction.

Every backend offers the same small interface, checked by one contract test suite
(``tests/ghapp/store/test_store_contract.py``) run against SQLite and PostgreSQL:

- ``store.write()``: a transaction holding the ledger's write lock (one writer at a
  time, across processes and replicas). Facts and the records they changed are written
  together; the commit is the acknowledgement.
- ``store.read()``: a read-only view.

The SQL is shared (:class:`SqlTx`); a backend supplies the connection, the
placeholder style and the lock statement.

Tables: ``facts`` (append-only), ``fact_keys`` (append-only: the unique keys a fact holds
besides its ``fkey``, such as a webhook's content key, with the fact's seq), ``records``
(the projections: matters, turns, cards, timers, actions and the counters, with three
index columns), ``events`` (one row per recorded event, keyed by its sequence number)
and ``queued`` (one row per event waiting in a matter, deleted when a turn takes it).
Event rows never change once written and are only ever read by number, so they sit in a
plain table without secondary indexes: recording an event costs one fact, one event row
and the matters it joins.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

# The kernel's codec, fact keys and record classes are loaded with the first record read
# or written (:func:`_load_kernel`), not with the store: ``autoloop status`` reads the
# stored data without them (``SqlTx.data``), and their dataclasses take long to create.
if TYPE_CHECKING:
    from kernel.codec import dump_fact, dump_record, load_fact, load_record
    from kernel.facts import Fact, extra_keys, fact_key, is_extra_key
    from kernel.records import EventRow, Queued, Record, index_of

_kernel_loaded = False  # whether _load_kernel has bound them here


def _load_kernel() -> None:
    """Bind the kernel's codec, fact keys and record classes in this module, once: the
    methods that use them check ``_kernel_loaded`` first (cheaper than an import
    statement in each, which costs about a microsecond a call)."""
    global _kernel_loaded, dump_fact, dump_record, load_fact, load_record  # noqa: PLW0603  # bound once, at the first record read or written
    global extra_keys, fact_key, is_extra_key, EventRow, Queued, index_of  # noqa: PLW0603  # the same
    from kernel.codec import dump_fact, dump_record, load_fact, load_record  # noqa: PLC0415  # imported late: the store starts without the kernel
    from kernel.facts import extra_keys, fact_key, is_extra_key  # noqa: PLC0415  # imported late: the store starts without the kernel
    from kernel.records import EventRow, Queued, index_of  # noqa: PLC0415  # imported late: the store starts without the kernel

    _kernel_loaded = True


# 1: event rows in ``records``; 2: event rows in their own ``events`` table;
# 3: each event waiting in a matter is a ``queued`` record (not a list in the matter).
SCHEMA_VERSION = 6


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

    def last_event(self) -> int: ...

    def last_fact(self) -> int: ...

    def ingest_view(
        self, keys: Sequence[str], matters: Sequence[str]
    ) -> tuple[set[str], int, list[Record]]: ...

    def append(
        self,
        facts: Sequence[Fact],
        records: Iterable[Record],
        removed: Iterable[tuple[str, str]] = (),
    ) -> list[int]: ...

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

    def data(self, kind: str, *, states: Sequence[str] | None = None) -> list[dict[str, Any]]: ...

    def facts(
        self, after: int = 0, limit: int | None = None, *, types: tuple[str, ...] = ()
    ) -> list[tuple[int, str, Fact]]: ...

    def fact_count(self) -> int: ...

    def facts_since(self, at: str) -> int: ...

    def records(self) -> Iterator[Record]: ...

    def replace_records(self, records: Iterable[Record]) -> None: ...

    def raw_records(self) -> list[tuple[str, str, str]]: ...

    def tamper(self, kind: str, rid: str, data: str) -> None: ...

    def ledger_name(self, proposed: str) -> str: ...

    def info(self, key: str, proposed: str) -> str: ...

    def swap_info(self, key: str, value: str) -> str | None: ...

    def read_info(self, key: str) -> str | None: ...


class Store(Protocol):
    url: str

    def write(
        self, *, durable: bool = True, long: bool = False
    ) -> contextlib.AbstractContextManager[Tx]:
        """A write transaction; ``durable=False``: its commit may wait for a later sync
        (SQLite: :meth:`~ghapp.store.sqlite.SqliteStore.sync_log`; PostgreSQL ignores it).
        ``long``: it may compute for long between statements (a rebuild); PostgreSQL
        gives up any other that sits idle (:data:`ghapp.store.postgres.HOLD_S`)."""
        ...

    def read(self) -> contextlib.AbstractContextManager[Tx]: ...

    def close(self) -> None: ...


Index = tuple[str, str, str]
_MAX_PARAMS = 900  # bound parameters in one statement (SQLite allows at least 999)
_HAS_KEY = "SELECT 1 FROM facts WHERE fkey = ?"
_HAS_EXTRA_KEY = "SELECT 1 FROM fact_keys WHERE fkey = ?"
# Tagged rows: k = a stored fact key, e = the last event seq, r = a record.
_INGEST_VIEW = (
    "SELECT 'k', fkey, '', '', '', '', '' FROM facts WHERE fkey IN ({keys}) "
    "UNION ALL SELECT 'k', fkey, '', '', '', '', '' FROM fact_keys WHERE fkey IN ({extra}) "
    "UNION ALL SELECT 'e', CAST(max(seq) AS TEXT), '', '', '', '', '' FROM events "
    "UNION ALL SELECT 'r', kind, id, matter, state, due, data FROM records "
    "WHERE (kind = 'meta' AND id = 'counters') OR (kind = 'matter' AND id IN ({ids}))"
)


class SqlTx:
    """Transaction operations over a DB-API cursor; ``ph`` is the placeholder.

    It remembers the index columns of the records it read, so that writing a record
    back whose index did not change updates its data alone (no index maintenance).
    """

    def __init__(self, cur: Any, ph: str) -> None:
        self.cur = cur
        self.ph = ph
        self._seen: dict[tuple[str, str], Index] = {}

    def _q(self, sql: str) -> str:
        return sql.replace("?", self.ph)

    def snapshot(self) -> None:
        """Let every read of this transaction see one state of the ledger (its first
        statement). SQLite's read transactions do already; PostgreSQL's default (read
        committed) gives each statement its own, and a check that read the facts, then
        the projections, while a server wrote found differences that were not there."""
        if self.ph == "%s":
            self.cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")

    def has_key(self, key: str) -> bool:
        """True when a fact holds ``key``: its ``fkey``, or one of its extra keys."""
        if not _kernel_loaded:
            _load_kernel()

        sql = _HAS_EXTRA_KEY if is_extra_key(key) else _HAS_KEY
        self.cur.execute(self._q(sql), (key,))
        return self.cur.fetchone() is not None

    def has_key_prefix(self, prefix: str) -> bool:
        """True when a fact key starts with ``prefix`` (e.g. every event of one delivery)."""
        hi = prefix + "\U0010ffff"
        self.cur.execute(
            self._q("SELECT 1 FROM facts WHERE fkey >= ? AND fkey < ? LIMIT 1"), (prefix, hi)
        )
        return self.cur.fetchone() is not None

    def last_event(self) -> int:
        """The highest recorded event sequence number (0 when there is none)."""
        self.cur.execute("SELECT max(seq) FROM events")
        row = self.cur.fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    def last_fact(self) -> int:
        """The highest fact sequence number (0 when there is none): whether anything was
        written since a reader last looked, in one index lookup."""
        self.cur.execute("SELECT max(seq) FROM facts")
        row = self.cur.fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    def ingest_view(
        self, keys: Sequence[str], matters: Sequence[str]
    ) -> tuple[set[str], int, list[Record]]:
        """What recording events needs, in one statement (one round trip): which of the
        fact ``keys`` are stored already, the last event seq, and the counters record
        with the named matters' records."""
        if not _kernel_loaded:
            _load_kernel()

        keys, matters = list(dict.fromkeys(keys)), list(dict.fromkeys(matters))
        found: set[str] = set()
        recs: list[Record] = []
        if len(keys) + len(matters) > _MAX_PARAMS:  # far beyond one group commit
            found.update(key for key in keys if self.has_key(key))
            recs.extend(r for r in (self.get("meta", "counters"),) if r is not None)
            recs.extend(r for mid in matters if (r := self.get("matter", mid)) is not None)
            return found, self.last_event(), recs
        plain = [key for key in keys if not is_extra_key(key)]
        extra = [key for key in keys if is_extra_key(key)]
        marks = ", ".join("?" for _ in plain) or "NULL"
        extra_marks = ", ".join("?" for _ in extra) or "NULL"
        mids = ", ".join("?" for _ in matters) or "NULL"
        sql = (
            _INGEST_VIEW.replace("{keys}", marks)
            .replace("{extra}", extra_marks)
            .replace("{ids}", mids)
        )
        self.cur.execute(self._q(sql), [*plain, *extra, *matters])
        last = 0
        for tag, a, b, c, d, e, data in self.cur.fetchall():
            if tag == "k":
                found.add(a)
            elif tag == "e":
                last = int(a) if a is not None else 0
            else:
                self._seen[(a, b)] = (c, d, e)
                recs.append(load_record(a, data))
        return found, last, recs

    def append(
        self,
        facts: Sequence[Fact],
        records: Iterable[Record],
        removed: Iterable[tuple[str, str]] = (),
    ) -> list[int]:
        """Insert ``facts`` in order, write ``records`` and delete the ``removed`` ones
        (kind, id): what one decision, or a group of them, changed."""
        if not _kernel_loaded:
            _load_kernel()

        seqs: list[int] = []
        sql = self._q(
            "INSERT INTO facts (at, type, v, fkey, data) VALUES (?, ?, ?, ?, ?) RETURNING seq"
        )
        for fact in facts:
            key = fact_key(fact)
            at = str(getattr(fact, "at", "") or "")
            try:
                self.cur.execute(sql, (at, type(fact).__name__, 1, key, dump_fact(fact)))
            except Exception as exc:
                # The unique index on fkey is the guard (one lookup fewer per fact);
                # the transaction is abandoned by the caller either way.
                if key is not None and _unique_violation(exc):
                    raise DuplicateFact(key) from exc
                raise
            seq = int(self.cur.fetchone()[0])
            seqs.append(seq)
            for extra in extra_keys(fact):
                self._add_key(extra, seq)
        self._upsert(records)
        self._delete(removed)
        return seqs

    def _add_key(self, key: str, seq: int) -> None:
        try:
            self.cur.execute(self._q("INSERT INTO fact_keys (fkey, seq) VALUES (?, ?)"), (key, seq))
        except Exception as exc:
            if _unique_violation(exc):
                raise DuplicateFact(key) from exc
            raise

    def _delete(self, keys: Iterable[tuple[str, str]]) -> None:
        queued: list[tuple[str, int]] = []
        other: list[tuple[str, str]] = []
        for kind, rid in keys:
            if kind == "queued":
                queued.append(_queued_key(rid))
            else:
                other.append((kind, rid))
                self._seen.pop((kind, rid), None)
        if queued:
            self.cur.executemany(self._q("DELETE FROM queued WHERE matter = ? AND seq = ?"), queued)
        if other:
            self.cur.executemany(self._q("DELETE FROM records WHERE kind = ? AND id = ?"), other)

    def _upsert(self, records: Iterable[Record]) -> None:
        if not _kernel_loaded:
            _load_kernel()

        events: list[tuple[int, str, str, str]] = []
        fresh: list[tuple[str, str, str, str, str, str]] = []  # not read in this tx
        same: list[tuple[str, str, str]] = []  # read, index unchanged: data only
        moved: list[tuple[str, str, str, str, str, str]] = []  # read, index changed
        queued: list[tuple[str, int]] = []
        for rec in records:
            if isinstance(rec, Queued):
                queued.append((rec.matter, rec.seq))
                continue
            matter, state, due = index_of(rec)
            data = dump_record(rec)
            if isinstance(rec, EventRow):
                events.append((rec.seq, matter, state, data))
                continue
            key = (rec.kind, rec.id)
            was = self._seen.get(key)
            if was is None:
                fresh.append((rec.kind, rec.id, matter, state, due, data))
            elif was == (matter, state, due):
                same.append((data, rec.kind, rec.id))
            else:
                moved.append((matter, state, due, data, rec.kind, rec.id))
            self._seen[key] = (matter, state, due)
        if queued:
            self.cur.executemany(
                self._q(
                    "INSERT INTO queued (matter, seq) VALUES (?, ?) "
                    "ON CONFLICT (matter, seq) DO NOTHING"
                ),
                queued,
            )
        if events:
            self.cur.executemany(
                self._q(
                    "INSERT INTO events (seq, matter, state, data) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (seq) DO UPDATE SET matter = excluded.matter, "
                    "state = excluded.state, data = excluded.data"
                ),
                events,
            )
        if same:
            self.cur.executemany(
                self._q("UPDATE records SET data = ? WHERE kind = ? AND id = ?"), same
            )
        if moved:
            self.cur.executemany(
                self._q(
                    "UPDATE records SET matter = ?, state = ?, due = ?, data = ? "
                    "WHERE kind = ? AND id = ?"
                ),
                moved,
            )
        if fresh:
            self.cur.executemany(
                self._q(
                    "INSERT INTO records (kind, id, matter, state, due, data) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (kind, id) DO UPDATE SET "
                    "matter = excluded.matter, state = excluded.state, due = excluded.due, "
                    "data = excluded.data"
                ),
                fresh,
            )

    def get(self, kind: str, rid: str) -> Record | None:
        if not _kernel_loaded:
            _load_kernel()

        if kind == "queued":
            matter, number = _queued_key(rid)
            self.cur.execute(
                self._q("SELECT 1 FROM queued WHERE matter = ? AND seq = ?"), (matter, number)
            )
            found = self.cur.fetchone() is not None
            return Queued(matter=matter, seq=number) if found else None
        if kind == "event":
            seq = _event_seq(rid)
            if seq is None:
                return None
            self.cur.execute(self._q("SELECT data FROM events WHERE seq = ?"), (seq,))
            row = self.cur.fetchone()
            return None if row is None else load_record(kind, row[0])
        self.cur.execute(
            self._q("SELECT matter, state, due, data FROM records WHERE kind = ? AND id = ?"),
            (kind, rid),
        )
        row = self.cur.fetchone()
        if row is None:
            return None
        self._seen[(kind, rid)] = (row[0], row[1], row[2])
        return load_record(kind, row[3])

    def query(
        self,
        kind: str,
        *,
        matter: str | None = None,
        states: Sequence[str] | None = None,
        due_before: str | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        if not _kernel_loaded:
            _load_kernel()

        if kind == "queued":
            pairs = self._waiting(matter, states, due_before, limit)
            return [Queued(matter=m, seq=seq) for m, seq in pairs]
        rows = self._rows(kind, matter, states, due_before, limit)
        if kind != "event":
            for r in rows:
                self._seen[(kind, r[0])] = (r[2], r[3], r[4])
        return [load_record(kind, r[1]) for r in rows]

    def data(self, kind: str, *, states: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """What :meth:`query` builds its records from, in the same order: each record's
        stored data as plain JSON data, decoded in one go by the standard library, so that
        a reader that only shows them (``autoloop status``) loads neither the kernel's
        record classes nor its codec. A field that a row written by an older autoloop
        lacks is absent (the record class gives it its default); a queued row is its
        ``matter`` and ``seq``."""
        if kind == "queued":
            pairs = self._waiting(None, states, None, None)
            return [{"matter": m, "seq": seq} for m, seq in pairs]
        rows = self._rows(kind, None, states, None, None)
        decoded: list[dict[str, Any]] = json.loads("[" + ",".join(str(r[1]) for r in rows) + "]")
        return decoded

    def _rows(
        self,
        kind: str,
        matter: str | None,
        states: Sequence[str] | None,
        due_before: str | None,
        limit: int | None,
    ) -> list[Any]:
        """The rows :meth:`query` reads: (id, data, matter, state, due) of the records of
        ``kind`` ordered by id, or ('', data) of the event rows ordered by seq."""
        if kind == "event":
            sql = "SELECT '', data FROM events WHERE 1 = 1"
            args: list[Any] = []
            order = " ORDER BY seq"
        else:
            sql = "SELECT id, data, matter, state, due FROM records WHERE kind = ?"
            args = [kind]
            order = " ORDER BY id"
        if matter is not None:
            sql += " AND matter = ?"
            args.append(matter)
        if states:
            sql += " AND state IN (" + ", ".join("?" for _ in states) + ")"
            args.extend(states)
        if due_before is not None:
            if kind == "event":
                return []  # events have no due time
            sql += " AND due <> '' AND due <= ?"
            args.append(due_before)
        sql += order
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        self.cur.execute(self._q(sql), args)
        rows: list[Any] = self.cur.fetchall()
        return rows

    def _waiting(
        self,
        matter: str | None,
        states: Sequence[str] | None,
        due_before: str | None,
        limit: int | None,
    ) -> list[tuple[str, int]]:
        """(matter, seq) of the waiting events (every queued row waits: a turn that takes
        one deletes it)."""
        if (states and "pending" not in states) or due_before is not None:
            return []
        sql = "SELECT matter, seq FROM queued"
        args: list[Any] = []
        if matter is not None:
            sql += " WHERE matter = ?"
            args.append(matter)
        sql += " ORDER BY matter, seq"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        self.cur.execute(self._q(sql), args)
        return [(str(m), int(seq)) for m, seq in self.cur.fetchall()]

    def facts(
        self, after: int = 0, limit: int | None = None, *, types: tuple[str, ...] = ()
    ) -> list[tuple[int, str, Fact]]:
        """Facts after seq ``after`` in order; only those of ``types`` when given."""
        sql = "SELECT seq, at, data FROM facts WHERE seq > ?"
        args: list[Any] = [after]
        if types:
            sql += " AND type IN (" + ", ".join("?" for _ in types) + ")"
            args.extend(types)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        self.cur.execute(self._q(sql), args)
        return [(int(s), str(a), _fact(s, d)) for s, a, d in self.cur.fetchall()]

    def fact_with_key(self, key: str) -> Fact | None:
        """The fact stored under ``key`` (its ``fkey``), or None."""
        self.cur.execute(self._q("SELECT seq, data FROM facts WHERE fkey = ?"), (key,))
        row = self.cur.fetchone()
        return _fact(row[0], row[1]) if row is not None else None

    def fact_count(self) -> int:
        self.cur.execute("SELECT count(*) FROM facts")
        return int(self.cur.fetchone()[0])

    def facts_since(self, at: str) -> int:
        """The seq after which the facts recorded at ``at`` or later begin (ISO instants
        compare as text), found by halving over the seqs (about 20 reads of the primary
        key for a million facts; no index on the time). Facts are recorded in time order,
        but for clocks of replicas apart by a moment: a caller that must see every fact
        of a window asks from a margin before it."""
        low, high = 0, self.last_fact()  # facts after low may be at or after; up to high
        while low < high:
            mid = (low + high + 1) // 2
            self.cur.execute(
                self._q("SELECT seq, at FROM facts WHERE seq >= ? ORDER BY seq LIMIT 1"), (mid,)
            )
            row = self.cur.fetchone()
            if row is None or str(row[1]) >= at:
                high = mid - 1
            else:
                low = int(row[0])
        return low

    def records(self) -> Iterator[Record]:
        if not _kernel_loaded:
            _load_kernel()

        for kind, _, data in self.raw_records():
            yield load_record(kind, data)

    def raw_records(self) -> list[tuple[str, str, str]]:
        """Every projection row as (kind, id, data), sorted by kind and id."""
        if not _kernel_loaded:
            _load_kernel()

        self.cur.execute("SELECT kind, id, data FROM records")
        out = [(str(k), str(i), str(d)) for k, i, d in self.cur.fetchall()]
        self.cur.execute("SELECT seq, data FROM events")
        out.extend(("event", f"{int(s):012d}", str(d)) for s, d in self.cur.fetchall())
        self.cur.execute("SELECT matter, seq FROM queued")
        for m, seq in self.cur.fetchall():
            q = Queued(matter=str(m), seq=int(seq))
            out.append(("queued", q.id, dump_record(q)))
        out.sort(key=lambda r: (r[0], r[1]))
        return out

    def replace_records(self, records: Iterable[Record]) -> None:
        self.cur.execute("DELETE FROM records")
        self.cur.execute("DELETE FROM events")
        self.cur.execute("DELETE FROM queued")
        self._seen.clear()
        self._upsert(records)

    def tamper(self, kind: str, rid: str, data: str) -> None:
        """For tests and drills only: overwrite one projection row behind the fold's back."""
        if kind == "event":
            self.cur.execute(
                self._q("UPDATE events SET data = ? WHERE seq = ?"), (data, _event_seq(rid))
            )
            return
        self.cur.execute(
            self._q("UPDATE records SET data = ? WHERE kind = ? AND id = ?"), (data, kind, rid)
        )

    def ledger_name(self, proposed: str) -> str:
        """This ledger's name, set once: ``proposed`` when it has none yet. What the hub
        writes on GitHub carries it, so that two ledgers (a home made afresh, a second
        hub) never take each other's comments for their own."""
        return self.info("name", proposed)

    def info(self, key: str, proposed: str) -> str:
        """The ledger's value for ``key`` (``ledger_info``), set once: ``proposed`` when
        it has none yet; every replica, and every later process, reads the same."""
        self.cur.execute(
            self._q("INSERT INTO ledger_info (k, v) VALUES (?, ?) ON CONFLICT (k) DO NOTHING"),
            (key, proposed),
        )
        self.cur.execute(self._q("SELECT v FROM ledger_info WHERE k = ?"), (key,))
        return str(self.cur.fetchone()[0])

    def read_info(self, key: str) -> str | None:
        """The ledger's value for ``key``; None when it has none."""
        self.cur.execute(self._q("SELECT v FROM ledger_info WHERE k = ?"), (key,))
        row = self.cur.fetchone()
        return None if row is None else str(row[0])

    def swap_info(self, key: str, value: str) -> str | None:
        """Set the ledger's value for ``key`` to ``value``; the one it replaced (None:
        none)."""
        self.cur.execute(self._q("SELECT v FROM ledger_info WHERE k = ?"), (key,))
        row = self.cur.fetchone()
        self.cur.execute(
            self._q(
                "INSERT INTO ledger_info (k, v) VALUES (?, ?) "
                "ON CONFLICT (k) DO UPDATE SET v = excluded.v"
            ),
            (key, value),
        )
        return str(row[0]) if row is not None else None


def _fact(seq: int, data: Any) -> Fact:
    """The fact stored as ``data``; a row that does not decode is a damaged ledger."""
    if not _kernel_loaded:
        _load_kernel()

    try:
        return load_fact(data)
    except Exception as exc:  # any decoding error: bad JSON, an unknown type, bad fields
        what = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        raise StoreError(
            f"fact {seq} of the ledger cannot be read ({what}): the ledger is damaged; "
            "restore it from a backup"
        ) from None


def ledger_name(store: Store, proposed: str = "") -> str:
    """The ledger's name (:meth:`SqlTx.ledger_name`), given ``proposed`` or 8 random hex
    digits when it has none yet."""
    import secrets  # noqa: PLC0415  # (hashlib with it: `autoloop status` loads neither)

    with store.write() as tx:
        return tx.ledger_name(proposed or secrets.token_hex(4))


def _queued_key(rid: str) -> tuple[str, int]:
    matter, _, seq = rid.rpartition("|")
    return matter, int(seq)


def _event_seq(rid: str) -> int | None:
    return int(rid) if rid.isdigit() else None


def migrate(cur: Any, ph: str) -> None:
    """Bring a ledger written by an older autoloop to ``SCHEMA_VERSION`` (in the caller's
    write transaction, after the tables exist). A newer ledger is refused.

    The facts never change shape (a new field has a default, which old facts mean); the
    projections did (schema 2 moved event rows to their own table, schema 3 made each
    waiting event a row of its own, schema 4 gave a matter the seq its wait began at,
    ``since``, schema 5 gave a matter, a turn, a timer and an event's row its chain,
    ``chain``, schema 6 a matter the end of a failed turn's backoff, ``retry_after``), so an
    older ledger gets its projections rebuilt from its facts (an older autoloop cannot read
    the rows of a newer one). (Schema 4 came late: ledgers of schema 3 written after
    ``since`` came are rebuilt too, to the same rows.)
    """
    tx = SqlTx(cur, ph)
    cur.execute("SELECT v FROM ledger_info WHERE k = 'schema'")
    row = cur.fetchone()
    found = int(row[0]) if row is not None else SCHEMA_VERSION
    if found > SCHEMA_VERSION:
        raise StoreError(
            f"this ledger has schema {found}, newer than this autoloop knows "
            f"({SCHEMA_VERSION}): upgrade autoloop"
        )
    if found < SCHEMA_VERSION:
        rebuild_records(tx)
    if row is None:
        cur.execute(
            tx._q("INSERT INTO ledger_info (k, v) VALUES ('schema', ?)"), (str(SCHEMA_VERSION),)
        )
    elif found != SCHEMA_VERSION:
        cur.execute(
            tx._q("UPDATE ledger_info SET v = ? WHERE k = 'schema'"), (str(SCHEMA_VERSION),)
        )


def rebuild_records(tx: Tx) -> int:
    """Replace every projection row with a replay of the facts; the number written."""
    from kernel.state import replay  # noqa: PLC0415  # only a rebuild folds every fact: start-up stays fast

    records = replay([fact for _, _, fact in tx.facts()]).records()
    tx.replace_records(records)
    return len(records)


def _unique_violation(exc: BaseException) -> bool:
    """A driver's unique-constraint error (sqlite3.IntegrityError, psycopg UniqueViolation)."""
    name = type(exc).__name__
    text = str(exc).lower()
    return name in ("IntegrityError", "UniqueViolation") and "unique" in text
