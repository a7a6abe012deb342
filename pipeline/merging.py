"""The merge stages: bring the branch up to date, merge with the head-SHA guard, and
settle a merge whose answer was lost by reading the PR back, never by merging again.
"""

from __future__ import annotations

from datetime import timedelta

from kernel.durations import iso
from pipeline.context import (
    MERGE_ANSWER_GRACE,
    RECONCILE_FIRST,
    RECONCILE_GRACE,
    RECONCILE_STEP,
    UNKNOWN_FIRST_S,
    UNKNOWN_MAX_S,
    UNKNOWN_POLLS,
    Ctx,
    instant,
    short,
)
from pipeline.delivery import Attempt
from pipeline.effects import Merge, UpdateBranch
from pipeline.handlers import conflict, names
from pipeline.stages import Outcome
from pipeline.verdicts import checks_verdict, merge_readiness, review_verdict

__all__ = ["merge", "update_branch"]


def update_branch(ctx: Ctx) -> Outcome:
    d, pr = ctx.d, ctx.pr
    req = d.update_request  # a new head clears it (see the guards)
    if req is None:  # just come from merge, which found the branch behind
        key = d.key("update", d.head_sha, ctx.tries())
        ctx.emit(UpdateBranch(key=key, expected_head_sha=d.head_sha))
        ctx.set(update_request=Attempt(key=key, sha=d.head_sha, at=ctx.at))
        ctx.wait(
            "webhook", f"GitHub to bring the branch up to date with {pr.base_ref}", ctx.deadline()
        )
        return "waiting"
    answer = pr.result(req.key)
    if answer is not None and answer.outcome == "conflict":
        ctx.set(update_request=None)
        return conflict(ctx)
    failed = answer is not None and answer.outcome == "refused"
    if failed or ctx.past(ctx.deadline()):
        why = answer.message if answer is not None else "no push arrived in time"
        ctx.set(update_request=None)
        ctx.raise_card(
            "update_failed",
            f"Could not update the branch of {pr.repo}#{pr.number}",
            f"Updating {d.head_sha} with {pr.base_ref} did not happen: {why or 'refused'}.",
        )
        return "refused" if failed else "timeout"
    ctx.wait("webhook", f"GitHub to bring the branch up to date with {pr.base_ref}", ctx.deadline())
    return "waiting"


def merge(ctx: Ctx) -> Outcome:
    d, pr, policy = ctx.d, ctx.pr, ctx.policy
    if d.merge_attempt is not None:
        return _settle(ctx, d.merge_attempt)
    if not d.queued_at:  # its place in the line of its base, kept through its updates
        ctx.set(queued_at=ctx.at)
    readiness = merge_readiness(pr, policy).kind
    if readiness == "draft":
        return readiness
    if readiness == "conflict":
        return conflict(ctx)
    posted = tuple((r.sha, r.event) for r in d.reviewed)
    if review_verdict(pr, policy.review, heads=d.heads, agent_reviews=posted).kind != "passed":
        ctx.note = "the review no longer passes"
        return "review_changed"
    verdict = checks_verdict(pr, policy)
    if verdict.kind != "passed":
        ctx.note = f"required checks changed: {names(verdict.failed + verdict.pending)}"
        return "checks_changed"
    if not pr.merge_queue_first:  # only the first in line updates, polls and merges
        ahead = f" (#{pr.merge_queue_ahead})" if pr.merge_queue_ahead else ""
        ctx.wait("line", f"its turn: another delivery{ahead} on {pr.base_ref} merges first")
        return "waiting"
    if readiness == "update":
        return readiness
    if readiness == "behind":
        ctx.wait("webhook", f"a push: {pr.base_ref} wants it up to date and update_branch is false")
        return "waiting"
    if readiness in ("unknown", "blocked") and (
        d.polls >= UNKNOWN_POLLS or ctx.past(ctx.deadline())
    ):
        ctx.raise_card(
            "not_mergeable",
            f"GitHub will not merge {pr.repo}#{pr.number}",
            f"GitHub reports its merge state as {pr.mergeable_state!r} for {d.head_sha}.",
        )
        return "timeout"
    if readiness == "unknown":
        # A re-read counts (and the next one backs off) only when its timer is due: a
        # webhook that wakes the delivery meanwhile does not use up the re-reads.
        due = None if d.next_poll_at is None else instant(d.next_poll_at)
        if due is None or ctx.past(due):
            delay = min(UNKNOWN_FIRST_S * 2 ** min(d.polls, 10), UNKNOWN_MAX_S)
            due = ctx.now + timedelta(seconds=delay)
            ctx.set(polls=d.polls + 1, next_poll_at=iso(due))
        ctx.wait("timer", "GitHub to compute mergeability", due)
        return "waiting"
    if readiness == "blocked":
        ctx.wait("webhook", "branch protection (GitHub reports the merge blocked)", ctx.deadline())
        return "waiting"
    key = d.key("merge", d.head_sha, ctx.tries())
    ctx.emit(Merge(key=key, sha=d.head_sha, method=policy.merge_method))
    ctx.set(merge_attempt=Attempt(key=key, sha=d.head_sha, at=ctx.at))
    ctx.wait(
        "write",
        f"GitHub's answer to the merge of {short(d.head_sha)}",
        ctx.now + MERGE_ANSWER_GRACE,
    )
    return "waiting"


