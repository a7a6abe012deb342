"""The webhook inbox: a delivery is acknowledged once its raw body is durable, no later.

``POST /github/webhook`` verifies the signature and hands the delivery to
:meth:`Inbox.submit`. One writer thread takes everything queued, checks that each body
is a JSON object without building it (:func:`~ghapp.runtime.webhooks.check_json_object`;
one that is not is refused: the route answers 400), checks each delivery
against the inbox and the ledger (a delivery id or a body seen before is a duplicate,
and is not stored again), appends the rest to the inbox (segment files of its own
beside the ledger, :mod:`ghapp.runtime.segments`: one write and one ``fdatasync`` a
group, over blocks filled with zeros beforehand), and only after that sync answers each
request. Nothing else waits for the disk in the ack path.

Right after, a second thread of the same process translates what was appended (the
GitHub source's pure translator), redacts it and decides it in the ledger, in batches;
each batch commits to the ledger first, then its raw records are released from the
inbox.
Given ``sync`` (``autoloop serve`` passes the SQLite ledger's
:meth:`~ghapp.store.sqlite.SqliteStore.sync_log`), those commits do not wait for the
disk: the ledger's log is synced :data:`SYNC_S` later, by a thread of its own, and only
then are the records released. A power cut
loses no delivery (the inbox still holds it), an event is routed without waiting for the
disk (a sync that stalls delays the release of records, not the deciding of the next
deliveries), and the disk sees one ledger sync per interval rather than one per batch.
Anything that acts on a decided event (a turn's claim, an outbox entry) commits durably
first, which syncs the log with it. A segment whose records are all released is
overwritten with zeros (the last one too, so a trickle leaves nothing behind), so
unredacted text does not stay on disk. A batch that cannot be decided (a full disk)
stays in the inbox and is tried again. After a crash, what is still in the inbox is
decided on start, before the server listens: every acknowledged delivery becomes its
events. A record decided twice (a crash between the ledger's commit and the zeroing of
its segment) is a duplicate for the kernel, recorded once. An inbox of an earlier
version (``ledger.inbox.db``, SQLite) is decided the same way at start, then removed.

**Acks first.** Both threads share one core with the event loop (and Python's GIL).
The translator runs while the ack path has nothing for the processor to do: before
each delivery it looks whether a webhook request is in the event loop's hands (from
the moment its whole body is read until its answer is sent: a body that trickles in
asks nothing of the processor, and counted, one slow sender held the deciding of every
delivery back for ``DEFER_MAX_S``),
whether the writer works on a group, and whether a request was answered less than
:data:`QUIET_S` ago (a busy sender's next request follows its answer within
microseconds, so a gap between two requests is not a pause in the stream), and waits
while one is, unless the oldest delivery waiting has waited :data:`DEFER_MAX_S` (10 s).
Requests that only wait for the disk (their group's commit being synced) leave the
processor idle: while at most :data:`EAGER_MAX` deliveries wait, the translator
decides them then (at 200 deliveries a second, a request is in flight most of the
time, nearly all of it waiting for the sync; waiting for a moment with none in flight,
measured: ack -> routed p99 up to 110 ms after a burst, against under 20 ms). A larger
backlog with more than :data:`BURST_IN_FLIGHT` requests in flight is a burst: then
requests waiting for the disk count as work too, and the burst is acknowledged first.
So a burst is acknowledged at the rate the ack path alone allows and decided as soon
as it eases; a load that never eases shares the processor after 10 s. A paced stream of
more than a few hundred deliveries a second leaves no quiet moment either, but few
requests in flight: once its oldest delivery waited :data:`CALM_DEFER_S` (20 ms) while
fewer than :data:`CROWDED` requests were in flight on average, the translator waits
only for the work under way in the ack path, not for a quiet moment (before, such a
stream was decided seconds after its ack; :meth:`Inbox._calm`). Past
:attr:`Inbox.backlog_max`
deliveries waiting, the writer waits instead (backpressure): the inbox never grows
without bound, and a sustained load is acknowledged no faster than it is decided.

The inbox is used with a SQLite ledger. With PostgreSQL, replicas share the ledger but
not a local file, so the webhook route decides before its ack there
(:class:`ghapp.runtime.ingest.IngestQueue`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import queue
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ghapp.runtime import crash
from ghapp.runtime.ledger import Ledger, Outcome, WriteError
from ghapp.runtime.segments import SEGMENT_BYTES, SegmentLog, segments_path
from ghapp.runtime.webhooks import (
    BadBody,
    check_json_object,
    inputs_for,
    mended_text,
    webhook_payload,
)
from kernel import inputs as k
from kernel.model import Event

__all__ = ["BACKLOG_MAX", "Inbox", "InboxError", "Received", "inbox_path", "old_inbox_path"]

log = logging.getLogger("autoloop.inbox")

#: Deliveries waiting for translation before the ack path yields to it (and then waits).
BACKLOG_MAX = 20_000
MEMORY_ITEMS = 128  # waiting deliveries whose body stays in memory too (the rest: on disk)
MEMORY_PAYLOADS = 256  # ... and whose payload decoded before (a form body's) is kept
BATCH = 64  # deliveries decided in one ledger transaction while the ack path is idle
BATCH_BUSY = 8  # ... and while it has work: the GIL is held for less at a time
DEFER_MAX_S = 10.0  # the translator yields to the ack path until a delivery waited this long
CALM_DEFER_S = 0.02  # ... or this long, while the senders do not crowd in (Inbox._calm):
CROWDED = 6  # ... this many requests in flight on average
CROWD_S = 0.1  # ... over the last this long
CALM_PAUSE_S = 0.0005  # then it waits only for the work of the ack path, looking this often
EAGER_MAX = 16  # up to this many waiting, they are decided while the acks wait for the disk
BURST_IN_FLIGHT = 4  # ... and past it too, unless more requests than this are in flight
QUIET_S = 0.002  # ... and while the last webhook was answered less than this long ago
YIELD_MAX_S = 0.004  # the longest it waits between two looks while the ack path is busy
YIELD_BURST_S = 0.016  # ... and during a burst (see Inbox._burst)
GATHER_S = 0.01  # a delivery waits at most this long for others to share its ledger commit
IDLE_S = 0.5  # the writer tidies the inbox once nothing came for this long
SYNC_S = 0.05  # decided records wait at most this long for the ledger's log to be synced
CHUNK = 100  # deliveries per statement (6 parameters each: under SQLite's oldest limit of 999)
_ROW = "(?, ?, ?, ?, ?, ?)"  # a row of six parameters, in the statement below


# ------------------------------------------------------------------------------- inbox


def inbox_path(ledger_file: Path) -> Path:
    """The inbox beside a SQLite ledger: ``ledger.db`` -> ``ledger.inbox/`` (a folder)."""
    return segments_path(ledger_file)


def old_inbox_path(ledger_file: Path) -> Path:
    """Where versions before the segments kept the inbox: ``ledger.inbox.db`` (SQLite)."""
    return ledger_file.with_name(ledger_file.stem + ".inbox" + (ledger_file.suffix or ".db"))


ABANDON_WAIT_S = 60.0  # at a stop, for the translator's batch in hand once it decides no more


class InboxError(Exception):
    """The inbox's files cannot be opened (one line, for ``autoloop serve``)."""


