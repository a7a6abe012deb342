"""A replica stopped in the middle of a write does not stop every replica's writes.

Writers share one advisory lock. A replica whose process pauses, or whose network is
cut, between two statements of a write held that lock until the server noticed, which
for a silent client is when the server's TCP gives up (two hours by default): every
other replica's webhooks and decisions waited behind it. The server now gives up a
write transaction that sits idle (``hold_s`` here, :data:`HOLD_S` in use).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from urllib.parse import quote

import pytest

from ghapp.store.postgres import PostgresStore
from tests.stores import pg_schema

pytestmark = pytest.mark.pg

HOLD_S = 1.0


def _stopped_inside_a_write(
    store: PostgresStore, *, long: bool = False
) -> tuple[threading.Event, list[BaseException], threading.Thread]:
    """A thread that writes, then stops (a paused process) until told to go on and
    write once more: (go_on, errors, thread)."""
    entered, go_on = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with store.write(long=long) as tx:
                tx.swap_info("stopped", "1")
                entered.set()
                go_on.wait(30)
                tx.swap_info("stopped", "2")
        except Exception as exc:  # what the stopped writer met is asserted
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert entered.wait(10)
    return go_on, errors, thread


def _time_to_write(store: PostgresStore, wait_s: float) -> Callable[[], float | None]:
    """Start a write of ``store`` on a thread; the returned call says how long it took
    (None: still waiting after ``wait_s``)."""
    began = time.monotonic()
    took: list[float] = []

    def run() -> None:
        with store.write() as tx:
            tx.swap_info("other", "1")
        took.append(time.monotonic() - began)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def result() -> float | None:
        thread.join(wait_s)
        return took[0] if took else None

    return result


def test_a_replica_stopped_inside_a_write_holds_the_others_only_for_the_hold() -> None:
    import psycopg

    with pg_schema() as url:
        stopped = PostgresStore(url, hold_s=HOLD_S)
        other = PostgresStore(url, hold_s=HOLD_S)
        try:
            go_on, errors, thread = _stopped_inside_a_write(stopped)
            took = _time_to_write(other, 10)()
            assert took is not None, "the other replica's write waited for the stopped one"
            assert HOLD_S * 0.8 <= took < HOLD_S + 5, took  # it waited for the lock, no more
            go_on.set()
            thread.join(10)
            # the stopped replica's write was given up, and nothing of it was kept
            assert len(errors) == 1 and isinstance(errors[0], psycopg.Error), errors
            with other.read() as tx:
                assert tx.read_info("stopped") is None
                assert tx.read_info("other") == "1"
            # once going again, the stopped replica connects anew and writes
            with stopped.write() as tx:
                tx.swap_info("after", "1")
            with other.read() as tx:
                assert tx.read_info("after") == "1"
        finally:
            stopped.close()
            other.close()


def test_a_long_write_is_not_given_up_and_a_deployment_that_says_never_is_heard() -> None:
    with pg_schema() as url:
        # a rebuild computes between statements for as long as it needs
        store = PostgresStore(url, hold_s=HOLD_S)
        try:
            go_on, errors, thread = _stopped_inside_a_write(store, long=True)
            time.sleep(HOLD_S * 2)
            go_on.set()
            thread.join(10)
            assert errors == []
            with store.read() as tx:
                assert tx.read_info("stopped") == "2"
        finally:
            store.close()
        # the deployment's own setting for these connections (here: never) stays
        own = url + quote(" -cidle_in_transaction_session_timeout=0")
        stopped = PostgresStore(own, hold_s=HOLD_S)
        other = PostgresStore(url, hold_s=HOLD_S)
        try:
            go_on, errors, thread = _stopped_inside_a_write(stopped)
            result = _time_to_write(other, HOLD_S * 3)
            assert result() is None, "the deployment's own setting was overridden"
            go_on.set()
            thread.join(10)
            assert errors == []
            assert result() is not None
        finally:
            stopped.close()
            other.close()


def test_a_deployments_own_hold_is_kept_for_writes_and_lifted_for_a_rebuild() -> None:
    """Its value however spelled (PostgreSQL takes the name in any case), where ours
    would be longer; a rebuild is not bounded by it either (a role's or a server's
    setting would otherwise end every ``autoloop rebuild`` that computes for long)."""
    import psycopg

    with pg_schema() as url:
        own = url + quote(" -c IDLE_IN_TRANSACTION_SESSION_TIMEOUT=1000")
        stopped = PostgresStore(own, hold_s=60)
        other = PostgresStore(url, hold_s=60)
        try:
            go_on, errors, thread = _stopped_inside_a_write(stopped)
            took = _time_to_write(other, 10)()
            assert took is not None and took < 5, took  # its 1 s, not our 60
            go_on.set()
            thread.join(10)
            assert len(errors) == 1 and isinstance(errors[0], psycopg.Error), errors
            go_on, errors, thread = _stopped_inside_a_write(stopped, long=True)
            time.sleep(2.5)
            go_on.set()
            thread.join(10)
            assert errors == []
        finally:
            stopped.close()
            other.close()
