"""The ingest queue: group commit, and big requests prepared aside from the writer."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ghapp.runtime.hub import RedactingLedger
from ghapp.runtime.ingest import IngestQueue
from ghapp.store.sqlite import SqliteStore
from kernel import inputs as k
from kernel.model import Event, Rules
from kernel.records import EventRow


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(f"sqlite:///{tmp_path / 'ledger.db'}", checkpoint_s=None)
    yield s
    s.close()


def make_queue(store: SqliteStore, redacted: list[str]) -> IngestQueue:
    def redact(text: str) -> str:
        redacted.append(text)
        return text.replace("hunter2", "[REDACTED]")

    ledger = RedactingLedger(
        store, lambda: Rules(version="t"), lambda: datetime(2026, 1, 1, tzinfo=UTC), redact
    )
    return IngestQueue(ledger)


def stored(store: SqliteStore) -> dict[str, EventRow]:
    with store.read() as tx:
        return {e.event.id: e for e in tx.query("event") if isinstance(e, EventRow)}


@pytest.mark.parametrize("aside", [False, True])
def test_a_request_is_prepared_once_redacted_once_and_committed(
    store: SqliteStore, aside: bool
) -> None:
    redacted: list[str] = []
    queue = make_queue(store, redacted)
    ran_on: list[str] = []

    def prepare() -> list[k.Input]:
        ran_on.append(threading.current_thread().name)
        event = Event(source="s", id="e1", type="t", subject="x", summary="pw hunter2")
        return [k.Ingest(event=event)]

    async def main() -> list[str]:
        outs = await queue.submit(prepare, aside=aside)
        return [o.reply.code for o in outs]

    queue.start()
    try:
        assert asyncio.run(main()) == ["recorded"]
    finally:
        queue.stop()
    assert (ran_on[0] == "ingest-writer") is not aside  # aside: on the loop's executor
    assert redacted.count("pw hunter2") == 1
    assert stored(store)["e1"].event.summary == "pw [REDACTED]"


def test_what_prepare_raises_aside_fails_that_request_only(store: SqliteStore) -> None:
    queue = make_queue(store, [])

    def bad() -> list[k.Input]:
        raise ValueError("not JSON")

    async def main() -> tuple[BaseException | list[object], ...]:
        good = [k.Ingest(event=Event(source="s", id="ok", type="t", subject="x"))]
        return tuple(
            await asyncio.gather(
                queue.submit(bad, aside=True), queue.submit(good), return_exceptions=True
            )
        )

    queue.start()
    try:
        failed, fine = asyncio.run(main())
    finally:
        queue.stop()
    assert isinstance(failed, ValueError)
    assert isinstance(fine, list) and set(stored(store)) == {"ok"}
