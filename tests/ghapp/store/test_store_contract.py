"""One contract for every ledger backend (SQLite, PostgreSQL)."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from ghapp.runtime.ledger import Ledger
from ghapp.store.base import SCHEMA_VERSION, DuplicateFact, Store, StoreError, ledger_name
from ghapp.store.open import open_store
from kernel import inputs as k
from kernel.codec import dump_record
from kernel.durations import iso
from kernel.facts import EventRecorded
from kernel.model import Event
from kernel.records import EventRow, Matter
from tests.kernel.helpers import T0, ev, receipt, rule, rules_of
from tests.stores import pg_schema

RULES = rules_of(rule(emits=("ping",)))


def ledger(s: Store) -> Ledger:
    return Ledger(s, lambda: RULES, lambda: T0)


def test_facts_and_records_commit_together(store: Store) -> None:
    led = ledger(store)
    out = led.decide(k.Ingest(event=ev("1")))
    assert out.reply.code == "recorded"
    with store.read() as tx:
        assert tx.last_fact() == 1
        assert tx.fact_count() == 1
        m = tx.get("matter", "r")
        assert isinstance(m, Matter) and m.waiting
        assert [q.seq for q in tx.query("queued", matter="r", states=["pending"])] == [1]  # type: ignore[union-attr]
        # Recording an event rewrites no counter row: the last event is the highest row.
        assert tx.get("meta", "counters") is None
        assert tx.last_event() == 1
        assert isinstance(tx.get("event", f"{1:012d}"), EventRow)
    led.decide(k.Ingest(event=ev("2")))
    with store.read() as tx:
        assert tx.last_event() == 2
        assert tx.last_fact() == 2
        assert [e.seq for e in tx.query("event") if isinstance(e, EventRow)] == [1, 2]
        assert tx.get("event", "nope") is None


def test_an_index_column_that_changes_is_found_by_queries(store: Store) -> None:
    """A record read and written back keeps its index columns right, both when they stay
    (the data alone is updated) and when they change."""
    led = ledger(store)
    led.decide(k.Ingest(event=ev("1")))
    led.decide(k.Ingest(event=ev("2")))  # read runnable, written back runnable
    with store.read() as tx:
        assert [m.id for m in tx.query("matter", states=["runnable"])] == ["r"]
        m = tx.get("matter", "r")
        assert isinstance(m, Matter) and m.waiting
        assert [q.seq for q in tx.query("queued", matter="r", states=["pending"])] == [1, 2]  # type: ignore[union-attr]
    led.decide(k.Claim(matter="r", worker="w"))  # read runnable, written back running
    with store.read() as tx:
        assert tx.query("queued", matter="r") == []  # the turn took both: their rows are gone
        assert tx.get("queued", "r|000000000001") is None
        assert tx.query("matter", states=["runnable"]) == []
        assert [m.id for m in tx.query("matter", states=["running"])] == ["r"]
    assert led.check() == []


def test_a_failed_transaction_leaves_nothing(store: Store) -> None:
    with pytest.raises(RuntimeError), store.write() as tx:
        fact = EventRecorded(seq=1, event=Event(source="x", id="1", type="t", subject="s"), at="")
        tx.append([fact], [])
        raise RuntimeError("crash before commit")
    with store.read() as tx:
        assert tx.fact_count() == 0


def test_the_facts_since_an_instant_are_found_without_reading_them_all(store: Store) -> None:
    """The daily caps' first look read every fact from the first (each delivery's
    decisions decoded): it starts where the facts of the window begin."""
    clock = [T0]
    led = Ledger(store, lambda: RULES, lambda: clock[0])
    for day in range(5):  # three events a day, recorded in time order
        for n in range(3):
            clock[0] = T0 + timedelta(days=day, hours=n)
            led.decide(k.Ingest(event=ev(f"{day}-{n}")))
    with store.read() as tx:
        assert tx.facts_since(iso(T0 - timedelta(days=1))) == 0  # before every fact
        assert tx.facts_since(iso(T0 + timedelta(days=2))) == 6  # day 2 begins at seq 7
        after = tx.facts_since(iso(T0 + timedelta(days=2, minutes=30)))
        assert after == 7 and [seq for seq, _, _ in tx.facts(after)][:1] == [8]
        assert tx.facts_since(iso(T0 + timedelta(days=9))) == 15  # after the last


def test_unique_fact_keys_are_enforced(store: Store) -> None:
    fact = EventRecorded(seq=1, event=Event(source="x", id="1", type="t", subject="s"), at="")
    with store.write() as tx:
        tx.append([fact], [])
    with pytest.raises(DuplicateFact), store.write() as tx:
        tx.append([fact], [])
    with store.read() as tx:
        assert tx.last_fact() == 1
        assert tx.fact_count() == 1


def test_duplicate_ingest_is_reported_not_stored(store: Store) -> None:
    led = ledger(store)
    led.decide(k.Ingest(event=ev("1")))
    assert led.decide(k.Ingest(event=ev("1"))).reply.code == "duplicate"
    with store.read() as tx:
        assert tx.last_fact() == 1
        assert tx.fact_count() == 1


def test_a_content_key_is_stored_unique_and_found(store: Store) -> None:
    led = ledger(store)
    assert led.decide(k.Ingest(event=ev("1"), content_key="c:1")).reply.code == "recorded"
    with store.read() as tx:
        assert tx.has_key("content:c:1") and tx.has_key("event:local:1")
        assert not tx.has_key("content:c:2")
        assert tx.ingest_view(["content:c:1", "event:local:1", "event:local:2"], [])[0] == {
            "content:c:1",
            "event:local:1",
        }
    assert led.decide(k.Ingest(event=ev("2"), content_key="c:1")).reply.code == "duplicate"
    assert led.decide_many([k.Ingest(event=ev("3"), content_key="c:1")])[0].reply.code == (
        "duplicate"
    )
    fact = EventRecorded(
        seq=9, event=Event(source="x", id="9", type="t", subject="s"), at="", content_key="c:1"
    )
    with pytest.raises(DuplicateFact, match="content:c:1"), store.write() as tx:
        tx.append([fact], [])
    with store.read() as tx:
        assert tx.fact_count() == 1
    with pytest.raises(Exception, match="append-only"), store.write() as tx:
        tx.cur.execute("DELETE FROM fact_keys")  # type: ignore[attr-defined]
    assert led.check() == []


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
        assert tx.query("timer", states=["armed"], due_before=iso(T0)) == []
        later = iso(T0 + timedelta(minutes=31))
        assert len(tx.query("timer", states=["armed"], due_before=later)) == 1


def test_stored_data_is_what_the_records_are_built_from_in_query_order(store: Store) -> None:
    """``Tx.data`` (what ``autoloop status`` reads) gives each record's stored data, in the
    order and with the filters of ``query``, decoded without the kernel's codec."""
    led = ledger(store)
    for i in range(3):
        led.decide(k.Ingest(event=ev(str(i))))
    t = led.decide(k.Claim(matter="r", worker="w")).reply.data["turn"]
    ask = receipt(
        '{"ask": [{"key": "q", "title": "Q?", "options": ["a", "b"]}], '
        '"notice": [{"title": "n\u00e9"}], "later": [{"in": "30m"}]}'
    )
    out = k.AgentOutcome(started=True, ok=True, final_message=ask, cost_usd=0.1, tokens=7)
    led.decide(k.Finish(turn=str(t), fence=1, outcome=out))
    led.decide(k.Ingest(event=ev("3")))
    with store.read() as tx:
        for kind in ("turn", "card", "event", "timer", "matter"):
            records = tx.query(kind)
            assert records, kind
            assert tx.data(kind) == [json.loads(dump_record(r)) for r in records], kind
        assert tx.data("card", states=["open"]) == [
            json.loads(dump_record(c)) for c in tx.query("card", states=["open"])
        ]
        assert [c["kind_"] for c in tx.data("card", states=["open"])] == ["ask", "notice"]
        assert tx.data("pipeline") == []
        queued = tx.query("queued", states=["pending"])
        assert tx.data("queued", states=["pending"]) == [
            {"matter": q.matter, "seq": q.seq}  # type: ignore[union-attr]
            for q in queued
        ]
        assert [q["seq"] for q in tx.data("queued")] == [4]


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
        waiting = tx.query("queued", matter="r", states=["pending"])
        assert sorted(q.seq for q in waiting) == list(range(1, 126))  # type: ignore[union-attr]
    assert ledger(stores[0]).check() == []
    for s in stores:
        s.close()


