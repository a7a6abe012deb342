"""A small simulated GitHub around one pull request, for property tests of ``decide``.

It plays GitHub's rules (a merge lands only on the head it names, a merged PR takes no
more pushes, a merge whose answer was lost shows as merged within seconds) and an
adversarial network (answers lost, late, or ambiguous), and checks the machine's
promises after every decision. Not a test module: the tests import it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from pipeline import (
    CardAnswer,
    CheckRun,
    Deployment,
    Merge,
    Mode,
    Policy,
    PostReview,
    ProbeVersion,
    Progress,
    PullSnapshot,
    RequestReview,
    ReviewFindings,
    Step,
    UpdateBranch,
    VersionObservation,
    WriteResult,
    decide,
    delivery_from_data,
    delivery_to_data,
    start,
)
from pipeline.snapshot import PrReview, WriteOutcome
from tests.pipeline.builders import ACTIONS, BASE, BOT, BOT_APP, H1, MERGED, NUMBER, REPO, T0, at

Report = Literal["done", "head_moved", "refused", "ambiguous", "lost"]
# A merge shows as merged at most this long after it landed: within the pipeline's read-back
# grace (pipeline.context.RECONCILE_GRACE, 30 s). One that showed later still could not be
# merged twice (GitHub refuses to merge a merged PR); here the World asserts the stronger
# promise that no second merge is even asked for.
VISIBLE_AFTER = timedelta(seconds=20)


@dataclass(frozen=True)
class Fate:
    """What happens to one merge request: whether it lands when it can, what we hear."""

    lands: bool
    report: Report


@dataclass
class World:
    policy: Policy
    mode: Mode
    fates: list[Fate]
    minutes: float = 0.0
    head: str = H1
    parents: tuple[str, ...] = (BASE,)
    labels: tuple[str, ...] = ()
    state: Literal["open", "closed"] = "open"
    draft: bool = False
    mergeable_state: str = "clean"
    behind: bool = False
    first_in_line: bool = True
    landed_at: float | None = None
    merged_by_us: bool = False
    visible_now: bool = False
    runs: list[CheckRun] = field(default_factory=list)
    reviews: list[PrReview] = field(default_factory=list)
    results: list[WriteResult] = field(default_factory=list)
    unreported: list[WriteResult] = field(default_factory=list)
    updates: list[UpdateBranch] = field(default_factory=list)
    requests: list[RequestReview] = field(default_factory=list)
    findings: ReviewFindings | None = None
    answer: CardAnswer | None = None
    deployments: list[Deployment] = field(default_factory=list)
    probes: list[ProbeVersion] = field(default_factory=list)
    versions: list[VersionObservation] = field(default_factory=list)
    merges: list[tuple[Merge, float]] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)
    reviewed_heads: list[str] = field(default_factory=list)
    seq: int = 0
    counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))

    def __post_init__(self) -> None:
        label = self.policy.labels.deliver if self.mode == "deliver" else self.policy.labels.review
        self.labels = (label,)
        self.delivery = start(repo=REPO, number=NUMBER, head_sha=self.head, mode=self.mode, now=T0)

    # -------------------------------------------------------------------- what we read

    @property
    def merged_visible(self) -> bool:
        if self.landed_at is None:
            return False
        return self.visible_now or at(self.minutes) - at(self.landed_at) >= VISIBLE_AFTER

    def snapshot(self) -> PullSnapshot:
        merged = self.merged_visible
        return PullSnapshot(
            repo=REPO,
            number=NUMBER,
            head_sha=self.head,
            head_parents=self.parents,
            head_ref="fix-login-redirect",
            labels=self.labels,
            state="closed" if merged else self.state,
            merged=merged,
            merged_by=BOT if self.merged_by_us else "hubot",
            merge_commit_sha=MERGED if merged else None,
            draft=self.draft,
            mergeable={"dirty": False, "unknown": None}.get(self.mergeable_state, True),
            mergeable_state=self.mergeable_state,
            behind_base=self.behind,
            base_contains_head=self._base_contains_head() if self.delivery.reconciling else None,
            reviews=tuple(self.reviews),
            check_runs=tuple(self.runs),
            required=(),
            deployments=tuple(self.deployments),
            versions=tuple(self.versions),
            merge_queue_first=self.first_in_line,
            results=tuple(self.results),
            findings=self.findings,
            answer=self.answer,
            bot_login=BOT,
            bot_app_id=BOT_APP,
        )

    def _base_contains_head(self) -> bool:
        # a merge commit keeps the head in the base's history; squash and rebase do not
        return self.landed_at is not None and self.policy.merge_method == "merge"

    # ---------------------------------------------------------------------- the moves

    def apply(self, move: tuple[Any, ...]) -> None:
        name, *args = move
        getattr(self, f"_{name}")(*args)

    def _tick(self, minutes: float) -> None:
        self.minutes += minutes

    def _push(self) -> None:
        if self.landed_at is None and self.state == "open":
            old, self.head = self.head, f"{next(self.counter):040x}"
            self.parents = (old,)

    def _base_moved(self) -> None:
        if self.landed_at is None:
            self.behind, self.mergeable_state = True, "behind"

    def _checks(self, conclusion: str | None) -> None:
        for name in ("build", "test"):
            self.runs.append(
                CheckRun(
                    id=next(self.counter),
                    name=name,
                    app_id=ACTIONS,
                    status="completed" if conclusion else "in_progress",
                    conclusion=conclusion,
                    head_sha=self.head,
                )
            )

    def _mergeable(self, state: str) -> None:
        self.mergeable_state = state

    def _approve(self) -> None:
        self.reviews.append(
            PrReview(
                id=next(self.counter),
                user="alice",
                state="APPROVED",
                commit_id=self.head,
                author_can_write=True,
            )
        )

    def _answers(self) -> None:
        for result in self.unreported:
            self.results.append(result)
            if result.outcome == "done":
                self.visible_now = True
        self.unreported.clear()

    def _visible(self) -> None:
        self.visible_now = self.landed_at is not None

    def _update_lands(self, kind: str) -> None:
        if not self.updates:
            return
        update = self.updates.pop(0)
        possible = (
            update.expected_head_sha == self.head
            and self.landed_at is None
            and self.state == "open"
        )
        outcome: WriteOutcome = "refused" if kind == "refused" else "conflict"
        if kind == "lands":
            outcome = "done" if possible else "head_moved"
        if outcome == "done":
            old, self.head = self.head, f"{next(self.counter):040x}"
            self.parents = (old, BASE)
            self.behind, self.mergeable_state = False, "clean"
        self.results.append(WriteResult(key=update.key, outcome=outcome))

    def _findings(self, event: Literal["COMMENT", "REQUEST_CHANGES"] | None) -> None:
        if self.requests:
            ask = self.requests[-1]
            self.findings = ReviewFindings(
                request=ask.key,
                head_sha=ask.head_sha,
                event=event,
                body="findings",
                error="" if event else "boom",
            )

    def _answer(self, choice: int) -> None:
        card = self.delivery.card
        if card is not None:
            self.answer = CardAnswer(card=card.key, choice=choice, by="mona")

    def _unlabel(self) -> None:
        self.labels = ()

    def _close(self) -> None:
        if self.landed_at is None:
            self.state = "closed"

    def _person_merges(self) -> None:
        if self.landed_at is None and self.state == "open":
            self.landed_at, self.visible_now = self.minutes, True

    def _deploy(self, state: str) -> None:
        if self.landed_at is not None:
            self.deployments.append(
                Deployment(
                    id=next(self.counter),
                    sha=MERGED,
                    environment="production",
                    state=state,
                    sha_is_merge_or_descendant=True,
                )
            )

    def _probe(self, matches: bool) -> None:
        if self.probes:
            probe = self.probes[-1]
            sha = MERGED if matches else BASE
            self.versions.append(
                VersionObservation(
                    attempt=probe.attempt, at=at(self.minutes).isoformat(), sha=sha, matches=matches
                )
            )

    def _draft(self, draft: bool) -> None:
        if self.landed_at is None:
            self.draft = draft

    def _line(self, first: bool) -> None:
        self.first_in_line = first

    # -------------------------------------------------------------------- a decision

    def decide(self) -> Step:
        pr, now = self.snapshot(), at(self.minutes)
        step = decide(self.delivery, pr, self.policy, now)
        assert decide(self.delivery, pr, self.policy, now) == step, "decide is not deterministic"
        self.check(step)
        self.delivery = step.delivery
        self.answer = None
        return step

    def check(self, step: Step) -> None:
        """The machine's promises, after every decision."""
        now = at(self.minutes)
        was_terminal = self.delivery.terminal
        d = step.delivery
        assert delivery_from_data(delivery_to_data(d)) == d
        if was_terminal:
            assert step.effects == () and step.wake_at is None
        if d.terminal:
            assert step.waiting is None and step.wake_at is None
        else:
            assert step.waiting is not None, d.stage
            assert step.waiting.on != "timer" or step.wake_at is not None, step.waiting
        if step.wake_at is not None:
            assert step.wake_at > now
        assert (d.stage == "blocked") == (d.card is not None), (d.stage, d.card)
        for effect in step.effects:
            assert effect.key not in self.keys, f"effect key used twice: {effect.key}"
            self.keys.add(effect.key)
            if isinstance(effect, Merge):
                self._merge(effect)
            elif isinstance(effect, UpdateBranch):
                self.updates.append(effect)
            elif isinstance(effect, RequestReview):
                self.requests.append(effect)
            elif isinstance(effect, ProbeVersion):
                self.probes.append(effect)
            elif isinstance(effect, PostReview):
                assert effect.head_sha not in self.reviewed_heads, "a head reviewed twice"
                self.reviewed_heads.append(effect.head_sha)
            elif isinstance(effect, Progress):
                assert effect.seq > self.seq
                self.seq = effect.seq
            if self.mode == "review":
                assert not isinstance(effect, Merge | UpdateBranch)

    def _merge(self, merge: Merge) -> None:
        assert self.landed_at is None, "a Merge after the PR was merged"
        for earlier, when in self.merges:
            heard = any(r.key == earlier.key for r in self.results)
            waited = at(self.minutes) - at(when) >= timedelta(minutes=10)
            assert heard or waited, "a Merge while an earlier one may still be answered"
        fate = self.fates[len(self.merges) % len(self.fates)]
        self.merges.append((merge, self.minutes))
        possible = merge.sha == self.head and self.landed_at is None and self.state == "open"
        if not possible:
            report: Report = "head_moved" if merge.sha != self.head else "refused"
            landed = False
        else:
            report = fate.report
            landed = report == "done" or (report in ("ambiguous", "lost") and fate.lands)
        if landed:
            self.landed_at, self.merged_by_us = self.minutes, True
        if report != "lost":
            outcome: WriteOutcome = report
            sha = MERGED if landed else None
            self.unreported.append(
                WriteResult(key=merge.key, outcome=outcome, merge_commit_sha=sha)
            )
