"""``/answer CARD N`` comments on GitHub become answers to cards.

A recorded ``issue_comment.created`` event whose body has a line ``/answer c<id> <n>``
(any case; the rest of the comment is ignored) from a person with write, maintain or
admin permission on the repository (asked of GitHub at that moment, never cached)
becomes ``hub.answer(card, n, by=login, via="github")``, and the worker is woken so
the agent resumes at once. Anyone else, or an answer the kernel refuses (unknown card,
already answered, not an option), gets a short reply comment saying why, and nothing
changes. The card must belong to a matter about the same repository (or to a delivery
pipeline ``deliver/owner/repo#N`` of it): write access to one repository does not answer
questions about another.

This runs off the request path: the webhook handler has committed the event and only
puts it on this desk's queue (``server.on_comment``); one background thread works the
queue. At start, and again every ``every_s``, the thread also sweeps the ledger's recent
``issue_comment.created`` events for ``/answer`` lines it has not handled (the process
may have stopped between the commit and the answer).

Knowing what was handled, without a table of our own: a comment is handled when

- a reply to it exists on GitHub: our comment holding ``<!-- autoloop:reply=<id> -->``
  (replies are sticky: found by that marker before one is written, so a retry never
  posts twice); or
- its card was answered through GitHub by the same person (``answered_via == "github"``
  and ``answered_by == login``): the kernel would now refuse it as "already answered",
  and the sweep must stay silent about an answer that was in fact applied.

Both facts live where they are true (GitHub, the ledger), so a restart, a second
replica or a rebuilt projection all see the same thing. The in-memory set of comment
ids only saves repeated reads within one process. (The one case the second rule cannot
tell apart: the same person answering the same card twice, the second comment unhandled
when the process stopped; the sweep then stays silent rather than reply late.)
"""

from __future__ import annotations

import logging
import queue
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from ghapp.github.client import WRITERS, GitHubClient
from ghapp.github.deliveries import pipeline_subject
from ghapp.github.executor import Target, find_marked, marker, subject_target
from ghapp.github.writes import defuse, say_once
from ghapp.runtime.hub import Hub
from kernel.durations import iso
from kernel.model import Event
from kernel.records import Card, EventRow, Matter

__all__ = ["ANSWER_LINE", "AnswerDesk", "AnswerRequest", "parse_answer"]

log = logging.getLogger("autoloop.github.answers")

ANSWER_LINE = re.compile(r"^[ \t]*/answer[ \t]+(c[0-9]{1,12})[ \t]+([0-9]{1,6})\b", re.I | re.M)
# A line that starts as an answer does but is not one ("/answer c1 two", "/answer 2"): it
# gets a reply saying how to answer, where it got none and the person waited.
ANSWER_TRIED = re.compile(r"^[ \t]*/answer\b[^\n]{0,80}", re.I | re.M)
_CARD_WORD = re.compile(r"\b(c[0-9]{1,12})\b", re.I)
# A delivery card's answer (``/answer d1 2``): the delivery's runner reads and answers it
# (:mod:`ghapp.github.level_cards`); here it is no mistake to reply to.
_DELIVERY_CARD = re.compile(r"/answer[ \t]+d[0-9]", re.I)
SWEEP_EVENTS = 5000  # the sweep looks at most at this many of the newest events
SWEEP_WINDOW = timedelta(days=3)


@dataclass(frozen=True, slots=True)
class AnswerRequest:
    comment_id: int
    target: Target  # the issue or PR the comment was written on
    login: str
    card: str
    choice: int  # 0: the line is not an answer (``written`` says what it was)
    written: str = ""


