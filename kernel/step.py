"""The one decision function: ``step(state, input, now=..., rules=...) -> Decision``.

``STEP``, just below the imports, is the table of this module: for each input, the
facts a decision on it may record, the effects it may ask for and the reply codes it
may answer with. ``step`` checks every decision against its row (a decision beyond it
raises :class:`~kernel.errors.OffTable`, a bug), and every fact moves records through
the lifecycle tables of :mod:`kernel.lifecycle`. ``needs(input)`` names the records the
shell must load first. The handlers live with what they decide about: events, turns,
cards, actions, timers.

Domain outcomes (duplicate, refused, unknown card) are replies, never exceptions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar, assert_never

from kernel import actions, cards, events, pipelines, timers, turns
from kernel import facts as f
from kernel.context import Context
from kernel.errors import OffTable
from kernel.facts import content_key, event_key
from kernel.inputs import (
    ActionDone,
    ActionTried,
    Advance,
    Answer,
    Claim,
    Decision,
    Delivered,
    Dismiss,
    Finish,
    Heartbeat,
    Ingest,
    Input,
    Needs,
    Outcomes,
    OwnerNotice,
    PerformAction,
    Reply,
    ScheduleDue,
    SendCard,
    Tick,
    Wake,
)
from kernel.model import OWNER_MATTER, Event, Receipt, Rule, Rules
from kernel.receipt import parse_receipt
from kernel.records import State
from kernel.routing import matter_of, route

STEP: Mapping[type[Any], Outcomes] = {
    # input: (facts it may record), (effects it may ask for), "reply codes"
    Ingest: Outcomes.of((f.EventRecorded,), (), "recorded duplicate"),
    Claim: Outcomes.of((f.TurnStarted,), (), "started unknown busy idle later no_rule"),
    Heartbeat: Outcomes.of((f.LeaseRenewed,), (), "renewed refused"),
    Finish: Outcomes.of(
        (
            f.TurnFinished,
            f.ReceiptRefused,
            f.CardOpened,
            f.CardUpdated,
            f.CardResolved,
            f.TimerArmed,
            f.EventRecorded,
            f.ActionRequested,
        ),
        (SendCard, PerformAction),
        "finished failed refused unknown",
    ),
    Answer: Outcomes.of(
        (f.CardAnswered, f.ActionDecided, f.EventRecorded, f.PipelineWoken),
        (SendCard, PerformAction),
        "answered unknown refused invalid",
    ),
    Tick: Outcomes.of(
        (f.TimerFired, f.EventRecorded, f.TurnFinished, f.CardOpened, f.ScheduleTicked),
        (SendCard,),
        "ticked",
    ),
    ScheduleDue: Outcomes.of((f.ScheduleTicked, f.EventRecorded), (), "recorded duplicate unknown"),
    Delivered: Outcomes.of((f.CardDelivered,), (), "recorded unknown"),
    ActionTried: Outcomes.of((f.ActionAttempted,), (), "recorded unknown not_allowed busy"),
    ActionDone: Outcomes.of(
        (f.ActionCompleted, f.CardOpened, f.PipelineWoken),
        (SendCard,),
        "recorded duplicate unknown not_allowed",
    ),
    OwnerNotice: Outcomes.of((f.CardOpened,), (SendCard,), "recorded duplicate"),
    Advance: Outcomes.of(
        (f.ActionRequested, f.CardResolved, f.CardOpened, f.PipelineAdvanced),
        (PerformAction, SendCard),
        "advanced stale ended active",
    ),
    Wake: Outcomes.of((f.PipelineWoken,), (), "woken"),
    Dismiss: Outcomes.of((f.CardResolved,), (SendCard,), "dismissed unknown refused"),
}

# ------------------------------------------------------------------------------- needs


_NOTHING = State()  # what is loaded before the first round (needs only reads it)


def needs(inp: Input, rules: Rules, state: State | None = None) -> Needs:
    """What the shell must load before :func:`step` decides ``inp``.

    ``state`` is what is loaded so far (None: nothing yet). The shell calls again with
    the state it loaded until the answer asks for nothing new (:meth:`Needs.beyond`): a
    finished turn's receipt routes its events by the turn's rule, an answered card may
    decide an action, and neither is known before the turn or the card is loaded.
    """
    loaded = state if state is not None else _NOTHING
    match inp:
        case Ingest(event=event, ignore=ignore, content_key=content):
            key = event_key(event)
            keys = frozenset((key, content_key(content)) if content else (key,))
            if ignore:
                return Needs(event_keys=keys)
            if event.matter:
                return Needs(event_keys=keys, matters=frozenset({event.matter}))
            return Needs(event_keys=keys, matters=frozenset(m for _, m in route(rules, event)))
        case Claim(matter=matter):
            return Needs(matters=frozenset({matter}), waiting=True, matter_cards=True)
        case Heartbeat(turn=turn):
            return Needs(turns=frozenset({turn}), owner=True, matter_cards=True)
        case Finish(turn=turn):
            t = loaded.turns.get(turn)
            m = loaded.matters.get(t.matter) if t is not None else None
            extra = (
                emitted_matters(inp, rules, rules.rule(t.rule), m.subject if m else "")
                if t is not None
                else frozenset()
            )
            return Needs(turns=frozenset({turn}), matters=extra, owner=True, matter_cards=True)
        case Answer(card=card):
            c = loaded.cards.get(card)
            acts = frozenset({c.action}) if c is not None and c.action else frozenset()
            # a card of no matter (after the first round) may be a pipeline's
            owner = (
                frozenset({c.matter})
                if c is not None and c.matter not in loaded.matters and c.matter != OWNER_MATTER
                else frozenset()
            )
            return Needs(cards=frozenset({card}), actions=acts, matter_cards=True, pipelines=owner)
        case Delivered(card=card):
            return Needs(cards=frozenset({card}), matter_cards=True)
        case Tick(local_now=local_now, look_ahead_s=look_ahead_s):
            due = (
                timers.due_schedules(rules, loaded.meta.ticks, local_now)
                if local_now is not None
                else []
            )
            return Needs(
                matters=frozenset(matter_of(rule, rule.name) for rule, _ in due),
                due_timers=True,
                lapsed_leases=True,
                owner=True,
                matter_cards=True,
                look_ahead_s=look_ahead_s,
            )
        case ScheduleDue(rule=name):
            rule = rules.rule(name)
            mids = frozenset({matter_of(rule, rule.name)} if rule else set())
            return Needs(matters=mids, matter_cards=True)
        case OwnerNotice():
            return Needs(owner=True, matter_cards=True)
        case ActionTried(action=action):
            return Needs(actions=frozenset({action}), matter_cards=True)
        case ActionDone(action=action):
            a = loaded.actions.get(action)
            owner = frozenset({a.matter}) if a is not None and not a.turn else frozenset()
            return Needs(actions=frozenset({action}), matter_cards=True, pipelines=owner)
        case Advance(pipeline=pipeline, actions=specs):
            return Needs(pipelines=frozenset({pipeline}), actions=frozenset(s.id for s in specs))
        case Wake(pipelines=woken):
            return Needs(pipelines=frozenset(woken))
        case Dismiss(card=card):
            return Needs(cards=frozenset({card}), matter_cards=True)
        case _:
            assert_never(inp)


def emitted_matters(
    inp: Finish, rules: Rules, rule: Rule | None, subject: str = ""
) -> frozenset[str]:
    """Matters the events of a receipt will join (a second seed for Finish).

    ``subject`` is the subject of the turn's matter: an event emitted without one takes
    it (as :func:`kernel.turns.finish` does), so it routes to the same matters here.
    """
    if rule is None or not inp.outcome.ok:
        return frozenset()
    receipt = parse_receipt(inp.outcome.final_message, rule=rule)
    if not isinstance(receipt, Receipt):
        return frozenset()
    out: set[str] = set()
    for spec in receipt.events:
        ev = Event(source="agent", id="-", type=spec.type, subject=spec.subject or subject)
        out.update(m for _, m in route(rules, ev))
    return frozenset(out)


# -------------------------------------------------------------------------------- step


def step(state: State, inp: Input, *, now: datetime, rules: Rules) -> Decision:
    """Decide what ``inp`` means given ``state``; folds the new facts into ``state``."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")  # a bug in the caller
    ctx = Context(state, now, rules)
    decision = ctx.done(HANDLERS[type(inp)](ctx, inp))
    _check(inp, decision)
    return decision


