"""Verdicts: pure functions over a :class:`~pipeline.snapshot.PullSnapshot`.

Each answers one question the machine asks at a stage (is the review done? did the
required checks pass? can GitHub merge it now? did the merge commit deploy? is it
live?) with a small value; none looks at the clock or at the delivery's history beyond
what it is handed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from pipeline.policy import OWN_CHECK, Deploy, Policy, ReviewRule
from pipeline.snapshot import (
    CheckRun,
    CommitStatus,
    Deployment,
    PullSnapshot,
    Required,
    VersionObservation,
)

__all__ = [
    "ChecksVerdict",
    "DeploymentVerdict",
    "Readiness",
    "ReviewVerdict",
    "VersionVerdict",
    "checks_verdict",
    "deployment_verdict",
    "label",
    "merge_readiness",
    "required_checks",
    "review_verdict",
    "version_verdict",
]

PASSING = frozenset({"success", "neutral", "skipped"})
FAILING = frozenset(
    {"failure", "cancelled", "timed_out", "action_required", "stale", "startup_failure"}
)
_DECISIVE = frozenset({"APPROVED", "CHANGES_REQUESTED", "DISMISSED"})
_STATUS = {"success": "passed", "pending": "pending", "failure": "failed", "error": "failed"}

Result = Literal["passed", "pending", "failed", "missing"]


# ------------------------------------------------------------------------------ review


@dataclass(frozen=True, slots=True, kw_only=True)
class ReviewVerdict:
    kind: Literal["passed", "waiting", "changes_requested", "agent_needed"]
    approvals: int = 0
    needed: int = 0
    by: tuple[str, ...] = ()  # who approved, or who asked for changes


def review_verdict(
    pr: PullSnapshot,
    rule: ReviewRule,
    *,
    heads: tuple[str, ...] = (),
    agent_reviews: Iterable[tuple[str, str]] = (),
) -> ReviewVerdict:
    """Whether the review the policy asks for is done for the current change.

    ``heads`` are the commits that count as the current change (the head and the heads
    our own branch updates were made from); default: the head alone. ``agent_reviews``
    are the ``(head_sha, event)`` reviews the pipeline already posted.
    """
    heads = heads or (pr.head_sha,)
    if rule.kind == "none":
        return ReviewVerdict(kind="passed")
    if rule.kind == "agent":
        events = {event for sha, event in agent_reviews if sha in heads}
        if "REQUEST_CHANGES" in events:
            return ReviewVerdict(kind="changes_requested", by=(pr.bot_login,))
        if "COMMENT" in events:
            return ReviewVerdict(kind="passed")
        return ReviewVerdict(kind="agent_needed")
    latest: dict[str, tuple[int, str, str]] = {}
    for review in pr.reviews:
        if review.state not in _DECISIVE or not review.author_can_write:
            continue
        if review.user in (pr.bot_login, pr.author):
            continue
        seen = latest.get(review.user)
        if seen is None or review.id > seen[0]:
            latest[review.user] = (review.id, review.state, review.commit_id)
    approvers = tuple(
        sorted(u for u, (_, s, sha) in latest.items() if s == "APPROVED" and sha in heads)
    )
    blockers = tuple(
        sorted(u for u, (_, s, sha) in latest.items() if s == "CHANGES_REQUESTED" and sha in heads)
    )
    if blockers:
        return ReviewVerdict(
            kind="changes_requested", approvals=len(approvers), needed=rule.approvals, by=blockers
        )
    kind: Literal["passed", "waiting"] = "passed" if len(approvers) >= rule.approvals else "waiting"
    return ReviewVerdict(kind=kind, approvals=len(approvers), needed=rule.approvals, by=approvers)


# ------------------------------------------------------------------------------ checks


@dataclass(frozen=True, slots=True, kw_only=True)
class ChecksVerdict:
    kind: Result  # failed before pending before missing before passed
    passed: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()  # required but never reported on this head


def label(required: Required) -> str:
    """How a required check is named to people: ``build`` or ``build (app 15368)``."""
    return required.name if required.app_id is None else f"{required.name} (app {required.app_id})"


def required_checks(pr: PullSnapshot, policy: Policy) -> tuple[Required, ...]:
    """The union of protection, rulesets and the policy, without our own check."""
    out: list[Required] = []
    seen: set[tuple[str, int | None]] = set()
    extra = tuple(Required(name=n, source="policy") for n in policy.required_checks)
    for req in (*pr.required, *extra):
        key = (req.name, req.app_id)
        if req.name == OWN_CHECK or key in seen:
            continue
        seen.add(key)
        out.append(req)
    return tuple(out)


def checks_verdict(pr: PullSnapshot, policy: Policy) -> ChecksVerdict:
    """The required checks on the current head.

    The latest run per (name, app) counts, so a re-run from failure to success is a
    success. When a rule names an app, a check of that name from another app does not
    count; commit statuses count by context. Our own runs and statuses never count.
    """
    groups: dict[Result, list[str]] = {"passed": [], "pending": [], "failed": [], "missing": []}
    for req in required_checks(pr, policy):
        groups[_requirement(pr, req)].append(label(req))
    order: tuple[Result, ...] = ("failed", "pending", "missing")
    kind: Result = next((k for k in order if groups[k]), "passed")
    return ChecksVerdict(
        kind=kind,
        passed=tuple(groups["passed"]),
        pending=tuple(groups["pending"]),
        failed=tuple(groups["failed"]),
        missing=tuple(groups["missing"]),
    )


def _requirement(pr: PullSnapshot, req: Required) -> Result:
    latest_runs: dict[int | None, CheckRun] = {}
    for run in pr.check_runs:
        if run.name != req.name or run.head_sha != pr.head_sha or not _counts(pr, run.app_id):
            continue
        if req.app_id is not None and run.app_id != req.app_id:
            continue
        if run.app_id not in latest_runs or run.id > latest_runs[run.app_id].id:
            latest_runs[run.app_id] = run
    latest_statuses: dict[int | None, CommitStatus] = {}
    for status in pr.statuses:
        if status.context != req.name or status.sha != pr.head_sha:
            continue
        if not _counts(pr, status.app_id):
            continue
        if req.app_id is not None and status.app_id != req.app_id:
            continue
        if status.app_id not in latest_statuses or status.id > latest_statuses[status.app_id].id:
            latest_statuses[status.app_id] = status
    results = [_run_result(r) for r in latest_runs.values()]
    results += [_STATUS.get(s.state, "pending") for s in latest_statuses.values()]
    if not results:
        return "missing"
    if "failed" in results:
        return "failed"
    if "pending" in results:
        return "pending"
    return "passed"


def _counts(pr: PullSnapshot, app_id: int | None) -> bool:
    return pr.bot_app_id is None or app_id != pr.bot_app_id


def _run_result(run: CheckRun) -> str:
    if run.status != "completed" or run.conclusion is None:
        return "pending"
    if run.conclusion in PASSING:
        return "passed"
    if run.conclusion in FAILING:
        return "failed"
    return "pending"


# ------------------------------------------------------------------------------- merge


@dataclass(frozen=True, slots=True, kw_only=True)
class Readiness:
    kind: Literal["ready", "update", "behind", "conflict", "unknown", "blocked", "draft"]


def merge_readiness(pr: PullSnapshot, policy: Policy) -> Readiness:
    """Whether GitHub would merge the PR now, and if not, what stands in the way.

    ``update``: behind its base and the policy updates branches; ``behind``: branch
    protection wants it up to date and the policy does not update branches;
    ``unknown``: GitHub is still computing mergeability; ``blocked``: branch protection
    is not satisfied yet.
    """
    if pr.draft or pr.mergeable_state == "draft":
        return Readiness(kind="draft")
    if pr.mergeable is False or pr.mergeable_state == "dirty":
        return Readiness(kind="conflict")
    if policy.update_branch and (pr.behind_base or pr.mergeable_state == "behind"):
        return Readiness(kind="update")
    if pr.mergeable_state == "behind":  # protection wants it up to date; we may not update
        return Readiness(kind="behind")
    if pr.mergeable is None or pr.mergeable_state == "unknown":
        return Readiness(kind="unknown")
    if pr.mergeable_state == "blocked":
        return Readiness(kind="blocked")
    return Readiness(kind="ready")


# -------------------------------------------------------------------------- deployment


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentVerdict:
    kind: Literal["deployed", "failed", "pending", "none"]
    deployment: Deployment | None = None


def deployment_verdict(pr: PullSnapshot, deploy: Deploy) -> DeploymentVerdict:
    """A deployment of the merge commit or a descendant in the policy's environment.

    Any such deployment that reached ``success`` wins; otherwise the newest one decides:
    ``failure`` or ``error`` fails, anything else is still pending.
    """
    env = deploy.environment.casefold()
    ours = sorted(
        (
            d
            for d in pr.deployments
            if d.environment.casefold() == env and d.sha_is_merge_or_descendant
        ),
        key=lambda d: d.id,
    )
    if not ours:
        return DeploymentVerdict(kind="none")
    done = [d for d in ours if d.state == "success"]
    if done:
        return DeploymentVerdict(kind="deployed", deployment=done[-1])
    newest = ours[-1]
    if newest.state in ("failure", "error"):
        return DeploymentVerdict(kind="failed", deployment=newest)
    return DeploymentVerdict(kind="pending", deployment=newest)


# ----------------------------------------------------------------------------- version


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionVerdict:
    kind: Literal["live", "waiting", "flapping"]
    streak: int = 0  # matching answers in a row, up to the last one
    flaps: int = 0  # times a matching answer was followed by a different commit
    last: str | None = None  # the commit the last answer reported
    error: str = ""  # why the newest probe got no answer ("" when it got one)


def version_verdict(
    observations: Iterable[VersionObservation], *, since: int, needed: int
) -> VersionVerdict:
    """Whether the version URL reported the merge commit (or a descendant) ``needed``
    times in a row, counting probe answers from attempt ``since`` on.

    A failed GET (no sha) is no answer: it neither counts nor breaks a streak.
    """
    seen: dict[int, VersionObservation] = {}
    for obs in observations:
        if obs.attempt >= since and obs.attempt not in seen:
            seen[obs.attempt] = obs
    streak = flaps = 0
    last: str | None = None
    error = ""
    for attempt in sorted(seen):
        obs = seen[attempt]
        if obs.sha is None:
            error = obs.error or "no answer"
            continue
        last, error = obs.sha, ""
        if obs.matches:
            streak += 1
        else:
            if streak:
                flaps += 1
            streak = 0
    if streak >= needed:
        return VersionVerdict(kind="live", streak=streak, flaps=flaps, last=last)
    kind: Literal["waiting", "flapping"] = "flapping" if flaps else "waiting"
    return VersionVerdict(kind=kind, streak=streak, flaps=flaps, last=last, error=error)
