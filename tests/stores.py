"""Fixtures that open every ledger backend: SQLite always, PostgreSQL when switched on."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from ghapp.store.base import Store
from ghapp.store.open import open_store
from tests.conftest import PG_SKIP_REASON, pg_url


def fresh_pg_url() -> str:
    """A PostgreSQL URL whose search_path is a new, empty schema."""
    base = pg_url()
    if base is None:
        pytest.skip(PG_SKIP_REASON)
    import psycopg

    schema = "t_" + uuid.uuid4().hex[:12]
    try:
        with psycopg.connect(base, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL was asked for but cannot be reached at {base}: {exc}")
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options={quote(f'-csearch_path={schema}')}"


def drop_pg_schema(url: str) -> None:
    import psycopg

    schema = url.rsplit("search_path%3D", 1)[-1]
    base = url.split("?options=", maxsplit=1)[0].split("&options=", maxsplit=1)[0]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@contextlib.contextmanager
def pg_schema() -> Iterator[str]:
    """A PostgreSQL URL on a new, empty schema (:func:`fresh_pg_url`), dropped after."""
    url = fresh_pg_url()
    try:
        yield url
    finally:
        drop_pg_schema(url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
        return
    with pg_schema() as url:
        yield url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def ledger_env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """Environment for a server's ledger: none (the home's SQLite file), or
    ``AUTOLOOP_DB`` naming a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield {}
        return
    with pg_schema() as url:
        yield {"AUTOLOOP_DB": url}
