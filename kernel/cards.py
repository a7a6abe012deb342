"""Cards: a person's answer, a channel's delivery, and what the owner is told once.

An answer to a question card becomes an event on the card's matter (the agent resumes
with it), or, for an approval card, the decision on its write-back.
"""

from __future__ import annotations

from kernel import facts as f
from kernel.context import Context
from kernel.inputs import (
    Answer,
    Delivered,
    Dismiss,
    OwnerNotice,
    PerformAction,
    Reply,
    SendCard,
)
from kernel.model import OWNER_MATTER, Event
from kernel.pipelines import wake_owner

__all__ = ["OPERATOR_NOTICES", "answer", "delivered", "dismiss", "for_operator", "owner_notice"]

#: Key prefixes of the notices the hub writes for whoever runs it (a turn that failed
#: for good, a receipt that could not be repaired): their text names local commands and
#: errors, so public channels show only that something needs its operator.
OPERATOR_NOTICES = ("failed/", "receipt/")


def for_operator(key: str) -> bool:
    """Whether a card with this key is one of :data:`OPERATOR_NOTICES`."""
    return key.startswith(OPERATOR_NOTICES)


def answer(ctx: Context, inp: Answer) -> Reply:
    st = ctx.state
    c = st.cards.get(inp.card)
    if c is None:
        return Reply(
            ok=False,
            code="unknown",
            message=f"no card {inp.card!r}; run 'autoloop cards' to list open cards",
        )
    if c.kind_ != "ask":
        return Reply(
            ok=False, code="refused", message=f"card {c.id} is a notice; it takes no answer"
        )
    if c.state != "open" and c.choice is None:  # resolved, or closed, before any answer
        return Reply(
            ok=False,
            code="refused",
            message=f"card {c.id} was {c.state} without an answer (what it asked about moved "
            "on, e.g. a new push); it takes no answer now",
        )
    if c.state != "open":
        prev = c.options[c.choice - 1] if c.choice and c.choice <= len(c.options) else "?"
        by = f" by {c.answered_by}" if c.answered_by else ""
        return Reply(
            ok=False,
            code="refused",
            message=f"card {c.id} was already answered ({prev!r}{by}); a card takes one answer",
        )
    if not 1 <= inp.choice <= len(c.options):
        opts = ", ".join(f"{i}={o}" for i, o in enumerate(c.options, 1))
        return Reply(
            ok=False,
            code="invalid",
            message=f"choice {inp.choice} is not an option of card {c.id} ({opts})",
        )
    ctx.emit(f.CardAnswered(card=c.id, choice=inp.choice, by=inp.by, via=inp.via, at=ctx.at))
    ctx.effects.append(SendCard(card=c.id))
    chosen = c.options[inp.choice - 1]
    if c.action is not None:
        approved = inp.choice == 1
        ctx.emit(f.ActionDecided(action=c.action, approved=approved, by=inp.by))
        if approved:
            ctx.effects.append(PerformAction(action=c.action))
        return Reply(ok=True, code="answered", message=f"card {c.id}: {chosen}")
    if wake_owner(ctx, c.matter) or c.matter in st.pipelines:
        return Reply(ok=True, code="answered", message=f"card {c.id}: {chosen}")
    m = st.matters.get(c.matter)
    if m is not None and m.id != OWNER_MATTER:
        ctx.record_event(
            Event(
                source="card",
                id=c.id,
                type="card.answered",
                subject=m.subject,
                summary=f"{c.key}: {chosen}",
                details={
                    "card": c.id,
                    "key": c.key,
                    "choice": chosen,
                    "index": inp.choice,
                    "by": inp.by,
                    "via": inp.via,
                },
                hops=m.hops,
                chain=m.chain,
                matter=m.id,
            )
        )
    return Reply(ok=True, code="answered", message=f"card {c.id}: {chosen}")


def delivered(ctx: Context, inp: Delivered) -> Reply:
    if inp.card not in ctx.state.cards:
        return Reply(ok=False, code="unknown", message=f"no card {inp.card!r}")
    ctx.emit(f.CardDelivered(card=inp.card, channel=inp.channel, version=inp.version, ref=inp.ref))
    return Reply(ok=True, code="recorded")


def owner_notice(ctx: Context, inp: OwnerNotice) -> Reply:
    if ctx.live_card(OWNER_MATTER, inp.key) is not None or any(
        c.key == inp.key and c.matter == OWNER_MATTER for c in ctx.state.cards.values()
    ):
        return Reply(ok=True, code="duplicate", message="the owner was told already")
    card = ctx.open_card(
        key=inp.key, matter=OWNER_MATTER, kind="notice", title=inp.title, text=inp.text
    )
    return Reply(ok=True, code="recorded", data={"card": card})


def dismiss(ctx: Context, inp: Dismiss) -> Reply:
    c = ctx.state.cards.get(inp.card)
    if c is None:
        return Reply(
            ok=False,
            code="unknown",
            message=f"no card {inp.card!r}; run 'autoloop cards' to list open cards",
        )
    if c.kind_ != "notice":
        return Reply(
            ok=False,
            code="refused",
            message=f"card {c.id} is a question: answer it with 'autoloop answer {c.id} N'",
        )
    if c.state != "open":
        return Reply(ok=False, code="refused", message=f"card {c.id} is already {c.state}")
    ctx.emit(f.CardResolved(card=c.id))
    ctx.effects.append(SendCard(card=c.id))
    by = f" by {inp.by}" if inp.by else ""
    return Reply(ok=True, code="dismissed", message=f"card {c.id} dismissed{by}")
