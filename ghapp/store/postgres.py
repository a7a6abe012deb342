"""The ledger on PostgreSQL, for many replicas sharing one database.

The same tables and SQL as SQLite (:mod:`ghapp.store.base`). Writers serialise on a
transaction-scoped advisory lock, so every decision sees the facts committed before
it, whichever replica takes it. Facts are append-only: a trigger refuses UPDATE and
DELETE on them and on their extra keys (``fact_keys``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ghapp.store.base import SCHEMA_VERSION, SqlTx, StoreError, migrate
from ghapp.store.urls import hide_passwords
from kernel.text import one_line  # libpq's message spans lines: the hint on the next

log = logging.getLogger("autoloop.store")

LOCK_ID = 0x6175746F6C6F6F70 & 0x7FFFFFFFFFFFFFFF  # "autoloop"

GUARD_BODY = "\n       BEGIN RAISE EXCEPTION 'facts are append-only'; END; "  # (as stored)
SCHEMA = [
    """CREATE TABLE IF NOT EXISTS facts (
        seq BIGSERIAL PRIMARY KEY,
        at TEXT NOT NULL,
        type TEXT NOT NULL,
        v INTEGER NOT NULL,
        fkey TEXT UNIQUE,
        data TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS fact_keys (
        fkey TEXT PRIMARY KEY,
        seq BIGINT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS records (
        kind TEXT NOT NULL,
        id TEXT NOT NULL,
        matter TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL DEFAULT '',
        due TEXT NOT NULL DEFAULT '',
        data TEXT NOT NULL,
        PRIMARY KEY (kind, id)
    )""",
    """CREATE TABLE IF NOT EXISTS events (
        seq BIGINT PRIMARY KEY,
        matter TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL DEFAULT '',
        data TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS queued (
        matter TEXT NOT NULL,
        seq BIGINT NOT NULL,
        PRIMARY KEY (matter, seq)
    )""",
    "CREATE INDEX IF NOT EXISTS records_by_state ON records (kind, state, due)",
    "CREATE INDEX IF NOT EXISTS records_by_matter ON records (kind, matter)",
    "CREATE TABLE IF NOT EXISTS ledger_info (k TEXT PRIMARY KEY, v TEXT NOT NULL)",
    "CREATE OR REPLACE FUNCTION autoloop_facts_append_only() RETURNS trigger AS $$"
    + GUARD_BODY
    + "$$ LANGUAGE plpgsql",
    "DROP TRIGGER IF EXISTS facts_append_only ON facts",
    """CREATE TRIGGER facts_append_only BEFORE UPDATE OR DELETE ON facts
       FOR EACH ROW EXECUTE FUNCTION autoloop_facts_append_only()""",
    "DROP TRIGGER IF EXISTS fact_keys_append_only ON fact_keys",
    """CREATE TRIGGER fact_keys_append_only BEFORE UPDATE OR DELETE ON fact_keys
       FOR EACH ROW EXECUTE FUNCTION autoloop_facts_append_only()""",
]


# A connection whose peer went silent (a network cut, a failover that drops packets)
# is found dead within about half a minute, not when the system's TCP gives up (hours):
# the ledger is then answered 503 and reconnected, instead of every request hanging
# behind the one stuck query. A value the URL gives wins.
KEEPALIVE: dict[str, str] = {
    "keepalives": "1",
    "keepalives_idle": "15",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",  # ms that sent data may stay unacknowledged
}

# A replica that stops between two statements of a write (its process paused, or its
# network cut: the server notices a silent client only when its own TCP gives up, two
# hours by default) would hold the ledger's write lock, and so every replica's writes,
# until then. The server gives up a write transaction that sits idle this long: the lock
# is freed, that transaction is rolled back (nothing of it was acknowledged), and the
# stopped replica connects anew at its next write. A write takes milliseconds between
# statements; a rebuild (``long``), which may compute for minutes, is not bounded, whatever
# the role or server set. Where the deployment set the timeout for these connections
# (``options`` in the URL, PGOPTIONS, ALTER ROLE or ALTER DATABASE ... SET), its value
# stays for the other writes.
HOLD_S = 15.0
HOLD_SETTING = "idle_in_transaction_session_timeout"
_SET_FOR_US = ("client", "user", "database", "database user")  # pg_settings.source


def _hold_ms(conn: Any, hold_s: float) -> str | None:
    """The hold a write sets on ``conn``: None where the deployment set its own."""
    row = conn.execute("SELECT source FROM pg_settings WHERE name = %s", (HOLD_SETTING,)).fetchone()
    return None if row is not None and row[0] in _SET_FOR_US else str(round(hold_s * 1000))


def _ready(conn: Any) -> bool:
    """The ledger's tables, at this schema, and their triggers are there: opening it
    changes nothing. The schema's statements take the strongest lock on ``facts`` (its
    triggers are made again), so running them at every start, or every ``autoloop
    status``, made each replica's writes wait behind any long read (a backup's); and a
    role that may only read and write could not open the ledger at all."""
    found = conn.execute(
        "SELECT to_regclass('facts') IS NOT NULL AND to_regclass('fact_keys') IS NOT NULL "
        "AND to_regclass('records') IS NOT NULL AND to_regclass('events') IS NOT NULL "
        "AND to_regclass('queued') IS NOT NULL AND to_regclass('ledger_info') IS NOT NULL"
    ).fetchone()
    if not found[0]:
        return False
    schema = conn.execute("SELECT v FROM ledger_info WHERE k = 'schema'").fetchone()
    if schema is None or schema[0] != str(SCHEMA_VERSION):
        return False  # an older one is migrated; a newer one is refused (migrate)
    # The append-only guard as the schema makes it: both triggers there and enabled, and
    # their function refusing (one disabled or made harmless is made again, as before).
    triggers = conn.execute(
        "SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal AND tgenabled <> 'D' "
        "AND tgname IN ('facts_append_only', 'fact_keys_append_only') "
        "AND tgrelid IN (to_regclass('facts'), to_regclass('fact_keys'))"
    ).fetchone()
    guard = conn.execute(
        "SELECT count(*) FROM pg_proc WHERE proname = 'autoloop_facts_append_only' "
        "AND pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) "
        "AND prosrc = %s",
        (GUARD_BODY,),
    ).fetchone()
    return bool(triggers[0] == 2 and guard[0] == 1)


class PostgresStore:
    def __init__(self, url: str, *, connect_timeout_s: int = 10, hold_s: float = HOLD_S) -> None:
        import psycopg  # noqa: PLC0415  # only users of PostgreSQL need it loaded

        self.url = url
        self._psycopg = psycopg
        self._params: dict[str, Any] = self._connect_params(url)
        self._hold_s = hold_s
        self._connect_timeout_s = connect_timeout_s
        self._hold: str | None = None
        try:
            self._conn: Any = self._connect()
            try:
                if not _ready(self._conn):
                    with self._conn.transaction():
                        self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_ID,))
                        for stmt in SCHEMA:
                            self._conn.execute(stmt)
                        migrate(self._conn.cursor(), "%s")
            except BaseException:
                self._conn.close()
                raise
        except psycopg.Error as exc:
            why = hide_passwords(one_line(str(exc)), url)
            hint = (
                "the first start makes the ledger's tables, and the first after an upgrade "
                "may change them: give AUTOLOOP_DB's role CREATE on the schema for a new "
                "ledger, or start once with the role that owns the tables"
                if "permission denied" in why.lower()
                else "check AUTOLOOP_DB and that the server is running"
            )
            raise StoreError(f"cannot open the PostgreSQL ledger: {why}; {hint}") from exc
        self._lock = threading.RLock()
        self._closed = False

    def _connect(self) -> Any:
        """A new connection, and the hold its writes set (:func:`_hold_ms`)."""
        conn = self._psycopg.connect(
            self.url, autocommit=True, connect_timeout=self._connect_timeout_s, **self._params
        )
        try:
            self._hold = _hold_ms(conn, self._hold_s)
        except BaseException:
            conn.close()
            raise
        return conn

    def _connect_params(self, url: str) -> dict[str, Any]:
        """:data:`KEEPALIVE`, less what ``url`` sets itself."""
        try:
            given = self._psycopg.conninfo.conninfo_to_dict(url)
        except self._psycopg.Error:  # connect says what is wrong with it
            return {}
        return {k: v for k, v in KEEPALIVE.items() if k not in given}

    def _connection(self) -> Any:
        """The connection, made again when the last one was lost (the server restarted,
        a network cut): before, one outage of a few seconds left ``serve`` and ``work``
        failing every write until they were restarted. While the server is away, this
        raises the driver's error, as the lost connection did."""
        conn = self._conn
        if not (conn.closed or conn.broken) or self._closed:
            return conn
        with contextlib.suppress(Exception):
            conn.close()
        self._conn = self._connect()
        log.warning("the PostgreSQL ledger is reachable again: connected anew")
        return self._conn

    @contextlib.contextmanager
    def write(self, *, durable: bool = True, long: bool = False) -> Iterator[SqlTx]:
        # every commit here is durable (``durable`` is for SQLite's webhook inbox); one
        # that sits idle for :data:`HOLD_S` is given up by the server, unless ``long``
        with self._lock:
            conn = self._connection()
            with conn.transaction():
                cur = conn.cursor()
                hold = "0" if long else self._hold  # "0": never given up
                if hold is None:
                    cur.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_ID,))
                else:  # one round trip: the setting lasts until this transaction ends
                    cur.execute(
                        "SELECT pg_advisory_xact_lock(%s), set_config(%s, %s, true)",
                        (LOCK_ID, HOLD_SETTING, hold),
                    )
                yield SqlTx(cur, "%s")

    @contextlib.contextmanager
    def read(self) -> Iterator[SqlTx]:
        with self._lock:
            conn = self._connection()
            with conn.transaction():
                yield SqlTx(conn.cursor(), "%s")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._conn.close()