def _check(inp: Input, decision: Decision) -> None:
    row = STEP[type(inp)]
    facts = row.facts
    for fact in decision.facts:
        if type(fact) not in facts:
            raise OffTable(type(inp).__name__, f"the fact {type(fact).__name__}")
    for effect in decision.effects:
        if type(effect) not in row.effects:
            raise OffTable(type(inp).__name__, f"the effect {type(effect).__name__}")
    if decision.reply.code not in row.replies:
        raise OffTable(type(inp).__name__, f"the reply code {decision.reply.code!r}")


Handler = Callable[[Context, Any], Reply]
InputT = TypeVar("InputT")


def _handler(
    inp: type[InputT], handler: Callable[[Context, InputT], Reply]
) -> tuple[type[Any], Handler]:
    """One row of :data:`HANDLERS`; mypy checks that ``handler`` takes ``inp``."""
    return inp, handler


HANDLERS: Mapping[type[Any], Handler] = dict(
    (
        _handler(Ingest, events.ingest),
        _handler(Claim, turns.claim),
        _handler(Heartbeat, turns.heartbeat),
        _handler(Finish, turns.finish),
        _handler(Answer, cards.answer),
        _handler(Tick, timers.tick),
        _handler(ScheduleDue, timers.schedule_due),
        _handler(Delivered, cards.delivered),
        _handler(ActionTried, actions.action_tried),
        _handler(ActionDone, actions.action_done),
        _handler(OwnerNotice, cards.owner_notice),
        _handler(Advance, pipelines.advance),
        _handler(Wake, pipelines.wake),
        _handler(Dismiss, cards.dismiss),
    )
)
