"""The worker loop: claim runnable turns for this worker and run them, a few at a time.

It sleeps on an event that ingest sets ("something new"), with a short timeout so that
timers, schedules and lapsed leases are noticed too. Waiting costs nothing but this
one thread: a card waiting for a person is a row in the ledger, not a process.

Claims are leases (the rule's ``timeout_s`` plus ``AUTOLOOP_LEASE_MARGIN_S``, default
120 s), renewed by heartbeats while the agent runs. When a worker dies mid-turn its lease
lapses, the next tick records the turn as ``lease_expired`` and the matter's events run
again (a retry, bounded by the rule's ``max_retries``). The dead worker's agent is not
killed with it: agents run in a session of their own, so that a timeout can kill the
whole group. So before that retry runs, and whenever a tick sees a lease lapse, the hub
kills every process on this host still carrying the old turn's ``AUTOLOOP_TURN_DIR``
(its whole process group), and waits until it is gone; the retry never runs beside its
orphan on the same host. An orphan on *another* host (workers on several machines) is
not reachable from here: it runs until its own end, and whatever receipt it might send
is refused (its fence is old). If the heartbeat itself is refused (this worker lost its
claim, e.g. after a long pause), the worker kills its own agent at once.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from ghapp.runtime.hub import Hub
from kernel.records import Turn

log = logging.getLogger("autoloop.worker")


class WorkerLoop:
    def __init__(
        self, hub: Hub, *, name: str = "local", max_parallel: int = 2, poll_s: float = 1.0
    ) -> None:
        self.hub = hub
        self.name = name
        self.max_parallel = max(1, max_parallel)
        self.poll_s = poll_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=self.max_parallel, thread_name_prefix="turn")
        self._running: dict[str, Future[object]] = {}
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        # Called for every webhook: a plain read when the loop is already due to run
        # (it clears the flag before it reads the ledger, so nothing is missed).
        if not self._wake.is_set():
            self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"worker-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def run(self) -> None:
        self.hub.sweep_cards()
        self.hub.sweep_actions()
        while not self._stop.is_set():
            try:
                self.once()
            except Exception:  # keep serving; the failure is logged (redacted)
                log.exception("worker loop step failed")
            self._wake.wait(self.poll_s)
            self._wake.clear()

    def once(self) -> int:
        """One pass: tick, then start as many runnable turns as there are free slots."""
        self.hub.tick()
        for matter, fut in list(self._running.items()):
            if fut.done():
                del self._running[matter]
        started = 0
        for m in self.hub.runnable(self.name):
            if len(self._running) >= self.max_parallel:
                break
            if m.id in self._running:
                continue
            turn = self.hub.claim(m.id, self.name)
            if turn is None:
                continue
            self._running[m.id] = self._pool.submit(self._run_turn, turn)
            started += 1
        return started

    def _run_turn(self, turn: Turn) -> object:
        log.info(
            "turn %s started: rule %s, matter %s, %d event(s)%s",
            turn.id,
            turn.rule,
            turn.matter,
            len(turn.events),
            f", resuming {turn.resume}" if turn.resume else "",
        )
        try:
            out = self.hub.run(turn)
            log.info("turn %s ended: %s", turn.id, out.reply.message)
            return out
        finally:
            self._wake.set()  # a finished turn may have made its matter runnable again