def test_a_ledger_is_named_once_by_whoever_asks_first(store_url: str) -> None:
    """What the hub writes on GitHub carries the ledger's name (card and action ids
    restart in every ledger); every replica, and every later process, gets the same."""
    first, second = open_store(store_url), open_store(store_url)
    name = ledger_name(first)
    assert len(name) == 8 and int(name, 16) >= 0
    assert ledger_name(second, "run7") == name  # proposed too late: the first one stays
    assert ledger_name(first, "run8") == name
    first.close()
    second.close()
    later = open_store(store_url)
    assert ledger_name(later) == name
    later.close()


def test_a_ledger_is_named_as_proposed_when_it_has_no_name(store_url: str) -> None:
    s = open_store(store_url)
    assert ledger_name(s, "run7") == "run7"
    s.close()


@pytest.mark.parametrize("old", [1, 2, 3, 4])
def test_an_older_ledger_is_migrated_on_open(store_url: str, old: int) -> None:
    """Ledgers written before rows had a chain (schema 4: an older autoloop cannot read
    the rows of a newer one), before a matter kept when its wait began (schema 3: an upgraded
    ledger failed `rebuild --check`, the documented check before a start), before
    waiting events became rows of their own (schema 2), or before event rows got their
    own table (schema 1), open with everything in place."""
    s = open_store(store_url)
    led = ledger(s)
    for i in range(3):
        led.decide(k.Ingest(event=ev(str(i))))
    led.decide(k.Claim(matter="r", worker="w"))  # takes events 1-3
    for i in range(3, 5):
        led.decide(k.Ingest(event=ev(str(i))))  # 4 and 5 wait
    ph = "?" if store_url.startswith("sqlite") else "%s"
    with s.write() as tx:  # turn it back into what the old schema stored
        cur = tx.cur  # type: ignore[attr-defined]
        if old < 3:
            cur.execute("DELETE FROM queued")
        cur.execute("SELECT data FROM records WHERE kind = 'matter' AND id = 'r'")
        matter = json.loads(cur.fetchone()[0])
        matter.pop("chain", None)
        if old < 4:
            matter.pop("since", None)
        if old < 3:
            del matter["waiting"]
            matter["pending"] = [4, 5]
        cur.execute(
            "UPDATE records SET data = ? WHERE kind = 'matter' AND id = 'r'".replace("?", ph),
            (json.dumps(matter),),
        )
        cur.execute("SELECT id, data FROM records WHERE kind = 'turn'")
        for tid, data in cur.fetchall():
            turn = json.loads(data)
            turn.pop("chain", None)
            cur.execute(
                "UPDATE records SET data = ? WHERE kind = 'turn' AND id = ?".replace("?", ph),
                (json.dumps(turn), tid),
            )
        if old == 1:
            cur.execute("SELECT seq, matter, state, data FROM events")
            for seq, m, state, data in cur.fetchall():
                cur.execute(
                    "INSERT INTO records (kind, id, matter, state, due, data) "
                    "VALUES ('event', ?, ?, ?, '', ?)".replace("?", ph),
                    (f"{int(seq):012d}", m, state, data),
                )
            cur.execute("DELETE FROM events")
            cur.execute(
                "UPDATE records SET data = "
                """'{"cards":0,"events":5,"ticks":{},"turns":1}' WHERE kind = 'meta'"""
            )
        cur.execute("UPDATE ledger_info SET v = ? WHERE k = 'schema'".replace("?", ph), (str(old),))
    s.close()
    again = open_store(store_url)
    try:
        led = ledger(again)
        assert led.check() == []
        with again.read() as tx:
            assert tx.last_event() == 5
            waiting = [q.seq for q in tx.query("queued", matter="r", states=["pending"])]  # type: ignore[union-attr]
            assert waiting == [4, 5]
            cur = tx.cur  # type: ignore[attr-defined]
            cur.execute("SELECT count(*) FROM records WHERE kind = 'event'")
            assert cur.fetchone()[0] == 0
            cur.execute("SELECT v FROM ledger_info WHERE k = 'schema'")
            assert cur.fetchone()[0] == str(SCHEMA_VERSION)
        assert led.decide(k.Ingest(event=ev("5"))).reply.message.startswith("event 6 recorded")
    finally:
        again.close()