def _settle(ctx: Ctx, att: Attempt) -> Outcome:
    """A merge was asked for: only its answer, or reading the PR back, settles it.

    A merge that happened shows as merged when the PR is read back (the guard in
    :mod:`pipeline.machine` then moves on), so an unclear one is read back for
    ``RECONCILE_GRACE``. Still unmerged then, and the base does not hold the head: it
    did not happen. The base holding the head of an unmerged PR, or no way to tell,
    is a question for a person.
    """
    pr = ctx.pr
    if att.outcome == "":
        asked = instant(att.at)
        what = f"GitHub's answer to the merge of {short(att.sha)}"
        ctx.wait("write", what, asked + MERGE_ANSWER_GRACE)
        return "waiting"
    heard = instant(att.heard or att.at)
    answer = pr.result(att.key)
    if att.outcome in ("refused", "conflict"):
        ctx.set(merge_attempt=None)
        # GitHub refuses a merge that a push to the base just put in conflict with "405
        # not mergeable", no word of why: the pull request read back says it
        if att.outcome == "conflict" or merge_readiness(pr, ctx.policy).kind == "conflict":
            return conflict(ctx)
        why = answer.message if answer is not None and answer.message else "no reason given"
        ctx.raise_card(
            "merge_refused",
            f"GitHub refused to merge {pr.repo}#{pr.number}",
            f"Merging {att.sha} was refused: {why}.",
        )
        return "refused"
    if att.outcome == "head_moved":
        if not ctx.past(heard + MERGE_ANSWER_GRACE):
            what = "the new head (GitHub said the head moved)"
            ctx.wait("webhook", what, heard + MERGE_ANSWER_GRACE)
            return "waiting"
        ctx.set(merge_attempt=None)
        ctx.note = "GitHub said the head moved, yet it did not: checking again"
        return "checks_changed"
    if not ctx.past(heard + RECONCILE_GRACE):
        step = min(max(ctx.now - heard, RECONCILE_FIRST), RECONCILE_STEP)
        until = min(heard + RECONCILE_GRACE, ctx.now + step)
        ctx.wait("timer", f"reading the PR back: did the merge of {short(att.sha)} happen?", until)
        return "waiting"
    if pr.base_contains_head is False:
        ctx.set(merge_attempt=None)
        ctx.note = f"read back: {short(att.sha)} was not merged"
        return "not_merged"
    seen = (
        f"{pr.base_ref} already holds {att.sha}, but the PR looks unmerged"
        if pr.base_contains_head
        else f"could not tell whether {pr.base_ref} holds {att.sha}"
    )
    ctx.raise_card(
        "merge_unclear",
        f"Is {pr.repo}#{pr.number} merged?",
        f"The answer to our merge was lost and {seen}. Nothing will be merged again.",
    )
    return "unclear"
