"""The one decision function: ``step(state, input, now=..., rules=...) -> Decision``.

Inputs are what the shell observed (an event arrived, a worker wants a turn, an agent
finished, a person answered, time passed). The decision is the list of facts to commit
(already folded into ``state``), a reply for the caller, and the effects the shell must
carry out after the commit. ``needs(input)`` names the records the shell must load first.

Domain outcomes (duplicate, refused, unknown card) are replies, never exceptions.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from kernel import facts as f
from kernel.codec import to_data
from kernel.durations import iso, parse_instant
from kernel.inputs import (
    ActionDone,
    ActionTried,
    AgentOutcome,
    Answer,
    Claim,
    Decision,
    Delivered,
    Effect,
    Finish,
    Heartbeat,
    Ingest,
    Input,
    Needs,
    OwnerNotice,
    PerformAction,
    Reply,
    ScheduleDue,
    SendCard,
    Tick,
)
from kernel.lifecycle import allows
from kernel.model import HOP_LIMIT_KEY, OWNER_MATTER, Event, Receipt, ReceiptError, Rule, Rules
from kernel.receipt import parse_receipt
from kernel.records import Card, Matter, Turn
from kernel.routing import matter_of, route, session_of
from kernel.state import State, apply


def needs(inp: Input, rules: Rules) -> Needs:
    if isinstance(inp, Ingest):
        if inp.ignore:
            return Needs()
        if inp.event.matter:
            return Needs(matters=frozenset({inp.event.matter}))
        return Needs(matters=frozenset(m for _, m in route(rules, inp.event)))
    if isinstance(inp, Claim):
        return Needs(matters=frozenset({inp.matter}))
    if isinstance(inp, Finish | Heartbeat):
        return Needs(turns=frozenset({inp.turn}), owner=True)
    if isinstance(inp, Answer | Delivered):
        return Needs(cards=frozenset({inp.card}))
    if isinstance(inp, Tick):
        return Needs(due_timers=True, lapsed_leases=True, owner=True)
    if isinstance(inp, ScheduleDue):
        rule = rules.rule(inp.rule)
        return Needs(matters=frozenset({matter_of(rule, rule.name)} if rule else set()))
    if isinstance(inp, OwnerNotice):
        return Needs(owner=True)
    return Needs()  # ActionTried / ActionDone name only their action; the shell loads it


def emitted_matters(
    inp: Finish, rules: Rules, rule: Rule | None, subject: str = ""
) -> frozenset[str]:
    """Matters the events of a receipt will join (a second seed for Finish).

    ``subject`` is the subject of the turn's matter: an event emitted without one takes
    it (as :func:`_apply_receipt` does), so it routes to the same matters here.
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


class _Ctx:
    def __init__(self, state: State, now: datetime, rules: Rules) -> None:
        self.state = state
        self.now = now
        self.at = iso(now)
        self.rules = rules
        self.facts: list[f.Fact] = []
        self.effects: list[Effect] = []
        self.touched: set[tuple[str, str]] = set()

    def emit(self, fact: f.Fact) -> None:
        self.facts.append(fact)
        self.touched |= apply(self.state, fact)

    def done(self, reply: Reply) -> Decision:
        return Decision(
            facts=tuple(self.facts),
            effects=tuple(self.effects),
            reply=reply,
            touched=frozenset(self.touched),
        )

    # -- helpers --------------------------------------------------------------------

    def next_card_id(self) -> str:
        return f"c{self.state.meta.cards + 1}"

    def open_card(
        self,
        *,
        key: str,
        matter: str,
        kind: str,
        title: str,
        text: str = "",
        options: tuple[str, ...] = (),
        turn: str | None = None,
        hops: int = 0,
        action: str | None = None,
    ) -> str:
        card = self.next_card_id()
        self.emit(
            f.CardOpened(
                card=card,
                key=key,
                matter=matter,
                kind=kind,
                title=title,
                text=text,
                options=options,
                turn=turn,
                hops=hops,
                at=self.at,
                action=action,
            )
        )
        self.effects.append(SendCard(card=card))
        return card

    def live_card(self, matter: str, key: str) -> Card | None:
        for c in self.state.cards.values():
            if c.matter == matter and (key in (c.key, c.id)) and c.state == "open":
                return c
        return None

    def record_event(
        self, event: Event, *, reason: str = "", create: tuple[str, str, str, str] | None = None
    ) -> f.EventRecorded:
        """Route and record one event; ``reason`` forces it to be recorded undispatched.

        ``create`` names a matter (id, rule, subject, session) the event founds.
        """
        seq = self.state.last_event + 1
        routes: list[str] = []
        new: list[tuple[str, str, str, str]] = [create] if create else []
        if reason:
            pass
        elif event.matter is not None:
            if event.matter in self.state.matters or create is not None:
                routes.append(event.matter)
            else:
                reason = f"matter {event.matter!r} does not exist"
        else:
            for rule, mid in route(self.rules, event):
                if mid not in routes:
                    routes.append(mid)
                if mid not in self.state.matters and all(n[0] != mid for n in new):
                    new.append((mid, rule.name, event.subject, session_of(mid)))
            if not routes:
                reason = "no rule matches"
        fact = f.EventRecorded(
            seq=seq,
            event=event,
            at=self.at,
            routes=tuple(routes),
            new_matters=tuple(new),
            dispatched=bool(routes),
            reason=reason,
        )
        self.emit(fact)
        return fact


