"""A test hook: ``kill -9`` this process at a named point of the ingest commit protocol.

For crash-consistency tests only (``tests/e2e/test_ingest_crash.py``); never set it on a
real server. ``AUTOLOOP_CRASH_AT=POINT:N``, read once by ``autoloop serve`` at start,
makes the process send itself SIGKILL at the Nth passage through POINT:

- ``before_insert``: the ingest writer holds the ledger's write transaction (and its
  lock) and has inserted nothing yet; with a SQLite ledger, the webhook inbox's writer
  has written nothing of its group yet;
- ``after_insert_before_commit``: the group's facts and records are inserted, the
  transaction is not committed; the inbox's group is written, not synced;
- ``after_commit_before_ack``: the group is committed (synced), no request of it is
  answered;
- ``after_ack``: one request's 2xx answer has been handed to the connection.

The first three pass once per group commit (one transaction of the ingest writer), the
last once per answered request. Unset, each point costs one test of a module global.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

ENV = "AUTOLOOP_CRASH_AT"
BEFORE_INSERT = "before_insert"
AFTER_INSERT_BEFORE_COMMIT = "after_insert_before_commit"
AFTER_COMMIT_BEFORE_ACK = "after_commit_before_ack"
AFTER_ACK = "after_ack"
POINTS = (BEFORE_INSERT, AFTER_INSERT_BEFORE_COMMIT, AFTER_COMMIT_BEFORE_ACK, AFTER_ACK)


class _Armed:
    def __init__(self, point: str, nth: int) -> None:
        self.point = point
        self.nth = nth
        self.seen = 0
        self.lock = threading.Lock()

    def reach(self, point: str) -> None:
        if point != self.point:
            return
        with self.lock:
            self.seen += 1
            if self.seen < self.nth:
                return
            # One line for the test's log, then the same end as an operator's kill -9:
            # no handler, no flush of anything but this line, no atexit.
            sys.stderr.write(f"autoloop: {ENV}: killed at {point} (passage {self.seen})\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)


_armed: _Armed | None = None


def parse(spec: str) -> tuple[str, int]:
    """``POINT:N`` as (point, N); ValueError with one line saying what is wrong."""
    point, _, count = spec.strip().partition(":")
    if point not in POINTS or not count.isdigit() or int(count) < 1:
        raise ValueError(
            f"{ENV}={spec!r} is not valid: use POINT:N with N >= 1 and POINT one of "
            + ", ".join(POINTS)
            + " (a test hook: unset it on a real server)"
        )
    return point, int(count)


def arm(spec: str | None) -> None:
    """Arm the hook from the value of ``AUTOLOOP_CRASH_AT`` (unset or empty: disarm)."""
    global _armed  # noqa: PLW0603  # one process, one hook: a test switch, set at start
    _armed = _Armed(*parse(spec)) if spec else None


def armed() -> bool:
    return _armed is not None


def reach(point: str) -> None:
    """Pass the named point: kill this process if it is armed for this passage."""
    if _armed is not None:
        _armed.reach(point)
