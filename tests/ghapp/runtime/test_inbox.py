"""The webhook inbox: acknowledged once durable, decided right after, its raw text gone.

Deliveries are GitHub's example payloads; the ledger is a real SQLite ledger with a
redactor, so that what reaches it is checked as stored.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ghapp.runtime import inbox as inbox_module
from ghapp.runtime.hub import RedactingLedger
from ghapp.runtime.inbox import Inbox, InboxError, Received, inbox_path, old_inbox_path
from ghapp.runtime.ledger import Outcome
from ghapp.runtime.segments import SegmentLog
from ghapp.runtime.webhooks import content_digest, webhook_payload
from ghapp.store.sqlite import SqliteStore
from kernel import inputs as k
from kernel.model import Event, Rules
from kernel.records import EventRow
from tests import paths

FIXTURES = paths.ROOT / "tests" / "fixtures" / "github" / "webhooks"
SECRET_WORD = "hunter2-not-for-disk"


def delivery(n: int, *, body: bytes | None = None, name: str = "issues") -> Received:
    if body is None:
        payload = json.loads((FIXTURES / "issues" / "opened.json").read_bytes())
        payload["issue"]["number"] = n
        payload["issue"]["body"] = f"the password is {SECRET_WORD} (delivery {n})"
        body = json.dumps(payload).encode()
    return Received(
        name=name,
        delivery=f"d-{n}",
        body=body,
        form=False,
        digest=content_digest(name, hmac.digest(b"inbox-test-secret", body, "sha256")),
        payload=webhook_payload(body, form=False),
    )


class Ledgered:
    """A SQLite ledger with a redactor, and an inbox beside it."""

    def __init__(self, folder: Path) -> None:
        self.file = folder / "ledger.db"
        self.store = SqliteStore(f"sqlite:///{self.file}", checkpoint_s=None)
        self.ledger = RedactingLedger(
            self.store,
            lambda: Rules(version="t"),
            lambda: datetime(2026, 1, 1, tzinfo=UTC),
            lambda text: text.replace(SECRET_WORD, "[REDACTED]"),
        )
        self.decided: list[list[Event]] = []

    def inbox(self, **kw: object) -> Inbox:
        def on_decided(events: list[Event], outs: list[Outcome]) -> None:
            self.decided.append(events)

        return Inbox(
            inbox_path(self.file),
            self.ledger,
            self.file,
            on_decided=on_decided,
            **kw,  # type: ignore[arg-type]
        )

    def events(self) -> dict[str, EventRow]:
        with self.store.read() as tx:
            return {e.event.id: e for e in tx.query("event") if isinstance(e, EventRow)}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[Ledgered]:
    w = Ledgered(tmp_path)
    yield w
    w.store.close()


def submit_all(inbox: Inbox, items: list[Received]) -> list[bool]:
    async def main() -> list[bool]:
        return list(await asyncio.gather(*(inbox.submit(i) for i in items)))

    return asyncio.run(main())


def test_an_acknowledged_delivery_is_decided_right_after_and_its_raw_record_zeroed(
    world: Ledgered,
) -> None:
    inbox = world.inbox()
    inbox.start()
    try:
        assert submit_all(inbox, [delivery(1), delivery(2)]) == [False, False]
        assert inbox.settle(10)
        events = world.events()
        assert sorted(events) == ["d-1", "d-2"]
        assert "[REDACTED]" in str(events["d-1"].event.details)  # redacted before stored
        assert SECRET_WORD not in str(events["d-1"].event.details)
        assert sorted(e.id for batch in world.decided for e in batch) == ["d-1", "d-2"]
        assert inbox.stats.acked == 2 and inbox.stats.decided == 2
    finally:
        inbox.stop()
    assert held(world) == []
    files = [f for f in inbox_path(world.file).iterdir() if f.name != inbox_module.LOCK_FILE]
    assert files and all(not any(f.read_bytes()) for f in files)


def test_a_redelivery_or_a_replayed_body_is_a_duplicate_before_and_after_it_is_decided(
    world: Ledgered,
) -> None:
    inbox = world.inbox()
    inbox.start()
    try:
        first = delivery(1)
        same_body = Received(
            name="issues",
            delivery="d-other",
            body=first.body,
            form=False,
            digest=first.digest,
            payload=first.payload,
        )
        # in one group: the second and third see the first in the inbox
        assert submit_all(inbox, [first, delivery(1), same_body]) == [False, True, True]
        assert inbox.settle(10)
        # once decided (the row deleted): the ledger knows both keys
        assert submit_all(inbox, [delivery(1), same_body]) == [True, True]
        assert inbox.settle(10)
        assert sorted(world.events()) == ["d-1"]
        assert inbox.stats.duplicates == 4
    finally:
        inbox.stop()


def test_a_replay_in_a_later_group_is_a_duplicate_while_the_first_waits_in_the_inbox(
    world: Ledgered,
) -> None:
    inbox = world.inbox()
    inbox.start()
    try:
        inbox.request_in()  # a webhook in flight: the translator leaves the rows waiting
        first = delivery(1)
        replay = Received(
            name="issues", delivery="d-other", body=first.body, form=False, digest=first.digest
        )
        assert submit_all(inbox, [first]) == [False]
        assert submit_all(inbox, [delivery(1)]) == [True]  # its id, a group later
        assert submit_all(inbox, [replay]) == [True]  # its body under a new id
        assert submit_all(inbox, [delivery(2)]) == [False]
        assert inbox.waiting() == 2  # nothing decided yet: the rows were the answer
        inbox.request_out()
        assert inbox.settle(10)
        assert sorted(world.events()) == ["d-1", "d-2"]
    finally:
        inbox.stop()


def held(world: Ledgered) -> list[str]:
    """The deliveries a restart would find in the inbox's files."""
    log = SegmentLog(inbox_path(world.file))
    try:
        return [r.delivery for r in log.open()]
    finally:
        log.close()