def parse_answer(event: Event, *, delivery_cards: bool = False) -> AnswerRequest | None:
    """The answer an ``issue_comment.created`` event asks for, or None. With
    ``delivery_cards`` (the Action, whose deliveries name their cards ``d<n>``),
    ``/answer d<n> ...`` is left to the delivery's run, which reads and answers it;
    elsewhere (the App, whose cards are all ``c<n>``) it is told how to answer."""
    if event.source != "github" or event.type != "issue_comment.created":
        return None
    d = event.details
    body, login, cid = d.get("comment_body"), d.get("comment_user"), d.get("comment_id")
    target = subject_target(event.subject)
    if not isinstance(body, str) or not isinstance(login, str) or target is None:
        return None
    if isinstance(cid, bool) or not isinstance(cid, int):
        return None
    found = ANSWER_LINE.search(body)
    if found is not None:
        return AnswerRequest(cid, target, login, found.group(1).lower(), int(found.group(2)))
    tried = ANSWER_TRIED.search(body)
    if tried is None:
        return None
    line = tried.group(0).strip()
    if delivery_cards and _DELIVERY_CARD.match(line):
        return None
    named = _CARD_WORD.search(line[len("/answer") :])
    return AnswerRequest(cid, target, login, named.group(1).lower() if named else "", 0, line)


def _code(text: str) -> str:
    """Text someone wrote, inside a code span of the reply: no backtick ends it."""
    return text.replace("`", "'")


def _in_repo(subject: str, repo: str) -> bool:
    return subject.lower() == repo.lower() or subject.lower().startswith(f"{repo.lower()}#")


