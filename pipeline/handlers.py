"""The stages before the merge (review, ready, checks) and ``blocked``.

Each stage handler reads its verdict, maybe asks for one write, and names the outcome
the stage table moves on. Guards (closed, unlabeled, new head, merged) have already run
in :mod:`pipeline.machine`; a handler only sees its stage. A handler that returns a
waiting outcome has said what it waits for (``ctx.wait``); one whose outcome leads to
``blocked`` has named the card (``ctx.raise_card``).
"""

from __future__ import annotations

from pipeline.context import READY_GRACE, REVIEW_TIMEOUT, Ctx, instant, short, span
from pipeline.delivery import Attempt, Reviewed
from pipeline.effects import MarkReady, PostReview, RequestReview
from pipeline.errors import PipelineError
from pipeline.stages import CARDS, Outcome
from pipeline.verdicts import (
    checks_verdict,
    deployment_verdict,
    merge_readiness,
    review_verdict,
)

__all__ = ["blocked", "checks", "conflict", "names", "ready", "review", "reviewed"]


def names(items: tuple[str, ...]) -> str:
    return ", ".join(items) if items else "none"


# ------------------------------------------------------------------------------ review


def review(ctx: Ctx) -> Outcome:
    d, pr, rule = ctx.d, ctx.pr, ctx.policy.review
    if d.mode == "review" and rule.kind != "agent":
        ctx.note = f'the policy\'s review is "{rule}": deliver-review needs "agent:NAME"'
        return "skipped"
    posted = tuple((r.sha, r.event) for r in d.reviewed)
    verdict = review_verdict(pr, rule, heads=d.heads, agent_reviews=posted)
    if verdict.kind == "passed":
        ctx.note = {
            "none": 'review = "none"',
            "approvals": f"approved by {names(verdict.by)}",
            "agent": f"agent {rule.agent} reviewed {short(d.head_sha)}",
        }[rule.kind]
        return "passed"
    if verdict.kind == "changes_requested":
        who = "the review" if rule.kind == "agent" else names(verdict.by)
        ctx.note = f"{who} asked for changes on {short(d.head_sha)}"
        ctx.wait("webhook", f"a new push: {ctx.note}")
        return "changes_requested"
    if verdict.kind == "waiting":
        more = verdict.needed - verdict.approvals
        ctx.wait("webhook", f"{more} more approving review(s) by writers on {short(d.head_sha)}")
        return "waiting"
    return _agent_review(ctx)


def _agent_review(ctx: Ctx) -> Outcome:
    d, pr, agent = ctx.d, ctx.pr, ctx.policy.review.agent
    req = d.review_request  # a new head clears it (see the guards)
    if req is None:
        key = d.key("review-request", d.head_sha, ctx.tries())
        ctx.emit(RequestReview(key=key, agent=agent, head_sha=d.head_sha))
        ctx.set(review_request=Attempt(key=key, sha=d.head_sha, at=ctx.at))
        ctx.wait(
            "agent", f"the review of {short(d.head_sha)} by agent {agent}", ctx.now + REVIEW_TIMEOUT
        )
        return "waiting"
    found = pr.findings
    if found is not None and found.request == req.key and found.head_sha == req.sha:
        if found.event is None:
            ctx.set(review_request=None)
            ctx.raise_card(
                "review_failed",
                f"The review agent {agent} failed on {pr.repo}#{pr.number}",
                f"Agent {agent} could not review {d.head_sha}: {found.error or 'no reason given'}.",
            )
            return "failed"
        footer = f"\n\n<sub>Autoloop review of {d.head_sha} by agent `{agent}`.</sub>"
        ctx.emit(
            PostReview(
                key=f"{d.id}/review/{d.head_sha}",  # not per run: a head is reviewed once
                head_sha=d.head_sha,
                event=found.event,
                body=(found.body.strip() or "No findings.") + footer,
            )
        )
        ctx.set(
            reviewed=(*d.reviewed, Reviewed(sha=d.head_sha, event=found.event)),
            review_request=None,
        )
        if found.event == "COMMENT":
            ctx.note = f"agent {agent} reviewed {short(d.head_sha)}"
            return "passed"
        ctx.note = f"agent {agent} asked for changes on {short(d.head_sha)}"
        ctx.wait("webhook", f"a new push: {ctx.note}")
        return "changes_requested"
    until = instant(req.at) + REVIEW_TIMEOUT
    if ctx.past(until):
        ctx.set(review_request=None)
        ctx.raise_card(
            "review_failed",
            f"The review agent {agent} did not answer on {pr.repo}#{pr.number}",
            f"No findings from agent {agent} for {d.head_sha} "
            f"within {span(REVIEW_TIMEOUT.total_seconds())}.",
        )
        return "timeout"
    ctx.wait("agent", f"the review of {short(d.head_sha)} by agent {agent}", until)
    return "waiting"


