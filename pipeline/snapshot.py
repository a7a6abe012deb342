"""What the shell read from GitHub just before a decision: one pull request, as values.

The shell fills a :class:`PullSnapshot` afresh before every call to
:func:`pipeline.machine.decide` (the pipeline re-reads before each write by being handed
a new snapshot). Besides what GitHub says about the PR, it carries what the shell
learned on the pipeline's behalf: the answers to our own writes (:class:`WriteResult`,
matched by effect key), the review agent's findings, live-version probes and a person's
answer to the delivery's card. Field names follow GitHub's REST API where one exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "GITHUB_ACTIONS_APP_ID",
    "CardAnswer",
    "CheckRun",
    "CommitStatus",
    "Deployment",
    "PrReview",
    "PullSnapshot",
    "Required",
    "ReviewFindings",
    "VersionObservation",
    "WriteOutcome",
    "WriteResult",
]

GITHUB_ACTIONS_APP_ID = 15368

WriteOutcome = Literal[
    "done",  # the write took effect (for a merge: the PR is merged)
    "head_moved",  # refused because the head is no longer the SHA we named (409 / 422)
    "conflict",  # refused because of merge conflicts (branch update)
    "refused",  # a definite "no" (405, 403, 422 ...): nothing changed
    "ambiguous",  # 5xx, timeout, lost response: it may or may not have happened
]


@dataclass(frozen=True, slots=True, kw_only=True)
class PrReview:
    id: int  # GitHub's review id: later reviews have larger ids
    user: str
    state: str  # APPROVED, CHANGES_REQUESTED, COMMENTED, DISMISSED, PENDING
    commit_id: str
    author_can_write: bool  # the reviewer has write (or admin/maintain) permission


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckRun:
    id: int  # later runs (re-runs included) have larger ids
    name: str
    app_id: int | None
    status: str  # queued, in_progress, completed, waiting, requested, pending
    conclusion: str | None  # success, failure, neutral, cancelled, skipped, timed_out, ...
    head_sha: str
    completed_at: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitStatus:
    id: int
    context: str
    state: str  # error, failure, pending, success
    sha: str
    app_id: int | None = None  # the app that created it, when an app did


@dataclass(frozen=True, slots=True, kw_only=True)
class Required:
    """One required check: by name and, when the rule names one, by the app that must
    report it. The shell lists those of branch protection and rulesets; the policy's
    ``required_checks`` are added by the pipeline."""

    name: str
    app_id: int | None = None
    source: Literal["protection", "ruleset", "policy"] = "protection"


@dataclass(frozen=True, slots=True, kw_only=True)
class Deployment:
    id: int
    sha: str
    environment: str
    state: str  # latest status: success, failure, error, inactive, in_progress, queued, pending
    sha_is_merge_or_descendant: bool  # the compare API says it contains the merge commit


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionObservation:
    """The answer to ``ProbeVersion(attempt=N)``: what the version URL reported."""

    attempt: int
    at: str  # ISO 8601, when the answer came
    sha: str | None  # the value of the version field; None when the GET failed
    matches: bool  # the reported commit is the merge commit or a descendant
    error: str = ""  # why there is no sha (status code, timeout, missing field...)


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteResult:
    """How one of our writes ended, as the outbox recorded it (``key``: the effect's)."""

    key: str
    outcome: WriteOutcome
    message: str = ""
    merge_commit_sha: str | None = None  # for a merge that was done


@dataclass(frozen=True, slots=True, kw_only=True)
class ReviewFindings:
    """The review agent's answer to ``RequestReview`` (``request``: that effect's key)."""

    request: str
    head_sha: str
    event: Literal["COMMENT", "REQUEST_CHANGES"] | None  # None when the agent failed
    body: str = ""
    error: str = ""
    # what the agent reported spending, when it ran (counted toward the daily caps)
    started_at: str = ""  # ISO 8601 UTC; "" when no agent ran
    cost_usd: float | None = None
    tokens: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CardAnswer:
    card: str  # the card key the delivery raised
    choice: int  # 1-based, as in ``/answer CARD N``
    by: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PullSnapshot:
    repo: str  # owner/name
    number: int
    head_sha: str
    base_ref: str = "main"
    head_ref: str = ""
    head_repo: str = ""  # owner/name of the head branch's repository ("" : the same repo)
    head_parents: tuple[str, ...] = ()  # parents of the head commit, first parent first
    state: Literal["open", "closed"] = "open"
    merged: bool = False
    merged_by: str = ""
    merge_commit_sha: str | None = None
    draft: bool = False
    labels: tuple[str, ...] = ()
    author: str = ""
    mergeable: bool | None = None  # None: GitHub is still computing it
    mergeable_state: str = "unknown"  # clean, behind, dirty, blocked, unstable, draft, ...
    behind_base: bool = False  # the base has commits the head lacks
    base_contains_head: bool | None = None  # filled while reconciling an unclear merge
    reviews: tuple[PrReview, ...] = ()
    check_runs: tuple[CheckRun, ...] = ()
    statuses: tuple[CommitStatus, ...] = ()
    required: tuple[Required, ...] = ()  # from branch protection and rulesets
    deployments: tuple[Deployment, ...] = ()  # of the policy's environment, after the merge
    versions: tuple[VersionObservation, ...] = ()  # probe answers of this delivery
    merge_queue_first: bool = True  # first in line among deliveries waiting on this base
    merge_queue_ahead: int = 0  # when not first: the number of the pull request first in line
    results: tuple[WriteResult, ...] = ()  # answers to this delivery's writes
    findings: ReviewFindings | None = None
    answer: CardAnswer | None = None
    bot_login: str = ""  # our App's bot user: its reviews never count
    bot_app_id: int | None = None  # our App: its check runs and statuses never count

    def result(self, key: str) -> WriteResult | None:
        """The shell's answer to the write whose effect key is ``key``, if any yet."""
        for result in self.results:
            if result.key == key:
                return result
        return None

    @property
    def fork(self) -> bool:
        return bool(self.head_repo) and self.head_repo != self.repo
