"""One delivery carried along in one level-triggered run (:mod:`ghapp.github.level`).

:class:`Carrier` decides a delivery again and again until it waits on the world: each
decision gets a fresh snapshot (:func:`~ghapp.github.snapshot.read_snapshot`) with the
answers of this run's writes, probes and review, and its effects are carried out at once:

- a write (merge, branch update, ready for review, review, branch deletion) through
  :class:`~ghapp.github.executor.GitHubExecutor`; a write an earlier run may have made
  (it ended before showing its state) is read back first, except the merge, whose
  head-SHA guard and GitHub's own state stop a second one;
- a probe of the live version (:func:`~ghapp.github.version.probe_version`);
- a review agent, run in the job (:meth:`~ghapp.github.reviews.Reviews.review`);
- a card: named ``d<n>`` in the sticky comment (:mod:`ghapp.github.level_cards`);
- progress: only the last one is kept, and shown once when the run ends.

:meth:`Carrier.keep` then shows the progress and keeps the new state, in one
``github.progress`` write (the check run and the sticky comment, the state in both); a
state that moved while what people see did not is shown again under a new seq, and a
run that changed nothing writes nothing. A wait of at most :data:`SHORT_WAIT_S` (GitHub
computing mergeability) is slept through, at most :data:`SHORT_WAITS_S` a run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from ghapp.github.carried import encode_state
from ghapp.github.client import GitHubClient
from ghapp.github.errors import GitHubError, Unauthorized
from ghapp.github.executor import GitHubExecutor
from ghapp.github.level_cards import CardAnswers, card_name
from ghapp.github.outcomes import effect_action, write_result
from ghapp.github.readcache import ReadCache
from ghapp.github.reviews import ReviewJob, Reviews
from ghapp.github.snapshot import Extras, read_snapshot
from ghapp.github.version import compare_with, probe_version
from ghapp.github.writes import Target
from ghapp.runtime.hub import Hub
from kernel.codec import to_data
from kernel.records import Action
from pipeline import (
    Delivery,
    Effect,
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
    delivery_to_data,
    first_in_line,
    next_in_line,
)
from pipeline.render import render
from plugins.protocols import ActionFailed

__all__ = [
    "MAX_DECISIONS",
    "SHORT_WAITS_S",
    "SHORT_WAIT_S",
    "VERSIONS_KEPT",
    "Carrier",
    "Moved",
    "Work",
    "dump",
    "record_data",
]

SHORT_WAIT_S = 10.0  # a timer this close is slept through in the job
SHORT_WAITS_S = 30.0  # and no more than this in all, per run
MAX_DECISIONS = 12  # decisions per delivery per run (answers feed back at once)
VERSIONS_KEPT = 20  # probe answers kept in the state (the newest)

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
    reviews: list[ReviewFindings] = field(default_factory=list)  # the agents' runs made here


@dataclass(slots=True)
class Work:
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


class Carrier:
    """Decides, carries out, shows and keeps deliveries for one run (see the module
    docstring). ``app_id``: our App's id (None when writing with a workflow's
    ``GITHUB_TOKEN``: its check runs are then known by the token's app, and checks that
    GitHub Actions reports still count as checks)."""

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
        self.executor = GitHubExecutor(
            client, bot_login, app_id=app_id, mentions=lambda: hub.rules().mentions
        )
        self.writes = self.executor.delivery
        self.cache = ReadCache()
        self.http = httpx.Client()
        self.reviews = Reviews(hub, client)
        self.answers = CardAnswers(client, self.executor, bot_login)
        self.known: dict[str, Delivery] = {}  # every delivery seen in this run (the line)
        self._slept = 0.0

    def close(self) -> None:
        self.reviews.stop()
        self.http.close()

    def decide(
        self,
        t: Target,
        work: Work,
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
            others = [o for o in self.known.values() if o.id != d.id]
            first = first_in_line(d, others)
            ahead = None if first else next_in_line(others, d.repo, d.base_ref)
            extras = Extras(
                merge_queue_first=first,
                merge_queue_ahead=ahead.number if ahead is not None else 0,
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

    def _effects(self, t: Target, work: Work, step: Step, moved: Moved) -> bool:
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
                if work.findings.started_at:  # an agent ran: the job says what it spent
                    moved.reviews.append(work.findings)
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

    def keep(self, t: Target, work: Work, policy: Policy | PolicyProblem, moved: Moved) -> None:
        """Show the progress, with the state in it; nothing when nothing changed."""
        d = work.delivery
        progress = work.progress
        data = record_data(d, work.versions, work.findings)
        if progress is None and dump(data) == work.old:
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
            data = record_data(d, work.versions, work.findings)
        mapped = effect_action(d, progress, card_id=card_name(d))
        if mapped is None:
            raise RuntimeError("no action shows progress")
        do, params = mapped
        params["state"] = encode_state(data)
        action = Action(id=progress.key, matter=d.id, turn="", do=do, params=params, attempts=1)
        try:
            result = self.executor.perform(action)
        except ActionFailed as exc:
            # (a 403 names the permission the token lacks: see errors.permission_hint)
            moved.error = f"GitHub refused to show the delivery on {t} ({exc})"
            return
        moved.shown = "shown" if result.get("applied") else "newer shown"
        comment = result.get("comment")
        moved.comment = comment if isinstance(comment, int) else None


# ------------------------------------------------------------------------------ helpers


def record_data(
    d: Delivery, versions: list[VersionObservation], findings: ReviewFindings | None
) -> JSON:
    data: JSON = delivery_to_data(d)
    if versions:
        data["versions"] = [to_data(v) for v in versions[-VERSIONS_KEPT:]]
    req = d.review_request
    if findings is not None and req is not None and findings.request == req.key:
        data["findings"] = to_data(findings)  # not taken by a decision yet
    return data


def dump(data: Mapping[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


def _do(d: Delivery, effect: Effect) -> str:
    mapped = effect_action(d, effect)
    return mapped[0] if mapped is not None else type(effect).__name__
