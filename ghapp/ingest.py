"""Group commit: many requests wait on one transaction, and each is answered after it.

The HTTP handlers hand their inputs to :class:`IngestQueue` and await the outcome. One
writer thread takes everything queued (up to ``max_batch``), decides it in a single
ledger transaction, and only after the commit resolves each request's future. So every
2xx still means "committed", while one fsync covers a whole burst.

Under load (the last commit held more than one request) the writer waits ``gather_s``
(half a millisecond) before taking the next group, so that requests already on their
way join it: a commit has a fixed cost (its pages, its fsync) that a bigger group
shares. A request arriving alone is committed at once.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ghapp.ledger import Ledger, Outcome
from kernel import step as k


@dataclass
class _Item:
    inputs: list[k.Input]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[list[Outcome]]


class IngestQueue:
    def __init__(
        self,
        ledger: Ledger,
        *,
        max_batch: int = 256,
        on_commit: Callable[[list[Outcome]], None] | None = None,
        gather_s: float = 0.0005,
    ) -> None:
        self.ledger = ledger
        self.max_batch = max_batch
        self.on_commit = on_commit
        self._q: queue.Queue[_Item | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="ingest-writer", daemon=True)
        self.batches = 0
        self.items = 0
        self.gather_s = gather_s
        self._last_size = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._q.put(None)
        self._thread.join(timeout=10)

    async def submit(self, inputs: list[k.Input]) -> list[Outcome]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[list[Outcome]] = loop.create_future()
        self._q.put(_Item(inputs, loop, fut))
        return await fut

    def _run(self) -> None:
        while True:
            first = self._q.get()
            if first is None:
                return
            if self._last_size > 1:
                # Under load: give the requests already on their way a moment to join
                # this commit. One commit's fixed cost (its pages, its fsync) then covers
                # more of them. A lone request (light load) is committed at once.
                time.sleep(self.gather_s)
            batch = [first]
            stop = False
            while len(batch) < self.max_batch:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            self._last_size = len(batch)
            self._commit(batch)
            if stop:
                return

    def _commit(self, batch: list[_Item]) -> None:
        flat = [inp for item in batch for inp in item.inputs]
        try:
            outs = self.ledger.decide_many(flat)
        except Exception as exc:
            # Nothing of this batch committed. One bad request must not sink the others:
            # try them one by one, and fail only those that fail alone (the sender retries).
            if len(batch) > 1:
                for item in batch:
                    self._commit([item])
                return
            batch[0].loop.call_soon_threadsafe(_set_exc, batch[0].future, exc)
            return
        self.batches += 1
        self.items += len(batch)
        # One wake-up per event loop for the whole group, not one per request.
        by_loop: dict[
            asyncio.AbstractEventLoop, list[tuple[asyncio.Future[list[Outcome]], list[Outcome]]]
        ] = {}
        i = 0
        for item in batch:
            mine = outs[i : i + len(item.inputs)]
            i += len(item.inputs)
            by_loop.setdefault(item.loop, []).append((item.future, mine))
        for loop, done in by_loop.items():
            loop.call_soon_threadsafe(_set_results, done)
        if self.on_commit is not None:
            self.on_commit(outs)


def _set_results(done: list[tuple[asyncio.Future[list[Outcome]], list[Outcome]]]) -> None:
    for fut, value in done:
        if not fut.done():
            fut.set_result(value)


def _set_exc(fut: asyncio.Future[list[Outcome]], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