@dataclass(slots=True)
class Received:
    """One verified delivery, as it is kept until it is decided."""

    name: str
    delivery: str
    body: bytes
    form: bool
    digest: str
    payload: dict[str, Any] | None = None  # decoded already (None: decode again)
    checked: bool = False  # decoded once already (a big body, off the event loop)
    rowid: int = 0  # its record's sequence number in the inbox
    acked: float = 0.0  # time.monotonic() of the commit that acknowledged it


@dataclass(slots=True)
class _Ack:
    item: Received
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[bool]


_FLUSH = object()  # asks the writer to release the decided records it holds
_STOP = object()


@dataclass
class InboxStats:
    acked: int = 0
    duplicates: int = 0
    groups: int = 0
    decided: int = 0
    batches: int = 0
    lag: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))  # ack -> decided


class Inbox:
    def __init__(
        self,
        path: Path,
        ledger: Ledger,
        ledger_file: Path,
        *,
        identity: Callable[[], tuple[str | None, int | None]] = lambda: (None, None),
        on_decided: Callable[[list[Event], list[Outcome]], None] = lambda e, o: None,
        backlog_max: int = BACKLOG_MAX,
        max_batch: int = 256,
        gather_s: float = 0.002,
        sync: Callable[[], None] | None = None,
        segment_bytes: int = SEGMENT_BYTES,
    ) -> None:
        self.path = path
        self.ledger = ledger
        self.ledger_file = ledger_file
        self.identity = identity
        self.on_decided = on_decided
        self.backlog_max = backlog_max
        self.max_batch = max_batch
        self.gather_s = gather_s
        self.sync = sync  # makes the ledger's relaxed commits durable (None: none relaxed)
        self._unsynced: list[int] = []  # records decided by relaxed commits, not synced yet
        self._unsynced_since = 0.0
        self._sync_failures = 0
        self._sync_retry_at = 0.0
        self.stats = InboxStats()
        self.write_error: WriteError | None = None  # set while the inbox cannot append
        # counters of the ack path, each written by one thread only (see _ack_busy)
        self.entered = 0  # event loop: webhook requests begun
        self.left = 0  # event loop: webhook requests answered
        self.left_at = float("-inf")  # event loop: time.monotonic() of the last answer
        self.in_flight_s = 0.0  # event loop: the requests in flight, integrated over time
        self.counted_at = time.monotonic()  # ... up to this moment
        self.queued = 0  # event loop: requests handed to the writer
        self.released = 0  # writer: ... and answered by it (their futures resolved)
        self._syncing = False  # writer: a group's commit is under way (waiting for the disk)
        self._q: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._todo: deque[Received] = deque()  # acknowledged, not decided yet (in order)
        self._cv = threading.Condition()
        self._deletes: list[int] = []
        self._deletes_lock = threading.Lock()
        self._commits = 0
        self._tidied = 0  # self._commits when the writer last emptied the log
        self._stopping = False
        self._log = SegmentLog(path, segment_bytes=segment_bytes)
        # What the inbox holds, by record: its delivery id and content digest (the
        # writer's; filled from the files at start). Duplicates are looked up here.
        self._held: dict[int, tuple[str, str]] = {}
        self._held_ids: set[str] = set()
        self._held_digests: set[str] = set()
        self._seen = sqlite3.connect(
            f"file:{ledger_file}?mode=ro", uri=True, timeout=30, check_same_thread=False
        )
        self._writer = threading.Thread(target=self._write_loop, name="inbox-writer", daemon=True)
        self._translator = threading.Thread(
            target=self._decide_loop, name="inbox-translator", daemon=True
        )
        self._syncer = threading.Thread(target=self._sync_loop, name="ledger-sync", daemon=True)
        # translator: whether the senders crowded in over the last CROWD_S (see _calm)
        self._crowded, self._crowd_at, self._crowd_area = True, time.monotonic(), 0.0
        self._translated = False  # the translator is done (stopping): a last sync, then out
        # stopping, and the translator took longer than the stop's wait: it decides no more
        # batches (what it has not decided stays in the inbox for the next start)
        self._abandon = False
        self._halt = threading.Event()
        self._opened = False
        self._started = False

    # -- life -----------------------------------------------------------------------------

    def open(self) -> list[Received]:
        """Open the inbox's files; what a previous process left in them (acknowledged,
        maybe not decided), in the order it was appended. :class:`InboxError` (one line)
        when they cannot be opened or read."""
        if self._opened:
            return []
        self._opened = True
        self._lock_inbox()
        try:
            found = self._log.open()
        except OSError as exc:
            raise self._cannot_open(exc) from exc
        recovered = [
            Received(
                name=r.name,
                delivery=r.delivery,
                body=r.body,
                form=r.form,
                digest=r.digest,
                rowid=r.seq,
            )
            for r in found
        ]
        for r in recovered:
            self._hold(r)
        return recovered

    def _cannot_open(self, exc: OSError) -> InboxError:
        return InboxError(
            f"the webhook inbox {self.path} cannot be opened: "
            f"{exc.strerror or exc} ({type(exc).__name__}); it must be a folder "
            "this user can write"
        )

    def _lock_inbox(self) -> None:
        """Hold the inbox's lock file for as long as this process serves: a second
        ``autoloop serve`` on the same home wrote the same segment files. The system drops
        the lock when the process ends, however it ends."""
        import fcntl  # noqa: PLC0415  # (POSIX; the inbox runs where the hub runs)

        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise self._cannot_open(exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise InboxError(
                f"another autoloop serve (pid {holder}) is using the webhook inbox "
                f"{self.path} of this home: stop it first, or give this one a home of its "
                "own (replicas share a PostgreSQL ledger, not a SQLite home)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _unlock_inbox(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # (the lock goes with it)

    _lock_fd: int | None = None

    def start(self) -> int:
        """Decide what a previous process left in the inbox (before serving), then start
        the threads; the number of deliveries recovered."""
        old = self._decide_old_inbox()
        recovered = self.open()
        if recovered:
            log.info("deciding %d delivery(ies) acknowledged before a restart", len(recovered))
            for start in range(0, len(recovered), BATCH):
                chunk = recovered[start : start + BATCH]
                while not self._decide(chunk):
                    time.sleep(0.5)  # the ledger cannot append: nothing is served until it can
                self._delete_now([r.rowid for r in chunk])
        self._log.start()  # (what was emptied is zeroed or removed before it returns)
        self._started = True
        self._writer.start()
        self._translator.start()
        if self.sync is not None:
            self._syncer.start()
        return old + len(recovered)

    def _decide_old_inbox(self) -> int:
        """Decide what an earlier version left in its SQLite inbox, then remove it."""
        old = old_inbox_path(self.ledger_file)
        if not old.exists():
            return 0
        conn = sqlite3.connect(str(old), timeout=30, isolation_level=None)
        try:
            conn.execute("PRAGMA secure_delete=ON")
            rows = conn.execute(
                "SELECT id, delivery, digest, name, form, body FROM inbox ORDER BY id"
            ).fetchall()
        except sqlite3.Error as exc:  # no table: nothing was ever appended
            log.info("the inbox of an earlier version holds nothing to decide (%s)", exc)
            rows = []
        items = [
            Received(name=r[3], delivery=r[1], body=r[5], form=bool(r[4]), digest=r[2], rowid=r[0])
            for r in rows
        ]
        if items:
            log.info(
                "deciding %d delivery(ies) acknowledged before a restart, from %s "
                "(the inbox of an earlier version)",
                len(items),
                old.name,
            )
        for start in range(0, len(items), BATCH):
            chunk = items[start : start + BATCH]
            while not self._decide(chunk):
                time.sleep(0.5)  # the ledger cannot append: nothing is served until it can
        with contextlib.suppress(sqlite3.Error):  # its bodies zeroed before the file goes
            conn.execute("DELETE FROM inbox")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                Path(f"{old}{suffix}").unlink()
        log.info("%s removed: the inbox is now %s/", old.name, self.path.name)
        return len(items)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop taking deliveries, decide every one acknowledged, and close."""
        if self._started:
            self._q.put(_STOP)
            self._writer.join(timeout)
            with self._cv:
                self._stopping = True
                self._cv.notify_all()
            self._translator.join(timeout)
            if self._translator.is_alive():
                # Closing the files under it made every body it had still to read look
                # damaged: thousands of acknowledged deliveries were recorded as "not
                # stored". It ends its batch in hand, decides no other, and the rest stay
                # in the inbox (acknowledged, durable) for the next start to decide.
                with self._cv:
                    self._abandon = True
                    self._cv.notify_all()
                    left = len(self._todo)
                log.warning(
                    "the stop's %g s were not enough to decide every delivery acknowledged: "
                    "about %d stay in the inbox, and the next start decides them",
                    timeout, left,
                )  # fmt: skip
                self._translator.join(ABANDON_WAIT_S)  # its batch in hand (a ledger's wait)
                if self._translator.is_alive():
                    # Still in the ledger's hands: the files stay open under it (the
                    # process ends; what is in them is the next start's).
                    log.error(
                        "the inbox's translator did not end within %g s more: its files are "
                        "left open as they are, for the next start",
                        ABANDON_WAIT_S,
                    )
                    return  # (its lock goes with the process)
            with self._cv:
                self._translated = True
                self._cv.notify_all()
            if self._syncer.is_alive():
                self._syncer.join(timeout)
            self._halt.set()
        with self._deletes_lock:
            leftover, self._deletes = self._deletes, []
        if leftover:
            self._delete_now(leftover)
        self._log.close()  # (the zeros it wrote are synced first)
        self._seen.close()
        self._unlock_inbox()

    def waiting(self) -> int:
        """Deliveries acknowledged and not decided yet."""
        return len(self._todo)

    def settle(self, timeout: float = 10.0, *, released: bool = True) -> bool:
        """Wait until every acknowledged delivery is decided and (``released``) its record
        released, which may wait for the ledger's next sync (tests, benches)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while self._todo or self._busy_deciding or (released and self._log.waiting() > 0):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(min(left, 0.05))
        return True

    _busy_deciding = False

    # -- the ack path ---------------------------------------------------------------------

    async def submit(self, item: Received) -> bool:
        """Append ``item`` durably; True when it is a duplicate (nothing appended).
        Raises what the append raised (the inbox cannot write: answer 503)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        self.queued += 1
        self._q.put(_Ack(item, loop, fut))
        return await fut

    def request_in(self) -> None:
        """The webhook route read a request's body (event loop thread)."""
        self._count_in_flight()
        self.entered += 1

    def request_out(self) -> None:
        """The webhook route answered it (event loop thread). The translator, waiting
        for a quiet moment, looks again within :data:`QUIET_S`."""
        self.left_at = self._count_in_flight()
        self.left += 1

    def _count_in_flight(self) -> float:
        """Add the requests in flight since the last count to the integral (see _calm);
        the time of this count (event loop thread)."""
        now = time.monotonic()
        self.in_flight_s += (now - self.counted_at) * (self.entered - self.left)
        self.counted_at = now
        return now

    def _ack_busy(self, *, calm: bool = False) -> bool:
        """Whether the ack path has work for the processor: a request in the event loop's
        hands (its body being read or checked, or its answer being sent), the writer
        working on a group (anything but waiting for its commit's sync), or an answer
        less than :data:`QUIET_S` ago (more are likely on their way). Requests waiting only
        for the disk need no processor: the translator uses that time. ``calm`` (see
        :meth:`_calm`): only the work under way counts."""
        parked = self.queued - self.released  # with the writer, queued or in its group
        if calm:
            return self.entered - self.left != parked or (parked > 0 and not self._syncing)
        if self._burst():  # the acks first, all of them
            working = self.entered != self.left or parked > 0
        else:
            working = self.entered - self.left != parked or (parked > 0 and not self._syncing)
        return working or time.monotonic() - self.left_at < QUIET_S

    def _burst(self) -> bool:
        """A burst, acknowledged first: more than :data:`EAGER_MAX` deliveries wait and
        more than :data:`BURST_IN_FLIGHT` requests are in flight. A backlog with few in
        flight is one a moment's stall of the disk left in a paced stream: at 200 a
        second with acks of 8 ms one request is nearly always in flight, and counted as
        work, it kept the backlog waiting for seconds (measured: 2.4 s p50 after one
        stall of 300 ms, against 14 ms without it)."""
        return len(self._todo) > EAGER_MAX and self.entered - self.left > BURST_IN_FLIGHT

    def _overdue(self) -> bool:
        """The backlog is at its limit, or its oldest delivery waited ``DEFER_MAX_S``:
        the translator stops yielding (a steady load must not starve it)."""
        todo = self._todo
        if len(todo) >= self.backlog_max:
            return True
        return bool(todo) and time.monotonic() - todo[0].acked > DEFER_MAX_S

    def _calm(self) -> bool:
        """Whether the oldest delivery waiting waited :data:`CALM_DEFER_S` while the
        senders do not crowd in: fewer than :data:`CROWDED` requests in flight on average
        over the last :data:`CROWD_S`. Then the translator waits only while a request is
        in the event loop's hands or the writer works, not for a quiet moment.

        Senders that crowd in (a burst, or many connections each sending its next
        request as soon as the last is answered) are acknowledged first: their
        deliveries are decided as they ease, or after ``DEFER_MAX_S``. A paced stream
        keeps few in flight (each for the sync of a group, a few milliseconds), yet it
        leaves no quiet moment either (at 1,000 a second, an answer every millisecond):
        without this look, its events were decided seconds after their ack, though most
        of the processor was idle (measured: ack -> routed p50 0.96 s at 1,000/s, 4.1 s
        at 1,500/s, against 3.4 ms at 200/s). Translator thread only."""
        todo = self._todo
        now = time.monotonic()
        if not todo or now - todo[0].acked <= CALM_DEFER_S:
            return False
        took = now - self._crowd_at
        if took >= CROWD_S:
            area = self.in_flight_s + (now - self.counted_at) * (self.entered - self.left)
            # Not looked at for a while (nothing waited): a new window, crowded until it
            # shows otherwise (a burst after a pause is not mistaken for calm).
            fresh = took > 2 * CROWD_S
            self._crowded = fresh or (area - self._crowd_area) / took >= CROWDED
            self._crowd_at, self._crowd_area = now, area
        return not self._crowded

    def _write_loop(self) -> None:
        last = 0
        while True:
            try:
                first = self._q.get(timeout=IDLE_S)
            except queue.Empty:
                self._tidy()
                continue
            if first is _STOP:
                self._flush_deletes()
                return
            while len(self._todo) >= self.backlog_max and not self._stopping:
                with self._cv:  # backpressure: the translator catches up first
                    self._cv.wait(0.05)
            if last > 1 and isinstance(first, _Ack):
                self._gather(first.loop)
            batch: list[_Ack] = [first] if isinstance(first, _Ack) else []
            stop = False
            while len(batch) < self.max_batch:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                if isinstance(nxt, _Ack):
                    batch.append(nxt)
            last = len(batch)
            if batch:
                self._append(batch)
            else:
                self._flush_deletes()
            if stop:
                self._flush_deletes()
                return

    def _gather(self, loop: asyncio.AbstractEventLoop) -> None:
        """Under load (the last group held more than one request), let the requests the
        event loop is reading now join this group: wait until the loop has run what it
        had ready (a marker queued behind it), at most ``gather_s``."""
        done = threading.Event()

        def mark() -> None:
            loop.call_soon(loop.call_soon, done.set)

        try:
            loop.call_soon_threadsafe(mark)
        except RuntimeError:  # the loop is closed
            return
        done.wait(self.gather_s)

    def _hold(self, item: Received) -> None:
        self._held[item.rowid] = (item.delivery, item.digest)
        self._held_ids.add(item.delivery)
        if item.digest:
            self._held_digests.add(item.digest)

    def _forget(self, rowids: list[int]) -> None:
        """Records released: no longer in the inbox."""
        for rowid in rowids:
            held = self._held.pop(rowid, None)
            if held is not None:
                self._held_ids.discard(held[0])
                self._held_digests.discard(held[1])

    def _in_ledger(self, items: list[Received]) -> set[int]:
        """The positions in ``items`` of deliveries the ledger recorded already (by
        delivery id, or by content under another id): one query for a group, so that the
        writer gives up the GIL once for it rather than twice a delivery."""
        found: set[int] = set()
        for start in range(0, len(items), CHUNK):
            part = items[start : start + CHUNK]
            params: list[object] = []
            for i, item in enumerate(part, start):
                key = "event:github:" + item.delivery
                body = "content:github:" + item.digest
                params += [i, key, key + ":", key + ";", body, body + "\U0010ffff"]
            rows = self._seen.execute(_seen_sql(len(part)), params).fetchall()
            found.update(row[0] for row in rows)
        return found

    def _append(self, batch: list[_Ack]) -> None:
        try:
            self._append_group(batch)
        finally:
            self.released += len(batch)  # each one answered (a result or an error)

    def _append_group(self, batch: list[_Ack]) -> None:
        self._flush_deletes()  # (a segment emptied by them may take this group)
        dup: list[bool | None] = []  # per request: a duplicate; None: refused (answered)
        for ack in batch:
            item = ack.item
            if item.payload is None and not item.checked:
                try:  # checked here, beside the group's other work, not in the loop
                    if item.form:
                        item.payload = webhook_payload(item.body, form=True)
                    else:  # the translator decodes it: nothing built twice
                        check_json_object(item.body)
                    item.checked = True
                except BadBody as exc:
                    ack.loop.call_soon_threadsafe(_set_exc, ack.future, exc)
                    dup.append(None)
                    continue
            dup.append(item.delivery in self._held_ids or item.digest in self._held_digests)
        fresh: list[Received] = []
        now = time.time()
        appended: list[int] = []
        try:
            asked = [i for i, d in enumerate(dup) if d is False]
            recorded = self._in_ledger([batch[i].item for i in asked])
            ids: set[str] = set()
            digests: set[str] = set()
            for n, i in enumerate(asked):
                item = batch[i].item
                if n in recorded or item.delivery in ids or item.digest in digests:
                    dup[i] = True  # (twice in this group: the first one is appended)
                    continue
                ids.add(item.delivery)
                digests.add(item.digest)
                fresh.append(item)
            crash.reach(crash.BEFORE_INSERT)
            if fresh:
                appended, seg = self._log.append(
                    [(i.name, i.delivery, i.digest, i.form, i.body) for i in fresh], now
                )
                for item, seq in zip(fresh, appended, strict=True):
                    item.rowid = seq
            crash.reach(crash.AFTER_INSERT_BEFORE_COMMIT)
            if fresh:
                self._syncing = True
                try:
                    self._log.sync(seg)
                finally:
                    self._syncing = False
        except Exception as exc:
            if appended:  # written, not known durable: not acknowledged, so not kept
                with contextlib.suppress(OSError):
                    self._log.release(appended)
            self.write_error = WriteError(message=f"{type(exc).__name__}: {exc}", at=time.time())
            for ack, d in zip(batch, dup, strict=True):
                if d is not None:
                    ack.loop.call_soon_threadsafe(_set_exc, ack.future, exc)
            return
        for item in fresh:
            self._hold(item)
        self._commits += 1
        crash.reach(crash.AFTER_COMMIT_BEFORE_ACK)
        if fresh:
            self.write_error = None
        acked = time.monotonic()
        self.stats.groups += 1
        self.stats.acked += len(fresh)
        self.stats.duplicates += dup.count(True)
        if fresh:
            with self._cv:
                for item in fresh:
                    item.acked = acked
                    if len(self._todo) >= MEMORY_PAYLOADS:  # decoded again when due
                        item.payload = None
                    if len(self._todo) >= MEMORY_ITEMS:  # on disk only: read back when due
                        item.body = b""
                    self._todo.append(item)
                self._cv.notify_all()
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[bool], bool]]] = {}
        for ack, is_dup in zip(batch, dup, strict=True):
            if is_dup is not None:
                by_loop.setdefault(ack.loop, []).append((ack.future, is_dup))
        for loop, done in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a loop closed meanwhile
                loop.call_soon_threadsafe(_set_results, done)

    def _flush_deletes(self) -> None:
        with self._deletes_lock:
            deletes, self._deletes = self._deletes, []
        if deletes:
            self._delete_now(deletes)

    def _delete_now(self, rowids: list[int]) -> None:
        """Release decided records (the ledger holds them durably): a segment left with
        none is zeroed. The zeros are synced with the next group written to it, or once
        the stream pauses; lost to a power cut, they only let those records be decided
        again (duplicates, recorded once)."""
        self._commits += 1
        self._forget(rowids)
        try:
            self._log.release(rowids)
        except OSError as exc:
            log.warning("decided inbox records not zeroed yet (%s); tried again later", exc)

    # -- deciding -------------------------------------------------------------------------

    def _decide_loop(self) -> None:
        failures = 0
        while True:
            with self._cv:
                while not self._todo and not self._stopping:
                    self._cv.wait(0.5)
                if not self._todo or self._abandon:  # (and stopping)
                    return
                # Each durable batch is a ledger commit, an fsync beside the inbox's:
                # while the ack path is active, let a few more arrive first (at most
                # GATHER_S). Relaxed commits wait for no disk: nothing to share.
                due = self._todo[0].acked + (GATHER_S if self.sync is None else 0.0)
                while (
                    len(self._todo) < BATCH
                    and not self._stopping
                    and self._ack_busy()
                    and (left := due - time.monotonic()) > 0
                ):
                    self._cv.wait(left)
            self._yield()
            size = BATCH_BUSY if self._ack_busy() else BATCH
            with self._cv:
                batch = [self._todo[i] for i in range(min(size, len(self._todo)))]
                self._busy_deciding = True
            ok = False
            try:
                ok = self._decide(batch, polite=True)
            finally:
                with self._cv:
                    if ok:
                        for _ in batch:
                            self._todo.popleft()
                        if self.sync is not None:  # released once the ledger's log is synced
                            if not self._unsynced:
                                self._unsynced_since = time.monotonic()
                            self._unsynced.extend(item.rowid for item in batch)
                    self._busy_deciding = False
                    self._cv.notify_all()
            if ok:
                failures = 0
                if self.sync is None:
                    with self._deletes_lock:
                        self._deletes.extend(item.rowid for item in batch)
                    self._q.put(_FLUSH)
            elif self._stopping:
                return  # the records stay in the inbox: the next start decides them
            else:
                failures += 1
                self._halt.wait(0.05 * 2 ** min(failures, 5))  # at most 1.6 s apart

    def _sync_loop(self) -> None:
        """The ledger's log is synced by a thread of its own, beside the deciding: a disk
        that stalls delays the release of decided records, never the deciding (and so
        the routing) of the next deliveries. A sync comes :data:`SYNC_S` after the oldest
        record not synced was decided, even when nothing else waits (a sync as soon as
        the backlog emptied was one a delivery at 200 a second: 162 us of system time a
        delivery, against 69 with one an interval); after the translator stops, one
        last."""
        while True:
            with self._cv:
                while True:
                    last = self._translated
                    if self._unsynced:
                        now = time.monotonic()
                        due = self._unsynced_since + SYNC_S
                        due = max(due, self._sync_retry_at)
                        if last or now >= due:
                            break
                        self._cv.wait(due - now)
                    elif last:
                        return
                    else:
                        self._cv.wait(0.5)
                rowids, self._unsynced = self._unsynced, []
            if not self._sync_decided(rowids):
                with self._cv:  # they stay, to be synced at the next try
                    self._unsynced = rowids + self._unsynced
                    self._unsynced_since = time.monotonic()
                if last:
                    return  # (the next start decides them again: duplicates, recorded once)

    def _sync_decided(self, rowids: list[int]) -> bool:
        """Sync the ledger's log, then hand the records its relaxed commits decided to the
        writer to release; False if it cannot be synced (they stay: decided again after
        a crash, duplicates recorded once)."""
        if self.sync is None:
            return True
        try:
            self.sync()
        except OSError as exc:
            self._sync_failures += 1
            if self._sync_failures == 1:
                log.warning(
                    "the ledger's log cannot be synced (%s): the records it decided stay in "
                    "the inbox until it can",
                    exc,
                )
            wait = min(1.6, 0.05 * 2 ** min(self._sync_failures, 5))
            self._sync_retry_at = time.monotonic() + wait
            return False
        if self._sync_failures:
            log.info("the ledger's log is synced again (%d failed tries)", self._sync_failures)
            self._sync_failures = 0
        with self._deletes_lock:
            self._deletes.extend(rowids)
        self._q.put(_FLUSH)
        return True

    def _yield(self) -> None:
        """Acks first: wait while the ack path has work for the processor, unless the
        backlog is overdue (or the inbox is stopping): just past the quiet moment after
        the last answer, or, while requests are in flight, after 2, then every 4 ms
        (during a burst: after 2, 4, 8, then every 16 ms). Once calm (:meth:`_calm`),
        only while the ack path works, looking every :data:`CALM_PAUSE_S`."""
        wait = QUIET_S
        while not self._stopping and not self._overdue():
            calm = self._calm()
            if not self._ack_busy(calm=calm):
                return
            if calm:
                pause = CALM_PAUSE_S
            elif self.entered == self.left and self._q.empty():
                # only the quiet moment after the last answer is left to wait for
                pause = max(QUIET_S / 10, QUIET_S - (time.monotonic() - self.left_at))
            else:
                # Each look costs the ack path a GIL hand-off: while requests stay in
                # flight, look less and less often (a pause is seen within YIELD_MAX_S).
                most = YIELD_BURST_S if self._burst() else YIELD_MAX_S
                pause, wait = wait, min(wait * 2, most)
            # A sleep, not a wait on the condition: the writer's commits (which notify
            # it) come while requests are in flight, never in the pause looked for.
            time.sleep(pause)

    def _bodies(self, batch: list[Received]) -> None:
        """Read back the bodies kept on disk only."""
        for item in batch:
            if not item.body and self._log.holds(item.rowid):
                item.body = self._log.body(item.rowid)

    def _decide(self, batch: list[Received], *, polite: bool = False) -> bool:
        """Translate, redact and decide ``batch`` in one ledger transaction; False when the
        ledger cannot append (the records stay, to be tried again)."""
        if self._log.closed:  # its bodies cannot be read: not damage, the records stay
            return False
        self._bodies(batch)
        slug, app_id = self.identity()
        found: list[Event | None] = []  # per input: the event it records (None: ignored)
        inputs: list[k.Input] = []
        for item in batch:
            if polite:
                self._yield()
            try:
                payload = item.payload or webhook_payload(item.body, form=item.form)
                events, made = inputs_for(
                    item.name, item.delivery, payload, item.digest, app_slug=slug, app_id=app_id
                )
            except Exception as exc:  # checked at the ack: only a damaged record gets here
                log.error(
                    "inbox record %d (%s %s) cannot be read: recorded as ignored, its body "
                    "dropped: %s",
                    item.rowid, item.name, _storable(item.delivery), exc,
                )  # fmt: skip
                found.append(None)
                inputs.append(self.ledger.clean(_aside(item, f"body cannot be read: {exc}")))
                continue
            found.extend(events if events else [None])
            inputs.extend(self.ledger.clean(i) for i in made)
        try:
            relaxed = polite and self.sync is not None  # durable at start (recovery)
            outs = (
                self.ledger.decide_many(inputs, cleaned=True, durable=not relaxed) if inputs else []
            )
        except Exception as exc:
            if not _passing(exc):  # the same inputs fail the same way next time
                if len(batch) > 1:  # one delivery no ledger takes holds back no other
                    return all(self._decide([item], polite=polite) for item in batch)
                return self._set_aside(batch[0], exc)
            log.error(
                "%d acknowledged delivery(ies) not decided yet, kept in the inbox: %s: %s",
                len(batch),
                type(exc).__name__,
                exc,
            )
            return False
        done = time.monotonic()
        self.stats.decided += len(batch)
        self.stats.batches += 1
        for item in batch:
            item.payload, item.body = None, b""
            if item.acked:
                self.stats.lag.append(done - item.acked)
        recorded = [
            e
            for e, o in zip(found, outs, strict=True)
            if e is not None and o.reply.code == "recorded"
        ]
        self.on_decided(recorded, outs)
        return True

    def _set_aside(self, item: Received, exc: Exception) -> bool:
        """Record ``item`` as ignored, with why its events could not be stored: known (a
        redelivery is a duplicate, the sweeper does not ask for it), logged, and no longer
        tried; its body goes with its record. False when even that cannot be stored."""
        inp = _aside(item, f"{type(exc).__name__}: {exc}")
        try:
            outs = self.ledger.decide_many([self.ledger.clean(inp)], cleaned=True)
        except Exception as again:
            log.error(
                "inbox record %d (%s %s) can be neither decided nor set aside, kept: %s: %s",
                item.rowid, item.name, _storable(item.delivery), type(again).__name__, again,
            )  # fmt: skip
            return False
        log.error(
            "delivery %s (%s) set aside, recorded as ignored and its body dropped: no "
            "ledger stores its events (%s: %s)",
            _storable(item.delivery), item.name, type(exc).__name__, exc,
        )  # fmt: skip
        self.stats.decided += 1
        self.stats.batches += 1
        item.payload, item.body = None, b""
        self.on_decided([], outs)
        return True

    # -- pauses ---------------------------------------------------------------------------

    def _tidy(self) -> None:
        """Once the stream pauses (nothing queued for :data:`IDLE_S`) with the inbox
        empty: sync the zeros written over decided records, remove the spare segments a
        backlog took, and give the memory it took back to the system."""
        if self._commits == self._tidied or self._log.waiting() > 0 or self._todo:
            return
        self._tidied = self._commits
        self._log.tidy()
        _give_back_memory()

    def rows(self) -> Iterator[tuple[str, str]]:
        """(delivery, digest) of every record the inbox holds (tests)."""
        yield from list(self._held.values())


