"""Opening a PostgreSQL ledger that is there already changes nothing, and a silent peer
is found dead.

Replicas, workers and every ``autoloop status`` open the ledger. Opening it ran the
whole schema, whose trigger statements take the strongest lock on ``facts``: behind any
long read (a backup's), every replica's writes waited, webhooks past GitHub's 10 s.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from ghapp.store.postgres import KEEPALIVE, PostgresStore
from tests.stores import pg_schema

pytestmark = pytest.mark.pg


def test_opening_a_ready_ledger_waits_for_no_long_read() -> None:
    import psycopg

    with pg_schema() as url:
        PostgresStore(url).close()  # made, as the first start makes it
        with psycopg.connect(url) as reader:  # a long read, as pg_dump's
            reader.execute("SELECT count(*) FROM facts").fetchone()
            opened: list[float] = []

            def open_one() -> None:
                started = time.monotonic()
                PostgresStore(url).close()
                opened.append(time.monotonic() - started)

            thread = threading.Thread(target=open_one, daemon=True)
            thread.start()
            thread.join(timeout=10)
            still_open = thread.is_alive()
            reader.rollback()  # the read ends (a stuck opener goes on now)
            thread.join(timeout=30)
        assert not still_open, "opening the ledger waited for the read to end"
        assert opened and opened[0] < 5


def test_a_role_that_may_only_read_and_write_opens_a_ready_ledger() -> None:
    import psycopg

    role = "autoloop_rw_" + uuid.uuid4().hex[:8]
    with pg_schema() as url:
        PostgresStore(url).close()
        schema = url.rsplit("search_path%3D", 1)[-1]
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"CREATE ROLE {role} LOGIN")
            try:
                admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
                admin.execute(
                    f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} "
                    f"TO {role}"
                )
                admin.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}")
                as_role = url.replace("postgres@", f"{role}@", 1)
                assert as_role != url
                store = PostgresStore(as_role)
                try:
                    with store.read() as tx:
                        assert tx.facts(0, 10) == []
                finally:
                    store.close()
            finally:
                admin.execute(f"DROP OWNED BY {role}")
                admin.execute(f"DROP ROLE {role}")


def test_a_new_ledger_needs_a_role_that_may_create_and_says_so() -> None:
    import psycopg

    from ghapp.store.base import StoreError

    role = "autoloop_ro_" + uuid.uuid4().hex[:8]
    with pg_schema() as url:
        schema = url.rsplit("search_path%3D", 1)[-1]
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"CREATE ROLE {role} LOGIN")
            try:
                admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
                with pytest.raises(StoreError) as refused:
                    PostgresStore(url.replace("postgres@", f"{role}@", 1))
                assert "permission denied" in str(refused.value)
                assert "give AUTOLOOP_DB's role CREATE on the schema" in str(refused.value)
            finally:
                admin.execute(f"DROP OWNED BY {role}")
                admin.execute(f"DROP ROLE {role}")


def test_connections_find_a_silent_peer_unless_the_url_says_otherwise() -> None:
    with pg_schema() as url:
        store = PostgresStore(url)
        try:
            dsn = dict(
                p.split("=", 1) for p in store._conn.info.dsn.split()
            )  # what libpq was given
            assert {k: dsn.get(k) for k in KEEPALIVE} == KEEPALIVE, dsn
        finally:
            store.close()
        mine = url + "&keepalives_idle=60"
        store = PostgresStore(mine)
        try:
            dsn = dict(p.split("=", 1) for p in store._conn.info.dsn.split())
            assert dsn["keepalives_idle"] == "60" and dsn["tcp_user_timeout"] == "30000"
        finally:
            store.close()


def test_a_guard_disabled_or_made_harmless_is_made_again_at_the_next_open() -> None:
    """Opening a ready ledger skips the schema's statements, but not when the append-only
    guard was disabled or its function replaced: it is made again, as every open did."""
    import psycopg

    with pg_schema() as url:
        store = PostgresStore(url)
        with store.write() as tx:
            tx.cur.execute(
                "INSERT INTO facts (at, type, v, fkey, data) VALUES ('', 'X', 1, NULL, '{}')"
            )
        store.close()
        for harm in (
            "ALTER TABLE facts DISABLE TRIGGER facts_append_only",
            "CREATE OR REPLACE FUNCTION autoloop_facts_append_only() RETURNS trigger AS $$ "
            "BEGIN RETURN NEW; END; $$ LANGUAGE plpgsql",
        ):
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(harm)
            PostgresStore(url).close()
            with (
                psycopg.connect(url, autocommit=True) as conn,
                pytest.raises(psycopg.Error, match="facts are append-only"),
            ):
                conn.execute("UPDATE facts SET type = 'Y'")