def test_a_ledger_from_a_newer_autoloop_is_refused(store_url: str) -> None:
    s = open_store(store_url)
    with s.write() as tx:
        tx.cur.execute("UPDATE ledger_info SET v = '99' WHERE k = 'schema'")  # type: ignore[attr-defined]
    s.close()
    with pytest.raises(StoreError, match="newer than this autoloop knows"):
        open_store(store_url)


def test_a_group_of_ingests_decides_as_one_by_one_does(store_url: str, tmp_path: Path) -> None:
    """decide_many of events (the webhook path: one read, one write for the group) leaves
    the same facts and records as deciding them one at a time, duplicates included, and
    a group too big for one statement takes the long way with the same result."""
    rules = rules_of(rule(parallel=True))
    events = [ev(str(i % 7 if i % 5 == 0 else i), subject=f"s{i % 4}") for i in range(40)]
    grouped = open_store(store_url)
    single = open_store(f"sqlite:///{tmp_path / 'single.db'}")
    try:
        g = Ledger(grouped, lambda: rules, lambda: T0)
        s = Ledger(single, lambda: rules, lambda: T0)
        replies_g = []
        for start in (0, 3, 11, 25):  # uneven groups
            end = {0: 3, 3: 11, 11: 25, 25: 40}[start]
            replies_g += [
                o.reply for o in g.decide_many([k.Ingest(event=e) for e in events[start:end]])
            ]
        replies_s = [s.decide(k.Ingest(event=e)).reply for e in events]
        assert [r.code for r in replies_g] == [r.code for r in replies_s]
        assert [r.message for r in replies_g] == [r.message for r in replies_s]
        assert "duplicate" in [r.code for r in replies_g]
        big = [ev(f"big-{i}", subject=f"s{i % 600}") for i in range(1000)]
        g.decide_many([k.Ingest(event=e) for e in big])
        for e in big:
            s.decide(k.Ingest(event=e))
        with grouped.read() as a, single.read() as b:
            assert [f for _, _, f in a.facts()] == [f for _, _, f in b.facts()]
            assert a.raw_records() == b.raw_records()
        assert g.check() == []
    finally:
        grouped.close()
        single.close()


