"""Pipelines (deliveries): the kernel records what their own machine decided, and wakes them.

A pipeline's machine (``pipeline/``, above the kernel) decides its stages; the shell
hands each decision here as :class:`~kernel.inputs.Advance`. The kernel keeps what makes
that decision safe to act on:

- **versions**: a decision made on an older version of the record is answered
  ``stale`` (another replica moved it first); the shell reads again and decides again;
- **exactly-once writes**: each action has the effect's key as its id; one already
  recorded is never requested again, whatever the shell asks;
- **cards**: opened on the pipeline (its id is their matter), one per key while open;
- **waking**: :class:`~kernel.inputs.Wake` (an event it waits on), a person's answer to
  its card and the result of its write make it due now (``wake_at``) and give it a new
  version, so that a decision made before, without that news, is stale. A write whose
  params say ``"quiet": true`` (showing progress) wakes nobody when it ends;
- **ended**: an ended pipeline is decided no more (``ended``) until a new run
  (``restart``). It takes a *note*: an Advance that keeps it ended at the stage it ended
  with and asks for nothing (no write, card, resolve or wake) changes only its data,
  e.g. what a review agent that ran while it ended spent, which the daily caps count.
"""

from __future__ import annotations

from kernel import facts as f
from kernel.context import Context
from kernel.inputs import Advance, PerformAction, Reply, Wake

__all__ = ["advance", "is_note", "wake", "wake_owner"]


def advance(ctx: Context, inp: Advance) -> Reply:
    st = ctx.state
    p = st.pipelines.get(inp.pipeline)
    have = p.version if p is not None else 0
    if inp.version != have:
        return Reply(
            ok=False,
            code="stale",
            message=f"pipeline {inp.pipeline} is at version {have}, not {inp.version}",
            data={"version": have},
        )
    if p is not None and p.ended and not inp.restart and not is_note(inp, p.stage, p.subject):
        return Reply(ok=False, code="ended", message=f"pipeline {inp.pipeline} has ended")
    if inp.restart and (p is None or not p.ended):
        return Reply(
            ok=False, code="active", message=f"pipeline {inp.pipeline} is not ended: no new run"
        )
    requested: list[str] = []
    for spec in inp.actions:
        if spec.id in st.actions or spec.id in requested:
            continue  # the same write is never requested twice
        ctx.emit(
            f.ActionRequested(
                action=spec.id, matter=inp.pipeline, turn="", do=spec.do, params=spec.params
            )
        )
        ctx.effects.append(PerformAction(action=spec.id))
        requested.append(spec.id)
    cards = dict(p.cards) if p is not None else {}
    for key in inp.resolve:
        cid = cards.pop(key, None)
        card = st.cards.get(cid) if cid else None
        if card is not None and card.state in ("open", "decided"):
            ctx.emit(f.CardResolved(card=card.id))
    for card_spec in inp.cards:
        if card_spec.key in cards:
            continue  # one card per key while it is open
        cards[card_spec.key] = ctx.open_card(
            key=card_spec.key,
            matter=inp.pipeline,
            kind="ask" if card_spec.options else "notice",
            title=card_spec.title,
            text=card_spec.text,
            options=card_spec.options,
        )
    ctx.emit(
        f.PipelineAdvanced(
            pipeline=inp.pipeline,
            subject=inp.subject,
            version=have + 1,
            stage=inp.stage,
            data=inp.data,
            wake_at=inp.wake_at,
            ended=inp.ended,
            cards=cards,
            at=ctx.at,
            restarted=inp.restart,
        )
    )
    return Reply(
        ok=True,
        code="advanced",
        message=f"pipeline {inp.pipeline}: {inp.stage}",
        data={"version": have + 1, "cards": cards, "actions": requested},
    )


def is_note(inp: Advance, stage: str, subject: str) -> bool:
    """``inp`` changes only the data of a pipeline that ended at ``stage``, on ``subject``."""
    return (
        inp.ended
        and not inp.restart
        and inp.stage == stage
        and inp.subject == subject
        and not (inp.actions or inp.cards or inp.resolve or inp.wake_at)
    )


def wake(ctx: Context, inp: Wake) -> Reply:
    woken = [pid for pid in dict.fromkeys(inp.pipelines) if wake_owner(ctx, pid)]
    return Reply(ok=True, code="woken", data={"pipelines": woken})


def wake_owner(ctx: Context, pipeline: str) -> bool:
    """Make ``pipeline`` due now, if it is loaded, active and not woken at this instant.

    One that is due already is woken again all the same: its ``wake_at`` moves to now, so
    a runner that decided it at the earlier instant sees that something new happened."""
    p = ctx.state.pipelines.get(pipeline)
    if p is None or p.ended or p.wake_at == ctx.at:
        return False
    ctx.emit(f.PipelineWoken(pipeline=pipeline, at=ctx.at))
    return True