def step(state: State, inp: Input, *, now: datetime, rules: Rules) -> Decision:
    """Decide what ``inp`` means given ``state``; folds the new facts into ``state``."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")  # a bug in the caller
    ctx = _Ctx(state, now, rules)
    handler = _HANDLERS[type(inp)]
    reply = handler(ctx, inp)
    return ctx.done(reply)


# ---------------------------------------------------------------------------- handlers


def _ingest(ctx: _Ctx, inp: Any) -> Reply:
    fact = ctx.record_event(inp.event, reason=inp.ignore)
    return Reply(
        ok=True,
        code="recorded",
        message=f"event {fact.seq} recorded"
        + (
            f", to {', '.join(fact.routes)}" if fact.routes else f" (not dispatched: {fact.reason})"
        ),
        data={"seq": fact.seq, "routes": list(fact.routes), "dispatched": fact.dispatched},
    )


def _claim(ctx: _Ctx, inp: Any) -> Reply:
    st = ctx.state
    m = st.matters.get(inp.matter)
    if m is None:
        return Reply(ok=False, code="unknown", message=f"no matter {inp.matter!r}")
    if m.running is not None:
        return Reply(ok=False, code="busy", message=f"turn {m.running} is running")
    if not m.runnable:
        return Reply(ok=False, code="idle", message="nothing to run")
    rule = ctx.rules.rule(m.rule)
    if rule is None:
        return Reply(ok=False, code="no_rule", message=f"rule {m.rule!r} is not in rules.json")
    batch: tuple[int, ...]
    if m.repair:
        kind, batch = "repair", ()
    elif m.retry:
        kind, batch = "retry", (*m.retry, *st.pending_of(m.id))
    else:
        kind, batch = "normal", st.pending_of(m.id)
    hops = max((st.events[s].event.hops for s in batch if s in st.events), default=m.hops)
    n = st.meta.turns + 1
    turn = f"t{n}"
    ctx.emit(
        f.TurnStarted(
            turn=turn,
            matter=m.id,
            rule=rule.name,
            agent=rule.agent,
            worker=inp.worker,
            kind=kind,
            events=tuple(batch),
            hops=hops,
            session=m.session,
            resume=m.agent_session,
            rules_version=ctx.rules.version,
            fence=n,
            at=ctx.at,
            lease_until=iso(ctx.now + timedelta(seconds=inp.lease_s)),
            repair_of=m.repair if kind == "repair" else None,
        )
    )
    return Reply(ok=True, code="started", message=f"turn {turn} started", data={"turn": turn})


def _heartbeat(ctx: _Ctx, inp: Any) -> Reply:
    t = ctx.state.turns.get(inp.turn)
    if t is None or t.state != "running" or t.fence != inp.fence:
        return Reply(ok=False, code="refused", message="the claim is no longer held")
    ctx.emit(
        f.LeaseRenewed(
            turn=t.id, fence=t.fence, lease_until=iso(ctx.now + timedelta(seconds=inp.lease_s))
        )
    )
    return Reply(ok=True, code="renewed")


def _finish(ctx: _Ctx, inp: Any) -> Reply:
    st = ctx.state
    t = st.turns.get(inp.turn)
    if t is None:
        return Reply(ok=False, code="unknown", message=f"no turn {inp.turn!r}")
    if t.state != "running" or t.fence != inp.fence:
        reason = "the turn already ended" if t.state != "running" else "a newer claim holds it"
        ctx.emit(f.ReceiptRefused(turn=t.id, fence=inp.fence, reason=reason, at=ctx.at))
        return Reply(ok=False, code="refused", message=f"receipt for {t.id} refused: {reason}")
    m = st.matters[t.matter]
    rule = ctx.rules.rule(t.rule) or Rule(name=t.rule, agent=t.agent)
    out: AgentOutcome = inp.outcome
    if not out.ok:
        return _failed(ctx, t, m, rule, out)
    parsed = parse_receipt(out.final_message, rule=rule)
    base: dict[str, Any] = {
        "turn": t.id,
        "matter": m.id,
        "at": ctx.at,
        "agent_session": out.session,
        "cost_usd": out.cost_usd,
        "tokens": out.tokens,
    }
    if parsed is None:
        ctx.emit(f.TurnFinished(outcome="no_receipt", **base))
        return Reply(ok=True, code="finished", message=f"{t.id} ended without a receipt")
    if isinstance(parsed, ReceiptError):
        where = f"{parsed.where}: " if parsed.where else ""
        error = f"malformed receipt: {where}{parsed.message}"
        if t.kind_ == "repair":
            ctx.emit(f.TurnFinished(outcome="malformed", error=error, **base))
            ctx.open_card(
                key=f"receipt/{t.id}",
                matter=m.id,
                kind="notice",
                title="The agent's receipt was malformed twice",
                text=f"Turn {t.id} could not repair its receipt ({error}). Nothing was applied.",
                turn=t.id,
                hops=t.hops,
            )
        else:
            ctx.emit(f.TurnFinished(outcome="malformed", error=error, repair=True, **base))
        return Reply(ok=True, code="finished", message=f"{t.id}: {error}")
    ctx.emit(f.TurnFinished(outcome="ok", receipt=to_data(parsed), **base))
    _apply_receipt(ctx, t, m, rule, parsed)
    return Reply(ok=True, code="finished", message=f"{t.id} finished")


def _failed(
    ctx: _Ctx, t: Turn, m: Matter, rule: Rule, out: AgentOutcome, *, outcome: str = ""
) -> Reply:
    outcome = outcome or ("timeout" if out.timed_out else "failed")
    retry = m.failures < rule.max_retries
    ctx.emit(
        f.TurnFinished(
            turn=t.id,
            matter=m.id,
            outcome=outcome,
            at=ctx.at,
            agent_session=out.session if out.started else None,
            cost_usd=out.cost_usd,
            tokens=out.tokens,
            error=out.error,
            retry=retry,
            # Started then failed: retry in the same session. Never started: a fresh one.
            keep_session=out.started,
        )
    )
    if not retry:
        ctx.open_card(
            key=f"failed/{t.id}",
            matter=m.id,
            kind="notice",
            title=(
                "Agent turn failed"
                if m.failures == 0
                else f"Agent turn failed {m.failures + 1} times"
            ),
            text=(
                f"Turn {t.id} of rule {rule.name!r} ended with: {out.error or outcome}. "
                f"No more retries. Check the agent {rule.agent!r} (run 'autoloop why {t.id}'), "
                "then emit the event again."
            ),
            turn=t.id,
            hops=t.hops,
        )
    return Reply(ok=True, code="failed", message=f"{t.id} {outcome}: {out.error}")


def _apply_receipt(ctx: _Ctx, t: Turn, m: Matter, rule: Rule, r: Receipt) -> None:
    st = ctx.state
    for key in r.resolve:
        for c in list(st.cards.values()):
            if c.matter == m.id and key in (c.key, c.id) and c.state in ("open", "decided"):
                ctx.emit(f.CardResolved(card=c.id, turn=t.id))
    for ask in r.ask:
        live = ctx.live_card(m.id, ask.key)
        if live is not None and live.kind_ == "ask":
            ctx.emit(
                f.CardUpdated(
                    card=live.id, title=ask.title, text=ask.text, options=ask.options, turn=t.id
                )
            )
            ctx.effects.append(SendCard(card=live.id))
        else:
            ctx.open_card(
                key=ask.key,
                matter=m.id,
                kind="ask",
                title=ask.title,
                text=ask.text,
                options=ask.options,
                turn=t.id,
                hops=t.hops,
            )
    for i, note in enumerate(r.notice):
        ctx.open_card(
            key=note.key or f"notice/{t.id}/{i}",
            matter=m.id,
            kind="notice",
            title=note.title,
            text=note.text,
            turn=t.id,
            hops=t.hops,
        )
    for i, later in enumerate(r.later):
        if later.in_seconds is not None:
            due = ctx.now + timedelta(seconds=later.in_seconds)
        else:
            due = parse_instant(later.at or ctx.at)
        ctx.emit(
            f.TimerArmed(
                timer=f"{t.id}.later{i}",
                matter=m.id,
                due=iso(due),
                why=later.why,
                hops=t.hops,
                turn=t.id,
            )
        )
    for i, spec in enumerate(r.events):
        ev = Event(
            source="agent",
            id=f"{t.id}.{i}",
            type=spec.type,
            subject=spec.subject or m.subject,
            summary=spec.summary,
            details=dict(spec.details),
            hops=t.hops + 1,
        )
        if ev.hops > ctx.rules.max_hops:
            ctx.record_event(ev, reason=f"hop limit {ctx.rules.max_hops} reached")
            if ctx.live_card(m.id, HOP_LIMIT_KEY) is None:
                ctx.open_card(
                    key=HOP_LIMIT_KEY,
                    matter=m.id,
                    kind="notice",
                    title="A chain of agent turns was cut",
                    text=(
                        f"Turn {t.id} emitted {spec.type!r} at hop {ev.hops}, past max_hops "
                        f"{ctx.rules.max_hops}. The event was recorded but not dispatched. "
                        "Check the rules' emits for a loop."
                    ),
                    turn=t.id,
                    hops=t.hops,
                )
        else:
            ctx.record_event(ev)
    for i, act in enumerate(r.actions):
        aid = f"{t.id}.a{i}"
        params = dict(act.params)
        base: dict[str, Any] = {
            "action": aid,
            "matter": m.id,
            "turn": t.id,
            "do": act.do,
            "params": params,
        }
        if act.do in rule.allow:
            ctx.emit(f.ActionRequested(**base))
            ctx.effects.append(PerformAction(action=aid))
        elif act.do in rule.approve:
            card = ctx.next_card_id()
            ctx.emit(f.ActionRequested(**base, status="awaiting_approval", card=card))
            ctx.open_card(
                key=f"approve/{aid}",
                matter=m.id,
                kind="ask",
                title=f"Approve {act.do}?",
                text=f"Turn {t.id} asks the hub to perform {act.do} with {_brief(params)}.",
                options=("approve", "decline"),
                turn=t.id,
                hops=t.hops,
                action=aid,
            )
        else:
            error = f"{act.do} is in neither allow nor approve of rule {rule.name!r}"
            ctx.emit(f.ActionRequested(**base, status="refused", error=error))
            ctx.open_card(
                key=f"refused/{aid}",
                matter=m.id,
                kind="notice",
                title=f"Refused write-back {act.do}",
                text=f"{error}. Add it to the rule's allow or approve list to permit it.",
                turn=t.id,
                hops=t.hops,
            )


def _brief(params: Mapping[str, Any]) -> str:
    parts = [f"{k}={str(v)[:60]}" for k, v in sorted(params.items())]
    return ", ".join(parts)[:300] or "no parameters"


def _answer(ctx: _Ctx, inp: Any) -> Reply:
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
                matter=m.id,
            )
        )
    return Reply(ok=True, code="answered", message=f"card {c.id}: {chosen}")


def _tick(ctx: _Ctx, inp: Any) -> Reply:
    st = ctx.state
    fired = 0
    for tm in sorted(st.timers.values(), key=lambda x: (x.due, x.id)):
        if tm.fired or tm.due > ctx.at:
            continue
        ctx.emit(f.TimerFired(timer=tm.id, at=ctx.at))
        m = st.matters.get(tm.matter)
        ctx.record_event(
            Event(
                source="timer",
                id=tm.id,
                type="timer.fired",
                subject=m.subject if m else tm.matter,
                summary=tm.why,
                details={"timer": tm.id, "why": tm.why, "due": tm.due},
                hops=m.hops if m else tm.hops,
                matter=tm.matter,
            )
        )
        fired += 1
    expired = 0
    for t in sorted(st.turns.values(), key=lambda x: x.id):
        if t.state != "running" or not t.lease_until or t.lease_until > ctx.at:
            continue
        m = st.matters[t.matter]
        rule = ctx.rules.rule(t.rule) or Rule(name=t.rule, agent=t.agent)
        _failed(
            ctx,
            t,
            m,
            rule,
            AgentOutcome(started=True, ok=False, error=f"lease of worker {t.worker!r} expired"),
            outcome="lease_expired",
        )
        expired += 1
    return Reply(ok=True, code="ticked", data={"timers_fired": fired, "leases_expired": expired})


def _schedule(ctx: _Ctx, inp: Any) -> Reply:
    rule = ctx.rules.rule(inp.rule)
    if rule is None:
        return Reply(ok=False, code="unknown", message=f"no rule {inp.rule!r}")
    last = ctx.state.meta.ticks.get(rule.name)
    if last is not None and last >= inp.at:
        return Reply(ok=True, code="duplicate", message="already ticked")
    mid = matter_of(rule, rule.name)
    create = None
    if mid not in ctx.state.matters:
        create = (mid, rule.name, rule.name, session_of(mid))
    ctx.emit(f.ScheduleTicked(rule=rule.name, at=inp.at))
    fact = ctx.record_event(
        Event(
            source="schedule",
            id=f"{rule.name}@{inp.at}",
            type="schedule.tick",
            subject=rule.name,
            details={"rule": rule.name, "at": inp.at},
            matter=mid,
        ),
        create=create,
    )
    return Reply(ok=True, code="recorded", data={"seq": fact.seq})


def _delivered(ctx: _Ctx, inp: Any) -> Reply:
    if inp.card not in ctx.state.cards:
        return Reply(ok=False, code="unknown", message=f"no card {inp.card!r}")
    ctx.emit(f.CardDelivered(card=inp.card, channel=inp.channel, version=inp.version, ref=inp.ref))
    return Reply(ok=True, code="recorded")


def _action_tried(ctx: _Ctx, inp: Any) -> Reply:
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
        if a.claimed_by and a.claimed_by != inp.by and a.claim_until > ctx.at:
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


def _action_done(ctx: _Ctx, inp: Any) -> Reply:
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


def _owner_notice(ctx: _Ctx, inp: Any) -> Reply:
    if ctx.live_card(OWNER_MATTER, inp.key) is not None or any(
        c.key == inp.key and c.matter == OWNER_MATTER for c in ctx.state.cards.values()
    ):
        return Reply(ok=True, code="duplicate", message="the owner was told already")
    card = ctx.open_card(
        key=inp.key, matter=OWNER_MATTER, kind="notice", title=inp.title, text=inp.text
    )
    return Reply(ok=True, code="recorded", data={"card": card})


_HANDLERS: dict[type[Any], Any] = {
    Ingest: _ingest,
    Claim: _claim,
    Finish: _finish,
    Heartbeat: _heartbeat,
    Answer: _answer,
    Tick: _tick,
    ScheduleDue: _schedule,
    Delivered: _delivered,
    ActionTried: _action_tried,
    ActionDone: _action_done,
    OwnerNotice: _owner_notice,
}
