"""Group commit: many requests wait on one transaction, and each is answered after it.

The HTTP handlers hand their inputs to :class:`IngestQueue` and await the outcome. One
writer thread takes everything queued (up to ``max_batch``), decides it in a single
ledger transaction, and only after the commit resolves each request's future. So every
2xx still means "committed", while one fsync covers a whole burst.

Under load (the last commit held more than one request) the writer lets the requests on
their way join the next group: it waits until the event loop has run what it had ready,
at most ``gather_s`` (2 ms). A commit has a fixed cost (its pages, its fsync) that a
bigger group shares. A request arriving alone is committed at once. The writer also
parses and translates the webhook bodies of its group (``submit`` of a function), next
to the rest of their work.

A big request (``submit(..., aside=True)``: the handlers say so for bodies over
:data:`ASIDE_BYTES`) is parsed, translated and redacted on a thread of the event loop's
executor instead, and reaches the writer ready to commit. Its cost grows with its size
(redacting megabytes of text takes seconds), and in the writer it would hold the acks of
every request of its group; aside, the others only share the processor with it.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ghapp.runtime import crash
from ghapp.runtime.ledger import Ledger, Outcome
from kernel import inputs as k

Prepare = Callable[[], list[k.Input]]
#: Bodies over this many bytes are prepared aside, not in the writer (see the docstring).
ASIDE_BYTES = 64 * 1024


@dataclass(slots=True)
class _Item:
    inputs: list[k.Input] | Prepare
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[list[Outcome]]
    cleaned: bool = False  # prepared and cleaned aside: ready to commit


class IngestQueue:
    def __init__(
        self,
        ledger: Ledger,
        *,
        max_batch: int = 256,
        on_commit: Callable[[list[Outcome]], None] | None = None,
        gather_s: float = 0.002,
    ) -> None:
        self.ledger = ledger
        self.max_batch = max_batch
        self.on_commit = on_commit
        # SimpleQueue: put and get in C, no Python-level locking per request
        self._q: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
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

    async def submit(
        self, inputs: list[k.Input] | Prepare, *, aside: bool = False
    ) -> list[Outcome]:
        """Commit ``inputs``, or what ``inputs()`` returns when it is a function: the
        writer then calls it first (a webhook's parsing and translation run there, next
        to the rest of the group's work). What it raises is raised here, and the rest of
        the group commits without it.

        ``aside``: call ``inputs()`` and clean what it returns on the loop's executor
        first, so that a big request costs its group nothing in the writer."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[list[Outcome]] = loop.create_future()
        if aside:
            ready = await loop.run_in_executor(None, self._prepare_aside, inputs)
            self._q.put(_Item(ready, loop, fut, cleaned=True))
        else:
            self._q.put(_Item(inputs, loop, fut))
        return await fut

    def _prepare_aside(self, inputs: list[k.Input] | Prepare) -> list[k.Input]:
        ready = inputs() if callable(inputs) else inputs
        return [self.ledger.clean(inp) for inp in ready]

    def _run(self) -> None:
        while True:
            first = self._q.get()
            if first is None:
                return
            if self._last_size > 1:
                self._gather(first.loop)
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

    def _gather(self, loop: asyncio.AbstractEventLoop) -> None:
        """Under load (the last commit held more than one request), let the requests the
        event loop is reading now join this commit: wait until the loop has run what it
        had ready (a marker queued behind it, three callbacks deep), at most
        ``gather_s``. One commit's fixed cost (its pages, its fsync) is then shared by
        more requests, and the loop is not left idle waiting for a fixed delay."""
        done = threading.Event()

        def mark() -> None:
            loop.call_soon(loop.call_soon, done.set)

        try:
            loop.call_soon_threadsafe(mark)
        except RuntimeError:  # the loop is closed: nothing more will arrive from it
            return
        done.wait(self.gather_s)

    def _commit(self, batch: list[_Item]) -> None:
        ready: list[tuple[_Item, list[k.Input]]] = []
        for item in batch:
            try:
                inputs = item.inputs() if callable(item.inputs) else item.inputs
                if not item.cleaned:
                    inputs = [self.ledger.clean(inp) for inp in inputs]
            except Exception as exc:  # e.g. a body that is not JSON: this request only
                item.loop.call_soon_threadsafe(_set_exc, item.future, exc)
                continue
            ready.append((item, inputs))
        if ready:
            self._decide(ready)

    def _decide(self, ready: list[tuple[_Item, list[k.Input]]]) -> None:
        flat = [inp for _, inputs in ready for inp in inputs]
        try:
            outs = self.ledger.decide_many(flat, cleaned=True, points=crash.reach)
        except Exception as exc:
            # Nothing of this batch committed. One bad request must not sink the others:
            # try them one by one, and fail only those that fail alone (the sender retries).
            if len(ready) > 1:
                for pair in ready:
                    self._decide([pair])
                return
            item = ready[0][0]
            item.loop.call_soon_threadsafe(_set_exc, item.future, exc)
            return
        crash.reach(crash.AFTER_COMMIT_BEFORE_ACK)
        self.batches += 1
        self.items += len(ready)
        # One wake-up per event loop for the whole group, not one per request.
        by_loop: dict[
            asyncio.AbstractEventLoop, list[tuple[asyncio.Future[list[Outcome]], list[Outcome]]]
        ] = {}
        i = 0
        for item, inputs in ready:
            mine = outs[i : i + len(inputs)]
            i += len(inputs)
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
