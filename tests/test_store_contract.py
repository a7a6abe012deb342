"""One contract for every ledger backend (SQLite, PostgreSQL)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from ghapp.ledger import Ledger
from ghapp.store.base import DuplicateFact, Store, open_store
from kernel import step as k
from kernel.facts import EventRecorded
from kernel.model import Event
from kernel.records import EventRow, Matter, Meta
from tests.kernel_helpers import T0, ev, receipt, rule, rules_of

RULES = rules_of(rule(emits=("ping",)))


def ledger(s: Store) -> Ledger:
    return Ledger(s, lambda: RULES, lambda: T0)


def test_facts_and_records_commit_together(store: Store) -> None:
    led = ledger(store)
    out = led.decide(k.Ingest(event=ev("1")))
    assert out.reply.code == "recorded"
    with store.read() as tx:
        assert tx.fact_count() == 1
        m = tx.get("matter", "r")
        assert isinstance(m, Matter) and m.pending == (1,)
        assert isinstance(tx.get("meta", "counters"), Meta)
        assert isinstance(tx.get("event", f"{1:012d}"), EventRow)


def test_a_failed_transaction_leaves_nothing(store: Store) -> None:
    with pytest.raises(RuntimeError), store.write() as tx:
        fact = EventRecorded(seq=1, event=Event(source="x", id="1", type="t", subject="s"), at="")
        tx.append([fact], [])
        raise RuntimeError("crash before commit")
    with store.read() as tx:
        assert tx.fact_count() == 0


def test_unique_fact_keys_are_enforced(store: Store) -> None:
    fact = EventRecorded(seq=1, event=Event(source="x", id="1", type="t", subject="s"), at="")
    with store.write() as tx:
        tx.append([fact], [])
    with pytest.raises(DuplicateFact), store.write() as tx:
        tx.append([fact], [])
    with store.read() as tx:
        assert tx.fact_count() == 1


def test_duplicate_ingest_is_reported_not_stored(store: Store) -> None:
    led = ledger(store)
    led.decide(k.Ingest(event=ev("1")))
    assert led.decide(k.Ingest(event=ev("1"))).reply.code == "duplicate"
    with store.read() as tx:
        assert tx.fact_count() == 1


def test_facts_are_append_only(store: Store) -> None:
    ledger(store).decide(k.Ingest(event=ev("1")))
    with pytest.raises(Exception, match="append-only"), store.write() as tx:
        tx.cur.execute("UPDATE facts SET data = 'x'")  # type: ignore[attr-defined]
    with pytest.raises(Exception, match="append-only"), store.write() as tx:
        tx.cur.execute("DELETE FROM facts")  # type: ignore[attr-defined]


def test_queries_find_runnable_matters_and_due_timers(store: Store) -> None:
    led = ledger(store)
    led.decide(k.Ingest(event=ev("1")))
    with store.read() as tx:
        assert [m.id for m in tx.query("matter", states=["runnable"])] == ["r"]
    t = led.decide(k.Claim(matter="r", worker="w")).reply.data["turn"]
    out = k.AgentOutcome(started=True, ok=True, final_message=receipt('{"later": [{"in": "30m"}]}'))
    led.decide(k.Finish(turn=str(t), fence=1, outcome=out))
    with store.read() as tx:
        assert tx.query("timer", states=["armed"], due_before=k.iso(T0)) == []
        later = k.iso(T0 + timedelta(minutes=31))
        assert len(tx.query("timer", states=["armed"], due_before=later)) == 1


def test_rebuild_restores_tampered_rows_and_check_agrees(store: Store) -> None:
    led = ledger(store)
    for i in range(3):
        led.decide(k.Ingest(event=ev(str(i))))
    t = led.decide(k.Claim(matter="r", worker="w")).reply.data["turn"]
    ask = receipt('{"ask": [{"key": "q", "title": "Q?", "options": ["a", "b"]}]}')
    out = k.AgentOutcome(started=True, ok=True, final_message=ask, session="s1")
    led.decide(k.Finish(turn=str(t), fence=1, outcome=out))
    assert led.check() == []
    with store.write() as tx:
        tx.tamper("card", "c1", '{"id": "c1"}')
    assert led.check() == ["differs card c1"]
    led.rebuild()
    assert led.check() == []


def test_concurrent_writers_never_lose_or_double_an_event(store_url: str) -> None:
    stores = [open_store(store_url) for _ in range(4)]
    errors: list[BaseException] = []

    def write(s: Store, n: int) -> None:
        try:
            led = ledger(s)
            for i in range(25):
                led.decide(k.Ingest(event=ev(f"{i}")))  # every writer sends the same ids
                led.decide(k.Ingest(event=ev(f"{n}-{i}")))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(s, n)) for n, s in enumerate(stores)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    with stores[0].read() as tx:
        assert tx.fact_count() == 25 + 4 * 25
        m = tx.get("matter", "r")
        assert isinstance(m, Matter) and sorted(m.pending) == list(range(1, 126))
    assert ledger(stores[0]).check() == []
    for s in stores:
        s.close()