@dataclass(frozen=True, slots=True)
class Found:
    """What :func:`look` found in a PostgreSQL database."""

    where: str  # USER@HOST:PORT/DB, never the password
    schema: int | None  # the ledger's schema version; None: no ledger there yet
    facts: int  # the number of the last fact (0: none)
    links_key: str | None = None  # the fingerprint of the key card links are signed with
    rules_version: str | None = None  # the rules the last process started on it read
    can_create: bool = True  # (no ledger yet) the role may make its tables in the schema


def look(url: str, *, connect_timeout_s: int = 5) -> Found:
    """The ledger at ``url``, looked at in a read-only transaction: nothing is created or
    changed (``autoloop doctor``). Raises :class:`StoreError` with one line."""
    import psycopg  # noqa: PLC0415  # only users of PostgreSQL need it loaded

    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=connect_timeout_s) as conn:
            info = conn.info
            where = f"{info.user}@{info.host}:{info.port}/{info.dbname}"
            with conn.transaction():
                conn.execute("SET TRANSACTION READ ONLY")
                row = conn.execute(
                    "SELECT to_regclass('ledger_info') IS NOT NULL"
                    " AND to_regclass('facts') IS NOT NULL"
                ).fetchone()
                if row is None or not row[0]:
                    may = conn.execute(
                        "SELECT current_schema() IS NOT NULL AND "
                        "has_schema_privilege(current_schema(), 'CREATE')"
                    ).fetchone()
                    return Found(where, None, 0, can_create=bool(may and may[0]))
                version = conn.execute("SELECT v FROM ledger_info WHERE k = 'schema'").fetchone()
                last = conn.execute("SELECT coalesce(max(seq), 0) FROM facts").fetchone()
                key = conn.execute("SELECT v FROM ledger_info WHERE k = 'links-key'").fetchone()
                rules = conn.execute(
                    "SELECT v FROM ledger_info WHERE k = 'rules-version'"
                ).fetchone()
    except psycopg.Error as exc:
        raise StoreError(
            f"cannot reach the PostgreSQL ledger: {hide_passwords(one_line(str(exc)), url)}; "
            "check AUTOLOOP_DB and that the server is running"
        ) from exc
    # no schema row: a ledger from before the row existed, taken as current (as migrate does)
    schema = int(version[0]) if version is not None else SCHEMA_VERSION
    return Found(
        where,
        schema,
        int(last[0]) if last is not None else 0,
        str(key[0]) if key is not None else None,
        str(rules[0]) if rules is not None else None,
    )
