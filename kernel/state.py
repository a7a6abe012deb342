"""State as a fold over facts.

``State`` holds records by kind and id. It may be *partial*: the shell loads only the
records a decision needs (see :func:`kernel.step.needs`); the fold touches only the
records a fact names, so applying a fact to a partial state gives the same records as
applying it to the whole state. ``apply`` returns the (kind, id) pairs it changed, which
the store writes in the same transaction as the fact; a pair whose record is no longer
in the state (a waiting event that a turn took) is deleted.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from kernel import facts as f
from kernel.records import (
    Action,
    Card,
    EventRow,
    Matter,
    Meta,
    Queued,
    Record,
    Timer,
    Turn,
    queued_id,
)

Key = tuple[str, str]


@dataclass(slots=True)
class State:
    meta: Meta = field(default_factory=Meta)
    events: dict[int, EventRow] = field(default_factory=dict)
    matters: dict[str, Matter] = field(default_factory=dict)
    queued: dict[str, Queued] = field(default_factory=dict)
    turns: dict[str, Turn] = field(default_factory=dict)
    cards: dict[str, Card] = field(default_factory=dict)
    timers: dict[str, Timer] = field(default_factory=dict)
    actions: dict[str, Action] = field(default_factory=dict)
    # The highest event seq handed out. Not a record: a replay keeps it as it folds, and
    # the shell sets it from the store (the highest stored event row) before a decision.
    last_event: int = 0

    def put(self, rec: Record) -> Key:
        if isinstance(rec, Meta):
            self.meta = rec
        elif isinstance(rec, EventRow):
            self.events[rec.seq] = rec
            self.last_event = max(self.last_event, rec.seq)
        elif isinstance(rec, Matter):
            self.matters[rec.id] = rec
        elif isinstance(rec, Queued):
            self.queued[rec.id] = rec
        elif isinstance(rec, Turn):
            self.turns[rec.id] = rec
        elif isinstance(rec, Card):
            self.cards[rec.id] = rec
        elif isinstance(rec, Timer):
            self.timers[rec.id] = rec
        else:
            self.actions[rec.id] = rec
        return (rec.kind, rec.id)

    def get(self, key: Key) -> Record | None:
        kind, rid = key
        table: dict[Any, Any]
        if kind == "meta":
            return self.meta
        if kind == "event":
            return self.events.get(int(rid))
        tables: dict[str, dict[Any, Any]] = {
            "matter": self.matters,
            "queued": self.queued,
            "turn": self.turns,
            "card": self.cards,
            "timer": self.timers,
            "action": self.actions,
        }
        table = tables[kind]
        rec: Record | None = table.get(rid)
        return rec

    def records(self) -> list[Record]:
        out: list[Record] = [self.meta] if self.meta != Meta() else []
        out.extend(self.events[k] for k in sorted(self.events))
        tables: tuple[dict[str, Any], ...] = (
            self.matters,
            self.queued,
            self.turns,
            self.cards,
            self.timers,
            self.actions,
        )
        for table in tables:
            out.extend(table[k] for k in sorted(table))
        return out

    def pending_of(self, matter: str) -> tuple[int, ...]:
        """Seqs of the events waiting in ``matter`` (those loaded), in order."""
        return tuple(sorted(q.seq for q in self.queued.values() if q.matter == matter))

    def copy(self) -> State:
        return State(
            meta=self.meta,
            events=dict(self.events),
            matters=dict(self.matters),
            queued=dict(self.queued),
            turns=dict(self.turns),
            cards=dict(self.cards),
            timers=dict(self.timers),
            actions=dict(self.actions),
            last_event=self.last_event,
        )


def _r(rec: Any, **changes: Any) -> Any:
    return dataclasses.replace(rec, **changes)


class MissingRecord(Exception):  # a bug: the shell did not load what a fact needs
    pass


def _need(table: dict[str, Any], key: str, what: str) -> Any:
    try:
        return table[key]
    except KeyError:
        raise MissingRecord(f"{what} {key!r} is not loaded") from None


def apply(state: State, fact: f.Fact) -> set[Key]:
    """Fold one fact into ``state`` (in place); return the keys of records it changed."""
    touched: set[Key] = set()
    put = state.put
    meta = state.meta

    if isinstance(fact, f.EventRecorded):
        ev = fact.event
        touched.add(
            put(
                EventRow(
                    seq=fact.seq,
                    event=ev,
                    at=fact.at,
                    routes=fact.routes,
                    dispatched=fact.dispatched,
                    reason=fact.reason,
                )
            )
        )
        for mid, rule, subject, session in fact.new_matters:
            if mid not in state.matters:
                touched.add(put(Matter(id=mid, rule=rule, subject=subject, session=session)))
        for mid in fact.routes:
            m = _need(state.matters, mid, "matter")
            touched.add(put(Queued(matter=mid, seq=fact.seq)))
            if not m.waiting:
                touched.add(put(_r(m, waiting=True)))
        return touched

    if isinstance(fact, f.TurnStarted):
        m = _need(state.matters, fact.matter, "matter")
        n = int(fact.turn.lstrip("t")) if fact.turn.lstrip("t").isdigit() else meta.turns + 1
        touched.add(put(_r(state.meta, turns=max(meta.turns, n))))
        if fact.kind == "repair":
            m = _r(m, repair=None)
        else:
            # A claim takes every event waiting in the matter (the shell loads them all).
            for seq in fact.events:
                qid = queued_id(fact.matter, seq)
                if state.queued.pop(qid, None) is not None:
                    touched.add(("queued", qid))  # gone: the store deletes it
            m = _r(m, waiting=False, retry=() if fact.kind == "retry" else m.retry)
        touched.add(put(_r(m, running=fact.turn, hops=fact.hops, turns=m.turns + 1)))
        touched.add(
            put(
                Turn(
                    id=fact.turn,
                    matter=fact.matter,
                    rule=fact.rule,
                    agent=fact.agent,
                    worker=fact.worker,
                    kind_=fact.kind,
                    events=fact.events,
                    hops=fact.hops,
                    session=fact.session,
                    resume=fact.resume,
                    rules_version=fact.rules_version,
                    fence=fact.fence,
                    lease_until=fact.lease_until,
                    started_at=fact.at,
                    repair_of=fact.repair_of,
                )
            )
        )
        return touched

    if isinstance(fact, f.LeaseRenewed):
        t = _need(state.turns, fact.turn, "turn")
        touched.add(put(_r(t, lease_until=fact.lease_until)))
        return touched

    if isinstance(fact, f.TurnFinished):
        t = _need(state.turns, fact.turn, "turn")
        m = _need(state.matters, fact.matter, "matter")
        ok = fact.outcome in ("ok", "no_receipt", "malformed", "refused")
        touched.add(
            put(
                _r(
                    t,
                    state="done" if ok else "failed",
                    ended_at=fact.at,
                    outcome=fact.outcome,
                    agent_session=fact.agent_session,
                    cost_usd=fact.cost_usd,
                    tokens=fact.tokens,
                    error=fact.error,
                    receipt=fact.receipt,
                    lease_until="",
                )
            )
        )
        agent_session = m.agent_session
        if fact.agent_session and fact.keep_session:
            agent_session = fact.agent_session
        if not fact.keep_session:
            agent_session = None
        repair = fact.turn if fact.repair else m.repair
        if fact.retry and t.kind_ == "repair" and t.repair_of:
            repair = t.repair_of  # a repair that failed to run is still owed: try it again
        m = _r(
            m,
            running=None if m.running == fact.turn else m.running,
            agent_session=agent_session,
            repair=repair,
            retry=(*m.retry, *t.events) if fact.retry else m.retry,
            failures=m.failures + 1 if fact.retry else 0,
        )
        touched.add(put(m))
        return touched

    if isinstance(fact, f.ReceiptRefused):
        t = state.turns.get(fact.turn)
        if t is not None:
            touched.add(put(_r(t, refused=(*t.refused, f"fence {fact.fence}: {fact.reason}"))))
        return touched

    if isinstance(fact, f.CardOpened):
        n = int(fact.card.lstrip("c")) if fact.card.lstrip("c").isdigit() else meta.cards + 1
        touched.add(put(_r(state.meta, cards=max(meta.cards, n))))
        touched.add(
            put(
                Card(
                    id=fact.card,
                    key=fact.key,
                    matter=fact.matter,
                    kind_=fact.kind,
                    title=fact.title,
                    text=fact.text,
                    options=fact.options,
                    turn=fact.turn,
                    hops=fact.hops,
                    opened_at=fact.at,
                    action=fact.action,
                )
            )
        )
        if fact.turn and fact.turn in state.turns:
            t = state.turns[fact.turn]
            touched.add(put(_r(t, cards=(*t.cards, fact.card))))
        return touched

    if isinstance(fact, f.CardUpdated):
        c = _need(state.cards, fact.card, "card")
        touched.add(
            put(
                _r(
                    c,
                    title=fact.title,
                    text=fact.text,
                    options=fact.options,
                    version=c.version + 1,
                    turn=fact.turn or c.turn,
                )
            )
        )
        if fact.turn and fact.turn in state.turns:
            t = state.turns[fact.turn]
            touched.add(put(_r(t, cards=(*t.cards, fact.card))))
        return touched

    if isinstance(fact, f.CardAnswered):
        c = _need(state.cards, fact.card, "card")
        touched.add(
            put(
                _r(
                    c,
                    state="decided",
                    choice=fact.choice,
                    answered_by=fact.by,
                    answered_via=fact.via,
                    version=c.version + 1,
                )
            )
        )
        return touched

    if isinstance(fact, f.CardResolved):
        c = _need(state.cards, fact.card, "card")
        state_ = "done" if c.kind_ == "ask" else "closed"
        touched.add(put(_r(c, state=state_, version=c.version + 1)))
        return touched

    if isinstance(fact, f.CardDelivered):
        c = _need(state.cards, fact.card, "card")
        delivered = dict(c.delivered)
        delivered[fact.channel] = {"version": fact.version, "ref": fact.ref}
        touched.add(put(_r(c, delivered=delivered)))
        return touched

    if isinstance(fact, f.TimerArmed):
        touched.add(
            put(
                Timer(
                    id=fact.timer,
                    matter=fact.matter,
                    due=fact.due,
                    why=fact.why,
                    hops=fact.hops,
                    turn=fact.turn,
                )
            )
        )
        if fact.turn and fact.turn in state.turns:
            t = state.turns[fact.turn]
            touched.add(put(_r(t, timers=(*t.timers, fact.timer))))
        return touched

    if isinstance(fact, f.TimerFired):
        tm = _need(state.timers, fact.timer, "timer")
        touched.add(put(_r(tm, fired=True)))
        return touched

    if isinstance(fact, f.ScheduleTicked):
        ticks = dict(meta.ticks)
        ticks[fact.rule] = fact.at
        touched.add(put(_r(meta, ticks=ticks)))
        return touched

    if isinstance(fact, f.ActionRequested):
        touched.add(
            put(
                Action(
                    id=fact.action,
                    matter=fact.matter,
                    turn=fact.turn,
                    do=fact.do,
                    params=fact.params,
                    status=fact.status,
                    card=fact.card,
                    error=fact.error,
                )
            )
        )
        if fact.turn in state.turns:
            t = state.turns[fact.turn]
            touched.add(put(_r(t, actions=(*t.actions, fact.action))))
        return touched

    if isinstance(fact, f.ActionDecided):
        a = _need(state.actions, fact.action, "action")
        touched.add(put(_r(a, status="allowed" if fact.approved else "declined")))
        return touched

    if isinstance(fact, f.ActionAttempted):
        a = _need(state.actions, fact.action, "action")
        if fact.error:  # a failed attempt: the error is recorded and the claim released
            a = _r(a, attempts=a.attempts + 1, error=fact.error, claimed_by="", claim_until="")
        else:
            a = _r(a, attempts=a.attempts + 1, claimed_by=fact.by, claim_until=fact.until)
        touched.add(put(a))
        return touched

    if isinstance(fact, f.ActionCompleted):
        a = _need(state.actions, fact.action, "action")
        touched.add(
            put(
                _r(
                    a,
                    status="done" if fact.ok else "failed",
                    result=fact.result,
                    error=fact.error,
                    claimed_by="",
                    claim_until="",
                )
            )
        )
        return touched

    raise TypeError(f"unknown fact {type(fact).__name__}")  # a bug, not a domain outcome


def replay(facts: list[f.Fact]) -> State:
    state = State()
    for fact in facts:
        apply(state, fact)
    return state