def left_by_a_killed_process(world: Ledgered, items: list[Received]) -> None:
    """What a process that acknowledged ``items`` and died before deciding them left."""
    log = SegmentLog(inbox_path(world.file))
    log.open()
    _, seg = log.append([(d.name, d.delivery, d.digest, d.form, d.body) for d in items], 1.0)
    log.sync(seg)
    for s in log._all:  # gone without a word: nothing released, nothing closed in order
        os.close(s.fd)


OLD_SCHEMA = """
CREATE TABLE inbox (
    id INTEGER PRIMARY KEY, delivery TEXT NOT NULL UNIQUE, digest TEXT NOT NULL,
    name TEXT NOT NULL, form INTEGER NOT NULL, body BLOB NOT NULL, at REAL NOT NULL
);
CREATE INDEX inbox_by_digest ON inbox (digest);
"""


def test_the_sqlite_inbox_of_an_earlier_version_is_decided_at_start_then_removed(
    world: Ledgered,
) -> None:
    old = old_inbox_path(world.file)
    assert old.name == "ledger.inbox.db"
    with sqlite3.connect(old) as conn:
        conn.executescript(OLD_SCHEMA)
        for d in (delivery(1), delivery(2)):
            conn.execute(
                "INSERT INTO inbox (delivery, digest, name, form, body, at) "
                "VALUES (?, ?, ?, 0, ?, 0)",
                (d.delivery, d.digest, d.name, d.body),
            )
    conn.close()
    inbox = world.inbox()
    assert inbox.start() == 2  # before it returns, both are in the ledger
    try:
        assert sorted(world.events()) == ["d-1", "d-2"]
        assert not old.exists() and not Path(f"{old}-wal").exists()
        assert submit_all(inbox, [delivery(1), delivery(3)]) == [True, False]
        assert inbox.settle(10)
    finally:
        inbox.stop()
    assert sorted(world.events()) == ["d-1", "d-2", "d-3"]
    assert "[REDACTED]" in str(world.events()["d-1"].event.details)


def test_what_a_killed_process_left_in_the_inbox_is_decided_on_start(world: Ledgered) -> None:
    left_by_a_killed_process(world, [delivery(1), delivery(2)])
    assert world.events() == {}
    assert held(world) == ["d-1", "d-2"]

    again = world.inbox()
    assert again.start() == 2  # before it returns, both are in the ledger
    try:
        assert sorted(world.events()) == ["d-1", "d-2"]
        assert list(again.rows()) == []
    finally:
        again.stop()
    assert held(world) == []


def test_a_record_decided_before_the_crash_is_recorded_once(world: Ledgered) -> None:
    inbox = world.inbox()
    inbox.start()
    try:
        submit_all(inbox, [delivery(1)])
        assert inbox.settle(10)
    finally:
        inbox.stop()
    # the crash came between the ledger's commit and the zeroing of its record
    left_by_a_killed_process(world, [delivery(1)])
    again = world.inbox()
    assert again.start() == 1
    again.stop()
    assert list(world.events()) == ["d-1"]