def _aside(item: Received, why: str) -> k.Input:
    """The input that records ``item`` as ignored, its events not stored, and why: known
    (a redelivery is a duplicate; the sweeper does not ask for it) and shown (``why``)."""
    own = Event(source="github", id=_storable(item.delivery), type=_storable(item.name),
                subject="github")  # fmt: skip
    return k.Ingest(
        event=own, ignore=f"not stored: {why}"[:300], content_key="github:" + item.digest
    )


def _passing(exc: BaseException) -> bool:
    """Whether the ledger may take the same inputs later: the disk, the database server,
    a lock (tried again). A wrong value is not: a type the codec refuses, PostgreSQL's
    ``DataError`` (a NUL character), a lone surrogate; a batch that holds one is decided
    a delivery at a time, and the one is set aside rather than tried for ever."""
    if isinstance(exc, TypeError | ValueError | LookupError | RecursionError | AttributeError):
        return False
    return not any(t.__name__ == "DataError" for t in type(exc).__mro__)


def _storable(text: str) -> str:
    """``text`` as every ledger stores it: no NUL, no lone surrogate (each as U+FFFD)."""
    return mended_text(text.replace("\x00", "\ufffd"))


LOCK_FILE = "serve.lock"  # held by the process that serves from the inbox (its pid inside)

