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

Which pull requests: those the event names, or for an event about none (a status, a
deployment, the clock) the labelled ones it may concern (:mod:`ghapp.github.level_scope`).

Nothing waits in the job. A wait on a webhook, a person or a deadline ends the run: the
next event, or a scheduled run, resumes it. Only a wait of at most :data:`SHORT_WAIT_S`
(GitHub computing mergeability) is slept through, at most :data:`SHORT_WAITS_S` a run.

A blocked delivery's card is named ``d<n>`` on its pull request and answered there with
``/answer d<n> <choice>`` (:mod:`ghapp.github.level_cards`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, get_args

import httpx

from ghapp.github.carried import Carried, encode_state, read_carried
from ghapp.github.client import GitHubClient
from ghapp.github.delivery import shown_seq
from ghapp.github.errors import GitHubError, NotFound, Unauthorized
from ghapp.github.executor import GitHubExecutor
from ghapp.github.level_cards import CardAnswers, card_name, instant
from ghapp.github.level_scope import concerned, has_label, labelled_pulls, named_pull, names_none
from ghapp.github.outcomes import effect_action, write_result
from ghapp.github.readcache import ReadCache
from ghapp.github.reviews import ReviewJob, Reviews
from ghapp.github.snapshot import Extras, read_policy, read_snapshot
from ghapp.github.version import compare_with, probe_version
from ghapp.github.writes import Target, find_marked, marker
from ghapp.runtime.hub import Hub
from kernel.codec import to_data
from kernel.durations import iso
from kernel.model import Event
from kernel.records import Action
from pipeline import (
    Delivery,
    Effect,
    Labels,
    Policy,
    PolicyProblem,
    ProbeVersion,
    Progress,
    RaiseCard,
    RequestReview,
    ResolveCard,
    ReviewFindings,
    Step,
    VersionObservation,
    WriteResult,
    decide,
    delivery_from_data,
    delivery_to_data,
    first_in_line,
    start,
)
from pipeline.render import render
from pipeline.stages import Mode, Stage
from plugins.protocols import ActionFailed

__all__ = ["SHORT_WAITS_S", "SHORT_WAIT_S", "LevelDeliveries", "Moved"]

log = logging.getLogger("autoloop.github.level")

SHORT_WAIT_S = 10.0  # a timer this close is slept through in the job
SHORT_WAITS_S = 30.0  # and no more than this in all, per run
MAX_DECISIONS = 12  # decisions per delivery per run (answers feed back at once)
VERSIONS_KEPT = 20  # probe answers kept in the state (the newest)
_SHELL_KEYS = ("versions", "findings")
STAGES: frozenset[str] = frozenset(get_args(Stage))
MODES: frozenset[str] = frozenset(get_args(Mode))

JSON = dict[str, Any]


@dataclass(slots=True, kw_only=True)
class Moved:
    """What one run did to one delivery (the outputs and the job summary show it)."""

    repo: str
    number: int
    mode: str = ""
    before: str = ""  # the stage it was rebuilt at ("": it started in this run)
    after: str = ""  # the stage it rests at now
    started: bool = False
    waiting: str = ""  # what it waits for, in people's words ("" once it ended)
    wake_at: str = ""  # when it asked to be looked at again ("": only an event moves it)
    writes: list[str] = field(default_factory=list)  # "github.merge: done", ...
    cards: list[str] = field(default_factory=list)  # names of the cards raised
    answered: str = ""  # "/answer d1 2 by maintainer"
    shown: str = ""  # "shown", "newer shown" (another run was first), "" (nothing new)
    comment: int | None = None  # the sticky comment's id
    rebuilt_from: str = ""  # "comment", "check run", or "" (no state yet)
    error: str = ""


@dataclass(frozen=True, slots=True)
class _Scope:
    """What one run reads once: the policy, its labels, the fresh label events."""

    policy: Policy | PolicyProblem
    labels: Labels
    relabeled: Mapping[int, str]


@dataclass(slots=True)
class _Work:
    """One delivery as this run carries it along."""

    delivery: Delivery
    versions: list[VersionObservation]
    findings: ReviewFindings | None
    old: str  # the state as rebuilt, serialised ("" when there was none)
    seq: int  # the progress seq shown on the pull request
    shown_at: str = ""  # when GitHub last saw that state written (the comment's updated_at)
    last: Step | None = None
    progress: Progress | None = None
    results: list[WriteResult] = field(default_factory=list)


class LevelDeliveries:
    """The level-triggered runner of deliveries (see the module docstring).

    ``app_id``: our App's id (None when writing with a workflow's ``GITHUB_TOKEN``: its
    check runs are then known by the token's app, and checks GitHub Actions reports still
    count as checks)."""

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
        self.app_id = app_id
        self.sleep = sleep
        self.executor = GitHubExecutor(client, bot_login, app_id=app_id)
        self.writes = self.executor.delivery
        self.cache = ReadCache()
        self.http = httpx.Client()
        self.reviews = Reviews(hub, client)
        self.answers = CardAnswers(client, self.executor, bot_login)
        self._known: dict[str, Delivery] = {}  # every delivery seen in this run (the line)
        self._slept = 0.0

    def close(self) -> None:
        self.reviews.stop()
        self.http.close()

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
        policy = read_policy(self.client, repo, agents=frozenset(self.hub.rules().agents))
        labels = policy.labels if isinstance(policy, Policy) else Labels()
        scope = _Scope(policy, labels, dict(relabeled or {}))
        named: dict[int, Event] = {}
        about: list[Event] = []  # events naming no pull request
        for event in events:
            number = named_pull(event, repo)
            if number:
                named.setdefault(number, event)
            elif names_none(event):
                about.append(event)
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
    ) -> _Work | None:
        """:meth:`_one`, with its trouble kept in ``moved.error`` (but for refused
        credentials, which stop the run)."""
        try:
            return self._one(scope, moved, pull, event, about)
        except Unauthorized:
            raise  # the credentials: nothing else in this run will work either
        except GitHubError as exc:
            moved.error = f"GitHub: {exc}"
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
    ) -> _Work | None:
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
        carried = read_carried(self.writes, t, head, comments)
        work = self._rebuild(carried) if carried is not None else None
        if work is not None and about is not None and not concerned(work.delivery, pull, about):
            return None
        moved.rebuilt_from = carried.where if carried is not None else ""
        if work is None or work.delivery.terminal:
            labeled = event is not None and event.type == "pull_request.labeled"
            by = _text(event.details, "sender") if event is not None and labeled else ""
            # The seq shown goes on, whatever was there before (an unreadable state, or
            # progress shown by a server): a lower one would never be shown.
            shown = shown_seq(find_marked(comments, marker("deliver", str(t)), self.bot_login))
            started = self._start(t, pull, scope, work, by=by, shown=shown)
            if started is None:
                if work is None or about is not None:
                    return None
                # The event's own pull request, whose delivery ended: say where it is.
                moved.mode = work.delivery.mode
                moved.before = moved.after = work.delivery.stage
                return work
            work = started
            moved.started = True
        else:
            moved.before = work.delivery.stage
        moved.mode = work.delivery.mode
        self._decide(t, work, scope.policy, comments, moved)
        self._keep(t, work, scope.policy, moved)
        d = work.delivery
        self._known[d.id] = d
        moved.after = d.stage
        step = work.last
        if step is not None and step.waiting is not None:
            moved.waiting = step.waiting.what
            moved.wake_at = iso(step.wake_at) if step.wake_at is not None else ""
        return work

    def _rebuild(self, carried: Carried) -> _Work | None:
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
        old = _dump(_data(delivery, versions, findings))
        comment = carried.comment or {}
        shown_at = comment.get("updated_at") if carried.where == "comment" else None
        return _Work(
            delivery,
            versions,
            findings,
            old=old,
            seq=seq,
            shown_at=shown_at if isinstance(shown_at, str) else "",
        )

    def _start(
        self, t: Target, pull: JSON, scope: _Scope, ended: _Work | None, *, by: str, shown: int
    ) -> _Work | None:
        """A new delivery for a labelled open pull request, or None. ``shown``: the
        progress seq the pull request shows now (the new delivery's seq goes on from it)."""
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
        run, seq = 1, 0
        if ended is not None:
            # A delivery that ended (delivered, cancelled, a person's "stop") starts again
            # only on a label event made after its end was shown, never on a re-run of an
            # older one. Both instants are GitHub's (to the second) when the comment holds
            # the state; else the end is the runner's.
            if t.number not in relabeled:
                return None
            last = ended.delivery.history[-1].at if ended.delivery.history else ""
            ended_at = ended.shown_at or last
            at = relabeled[t.number]
            if at and ended_at and instant(at) < instant(ended_at).replace(microsecond=0):
                return None
            run, seq = ended.delivery.run + 1, ended.seq
        seq = max(seq, shown)
        head = _head(pull)
        delivery = start(
            repo=t.repo,
            number=t.number,
            head_sha=head,
            mode=mode,
            now=self.hub.clock(),
            run=run,
            by=by,
        )
        # The progress seq goes on from what the pull request shows, so that the new
        # run's progress is never taken for an older one.
        delivery = replace(delivery, progress_seq=seq)
        return _Work(delivery, [], None, old="", seq=seq)

    def _decide(
        self,
        t: Target,
        work: _Work,
        policy: Policy | PolicyProblem,
        comments: list[JSON],
        moved: Moved,
    ) -> None:
        decisions = 0
        while decisions < MAX_DECISIONS:
            decisions += 1
            d = work.delivery
            answer, said = self.answers.answer(t, d, comments)
            moved.answered = said or moved.answered
            others = [o for o in self._known.values() if o.id != d.id]
            extras = Extras(
                merge_queue_first=first_in_line(d, others),
                results=tuple(work.results),
                findings=work.findings,
                versions=tuple(work.versions),
                answer=answer,
            )
            pr = read_snapshot(
                self.client,
                d,
                bot_login=self.bot_login,
                bot_app_id=self.app_id,
                policy=policy,
                extras=extras,
                cache=self.cache,
            )
            step = decide(d, pr, policy, self.hub.clock())
            work.delivery, work.last = step.delivery, step
            again = self._effects(t, work, step, moved)
            if step.delivery.terminal:
                return
            if again:
                continue
            if not self._short_wait(step):
                return

    def _effects(self, t: Target, work: _Work, step: Step, moved: Moved) -> bool:
        """Carry out one decision's effects; True when an answer came back to decide on."""
        d = step.delivery
        again = False
        for effect in step.effects:
            if isinstance(effect, ProbeVersion):
                compare = compare_with(self.client, t.repo, self.cache)
                work.versions.append(
                    probe_version(
                        self.http,
                        effect.url,
                        effect.field,
                        effect.merge_sha,
                        effect.attempt,
                        compare=compare,
                        now=self.hub.clock,
                    )
                )
                again = True
            elif isinstance(effect, RequestReview):
                work.findings = self._review(t, d, effect)
                again = True
            elif isinstance(effect, RaiseCard):
                moved.cards.append(f"d{d.cards}")
            elif isinstance(effect, ResolveCard):
                pass  # the sticky comment stops showing it
            elif isinstance(effect, Progress):
                work.progress = effect  # shown once, with the state, when the run ends
            else:
                result = self._write(d, effect)
                work.results.append(result)
                moved.writes.append(f"{_do(d, effect)}: {result.outcome}")
                again = True
        return again

    def _short_wait(self, step: Step) -> bool:
        """Sleep through a wait of a few seconds (GitHub computing mergeability); False
        when the wait is longer, or the run has slept enough: the job ends instead."""
        waiting = step.waiting
        if waiting is None or waiting.on != "timer" or step.wake_at is None:
            return False
        left = (step.wake_at - self.hub.clock()).total_seconds()
        if left > SHORT_WAIT_S or self._slept + max(left, 0.0) > SHORT_WAITS_S:
            return False
        if left > 0:
            self._slept += left
            self.sleep(left)
        return True

    # -- writes ------------------------------------------------------------------------

    def _write(self, d: Delivery, effect: Effect) -> WriteResult:
        """One write the pipeline asked for, made now; its answer as the pipeline reads it."""
        mapped = effect_action(d, effect)
        if mapped is None:
            raise RuntimeError(f"no action carries out {type(effect).__name__}")
        do, params = mapped
        # A write an earlier run may have made (it ended before showing its state) is read
        # back first; the merge is not: its SHA guard and GitHub's own state stop a second
        # one, and a merge read back unmerged must still be tried.
        attempts = 0 if do == "github.merge" else 1
        action = Action(
            id=effect.key, matter=d.id, turn="", do=do, params=params, attempts=attempts
        )
        try:
            result = self.executor.perform(action)
        except ActionFailed as exc:
            record = replace(action, status="failed", error=str(exc))
        except Unauthorized:
            raise
        except GitHubError as exc:  # no answer, 5xx, rate limit: it may yet have happened
            record = replace(action, attempts=attempts + 1, error=f"{type(exc).__name__}: {exc}")
        else:
            record = replace(action, status="done", result=dict(result))
        found = write_result(record)
        return found or WriteResult(key=effect.key, outcome="ambiguous", message=record.error)

    def _review(self, t: Target, d: Delivery, effect: RequestReview) -> ReviewFindings:
        job = ReviewJob(
            pipeline=d.id,
            request=effect.key,
            agent=effect.agent,
            repo=t.repo,
            number=t.number,
            head_sha=effect.head_sha,
        )
        try:
            return self.reviews.review(job)
        except Exception as exc:  # GitHub or the disk failed: findings that say so
            error = self.hub.redact(f"{type(exc).__name__}: {exc}")
            return ReviewFindings(
                request=effect.key, head_sha=effect.head_sha, event=None, error=error
            )

    def _keep(self, t: Target, work: _Work, policy: Policy | PolicyProblem, moved: Moved) -> None:
        """Show the progress, with the state in it; nothing when nothing changed."""
        d = work.delivery
        progress = work.progress
        data = _data(d, work.versions, work.findings)
        if progress is None and _dump(data) == work.old:
            return
        if progress is None:
            # The state moved but what people see did not: shown again under a new seq.
            seq = max(work.seq, d.progress_seq) + 1
            d = replace(d, progress_seq=seq)
            step = work.last
            waiting = step.waiting.what if step is not None and step.waiting is not None else ""
            problem = policy if isinstance(policy, PolicyProblem) and d.policy_problem else None
            shown = render(d, waiting=waiting, problem=problem)
            progress = Progress(
                key=d.key("progress", seq),
                seq=seq,
                head_sha=d.head_sha,
                check_title=shown.check_title,
                check_status=shown.check_status,
                check_conclusion=shown.check_conclusion,
                check_summary=shown.check_summary,
                comment_body=shown.comment_body,
            )
            work.delivery = d
            data = _data(d, work.versions, work.findings)
        mapped = effect_action(d, progress, card_id=card_name(d))
        if mapped is None:
            raise RuntimeError("no action shows progress")
        do, params = mapped
        params["state"] = encode_state(data)
        action = Action(id=progress.key, matter=d.id, turn="", do=do, params=params, attempts=1)
        try:
            result = self.executor.perform(action)
        except ActionFailed as exc:
            moved.error = (
                f"GitHub refused to show the delivery on {t} ({exc}); the job needs "
                "checks: write and pull-requests: write (or an App with them)"
            )
            return
        moved.shown = "shown" if result.get("applied") else "newer shown"
        comment = result.get("comment")
        moved.comment = comment if isinstance(comment, int) else None


# ------------------------------------------------------------------------------ helpers


def _data(d: Delivery, versions: list[VersionObservation], findings: ReviewFindings | None) -> JSON:
    data: JSON = delivery_to_data(d)
    if versions:
        data["versions"] = [to_data(v) for v in versions[-VERSIONS_KEPT:]]
    req = d.review_request
    if findings is not None and req is not None and findings.request == req.key:
        data["findings"] = to_data(findings)  # not taken by a decision yet
    return data


def _dump(data: Mapping[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


def _do(d: Delivery, effect: Effect) -> str:
    mapped = effect_action(d, effect)
    return mapped[0] if mapped is not None else type(effect).__name__


def _head(pull: Mapping[str, Any]) -> str:
    head = pull.get("head")
    sha = head.get("sha") if isinstance(head, Mapping) else None
    return sha if isinstance(sha, str) else ""


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""