class AnswerDesk:
    """The queue, the background thread and the handling of one ``/answer`` comment."""

    def __init__(
        self,
        hub: Hub,
        client: GitHubClient,
        bot_login: str,
        *,
        wake: Callable[[], None] = lambda: None,
        every_s: float = 300.0,
    ) -> None:
        self.hub = hub
        self.client = client
        self.bot_login = bot_login
        self.wake = wake
        self.every_s = every_s
        #: Said after "there is no card ...": why one may be missing here (an Action's
        #: ledger that ended with the run that asked it).
        self.missing_hint = ""
        #: Whether a delivery's runner reads ``/answer d<n>`` here (see parse_answer).
        self.delivery_cards = False
        self._queue: queue.Queue[Event | None] = queue.Queue()
        self._done: set[int] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def submit(self, event: Event) -> None:
        """Called on the request path: only queues (never blocks the webhook's answer)."""
        if event.type == "issue_comment.created":
            self._queue.put(event)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="github-answers", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None

    def idle(self) -> bool:
        """True when nothing is queued or being handled (for tests and drains)."""
        return self._queue.unfinished_tasks == 0

    def _run(self) -> None:
        self._safely(self.sweep)
        while not self._stop.is_set():
            try:
                event = self._queue.get(timeout=self.every_s)
            except queue.Empty:
                self._safely(self.sweep)
                continue
            try:
                if event is not None:
                    self._safely(partial(self.handle_event, event))
            finally:
                self._queue.task_done()

    @staticmethod
    def _safely(work: Callable[[], object]) -> None:
        try:
            work()
        except Exception as exc:  # keep the desk alive; an unhandled comment is swept later
            log.error(
                "handling /answer comments failed: %s: %s", type(exc).__name__, exc,
                exc_info=log.isEnabledFor(logging.DEBUG),
            )  # fmt: skip

    # -- handling ----------------------------------------------------------------------

    def handle_event(self, event: Event, *, sweeping: bool = False) -> str:
        """What was done: ``answered``, ``replied``, ``handled`` (before), or ``ignored``."""
        req = parse_answer(event, delivery_cards=self.delivery_cards)
        if req is None or req.comment_id in self._done:
            return "ignored"
        outcome = self.handle(req, sweeping=sweeping)  # raises: not done, swept again later
        self._done.add(req.comment_id)
        return outcome

    def handle(self, req: AnswerRequest, *, sweeping: bool) -> str:
        if sweeping and self._was_handled(req):
            return "handled"
        permission = self.client.get_collaborator_permission(req.target.repo, req.login)
        if permission not in WRITERS:
            return self._reply(
                req,
                f"only people with write access to {req.target.repo} can answer cards "
                f"(yours: {permission}). Nothing was changed.",
            )
        if req.choice == 0:
            card = self._card(req.card) if req.card else None
            options = ""
            if card is not None and card.options:
                listed = ", ".join(f"{i}: {o}" for i, o in enumerate(card.options, 1))
                options = f" ({defuse(listed)})"  # an agent's words: they notify no one
            example = req.card or "c1"
            return self._reply(
                req,
                f"it is not an answer: write `/answer {example} N` on a line of its own, N "
                f"the number of an option{options}. Nothing was changed.",
            )
        card = self._card(req.card)
        subject = self._subject(card) if card is not None else None
        if card is None or subject is None or not _in_repo(subject, req.target.repo):
            hint = f" {self.missing_hint}" if self.missing_hint else ""
            return self._reply(req, f"there is no card {req.card} about {req.target.repo}.{hint}")
        if "#" in subject and subject.lower() != str(req.target).lower():
            # A mistyped card id stopped someone else's delivery, without a word on either.
            return self._reply(
                req,
                f"card {card.id} is about {subject}: answer it there. Nothing was changed.",
            )
        out = self.hub.answer(card.id, req.choice, by=req.login, via="github")
        if not out.reply.ok:
            return self._reply(req, f"{out.reply.message}. Nothing was changed.")
        self.wake()
        return "answered"

    def _card(self, card_id: str) -> Card | None:
        with self.hub.store.read() as tx:
            card = tx.get("card", card_id)
        return card if isinstance(card, Card) else None

    def _subject(self, card: Card) -> str | None:
        """What ``card`` is about: ``owner/repo#N``, ``owner/repo``, or another subject."""
        # A delivery pipeline's card: its matter is the pipeline id, deliver/owner/repo#N.
        subject = pipeline_subject(card.matter)
        if subject is None:
            with self.hub.store.read() as tx:
                matter = tx.get("matter", card.matter)
            if not isinstance(matter, Matter):
                return None
            subject = matter.subject
        return subject

    def _was_handled(self, req: AnswerRequest) -> bool:
        card = self._card(req.card)
        if (
            card is not None
            and card.answered_via == "github"
            and card.answered_by.lower() == req.login.lower()
        ):
            return True
        comments = self.client.list_issue_comments(req.target.repo, req.target.number)
        return find_marked(comments, self._mark(req), self.bot_login) is not None

    @staticmethod
    def _mark(req: AnswerRequest) -> str:
        return marker("reply", str(req.comment_id))

    def _reply(self, req: AnswerRequest, why: str) -> str:
        """One sticky reply per /answer comment, however often this runs."""
        t, mark = req.target, self._mark(req)
        written = _code(req.written) if req.choice == 0 else f"/answer {req.card} {req.choice}"
        text = f"{mark}\n@{req.login}: your `{written}` was not taken: {why}"
        say_once(self.client, self.bot_login, t, mark, text)
        return "replied"

    # -- the sweep ---------------------------------------------------------------------

    def recent_answer_events(self) -> list[Event]:
        """``issue_comment.created`` events of the last 3 days with an ``/answer`` line."""
        cutoff = iso(self.hub.clock() - SWEEP_WINDOW)
        out: list[Event] = []
        with self.hub.store.read() as tx:
            last = tx.last_event()
            for seq in range(max(1, last - SWEEP_EVENTS + 1), last + 1):
                row = tx.get("event", f"{seq:012d}")
                if not isinstance(row, EventRow) or row.at < cutoff:
                    continue
                if parse_answer(row.event, delivery_cards=self.delivery_cards) is not None:
                    out.append(row.event)
        return out

    def sweep(self) -> dict[str, int]:
        """Handle every recent ``/answer`` comment not handled yet; counts by outcome."""
        counts: dict[str, int] = {}
        for event in self.recent_answer_events():
            try:
                outcome = self.handle_event(event, sweeping=True)
            except Exception as exc:  # one comment's trouble must not stop the others
                log.error(
                    "handling /answer comment %s failed: %s: %s", event.id,
                    type(exc).__name__, exc, exc_info=log.isEnabledFor(logging.DEBUG),
                )  # fmt: skip
                outcome = "failed"
            counts[outcome] = counts.get(outcome, 0) + 1
        return counts
