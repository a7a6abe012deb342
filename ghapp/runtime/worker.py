"""The worker loop: claim runnable turns for this worker and run them, a few at a time.

It sleeps until something wakes it: ``wake()`` (ingest and the card routes call it for
every new event in this process, and a finished turn calls it), the instant the last
tick asked for (``wake_at``: the next timer, lease or schedule the kernel knows of), the
end of a failed turn's backoff (its matter's ``retry_after``, read with the runnable
matters), or ``poll_s``. At ``poll_s`` it only reads the last fact's number: another process writing
to a shared ledger (a worker, a CLI answer, a replica) is what nothing here hears of,
and a pass, a tick (a write) then the claims, runs only when something was written,
when woken, when ``wake_at`` came, or ``tick_every_s`` after the last tick (each tick
looks that far ahead for timers and leases). Waiting costs nothing but this one
thread: a card waiting for a person is a row in the ledger, not a process.

Claims are leases (the rule's ``timeout_s`` plus ``AUTOLOOP_LEASE_MARGIN_S``, default
120 s), renewed by heartbeats while the agent runs. When a worker dies mid-turn its
lease lapses, the next tick records the turn as ``lease_expired`` and the matter's
events run again (a retry, bounded by the rule's ``max_retries``; the lapse was its
wait: no backoff). The dead worker's agent is not killed with it: agents run in a
session of their own, so that a timeout can kill the whole group. So before that retry
runs, and whenever a tick sees a lease lapse, the hub kills every process on this host
still carrying the old turn's ``AUTOLOOP_TURN_DIR`` (its whole process group), and waits
until it is gone; the retry never runs beside its orphan on the same host. An orphan on
*another* host (workers on several machines) is not reachable from here: it runs until
its own end, and whatever receipt it might send is refused (its fence is old). A worker
that starts on the host where one was killed does not wait for the lapse: the turns
whose worker process is gone (``worker.json`` in the turn folder) end failed at once,
their leftovers stopped, and run again as the rule's retries allow. If the heartbeat
itself is refused (this worker lost its claim, e.g. after a long pause), the worker
kills its own agent at once.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait

from ghapp.runtime.hub import Hub
from kernel.records import Turn

log = logging.getLogger("autoloop.worker")

TICK_EVERY_S = 30.0  # the longest time between two ticks; each looks this far ahead
MIN_SLEEP_S = 0.01  # a wake_at a hair away (or a pinned clock) must not spin the loop
# Passes woken one after another are this far apart at least: a stream of webhooks wakes
# the loop for every batch, and each pass reads every runnable matter (measured: with a
# few hundred matters waiting, passes at the pace of the stream cost more processor than
# recording it). A turn starts at most this much later.
MIN_PASS_S = 0.05
FAIL_WAIT_S = 0.1  # after a failed pass, the next waits this long, doubled each time...
FAIL_WAIT_MAX_S = 5.0  # ... up to this
FAIL_SAY_S = 60.0  # while passes keep failing, one line this often
STOP_RECORD_S = 10.0  # after a stop now, how long the killed turns have to record their end
FAIL_UNHEALTHY_S = 30.0  # passes failing this long make the worker unhealthy (/healthz)


class WorkerLoop:
    def __init__(
        self,
        hub: Hub,
        *,
        name: str = "local",
        max_parallel: int = 2,
        poll_s: float = 1.0,
        tick_every_s: float = TICK_EVERY_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.hub = hub
        self.name = name
        self.max_parallel = max(1, max_parallel)
        self.poll_s = poll_s
        self.tick_every_s = max(poll_s, tick_every_s)
        self.monotonic = monotonic
        self._ticked = -float("inf")  # monotonic time of the last tick
        self._seen = -1  # the last fact number at the start of the last pass
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=self.max_parallel, thread_name_prefix="turn")
        self._running: dict[str, Future[object]] = {}
        self._turn_of: dict[str, str] = {}  # matter -> the turn running for it
        self._thread: threading.Thread | None = None
        self._failing_since: float | None = None  # monotonic time of the first failed pass
        self._failing = 0
        self._last_error = ""

    def problem(self) -> str:
        """Why this worker runs no turns ("" when it does): its thread ended, or its
        passes have failed for :data:`FAIL_UNHEALTHY_S` (for ``/healthz``: a server whose
        worker had died answered ``{"ok": true}`` for ever)."""
        if self._stop.is_set():
            return ""  # stopped on purpose
        thread = self._thread
        if thread is not None and not thread.is_alive():
            return f"the worker stopped: {self._last_error or 'its thread ended'}"
        since = self._failing_since
        if since is not None and self.monotonic() - since >= FAIL_UNHEALTHY_S:
            return f"the worker's passes fail ({self._failing} in a row): {self._last_error}"
        return ""

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

    def running_turns(self) -> list[str]:
        """The turns this loop started that have not ended (their agents still run)."""
        return sorted(
            self._turn_of.get(matter, "?")
            for matter, fut in list(self._running.items())
            if not fut.done()
        )

    def stop_turns_now(self) -> list[str]:
        """Kill the agents of the turns still running (their process groups): for a
        process told twice to stop. Their claims lapse and the turns run again after the
        next start, as after a crash (at once: no failure of their agents')."""
        left = self.running_turns()
        self.hub.stopped.update(left)  # their ends are no agent's failure: no backoff
        for turn_id in left:
            self.hub.stop_orphans(turn_id)
        # Their threads record each end (a failure, run again at the next start, as the
        # rule's retries allow): left "running", they held their matters until the claim
        # lapsed, the rule's timeout_s plus two minutes after a restart.
        futures = [fut for fut in list(self._running.values()) if not fut.done()]
        wait(futures, timeout=STOP_RECORD_S)
        return left

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # (a bug): said, and /healthz tells
            self._last_error = f"{type(exc).__name__}: {exc}"
            log.exception("the worker stopped: %s", self._last_error)
            raise

    def _run(self) -> None:
        woken = True
        swept = False  # the cards and write-backs a stop left: taken up in the first pass
        failing = 0  # passes failed in a row (the ledger unreachable, a full disk)
        said_at = 0.0
        while not self._stop.is_set():
            began = self.monotonic()
            try:
                if not swept:
                    # In the loop, not before it: a failure here (a dropped connection, a
                    # damaged ledger) ended the thread, and the server ran with no worker.
                    self.hub.take_back()
                    self.hub.sweep_cards()
                    self.hub.sweep_actions()
                    swept = True
                self.look(woken=woken)
            except Exception as exc:  # keep serving; the failure is logged (redacted)
                failing += 1
                self._failing = failing
                self._last_error = f"{type(exc).__name__}: {exc}"
                if self._failing_since is None:
                    self._failing_since = began
                # One line, then one a minute while it lasts (a database that is down
                # failed every pass: a hundred lines a second); the traceback only when
                # debugging. Passes wait longer and longer, up to FAIL_WAIT_MAX_S.
                if failing == 1 or began - said_at >= FAIL_SAY_S:
                    said_at = began
                    again = f" ({failing} passes in a row)" if failing > 1 else ""
                    log.error(
                        "worker loop step failed%s: %s: %s",
                        again,
                        type(exc).__name__,
                        exc,
                        exc_info=log.isEnabledFor(logging.DEBUG),
                    )
                self._stop.wait(min(FAIL_WAIT_S * 2 ** (failing - 1), FAIL_WAIT_MAX_S))
                woken = True  # what came meanwhile is looked at in the next pass
                self._wake.clear()
                continue
            if failing:
                log.warning("worker loop works again after %d failed pass(es)", failing)
                failing = self._failing = 0
                self._failing_since = None
            woken = self._wake.wait(self.sleep_s())
            if woken and (rest := began + MIN_PASS_S - self.monotonic()) > 0:
                self._stop.wait(rest)  # more wake-ups may come meanwhile: one pass for all
            self._wake.clear()

    def look(self, *, woken: bool) -> int:
        """A pass (:meth:`once`) when woken, when a tick is due, or when the ledger changed
        since the last pass began; otherwise one read and nothing else."""
        with self.hub.store.read() as tx:
            mark = tx.last_fact()
        if not (woken or mark != self._seen or self.tick_due()):
            return 0
        self._seen = mark  # what is written from here on is seen at the next look
        return self.once()

    def sleep_s(self) -> float:
        """Until the next look: ``poll_s`` at most, less when a tick (or a failed turn's
        retry) is due sooner."""
        until = min(self.poll_s, self._ticked + self.tick_every_s - self.monotonic())
        wake_at = self.hub.next_wake()
        if wake_at is not None:
            until = min(until, (wake_at - self.hub.clock()).total_seconds())
        return max(MIN_SLEEP_S, until)

    def tick_due(self) -> bool:
        """Whether the kernel asked to be woken by now (or a retry is due), or the last
        tick is too old."""
        if self.monotonic() >= self._ticked + self.tick_every_s:
            return True
        wake_at = self.hub.next_wake()
        return wake_at is not None and wake_at <= self.hub.clock()

    def once(self) -> int:
        """One pass: tick, then start as many runnable turns as there are free slots."""
        self._ticked = self.monotonic()
        self.hub.tick(look_ahead_s=self.tick_every_s)
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
            self._turn_of[m.id] = turn.id
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
        except Exception as exc:  # e.g. the ledger cannot record the end (a full disk)
            # The future's result is never read: say it here, in one line. The turn stays
            # running until its lease lapses, then its matter's events run again.
            log.error("turn %s could not be ended: %s: %s", turn.id, type(exc).__name__, exc)
            return None
        else:
            log.info("turn %s ended: %s", turn.id, out.reply.message)
            return out
        finally:
            self._wake.set()  # a finished turn may have made its matter runnable again


def second_stop() -> threading.Event:
    """An event a second Ctrl-C or SIGTERM sets from now on (for :func:`wait_for_turns`,
    while the rest of the process stops)."""
    asked = threading.Event()

    def _again(signum: int, frame: object) -> None:
        asked.set()

    signal.signal(signal.SIGINT, _again)
    signal.signal(signal.SIGTERM, _again)
    return asked


def wait_for_turns(
    worker: WorkerLoop, within_s: float | None = None, *, now: threading.Event | None = None
) -> int:
    """After a stop, wait for the agents still running, saying so; a second Ctrl-C or
    SIGTERM stops them now. Python would wait for their threads at exit in any case, in
    silence, up to each rule's timeout_s (30 minutes by default), and a second signal did
    nothing. ``within_s``: stop them once that long has passed (a service manager kills
    the process at its own stop timeout, and the turns then stayed "running" until their
    claims lapsed). ``now``: set by a second signal that came while the process was
    stopping its other parts (it was lost). The exit code: 0 once they ended, 1 when
    they were stopped."""
    left = worker.running_turns()
    if not left:
        return 0
    again = now if now is not None else threading.Event()  # (set: asked twice already)

    def _again(signum: int, frame: object) -> None:
        again.set()

    signal.signal(signal.SIGINT, _again)
    signal.signal(signal.SIGTERM, _again)
    bound = (
        f"at most {within_s:g} s" if within_s is not None else "each within its rule's timeout_s"
    )
    log.warning(
        "stopping: waiting for turn(s) %s to end (%s); Ctrl-C (or SIGTERM) again stops "
        "them now (a restart takes them up from the ledger)",
        ", ".join(left), bound,
    )  # fmt: skip
    deadline = None if within_s is None else time.monotonic() + within_s
    while worker.running_turns():
        if again.wait(0.2) or (deadline is not None and time.monotonic() >= deadline):
            stopped = worker.stop_turns_now()
            log.warning(
                "stopped turn(s) %s now: their agents were killed, and each ended failed; "
                "the next start runs them again (as their rule's retries allow)",
                ", ".join(stopped) or "-",
            )
            return 1
    log.info("the running turn(s) ended; stopped")
    return 0
