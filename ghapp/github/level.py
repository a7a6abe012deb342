"""The delivery pipeline, level-triggered: each run rebuilds what it needs from GitHub.

For ``autoloop action``. A workflow job runs once per event and may keep nothing between
jobs (a GitHub-hosted runner without a database), so here no delivery lives in a ledger.
One run, for each pull request its event concerns:

1. **Rebuild.** The delivery's state is read back from the pull request itself: our
   sticky comment and our ``autoloop/deliver`` check run carry it
   (:mod:`ghapp.github.carried`). A labelled open pull request without one starts a
   delivery; one whose delivery ended starts a new run only on a ``labeled`` event made
   after that end.
2. **Decide** with the pure machine (:func:`pipeline.decide`) over a fresh snapshot
   (:func:`~ghapp.github.snapshot.read_snapshot`), as ``autoloop serve`` does. Its writes
   are made at once through :class:`~ghapp.github.executor.GitHubExecutor`, which reads
   GitHub back where an answer may have been lost (the merge keeps its head-SHA guard and
   its read-back; any other write an earlier run may have made is read back first); the
   live version is probed and a review agent runs in the job; then it decides again with
   the answers, until the delivery waits on the world.
3. **Show and keep**, in one ``github.progress`` write: the check run and the sticky
   comment, with the new state in them. A run that changed nothing writes nothing.

Steps 2 and 3 are :mod:`ghapp.github.level_carry`.

Which pull requests: those the event names, or for an event about none (a status, a
deployment, the clock) the labelled ones it may concern (:mod:`ghapp.github.level_scope`).

Nothing waits in the job. A wait on a webhook, a person or a deadline ends the run: the
next event, or a scheduled run, resumes it. Only a wait of at most :data:`SHORT_WAIT_S`
(GitHub computing mergeability) is slept through, at most :data:`SHORT_WAITS_S` a run.

A blocked delivery's card is named ``d<n>`` on its pull request and answered there with
``/answer d<n> <choice>`` (:mod:`ghapp.github.level_cards`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, get_args

from ghapp.github.carried import Carried, read_carried
from ghapp.github.client import GitHubClient
from ghapp.github.delivery import shown_seq
from ghapp.github.errors import GitHubError, NotFound, Unauthorized
from ghapp.github.level_carry import (
    SHORT_WAIT_S,
    SHORT_WAITS_S,
    Carrier,
    Moved,
    Work,
    dump,
    record_data,
)
from ghapp.github.level_scope import concerned, has_label, labelled_pulls, named_pull, names_none
from ghapp.github.snapshot import read_policy
from ghapp.github.trigger import added_after, other_label, refused_label, say_refused
from ghapp.github.writes import Target, find_marked, marker
from ghapp.runtime.hub import Hub
from kernel.durations import iso
from kernel.model import Event
from pipeline import (
    Labels,
    Policy,
    PolicyProblem,
    ReviewFindings,
    VersionObservation,
    delivery_from_data,
    start,
)
from pipeline.stages import Mode, Stage

__all__ = ["SHORT_WAITS_S", "SHORT_WAIT_S", "LevelDeliveries", "Moved"]

log = logging.getLogger("autoloop.github.level")

_SHELL_KEYS = ("versions", "findings")
STAGES: frozenset[str] = frozenset(get_args(Stage))
MODES: frozenset[str] = frozenset(get_args(Mode))

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Scope:
    """What one run reads once: the policy, its labels, the fresh label events."""

    policy: Policy | PolicyProblem
    labels: Labels
    relabeled: Mapping[int, str]


class LevelDeliveries:
    """The level-triggered runner of deliveries (see the module docstring); ``app_id``
    as for :class:`~ghapp.github.level_carry.Carrier`."""

    def __init__(
        self,
        hub: Hub,
        client: GitHubClient,
        bot_login: str,
        *,
        app_id: int | None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.hub = hub
        self.client = client
        self.bot_login = bot_login
        self.carrier = Carrier(hub, client, bot_login, app_id=app_id, sleep=sleep)

    def close(self) -> None:
        self.carrier.close()

    # -- one run -----------------------------------------------------------------------

    def run(
        self, repo: str, events: Sequence[Event], *, relabeled: Mapping[int, str] | None = None
    ) -> list[Moved]:
        """Carry along the deliveries ``events`` concern (see the module docstring).

        ``relabeled``: pull requests labelled by a newly recorded event, with the instant
        of that event ("" when unknown): only these start a new run of a delivery that
        ended (and only if it ended before that instant).

        Raises only when the run as a whole cannot go on (the policy cannot be read, the
        credentials are refused); one delivery's trouble is in its :class:`Moved`.
        """
        named: dict[int, Event] = {}
        about: list[Event] = []  # events naming no pull request
        for event in events:
            number = named_pull(event, repo)
            if number:
                named.setdefault(number, event)
            elif names_none(event):
                about.append(event)
        if not named and not about:
            return []  # an issue's own events: nothing to read
        policy = read_policy(self.client, repo, agents=frozenset(self.hub.rules().agents))
        labels = policy.labels if isinstance(policy, Policy) else Labels()
        scope = _Scope(policy, labels, dict(relabeled or {}))
        pulls: dict[int, JSON | None] = dict.fromkeys(named)
        if about:
            for pull in labelled_pulls(self.client, repo, labels, policy, self.hub.clock()):
                found = pull.get("number")
                if isinstance(found, int) and found not in named:
                    pulls[found] = pull
        out: list[Moved] = []
        line: list[int] = []
        freed = False
        for number in sorted(pulls):
            moved = Moved(repo=repo, number=number)
            its = named.get(number)
            work = self._safely(scope, moved, pulls[number], its, None if its else about)
            if work is None and not moved.error:
                continue
            out.append(moved)
            last = work.last if work is not None else None
            if last is not None and last.line_freed:
                freed = True
            if last is not None and last.waiting is not None and last.waiting.on == "line":
                line.append(len(out) - 1)
        if freed:  # the next in line on a base may merge now: once more for those waiting
            for index in line:
                first = out[index]
                again = Moved(repo=repo, number=first.number)
                if self._safely(scope, again, None, None, None) is not None or again.error:
                    again.writes = first.writes + again.writes
                    again.cards = first.cards + again.cards
                    again.before, again.started = first.before, first.started
                    out[index] = again
        return out

    def _safely(
        self,
        scope: _Scope,
        moved: Moved,
        pull: JSON | None,
        event: Event | None,
        about: list[Event] | None,
    ) -> Work | None:
        """:meth:`_one`, with its trouble kept in ``moved.error`` (but for refused
        credentials, which stop the run)."""
        try:
            return self._one(scope, moved, pull, event, about)
        except Unauthorized:
            raise  # the credentials: nothing else in this run will work either
        except GitHubError as exc:
            moved.error = f"GitHub: {exc}"  # (a 403 names the permission)
        except Exception as exc:  # one delivery's trouble must not stop the others
            moved.error = f"{type(exc).__name__}: {exc}"
        log.warning("delivery %s#%d: %s", moved.repo, moved.number, moved.error)
        return None

    # -- one delivery --------------------------------------------------------------------

    def _one(
        self,
        scope: _Scope,
        moved: Moved,
        pull: JSON | None,
        event: Event | None,
        about: list[Event] | None,
    ) -> Work | None:
        """Rebuild, decide, show and keep one delivery; None when there is none to move
        (not a pull request, not labelled, ended, or not concerned by ``about``)."""
        t = Target(moved.repo, moved.number)
        if pull is None:
            try:
                pull = self.client.get_pull(t.repo, t.number)
            except NotFound:
                return None  # an issue, not a pull request
        head = _head(pull)
        comments = self.client.list_issue_comments(t.repo, t.number)
        carried = read_carried(self.carrier.writes, t, head, comments)
        work = self._rebuild(carried) if carried is not None else None
        if work is not None and about is not None and not concerned(work.delivery, pull, about):
            return None
        moved.rebuilt_from = carried.where if carried is not None else ""
        commented = event is not None and event.type == "issue_comment.created"
        if work is not None and event is not None and commented:
            said = {
                "id": event.details.get("comment_id"),
                "user": {"login": _text(event.details, "comment_user")},
                "body": event.details.get("comment_body"),
            }
            if isinstance(said["id"], int):  # (the reply's marker names the comment)
                self.carrier.answers.no_card(t, work.delivery, said)
        if work is None or work.delivery.terminal:
            labeled = event is not None and event.type == "pull_request.labeled"
            by = _text(event.details, "sender") if event is not None and labeled else ""
            by_label = _text(event.details, "label").casefold() if event is not None else ""
            # The seq shown goes on, whatever was there before (an unreadable state, or
            # progress shown by a server): a lower one would never be shown.
            shown = shown_seq(find_marked(comments, marker("deliver", str(t)), self.bot_login))
            started = self._start(t, pull, scope, work, by=by, by_label=by_label, shown=shown)
            if started is None:
                if work is None or about is not None:
                    return None
                # The event's own pull request, whose delivery ended: say where it is.
                moved.mode = work.delivery.mode
                moved.before = moved.after = work.delivery.stage
                return work
            work = started
            moved.started = True
            if event is not None and labeled:  # both labels at once: the other one's reply
                self._other_label(t, work.delivery.mode, scope, event)
        else:
            moved.before = work.delivery.stage
            if event is not None and event.type == "pull_request.labeled":
                self._other_label(t, work.delivery.mode, scope, event)
        moved.mode = work.delivery.mode
        self.carrier.decide(t, work, scope.policy, comments, moved)
        self.carrier.keep(t, work, scope.policy, moved)
        d = work.delivery
        self.carrier.known[d.id] = d
        moved.after = d.stage
        step = work.last
        if step is not None and step.waiting is not None:
            moved.waiting = step.waiting.what
            moved.wake_at = iso(step.wake_at) if step.wake_at is not None else ""
        return work

    def _rebuild(self, carried: Carried) -> Work | None:
        data = carried.data
        try:
            delivery = delivery_from_data({k: v for k, v in data.items() if k not in _SHELL_KEYS})
            versions = [VersionObservation(**v) for v in data.get("versions") or ()]
            raw = data.get("findings")
            findings = ReviewFindings(**raw) if isinstance(raw, Mapping) else None
            if delivery.stage not in STAGES or delivery.mode not in MODES:
                raise ValueError(f"stage {delivery.stage!r} in mode {delivery.mode!r}")
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            where = f"{data.get('repo')}#{data.get('number')}"
            log.warning("the delivery state on %s is not readable: %s", where, exc)
            return None
        seq = max(carried.seq, delivery.progress_seq)
        delivery = replace(delivery, progress_seq=seq)
        old = dump(record_data(delivery, versions, findings))
        comment = carried.comment or {}
        shown_at = comment.get("updated_at") if carried.where == "comment" else None
        return Work(
            delivery,
            versions,
            findings,
            old=old,
            seq=seq,
            shown_at=shown_at if isinstance(shown_at, str) else "",
        )

    def _other_label(self, t: Target, running: str, scope: _Scope, event: Event) -> None:
        """The other delivery label added by a person while a run goes on: one reply
        saying why it starts nothing (as the server says it)."""
        found = other_label(running, scope.labels, _text(event.details, "label"))
        by = _text(event.details, "sender")
        if found is None or not by:
            return
        label, why = found
        try:
            say_refused(self.client, self.bot_login, t, label, login=by, why=why, then="")
        except GitHubError as exc:  # the reply is a courtesy: it stops nothing
            log.warning("delivery %s: could not reply: %s", t, exc)

    def _start(
        self,
        t: Target,
        pull: JSON,
        scope: _Scope,
        ended: Work | None,
        *,
        by: str,
        by_label: str = "",
        shown: int,
    ) -> Work | None:
        """A new delivery for a labelled open pull request, or None. ``by``: who added
        ``by_label`` (a labelled event's sender); ``shown``: the progress seq the pull
        request shows now (the new delivery's seq goes on from it)."""
        labels, relabeled = scope.labels, scope.relabeled
        if pull.get("state") != "open":
            return None
        mode: Mode
        if has_label(pull, {labels.deliver.casefold()}):
            mode = "deliver"
        elif has_label(pull, {labels.review.casefold()}):
            mode = "review"
        else:
            return None
        run, seq, cards = 1, 0, 0
        if ended is not None:
            # A delivery that ended (delivered, cancelled, a person's "stop") starts again
            # only on a label event made after its end was shown, never on a re-run of an
            # older one. Both instants are GitHub's (to the second) when the comment holds
            # the state; else the end is the runner's.
            if t.number not in relabeled:
                return None
            last = ended.delivery.history[-1].at if ended.delivery.history else ""
            ended_at = ended.shown_at or last
            if added_after(relabeled[t.number], ended_at) is False:
                return None
            run, seq = ended.delivery.run + 1, ended.seq
            # Card names go on from the ended run's (d2 after d1): an answer to its card
            # (``/answer d1 2``, "stop") was taken by the new run's d1 within the clocks'
            # slack, and stopped the delivery a person had just started again.
            cards = ended.delivery.cards
        seq = max(seq, shown)
        label = labels.deliver if mode == "deliver" else labels.review
        # the event's sender added this label only if the event is about this label
        login, why = refused_label(
            self.client, t, label, by if by_label == label.casefold() else ""
        )
        if why:
            say_refused(self.client, self.bot_login, t, label, login=login, why=why)
            return None
        by = login
        head = _head(pull)
        delivery = start(
            repo=t.repo,
            number=t.number,
            head_sha=head,
            mode=mode,
            now=self.hub.clock(),
            run=run,
            by=by,
            label=label,
        )
        # The progress seq goes on from what the pull request shows, so that the new
        # run's progress is never taken for an older one.
        delivery = replace(delivery, progress_seq=seq, cards=cards)
        return Work(delivery, [], None, old="", seq=seq)


# ------------------------------------------------------------------------------ helpers


def _head(pull: Mapping[str, Any]) -> str:
    head = pull.get("head")
    sha = head.get("sha") if isinstance(head, Mapping) else None
    return sha if isinstance(sha, str) else ""


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""