def test_no_unredacted_text_stays_in_the_inbox_files(world: Ledgered) -> None:
    inbox = world.inbox(segment_bytes=64 * 1024)  # a few deliveries a segment: several
    inbox.start()
    try:
        for n in range(1, 30, 2):  # groups of two
            submit_all(inbox, [delivery(n), delivery(n + 1)])
        submit_all(inbox, [delivery(n) for n in range(100, 120)])  # a group of its own size
        assert inbox.settle(10)
    finally:
        inbox.stop()
    folder = inbox_path(world.file)
    files = list(folder.iterdir())
    assert files
    for file in [*files, *world.file.parent.iterdir()]:
        if file.is_file() and file.name.startswith("ledger.inbox"):
            assert SECRET_WORD.encode() not in file.read_bytes(), file.name
    for file in files:
        assert SECRET_WORD.encode() not in file.read_bytes(), file.name


def test_past_the_backlog_limit_the_writer_waits_for_the_translator(world: Ledgered) -> None:
    inbox = world.inbox(backlog_max=2)
    inbox.start()
    try:
        assert submit_all(inbox, [delivery(n) for n in range(1, 12)]) == [False] * 11
        assert inbox.settle(10)
        assert len(world.events()) == 11
    finally:
        inbox.stop()


def test_acks_first_deciding_waits_while_a_webhook_is_in_flight(world: Ledgered) -> None:
    inbox = world.inbox()
    inbox.start()
    try:
        inbox.request_in()  # another sender's request, its body still being read
        assert submit_all(inbox, [delivery(1)]) == [False]  # acknowledged all the same
        time.sleep(0.3)
        assert world.events() == {} and inbox.waiting() == 1  # not decided meanwhile
        inbox.request_out()
        assert inbox.settle(10)  # decided once the ack path is quiet
        assert sorted(world.events()) == ["d-1"]
    finally:
        inbox.stop()


def test_a_paced_stream_is_decided_in_its_pauses_not_after_defer_max(world: Ledgered) -> None:
    # 200 a second, each request answered at once: the pauses between them are quiet
    # moments, and the translator must find them (a wait woken by each commit never did)
    inbox = world.inbox()
    inbox.start()

    async def stream() -> None:
        for n in range(1, 301):  # 1.5 s at least
            inbox.request_in()
            await inbox.submit(delivery(n))
            inbox.request_out()
            await asyncio.sleep(0.005)

    try:
        asyncio.run(stream())
        assert inbox.settle(10)
        assert len(inbox.stats.lag) == 300
        assert max(inbox.stats.lag) < 0.5  # (DEFER_MAX_S is 10 s)
    finally:
        inbox.stop()