def test_pipelines_are_found_active_due_and_ended(store: Store) -> None:
    led = ledger(store)
    soon, later = iso(T0 + timedelta(minutes=5)), iso(T0 + timedelta(hours=2))
    spec = k.ActionSpec(id="deliver/a/b#1/merge/abc", do="github.merge", params={"sha": "abc"})
    led.decide(k.Advance(pipeline="deliver/a/b#1", subject="a/b#1", version=0, stage="checks"))
    led.decide(
        k.Advance(
            pipeline="deliver/a/b#1",
            subject="a/b#1",
            version=1,
            stage="merge",
            wake_at=soon,
            actions=(spec,),
        )
    )
    led.decide(
        k.Advance(pipeline="deliver/a/b#2", subject="a/b#2", version=0, stage="x", wake_at=later)
    )
    led.decide(
        k.Advance(pipeline="deliver/a/b#3", subject="a/b#3", version=0, stage="y", ended=True)
    )
    with store.read() as tx:
        assert sorted(p.id for p in tx.query("pipeline", states=["active"])) == [
            "deliver/a/b#1",
            "deliver/a/b#2",
        ]
        due = tx.query("pipeline", states=["active"], due_before=iso(T0 + timedelta(hours=1)))
        assert [p.id for p in due] == ["deliver/a/b#1"]
        assert [p.id for p in tx.query("pipeline", states=["ended"])] == ["deliver/a/b#3"]
        assert [a.id for a in tx.query("action", matter="deliver/a/b#1")] == [spec.id]
    done = led.decide(k.ActionDone(action=spec.id, ok=True, result={"merged": True}))
    assert done.reply.code == "recorded"
    with store.read() as tx:
        p = tx.get("pipeline", "deliver/a/b#1")
        assert p is not None and p.wake_at == iso(T0)  # type: ignore[union-attr]
    assert led.check() == []