def reviewed(ctx: Ctx) -> Outcome:
    ctx.wait("webhook", f"the next push (the head {short(ctx.d.head_sha)} is reviewed)")
    return "waiting"


# ------------------------------------------------------------------------------- ready


def ready(ctx: Ctx) -> Outcome:
    d, pr = ctx.d, ctx.pr
    if not pr.draft:
        return "ready"
    req = d.ready_request  # a new head clears it (see the guards)
    if req is None:
        key = d.key("ready", d.head_sha, ctx.tries())
        ctx.emit(MarkReady(key=key, head_sha=d.head_sha))
        ctx.set(ready_request=Attempt(key=key, sha=d.head_sha, at=ctx.at))
        ctx.wait("webhook", "GitHub to show the PR ready for review", ctx.now + READY_GRACE)
        return "waiting"
    answer = pr.result(req.key)
    until = instant(req.at) + READY_GRACE
    if (answer is not None and answer.outcome == "refused") or ctx.past(until):
        why = answer.message if answer is not None and answer.message else "it is still a draft"
        ctx.set(ready_request=None)
        ctx.raise_card(
            "ready_refused",
            f"Could not mark {pr.repo}#{pr.number} ready for review",
            f"Marking the draft ready did not take: {why}.",
        )
        return "refused"
    ctx.wait("webhook", "GitHub to show the PR ready for review", until)
    return "waiting"


# ------------------------------------------------------------------------------ checks


def checks(ctx: Ctx) -> Outcome:
    d, pr = ctx.d, ctx.pr
    if pr.draft:
        return "draft"
    if merge_readiness(pr, ctx.policy).kind == "conflict":
        return conflict(ctx)
    verdict = checks_verdict(pr, ctx.policy)
    if verdict.kind == "passed":
        ctx.note = f"required checks passed: {names(verdict.passed)}"
        return "passed"
    deadline = ctx.deadline()
    if ctx.past(deadline):
        timeout = span(ctx.policy.checks_timeout_s)
        # The title says what held the PR: a failure nobody ran again before the
        # deadline, a check that never reported, or checks still running.
        held = (
            "failed" if verdict.failed else "never reported" if verdict.missing else "still running"
        )
        ctx.raise_card(
            "checks_timeout",
            f"Required checks {held} on {pr.repo}#{pr.number}",
            f"After {timeout} on {d.head_sha}: never reported: {names(verdict.missing)}; "
            f"still running: {names(verdict.pending)}; failed: {names(verdict.failed)}.",
        )
        return "timeout"
    parts = []
    if verdict.failed:
        parts.append(f"a re-run or a push (failed: {names(verdict.failed)})")
        # A failure waits for a person: its place in the merge line (kept through its
        # branch update) would hold every delivery behind it until the checks' deadline.
        # It queues again, at the back, once its checks pass.
        ctx.set(queued_at="")
    if verdict.pending or verdict.missing:
        parts.append(f"required checks {names(verdict.pending + verdict.missing)}")
    ctx.wait("webhook", "; ".join(parts), deadline)
    return "waiting"


def conflict(ctx: Ctx) -> Outcome:
    pr = ctx.pr
    ctx.raise_card(
        "conflict",
        f"{pr.repo}#{pr.number} has conflicts with {pr.base_ref}",
        f"{pr.head_ref or 'The branch'} conflicts with {pr.base_ref}: "
        "resolve them and push; the delivery goes on with the next push.",
    )
    return "conflict"


# ----------------------------------------------------------------------------- blocked


def blocked(ctx: Ctx) -> Outcome:
    d, pr, card = ctx.d, ctx.pr, ctx.d.card
    if card is None:
        raise PipelineError(f"{d.id} is blocked without a card")
    options = CARDS[card.kind]
    answer = pr.answer
    if answer is not None and answer.card == card.key and 1 <= answer.choice <= len(options):
        label, outcome = options[answer.choice - 1]
        ctx.note = f"{answer.by or 'a person'} chose: {label}"
        if outcome == "is_merged":
            att = d.merge_attempt
            ctx.set(merge_sha=pr.merge_commit_sha or (att.sha if att else d.head_sha))
        return outcome
    # What the card waits for may come about without a person (a check that reported
    # after the deadline, a deployment run again): the card was left open, the check run
    # spinning, until someone answered "wait again".
    if card.kind == "checks_timeout" and checks_verdict(pr, ctx.policy).kind == "passed":
        ctx.note = "the required checks passed after all: the card is not needed"
        return "wait_checks"
    deploy = ctx.policy.deploy
    late = card.kind in ("deploy_failed", "deploy_timeout") and deploy is not None
    if late and deploy is not None and deployment_verdict(pr, deploy).kind == "deployed":
        ctx.note = "a deployment succeeded after all: the card is not needed"
        return "wait_deploy"
    if card.kind == "conflict":
        ctx.wait("webhook", f"a push that resolves the conflicts with {pr.base_ref}")
    else:
        ctx.wait("answer", f"an answer to: {card.title}")
    return "waiting"
