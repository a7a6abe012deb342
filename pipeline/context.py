"""The working state of one decision: the delivery as it changes, the effects so far,
and what the delivery waits for. Shared by :mod:`pipeline.machine` and
:mod:`pipeline.handlers`; nothing here outlives one call to ``decide``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from kernel.durations import iso
from pipeline.delivery import Delivery
from pipeline.effects import Effect
from pipeline.policy import Policy
from pipeline.snapshot import PullSnapshot
from pipeline.stages import CardKind

__all__ = ["Ctx", "WaitOn", "Waiting", "instant", "probe_delay", "short", "span"]

WaitOn = Literal[
    "webhook",  # a GitHub webhook about the PR, its checks, reviews or deployments
    "timer",  # only ``wake_at`` moves it
    "agent",  # the review agent's findings
    "answer",  # a person's answer to the delivery's card
    "write",  # the outbox's answer to one of our writes
    "line",  # another delivery on the same base leaving ``merge``
    "policy",  # a push to the default branch that fixes the policy
]

# Waits with no deadline of their own in the policy.
REVIEW_TIMEOUT = timedelta(hours=2)  # the review agent's findings
READY_GRACE = timedelta(minutes=10)  # GitHub to show the PR ready after we asked
UPDATE_TIMEOUT = timedelta(minutes=15)  # GitHub to push the branch update we asked for
MERGE_ANSWER_GRACE = timedelta(minutes=10)  # an unanswered merge is then ambiguous
# An unclear merge is read back for RECONCILE_GRACE, 2 s after the answer, then with a
# doubling step of at most RECONCILE_STEP. The merge line of its base waits meanwhile, so
# the grace is short: a merge that happens late cannot make a second one merge the PR
# again (GitHub refuses to merge a merged PR, and the next merge is guarded by the head).
RECONCILE_GRACE = timedelta(seconds=30)
RECONCILE_FIRST = timedelta(seconds=2)
RECONCILE_STEP = timedelta(seconds=15)
UNKNOWN_POLLS = 10  # re-reads while GitHub computes mergeability, then a card
UNKNOWN_FIRST_S, UNKNOWN_MAX_S = 5, 60
# The live version is read soon after the deployment (PROBE_FIRST_S), then with a
# doubling backoff up to PROBE_MAX_S; a short deploy ``timeout`` shrinks both (a twentieth
# and a tenth of it), so that any timeout leaves room for about ten answers, but the
# version URL is never read more than once every PROBE_MIN_S.
PROBE_MIN_S, PROBE_FIRST_S, PROBE_MAX_S = 1.0, 5.0, 300.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """What a delivery at rest waits for: ``on`` says who brings it, ``what`` says it to
    people (the check run's title and the sticky comment)."""

    on: WaitOn
    what: str


class Ctx:
    def __init__(self, d: Delivery, pr: PullSnapshot, policy: Policy, now: datetime) -> None:
        self.d = d
        self.pr = pr
        self.policy = policy
        self.now = now
        self.at = iso(now)
        self.effects: list[Effect] = []
        self.waiting: Waiting | None = None
        self.wake: datetime | None = None
        self.note = ""  # why the next move happens, for the history
        self.card: tuple[CardKind, str, str] | None = None  # raised by the next move

    def set(self, **changes: Any) -> None:
        self.d = replace(self.d, **changes)

    def emit(self, effect: Effect) -> None:
        self.effects.append(effect)

    def wait(self, on: WaitOn, what: str, until: datetime | None = None) -> None:
        self.waiting = Waiting(on=on, what=what)
        self.wake = until

    def raise_card(self, kind: CardKind, title: str, text: str) -> None:
        self.card = (kind, title, text)

    def tries(self) -> int:
        """The next write number of this run (it numbers the write's key)."""
        n = self.d.tries + 1
        self.set(tries=n)
        return n

    def deadline(self) -> datetime | None:
        return None if self.d.deadline is None else instant(self.d.deadline)

    def past(self, moment: datetime | None) -> bool:
        return moment is not None and self.now >= moment


def probe_delay(n: int, timeout_s: float) -> float:
    """Seconds from the ``n``-th read of the live version of one watch (0: the first) to
    the next, for a deploy ``timeout`` of ``timeout_s``: 5 s, 10 s, 20 s... up to 5 minutes
    for the default hour; 1 s apart for a timeout of 10 s or less."""
    first = min(max(timeout_s / 20, PROBE_MIN_S), PROBE_FIRST_S)
    cap = min(max(timeout_s / 10, PROBE_MIN_S), PROBE_MAX_S)
    return float(min(first * 2 ** min(max(n, 0), 16), cap))


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


def short(sha: str | None) -> str:
    return (sha or "")[:7]


def times(n: int) -> str:
    """``once``, ``2 times``: a count as a sentence says it."""
    return "once" if n == 1 else f"{n} times"


def in_a_row(n: int) -> str:
    """`` 2 times in a row`` after "reported X"; nothing for one answer (it said "1 times
    in a row")."""
    return "" if n == 1 else f" {n} times in a row"


def span(seconds: float) -> str:
    """``2h``, ``1h30m``, ``90s`` style, as the policy writes durations."""
    left = int(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(parts) or "0s"