@pytest.mark.pg
def test_a_lost_postgresql_connection_is_made_again() -> None:
    """The server closed the connection (a restart, a network cut): before, every later
    write failed until the process was restarted."""
    import psycopg  # only this test needs the driver itself

    with pg_schema() as url:
        s = open_store(url)
        try:
            led = ledger(s)
            assert led.decide(k.Ingest(event=ev("1"))).reply.code == "recorded"
            pid = s._conn.info.backend_pid  # type: ignore[attr-defined]  # PostgreSQL's own
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            with pytest.raises(Exception, match=r"terminat|connection"):
                led.decide(k.Ingest(event=ev("2")))  # the loss is seen here...
            assert led.decide(k.Ingest(event=ev("2"))).reply.code == "recorded"  # ...not after
            with s.read() as tx:
                assert tx.fact_count() == 2
        finally:
            s.close()


#: The fields of the projection rows at each schema (a digest of their names): a field
#: added to a record is a new schema, so that older ledgers get their rows rebuilt (a
#: matter's "since" came without one, and upgraded ledgers failed `rebuild --check`).
RECORD_FIELDS = {4: "df9bfaf2e3fd8ac6", 5: "db1ddc46cd2c312c", 6: "4b89cba34c3f1bb2"}


def test_the_projection_rows_change_only_with_the_schema() -> None:
    import dataclasses
    import hashlib

    from kernel import records

    kinds = (
        records.Meta, records.EventRow, records.Matter, records.Queued, records.Turn,
        records.Card, records.Timer, records.Action, records.Pipeline,
    )  # fmt: skip
    names = {c.__name__: [f.name for f in dataclasses.fields(c)] for c in kinds}
    digest = hashlib.sha256(json.dumps(names, sort_keys=True).encode()).hexdigest()[:16]
    assert RECORD_FIELDS.get(SCHEMA_VERSION) == digest, (
        "the record classes changed: raise SCHEMA_VERSION (ghapp/store/base.py), say why in "
        f"migrate()'s docstring, and add {{{SCHEMA_VERSION + 1}: {digest!r}}} here"
    )


def test_a_check_while_another_process_writes_finds_no_difference(store_url: str) -> None:
    """`rebuild --check` during a stream of webhooks read the facts, then the projections,
    and reported rows that differ (and advised a rebuild) where none did."""
    import threading

    writer_store, checker_store = open_store(store_url), open_store(store_url)
    writer, checker = ledger(writer_store), ledger(checker_store)
    stop = threading.Event()

    def write() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            writer.decide(k.Ingest(event=ev(f"w{n}")))

    thread = threading.Thread(target=write)
    thread.start()
    try:
        found = [checker.check() for _ in range(30)]
    finally:
        stop.set()
        thread.join(timeout=30)
        writer_store.close()
        checker_store.close()
    assert all(diffs == [] for diffs in found), next(d for d in found if d)[:5]