_malloc_trim: Callable[[int], int] | bool | None = False  # False: not looked up yet


def _give_back_memory() -> None:
    """Return the heap a backlog's bodies took to the system once it is gone (glibc's
    ``malloc_trim``; bodies over a few hundred bytes are the C library's, which keeps
    freed memory otherwise: measured 5 MB of the idle RSS after a 2,000-delivery
    backlog). Nothing where the C library has no such call."""
    global _malloc_trim  # noqa: PLW0603  # looked up once, at the first pause
    if _malloc_trim is False:
        _malloc_trim = None
        with contextlib.suppress(OSError, AttributeError):
            import ctypes  # noqa: PLC0415  # only here, once

            _malloc_trim = ctypes.CDLL(None).malloc_trim  # the process's own C library
    if callable(_malloc_trim):
        _malloc_trim(0)


@functools.cache
def _seen_sql(n: int) -> str:
    """Which of ``n`` deliveries the ledger holds: by delivery id (its events' keys are
    the id, or the id then ``:``) or by content (the digest, then the event's suffix)."""
    rows = ",".join([_ROW] * n)
    return (
        f"WITH v(i, k, lo, hi, blo, bhi) AS (VALUES {rows}) SELECT i FROM v WHERE "  # noqa: S608  # placeholders only
        "EXISTS (SELECT 1 FROM facts WHERE fkey = v.k) "
        "OR EXISTS (SELECT 1 FROM facts WHERE fkey >= v.lo AND fkey < v.hi) "
        "OR EXISTS (SELECT 1 FROM fact_keys WHERE fkey >= v.blo AND fkey < v.bhi)"
    )


def _set_results(done: list[tuple[asyncio.Future[bool], bool]]) -> None:
    for fut, value in done:
        if not fut.done():
            fut.set_result(value)


def _set_exc(fut: asyncio.Future[bool], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
