"""Write-backs the hub performs for an agent: each attempt claimed, each result recorded once.

A performer claims an allowed action before it attempts it (one performer at a time,
across hubs); the claim lapses after ``lease_s`` (or at once when the caller names its
claimant in ``lapsed``: a process it found dead), and whoever takes over reads back first
(``attempts`` counts the attempts made before).
"""

from __future__ import annotations

from datetime import timedelta

from kernel import facts as f
from kernel.context import Context
from kernel.durations import iso
from kernel.inputs import ActionDone, ActionTried, Reply
from kernel.lifecycle import allows
from kernel.pipelines import wake_owner

__all__ = ["action_done", "action_tried"]


def action_tried(ctx: Context, inp: ActionTried) -> Reply:
    a = ctx.state.actions.get(inp.action)
    if a is None:
        return Reply(ok=False, code="unknown", message=f"no action {inp.action!r}")
    if not allows("action", a.status, "ActionAttempted"):
        return Reply(ok=False, code="not_allowed", message=f"action {a.id} is {a.status}")
    if inp.error:
        ctx.emit(f.ActionAttempted(action=a.id, at=ctx.at, error=inp.error))
        return Reply(ok=True, code="recorded")
    if inp.by:
        if a.status != "allowed":
            return Reply(ok=False, code="not_allowed", message=f"action {a.id} is {a.status}")
        live = a.claimed_by not in ("", inp.by, inp.lapsed) and a.claim_until > ctx.at
        if live:
            return Reply(
                ok=False,
                code="busy",
                message=f"action {a.id} is being performed by {a.claimed_by} "
                f"(claimed until {a.claim_until})",
            )
    until = iso(ctx.now + timedelta(seconds=inp.lease_s)) if inp.by else ""
    ctx.emit(f.ActionAttempted(action=a.id, at=ctx.at, by=inp.by, until=until))
    # attempts made before this one: more than 0 means an earlier one may have landed
    return Reply(ok=True, code="recorded", data={"attempts": a.attempts})


def action_done(ctx: Context, inp: ActionDone) -> Reply:
    a = ctx.state.actions.get(inp.action)
    if a is None:
        return Reply(ok=False, code="unknown", message=f"no action {inp.action!r}")
    if a.status in ("done", "failed"):
        return Reply(ok=True, code="duplicate", message="already recorded")
    if not allows("action", a.status, "ActionCompleted:ok"):
        return Reply(ok=False, code="not_allowed", message=f"action {a.id} is {a.status}")
    ctx.emit(
        f.ActionCompleted(
            action=a.id, ok=inp.ok, result=dict(inp.result), error=inp.error, at=ctx.at
        )
    )
    if a.matter in ctx.state.pipelines:
        # a pipeline's write: its own machine reads the outcome (a refusal is often news
        # it waits for, such as a head that moved), so it is woken instead of a card
        if a.params.get("quiet") is not True:
            wake_owner(ctx, a.matter)
        return Reply(ok=True, code="recorded")
    if not inp.ok:
        ctx.open_card(
            key=f"action-failed/{a.id}",
            matter=a.matter,
            kind="notice",
            title=f"Write-back {a.do} failed",
            text=f"{a.do} for turn {a.turn} failed: {inp.error}",
            turn=None,
        )
    return Reply(ok=True, code="recorded")