def test_a_paced_stream_on_a_slow_disk_is_decided_in_its_waits_after_a_stall(
    world: Ledgered, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 200 a second, each ack waiting 8 ms for the disk, once 300 ms: one request is
    # nearly always in flight, waiting for the disk. The stall leaves a backlog; it must
    # be decided in those waits, not held back as a burst's (seconds, up to DEFER_MAX_S).
    real = SegmentLog.sync
    syncs = [0]

    def slow(seg: object) -> None:
        syncs[0] += 1
        time.sleep(0.3 if syncs[0] == 20 else 0.008)
        real(seg)  # type: ignore[arg-type]

    monkeypatch.setattr(SegmentLog, "sync", staticmethod(slow))
    inbox = world.inbox()
    inbox.start()

    async def one(n: int) -> None:
        inbox.request_in()
        await inbox.submit(delivery(n))
        inbox.request_out()

    async def stream() -> None:
        sent = []
        for n in range(1, 401):  # 2 s at least
            sent.append(asyncio.create_task(one(n)))
            await asyncio.sleep(0.005)
        await asyncio.gather(*sent)

    try:
        asyncio.run(stream())
        assert inbox.settle(20)
        assert syncs[0] > 20 and len(inbox.stats.lag) == 400
        assert max(inbox.stats.lag) < 1.0  # (before: 2.4 s p50, 4.4 s the most)
    finally:
        inbox.stop()


def test_senders_that_crowd_in_are_acknowledged_first_a_paced_stream_is_calm(
    world: Ledgered,
) -> None:
    inbox = world.inbox()
    try:
        assert not inbox._calm()  # nothing waits
        item = delivery(1)
        item.acked = time.monotonic()
        inbox._todo.append(item)
        assert not inbox._calm()  # it has not waited CALM_DEFER_S yet
        item.acked -= 1.0
        inbox._crowd_at -= 1.0  # not looked at for a second (nothing waited that long)
        assert not inbox._calm()  # ... so crowded until a window shows otherwise
        for _ in range(inbox_module.CROWDED + 2):
            inbox.request_in()  # senders waiting for their acks, the whole window
        time.sleep(inbox_module.CROWD_S * 1.2)
        assert not inbox._calm()
        for _ in range(inbox_module.CROWDED + 1):
            inbox.request_out()  # one left in flight, the whole window
        time.sleep(inbox_module.CROWD_S * 1.2)
        assert inbox._calm()
        # calm: a request answered just now is no reason to wait; one being read is
        inbox.request_out()
        assert inbox._ack_busy() and not inbox._ack_busy(calm=True)
        inbox.request_in()
        assert inbox._ack_busy(calm=True)
    finally:
        inbox.stop()


def test_a_load_that_never_eases_is_decided_after_defer_max(
    world: Ledgered, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inbox_module, "DEFER_MAX_S", 0.2)
    inbox = world.inbox()
    inbox.start()
    try:
        inbox.request_in()  # a request in flight the whole time
        assert submit_all(inbox, [delivery(1), delivery(2)]) == [False, False]
        assert inbox.settle(10)  # overdue: the translator stops waiting
        assert sorted(world.events()) == ["d-1", "d-2"]
        inbox.request_out()
    finally:
        inbox.stop()


def test_a_moment_after_an_answer_is_not_yet_quiet(
    world: Ledgered, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A busy sender's next request follows its answer within microseconds: the gap
    # between two requests is no pause for the translator to fill.
    monkeypatch.setattr(inbox_module, "QUIET_S", 60.0)
    inbox = world.inbox()
    try:
        assert not inbox._ack_busy()  # nothing answered yet
        inbox.request_in()
        assert inbox._ack_busy()
        inbox.request_out()
        assert inbox._ack_busy()  # answered, but just now
        inbox.left_at -= 61.0
        assert not inbox._ack_busy()
    finally:
        inbox.stop()


def test_requests_waiting_only_for_the_disk_leave_the_processor_to_the_translator(
    world: Ledgered, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At 200 deliveries a second a request is in flight most of the time, nearly all of
    # it waiting for its group's sync: waiting deliveries are decided then. A burst (a
    # backlog, and many requests in flight) waits for every request, those waiting for
    # the disk included.
    monkeypatch.setattr(inbox_module, "QUIET_S", 0.0)
    inbox = world.inbox()
    try:
        inbox.request_in()
        assert inbox._ack_busy()  # its body being read
        inbox.queued += 1  # handed to the writer (Inbox.submit)
        assert inbox._ack_busy()  # the writer checks and inserts it
        inbox._syncing = True
        assert not inbox._ack_busy()  # only the disk is left to wait for
        inbox.request_in()
        assert inbox._ack_busy()  # another request in the event loop's hands
        inbox.request_out()  # (the counts, not which request)
        assert not inbox._ack_busy()
        inbox._todo.extend(delivery(n) for n in range(inbox_module.EAGER_MAX + 1))
        assert not inbox._ack_busy()  # a backlog, one request in flight: no burst
        for _ in range(inbox_module.BURST_IN_FLIGHT):
            inbox.request_in()  # senders' requests, their bodies being read
            inbox.queued += 1  # ... and handed to the writer, whose group syncs
        assert inbox._ack_busy()  # a burst: acks first, all of them
        for _ in range(inbox_module.BURST_IN_FLIGHT):
            inbox.request_out()
        inbox.released += inbox_module.BURST_IN_FLIGHT
        inbox._todo.clear()
        inbox._syncing = False
        inbox.released += 1  # the writer answered it: the event loop sends the answer
        assert inbox._ack_busy()
        inbox.request_out()
        assert not inbox._ack_busy()
    finally:
        inbox.stop()


def test_while_serving_decided_bodies_are_zeroed_a_burst_and_a_trickle_alike(
    world: Ledgered,
) -> None:
    inbox = world.inbox(segment_bytes=64 * 1024)
    inbox.start()
    folder = inbox_path(world.file)

    def no_secret_left() -> None:
        deadline = time.monotonic() + 5
        while any(SECRET_WORD.encode() in f.read_bytes() for f in folder.iterdir()):
            assert time.monotonic() < deadline, "a decided body stays in the inbox's files"
            time.sleep(0.02)

    try:
        inbox.request_in()  # a burst, decided once it ends: it takes many segments
        for n in range(1, 60, 2):
            submit_all(inbox, [delivery(n), delivery(n + 1)])
        assert len(list(folder.iterdir())) > 3
        inbox.request_out()
        assert inbox.settle(10)
        no_secret_left()  # while still serving
        for n in range(100, 105):  # one at a time, each decided before the next
            submit_all(inbox, [delivery(n)])
            assert inbox.settle(10)
            no_secret_left()
        assert inbox.stats.decided == 65
    finally:
        inbox.stop()


def test_a_sync_that_stalls_delays_no_deciding_only_the_release(world: Ledgered) -> None:
    # A disk that stalls for a moment: the ledger's log takes long to sync. The
    # deliveries acknowledged meanwhile are decided (and routed) all the same; only their
    # records wait in the inbox for the sync.
    stalled = threading.Event()
    resume = threading.Event()

    def sync() -> None:
        stalled.set()
        resume.wait(10)

    inbox = world.inbox(sync=sync)
    inbox.start()
    try:
        submit_all(inbox, [delivery(1)])
        assert stalled.wait(10)  # its sync is under way, and does not return
        submit_all(inbox, [delivery(2), delivery(3)])
        deadline = time.monotonic() + 10
        while len(world.events()) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(world.events()) == ["d-1", "d-2", "d-3"]  # decided, sync or not
        assert not resume.is_set()
        assert sorted(d for d, _ in inbox.rows()) == ["d-1", "d-2", "d-3"]  # still held
        resume.set()
        assert inbox.settle(10)
        assert list(inbox.rows()) == []
    finally:
        resume.set()
        inbox.stop()


def test_a_trickle_syncs_the_ledgers_log_once_an_interval_not_once_a_delivery(
    world: Ledgered,
) -> None:
    # 30 deliveries 10 ms apart, each decided before the next comes: a sync each time
    # the backlog emptied was one a delivery (30); one SYNC_S (50 ms) after the oldest
    # not synced is about one for five.
    syncs: list[float] = []

    def sync() -> None:
        syncs.append(time.monotonic())
        world.store.sync_log()

    inbox = world.inbox(sync=sync)
    inbox.start()

    async def trickle() -> None:
        for n in range(1, 31):
            await inbox.submit(delivery(n))
            await asyncio.sleep(0.01)

    try:
        began = time.monotonic()
        asyncio.run(trickle())
        assert inbox.settle(10)
        took = time.monotonic() - began
        assert len(world.events()) == 30 and list(inbox.rows()) == []
        assert 1 <= len(syncs) <= took / inbox_module.SYNC_S + 2, (len(syncs), took)
    finally:
        inbox.stop()


def test_with_a_sync_records_are_released_only_once_the_ledgers_log_is_synced(
    world: Ledgered,
) -> None:
    calls: list[bool] = []
    failing = [True]

    def sync() -> None:
        calls.append(failing[0])
        if failing[0]:
            raise OSError("the disk is gone for a moment")

    relaxed: list[bool] = []
    decide_many = world.ledger.decide_many

    def recording(inputs: list[object], **kw: object) -> object:
        relaxed.append(kw.get("durable") is False)
        return decide_many(inputs, **kw)  # type: ignore[arg-type]

    world.ledger.decide_many = recording  # type: ignore[method-assign]
    inbox = world.inbox(sync=sync)
    inbox.start()
    try:
        assert submit_all(inbox, [delivery(1), delivery(2)]) == [False, False]
        deadline = time.monotonic() + 10
        while len(world.events()) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sorted(world.events()) == ["d-1", "d-2"]  # decided, by relaxed commits
        assert relaxed and all(relaxed)
        while not calls and time.monotonic() < deadline:
            time.sleep(0.02)
        assert calls  # a sync was tried, and failed: the rows stay
        assert sorted(d for d, _ in inbox.rows()) == ["d-1", "d-2"]
        failing[0] = False
        assert inbox.settle(10)  # synced, then deleted
        assert list(inbox.rows()) == [] and calls[-1] is False
    finally:
        inbox.stop()


class DataError(Exception):
    """Named as psycopg's: a value PostgreSQL refuses (a NUL character)."""


@pytest.mark.parametrize("error", [TypeError, DataError])
def test_a_delivery_no_ledger_takes_is_set_aside_and_holds_back_no_other(
    world: Ledgered, error: type[Exception]
) -> None:
    """A lone surrogate once reached the ledger's codec: the batch failed, was tried
    again and again, and no delivery after it was decided. Now the batch is decided a
    delivery at a time, and the one that fails so is recorded as ignored, with why."""
    decide_many = world.ledger.decide_many
    tries: list[int] = []

    def refusing(inputs: list[k.Input], **kw: Any) -> list[Outcome]:
        tries.append(len(inputs))
        for inp in inputs:
            if isinstance(inp, k.Ingest) and inp.event.id == "d-2" and not inp.ignore:
                raise error("str is not valid UTF-8: surrogates not allowed")
        return decide_many(inputs, **kw)

    world.ledger.decide_many = refusing  # type: ignore[method-assign]
    inbox = world.inbox()
    inbox.start()
    try:
        assert submit_all(inbox, [delivery(1), delivery(2), delivery(3)]) == [False] * 3
        assert inbox.settle(10)
        events = world.events()
        assert sorted(events) == ["d-1", "d-2", "d-3"]
        assert sorted(e.id for batch in world.decided for e in batch) == ["d-1", "d-3"]
        assert len(tries) < 10  # not tried again and again
        assert events["d-2"].reason.startswith(f"not stored: {error.__name__}: str is not")
        assert not events["d-2"].dispatched and events["d-2"].event.subject == "github"
        assert not events["d-1"].reason.startswith("not stored")
        assert not events["d-3"].reason.startswith("not stored")
    finally:
        inbox.stop()
    assert held(world) == []
    # a redelivery of it is a duplicate: it is known
    again = world.inbox()
    again.start()
    try:
        assert submit_all(again, [delivery(2)]) == [True]
    finally:
        again.stop()


def test_an_error_of_the_disk_or_the_server_is_tried_again_not_set_aside() -> None:
    assert inbox_module._passing(OSError("disk full"))
    assert inbox_module._passing(sqlite3.OperationalError("database is locked"))
    assert not inbox_module._passing(TypeError("str is not valid UTF-8"))
    assert not inbox_module._passing(UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogate"))
    assert not inbox_module._passing(DataError("NUL"))
    assert inbox_module._storable("a\x00b\ud800") == "a\ufffdb\ufffd"


def test_a_record_whose_body_cannot_be_read_is_recorded_as_ignored_not_dropped(
    world: Ledgered,
) -> None:
    """Acknowledged, then unreadable (the check at the ack and the decode disagreed, or
    the record was damaged): it was logged and dropped; now it is known in the ledger."""
    bad = replace(delivery(2), body=b'{"a": not json', payload=None, checked=True)
    inbox = world.inbox()
    inbox.start()
    try:
        assert submit_all(inbox, [delivery(1), bad, delivery(3)]) == [False] * 3
        assert inbox.settle(10)
        events = world.events()
        assert sorted(events) == ["d-1", "d-2", "d-3"]
        assert events["d-2"].reason.startswith("not stored: body cannot be read: body is not")
    finally:
        inbox.stop()
    assert held(world) == []


def test_a_body_the_ack_takes_becomes_its_event_however_deep_or_long_its_numbers(
    world: Ledgered,
) -> None:
    """Bodies the check at the ack took and the translator's decode refused: an integer of
    4,301 digits, or nesting of 1,100 to about 4,000 levels. Each was acknowledged, then
    recorded as ignored with its body dropped (and its redelivery was a duplicate)."""
    extras = [
        b"1" * 4301,
        b"-" + b"9" * 10_000,
        b"[" * 1100 + b"]" * 1100,
        b"[" * 3990 + b"]" * 3990,
        b'{"x": ' * 9_000 + b"1" + b"}" * 9_000,  # past the check's own parser
    ]
    items = []
    for n, extra in enumerate(extras, start=1):
        made = delivery(n)
        body = made.body[:-1] + b', "zen": ' + extra + b"}"
        items.append(replace(made, delivery=f"deep-{n}", body=body, payload=None))
    inbox = world.inbox()
    inbox.start()
    try:
        assert submit_all(inbox, items) == [False] * len(items)  # acknowledged, none refused
        assert inbox.settle(10)
        events = world.events()
        assert sorted(events) == [f"deep-{n}" for n in range(1, len(extras) + 1)]
        for e in events.values():
            assert not e.reason.startswith("not stored"), e.reason  # (no rule takes it)
            assert e.event.type == "issues.opened"
    finally:
        inbox.stop()
    assert held(world) == []


def test_a_second_process_serving_the_same_inbox_is_refused_with_one_line(
    world: Ledgered,
) -> None:
    """Two 'autoloop serve' on one home wrote the same segment files."""
    first = world.inbox()
    first.start()
    try:
        second = world.inbox()
        with pytest.raises(InboxError) as refused:
            second.start()
        line = str(refused.value)
        assert f"another autoloop serve (pid {os.getpid()}) is using the webhook inbox" in line
        assert "\n" not in line
    finally:
        first.stop()
    again = world.inbox()  # the lock goes with the process that held it (here: its stop)
    again.start()
    again.stop()


def test_a_stop_that_outlasts_its_wait_leaves_the_rest_in_the_inbox_not_set_aside(
    world: Ledgered, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop waited 30 s for the translator, then closed the files under it: every body
    it had still to read looked damaged, and thousands of acknowledged deliveries were
    recorded as "not stored" (a turn running kept the process alive meanwhile)."""
    slow = world.ledger.decide_many
    go = threading.Event()  # nothing is decided before the stop begins

    def decide_many(*args: Any, **kw: Any) -> Any:
        go.wait(30)
        time.sleep(0.05)  # a busy core, a ledger another process holds a while
        return slow(*args, **kw)

    monkeypatch.setattr(world.ledger, "decide_many", decide_many)
    inbox = world.inbox()
    inbox.start()
    items = [delivery(n) for n in range(1, 401)]  # 7 batches: 0.35 s of deciding at least
    assert submit_all(inbox, items) == [False] * len(items)
    go.set()
    inbox.stop(timeout=0.2)
    inbox._translator.join(30)  # (it ended within the stop: whatever it did is done)
    decided = world.events()
    assert all(not e.reason.startswith("not stored") for e in decided.values())
    assert 0 < len(decided) < len(items)  # the stop's wait ended with deliveries left
    monkeypatch.setattr(world.ledger, "decide_many", slow)
    again = world.inbox()
    # the rest, decided before it returns (with, at most, records decided before the stop
    # whose release waited for the ledger's next sync: found to be duplicates)
    assert again.start() >= len(items) - len(decided)
    again.stop()
    after = world.events()
    assert sorted(after) == sorted(d.delivery for d in items)
    assert all(not e.reason.startswith("not stored") for e in after.values())


def test_a_batch_the_ledger_holds_past_the_stop_leaves_the_files_open_not_their_bodies_lost(
    world: Ledgered, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Once the translator decides no more batches, the stop waits for its batch in hand
    a bounded time (a ledger another process holds has no bound of its own); past it, the
    files are left open under the batch rather than closed (its bodies read as damage)."""
    slow = world.ledger.decide_many

    def decide_many(*args: Any, **kw: Any) -> Any:
        time.sleep(3.0)  # far longer than the stop's two waits together
        return slow(*args, **kw)

    monkeypatch.setattr(world.ledger, "decide_many", decide_many)
    monkeypatch.setattr(inbox_module, "ABANDON_WAIT_S", 0.1)
    inbox = world.inbox()
    inbox.start()
    items = [delivery(n) for n in range(1, 201)]
    assert submit_all(inbox, items) == [False] * len(items)
    began = time.monotonic()
    inbox.stop(timeout=0.1)
    assert time.monotonic() - began < 2.5  # bounded: it did not wait for the batch
    assert "did not end within 0.1 s more" in caplog.text
    inbox._translator.join(30)  # it ends its batch, and decides no other
    decided = world.events()
    assert decided and all(not e.reason.startswith("not stored") for e in decided.values())
    inbox._log.close()  # (the process would end here: its files and lock with it)
    inbox._unlock_inbox()
    monkeypatch.setattr(world.ledger, "decide_many", slow)
    again = world.inbox()
    again.start()
    again.stop()
    after = world.events()
    assert sorted(after) == sorted(d.delivery for d in items)
    assert all(not e.reason.startswith("not stored") for e in after.values())
