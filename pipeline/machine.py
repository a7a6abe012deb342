"""The one decision function: ``decide(delivery, pr, policy, now) -> Step``.

The shell calls it whenever something about the delivery may have changed (a webhook
about the PR, its checks, reviews or deployments; an answer to one of our writes; the
review agent's findings; a probe's answer; a card answer; the wake-up time it asked
for), each time with a fresh :class:`~pipeline.snapshot.PullSnapshot`. It returns the
new delivery, the effects to carry out (through the outbox, each exactly once by its
key) and when to wake it if nothing else does. It reads no clock and does no I/O.

One decision first settles what it heard about an earlier merge, then checks the
guards (closed, policy, label, merged, new head), then lets stages run one after
another (``review`` with nothing to review goes straight on to ``ready``) until one
waits, blocks or ends.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from kernel.durations import iso
from pipeline import handlers, merging, watching
from pipeline.context import MERGE_ANSWER_GRACE, UPDATE_TIMEOUT, Ctx, Waiting, instant, short
from pipeline.delivery import Delivery, HistoryEntry, OpenCard, in_line
from pipeline.effects import DeleteBranch, Effect, Progress, RaiseCard, ResolveCard
from pipeline.errors import PipelineError, WrongInput
from pipeline.policy import POLICY_PATH, Policy, PolicyProblem
from pipeline.render import render
from pipeline.snapshot import PullSnapshot
from pipeline.stages import (
    CARDS,
    LINE_STAGES,
    POST_MERGE,
    TERMINAL,
    Outcome,
    Stage,
    next_stage,
)

__all__ = ["HISTORY_LIMIT", "Step", "decide"]

HISTORY_LIMIT = 60  # stage history rows kept (the oldest go first)
HEADS_LIMIT = 20  # heads of one change kept through our own branch updates
_MAX_MOVES = 16  # a decision moves through at most this many stages (more is a bug)

HANDLERS: Mapping[Stage, Callable[[Ctx], Outcome]] = {
    "review": handlers.review,
    "ready": handlers.ready,
    "checks": handlers.checks,
    "update_branch": merging.update_branch,
    "merge": merging.merge,
    "deployment": watching.deployment,
    "live_version": watching.live_version,
    "reviewed": handlers.reviewed,
    "blocked": handlers.blocked,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """What one decision produced.

    ``wake_at``: call ``decide`` again at this instant if nothing else happened first
    (a deadline or a backoff); None when only something the shell brings can move it
    (``waiting.on`` says what). ``line_freed``: this delivery gave up its place in the
    merge line of its base (merged, blocked, cancelled, a new head); decide the next in
    line again (:func:`~pipeline.delivery.next_in_line`).
    """

    delivery: Delivery
    effects: tuple[Effect, ...]
    wake_at: datetime | None
    waiting: Waiting | None  # None once the delivery has ended
    line_freed: bool = False


def decide(
    delivery: Delivery, pr: PullSnapshot, policy: Policy | PolicyProblem, now: datetime
) -> Step:
    """The next step of ``delivery`` given ``pr`` as read just now (``now``, aware)."""
    if (pr.repo, pr.number) != (delivery.repo, delivery.number):
        raise WrongInput(delivery.id, f"handed a snapshot of {pr.repo}#{pr.number}")
    if now.utcoffset() is None:
        raise WrongInput(delivery.id, f"now has no UTC offset: {now.isoformat()}")
    if delivery.stage in TERMINAL:
        return Step(delivery=delivery, effects=(), wake_at=None, waiting=None)
    ctx = Ctx(delivery, pr, policy if isinstance(policy, Policy) else Policy(), now)
    ctx.set(base_ref=pr.base_ref)
    queued = in_line(delivery)
    _settle_merge_answer(ctx)
    closed = _closed(ctx)
    if isinstance(policy, PolicyProblem) and closed is None:
        ctx.set(policy_problem=str(policy))
        ctx.wait("policy", f"a fix to {POLICY_PATH} on the default branch")
        return _finish(ctx, queued, policy)
    ctx.set(policy_problem="")
    guard = closed or _guards(ctx)
    if guard is not None:
        _move(ctx, guard)
    for _ in range(_MAX_MOVES):
        if ctx.d.stage in TERMINAL:
            break
        outcome = HANDLERS[ctx.d.stage](ctx)
        if next_stage(ctx.d.mode, ctx.d.stage, outcome) == ctx.d.stage:
            break
        _move(ctx, outcome)
    else:
        raise PipelineError(f"{delivery.id} moved more than {_MAX_MOVES} times in one decision")
    if ctx.d.stage not in TERMINAL and ctx.waiting is None:
        raise PipelineError(
            f"{delivery.id} rests at {ctx.d.stage} without saying what it waits for"
        )
    return _finish(ctx, queued, None)


# ------------------------------------------------------------------------------ guards


def _settle_merge_answer(ctx: Ctx) -> None:
    """Record the answer to our merge, and forget a merge that can no longer happen."""
    d, pr = ctx.d, ctx.pr
    att = d.merge_attempt
    if att is None or d.merge_sha is not None:
        return
    if att.outcome == "":
        answer = pr.result(att.key)
        if answer is not None:
            att = replace(att, outcome=answer.outcome, heard=ctx.at)
        elif ctx.past(instant(att.at) + MERGE_ANSWER_GRACE):
            att = replace(att, outcome="ambiguous", heard=ctx.at)
    # The PR is open, unmerged, at another head: a merge guarded by the old head can no
    # longer succeed, so it settles as not merged (an unanswered one only after a grace).
    settled = att.outcome in ("head_moved", "refused", "conflict", "ambiguous")
    if settled and not pr.merged and pr.head_sha != att.sha:
        ctx.set(merge_attempt=None)
        return
    ctx.set(merge_attempt=att)


def _closed(ctx: Ctx) -> Outcome | None:
    d, pr = ctx.d, ctx.pr
    if d.merge_sha is not None or d.stage in POST_MERGE:
        return None
    merged = pr.merged or (d.merge_attempt is not None and d.merge_attempt.outcome == "done")
    if d.mode == "review" and merged:
        ctx.note = "the PR was merged"
        return "closed"
    if pr.state == "closed" and not merged:
        ctx.note = "the PR was closed"
        return "closed"
    return None


def _guards(ctx: Ctx) -> Outcome | None:
    d, pr, policy = ctx.d, ctx.pr, ctx.policy
    named = policy.labels.deliver if d.mode == "deliver" else policy.labels.review
    label = d.label or named  # the one that started it, whatever the policy says now
    att = d.merge_attempt
    answered_done = att is not None and att.outcome == "done"
    pre_merge = d.merge_sha is None and d.stage not in POST_MERGE
    # A merge made or under way is recorded before the label's removal is: a merge
    # answered after the removal was shown as "Cancelled" on a PR it had merged, with no
    # merge commit. The removal then stops the following of the deployment.
    merging = att is not None and att.outcome in ("", "done")
    on_pr = {name.casefold() for name in pr.labels}
    labelled = label.casefold() in on_pr or named.casefold() in on_pr
    if not labelled and not (pre_merge and (pr.merged or merging)):
        ctx.note = f"label {label} removed" + (
            "" if pre_merge else ": the merge stays, its deployment is no longer followed"
        )
        return "unlabeled"
    if not pre_merge:
        return None
    ours = answered_done or (pr.merged and bool(pr.bot_login) and pr.merged_by == pr.bot_login)
    if d.mode == "deliver" and (pr.merged or answered_done):
        answer = pr.result(att.key) if att is not None else None
        merge_sha = (answer.merge_commit_sha if answer else None) or pr.merge_commit_sha
        ctx.set(merge_sha=merge_sha or pr.head_sha)
        ctx.note = "merged" if ours else f"merged by {pr.merged_by or 'a person'}"
        if not ours and d.stage != "merge":  # before the delivery's own steps were done
            ctx.note += f" while the delivery was at {d.stage}"
        if ours and policy.delete_branch and pr.head_ref and not pr.fork:
            ctx.emit(DeleteBranch(key=d.key("delete-branch", pr.head_ref), ref=pr.head_ref))
        return "merged"
    if pr.head_sha != d.head_sha:
        req = d.update_request
        updated = (
            d.mode == "deliver"
            and req is not None
            and req.sha == d.head_sha
            and len(pr.head_parents) == 2
            and pr.head_parents[0] == d.head_sha
        )
        heads = (pr.head_sha, *d.heads)[:HEADS_LIMIT] if updated else (pr.head_sha,)
        ctx.set(
            head_sha=pr.head_sha,
            heads=heads,
            review_request=None,
            ready_request=None,
            update_request=None,
        )
        if updated:
            ctx.note = f"branch updated with {pr.base_ref}: {short(pr.head_sha)}"
            return "updated"
        ctx.note = f"new head {short(pr.head_sha)}"
        ctx.set(queued_at="")  # a new change takes a new place in the line
        return "new_head"
    return None


# ------------------------------------------------------------------------------- moves


def _move(ctx: Ctx, outcome: Outcome) -> None:
    d = ctx.d
    old = d.stage
    new = next_stage(d.mode, old, outcome)
    if d.card is not None and new != "blocked":
        ctx.emit(ResolveCard(key=f"{d.card.key}/resolve", card=d.card.key))
        ctx.set(card=None)
    if new == "blocked":
        _block(ctx, old)
    d = ctx.d
    policy = ctx.policy
    deadline: datetime | None = None
    if new in ("checks", "merge"):
        deadline = ctx.now + timedelta(seconds=policy.checks_timeout_s)
    elif new == "update_branch":
        deadline = ctx.now + UPDATE_TIMEOUT
    elif new in POST_MERGE and policy.deploy is not None:
        deadline = ctx.now + timedelta(seconds=policy.deploy.timeout_s)
    changes: dict[str, object] = {
        "queued_at": d.queued_at if new in LINE_STAGES else "",
        "stage": new,
        "stage_since": ctx.at,
        "deadline": None if deadline is None else iso(deadline),
        "polls": 0,
        "next_poll_at": None,
    }
    if new == "live_version":
        changes.update(probe_since=d.probe_attempt + 1, next_probe_at=None)
    entry = HistoryEntry(stage=new, at=ctx.at, outcome=outcome, note=ctx.note)
    changes["history"] = (*d.history, entry)[-HISTORY_LIMIT:]
    ctx.set(**changes)
    ctx.note = ""
    ctx.card = None
    ctx.waiting = None
    ctx.wake = None


def _block(ctx: Ctx, at: Stage) -> None:
    if ctx.card is None:
        raise PipelineError(f"{ctx.d.id} blocks at {at} without a card")
    kind, title, text = ctx.card
    d = ctx.d
    n = d.cards + 1
    key = d.key("card", n, kind)
    options = tuple(label for label, _ in CARDS[kind])
    ctx.emit(RaiseCard(key=f"{key}/raise", card=key, title=title, text=text, options=options))
    card = OpenCard(key=key, kind=kind, title=title, text=text, options=options, blocked_at=at)
    ctx.set(card=card, cards=n)
    ctx.note = ctx.note or title


# ------------------------------------------------------------------------------ finish


def _finish(ctx: Ctx, queued: bool, problem: PolicyProblem | None) -> Step:
    waiting = ctx.waiting if ctx.d.stage not in TERMINAL else None
    ctx.set(waiting_on=waiting.on if waiting else "", waiting_for=waiting.what if waiting else "")
    d = ctx.d
    shown = render(d, waiting=waiting.what if waiting else "", problem=problem)
    digest = hashlib.sha256(
        "\0".join(
            (shown.check_title, shown.check_status, str(shown.check_conclusion), shown.comment_body)
        ).encode()
    ).hexdigest()[:32]
    if digest != d.progress_digest:
        seq = d.progress_seq + 1
        ctx.emit(
            Progress(
                key=d.key("progress", seq),
                seq=seq,
                head_sha=d.head_sha,
                check_title=shown.check_title,
                check_status=shown.check_status,
                check_conclusion=shown.check_conclusion,
                check_summary=shown.check_summary,
                comment_body=shown.comment_body,
            )
        )
        ctx.set(progress_seq=seq, progress_digest=digest)
    return Step(
        delivery=ctx.d,
        effects=tuple(ctx.effects),
        wake_at=ctx.wake if waiting is not None else None,
        waiting=waiting,
        line_freed=queued and not in_line(ctx.d),
    )
