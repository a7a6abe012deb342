"""State as a fold over facts: one small function per fact type, in the table ``FOLD``.

``State`` (defined beside its records in :mod:`kernel.records`) may be *partial*: the
shell loads only the records a decision needs (:func:`kernel.step.needs`); the fold
touches only the records a fact names, so applying a fact to a partial state gives the
same records as applying it to the whole state. ``apply`` returns the (kind, id) pairs
it changed, which the store writes in the same transaction as the fact; a pair whose
record is no longer in the state (a waiting event that a turn took) is deleted.

Records move through :func:`kernel.lifecycle.move`: a move a table lacks is IllegalMove.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from kernel import facts as f
from kernel.errors import IllegalMove, MissingRecord, NoFold
from kernel.lifecycle import NEW, card_table, move
from kernel.pipeline_state import pipeline_advanced, pipeline_woken
from kernel.records import (
    Action,
    Card,
    EventRow,
    Key,
    Matter,
    Queued,
    State,
    Timer,
    Turn,
    queued_id,
)

__all__ = ["FOLD", "Key", "State", "apply", "replay"]
_event_key = f.event_key  # every event passes here: one lookup fewer


_r = dataclasses.replace  # a record with some fields changed


def _need(table: dict[str, Any], key: str, what: str) -> Any:
    try:
        return table[key]
    except KeyError:
        raise MissingRecord(what, key) from None


def _now(table: Mapping[str, Turn | Card | Timer | Action], rid: str) -> str:
    """Where a record a fact creates is now: NEW, unless it is there already."""
    rec = table.get(rid)
    if rec is None:
        return NEW
    if isinstance(rec, Timer):
        return "fired" if rec.fired else "armed"
    return rec.status if isinstance(rec, Action) else rec.state


def _attach(st: State, turn: str | None, fact: str, **lists: str) -> set[Key]:
    """A card, timer or action that hangs off ``turn`` (when it is loaded)."""
    t = st.turns.get(turn) if turn else None
    if t is None:
        return set()
    move("turn", t.id, t.state, fact)
    changes = {name: (*getattr(t, name), value) for name, value in lists.items()}
    return {st.put(_r(t, **changes))}


# ------------------------------------------------------------------- one per fact


def _event_recorded(st: State, fact: f.EventRecorded) -> set[Key]:
    st.seen_keys.add(_event_key(fact.event))  # the same (source, id) again: a duplicate
    if fact.content_key:  # and the same content under another id
        st.seen_keys.add(f.content_key(fact.content_key))
    touched = {
        st.put(
            EventRow(
                seq=fact.seq,
                event=fact.event,
                at=fact.at,
                routes=fact.routes,
                dispatched=fact.dispatched,
                reason=fact.reason,
            )
        )
    }
    for mid, rule, subject, session in fact.new_matters:
        if mid not in st.matters:
            move("matter", mid, NEW, "EventRecorded")
            touched.add(st.put(Matter(id=mid, rule=rule, subject=subject, session=session)))
    for mid in fact.routes:
        m = _need(st.matters, mid, "matter")
        move("matter", mid, m.phase, "EventRecorded")
        touched.add(st.put(Queued(matter=mid, seq=fact.seq)))
        if not m.waiting:
            touched.add(st.put(_r(m, waiting=True, since=fact.seq)))
    return touched


def _turn_started(st: State, fact: f.TurnStarted) -> set[Key]:
    m = _need(st.matters, fact.matter, "matter")
    move("matter", m.id, m.phase, "TurnStarted")
    touched: set[Key] = set()
    meta = st.meta
    n = int(fact.turn.lstrip("t")) if fact.turn.lstrip("t").isdigit() else meta.turns + 1
    touched.add(st.put(_r(meta, turns=max(meta.turns, n))))
    if fact.kind == "repair":
        m = _r(m, repair=None)
    else:
        # A claim takes every event waiting in the matter (the shell loads them all).
        for seq in fact.events:
            qid = queued_id(fact.matter, seq)
            if st.queued.pop(qid, None) is not None:
                touched.add(("queued", qid))  # gone: the store deletes it
        m = _r(m, waiting=False, retry=() if fact.kind == "retry" else m.retry)
    touched.add(
        st.put(
            _r(
                m,
                running=fact.turn,
                hops=fact.hops,
                chain=fact.chain,
                turns=m.turns + 1,
                retry_after="",
            )
        )
    )
    touched.add(
        st.put(
            Turn(
                id=fact.turn,
                matter=fact.matter,
                rule=fact.rule,
                agent=fact.agent,
                worker=fact.worker,
                kind_=fact.kind,
                state=move("turn", fact.turn, _now(st.turns, fact.turn), "TurnStarted"),
                events=fact.events,
                hops=fact.hops,
                session=fact.session,
                resume=fact.resume,
                rules_version=fact.rules_version,
                fence=fact.fence,
                lease_until=fact.lease_until,
                started_at=fact.at,
                repair_of=fact.repair_of,
                chain=fact.chain,
            )
        )
    )
    return touched


def _lease_renewed(st: State, fact: f.LeaseRenewed) -> set[Key]:
    t = _need(st.turns, fact.turn, "turn")
    move("turn", t.id, t.state, "LeaseRenewed")
    return {st.put(_r(t, lease_until=fact.lease_until))}


def _turn_finished(st: State, fact: f.TurnFinished) -> set[Key]:
    t = _need(st.turns, fact.turn, "turn")
    m = _need(st.matters, fact.matter, "matter")
    if m.running != fact.turn:  # the table cannot say whose turn it was: this can
        raise IllegalMove(table="matter", record=m.id, state=str(m.running), fact="TurnFinished")
    move("matter", m.id, m.phase, "TurnFinished")
    touched = {
        st.put(
            _r(
                t,
                state=move("turn", t.id, t.state, f"TurnFinished:{fact.outcome}"),
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
    }
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
        running=None,
        agent_session=agent_session,
        repair=repair,
        retry=(*m.retry, *t.events) if fact.retry else m.retry,
        failures=m.failures + 1 if fact.retry else 0,
        retry_after=fact.retry_at if fact.retry else "",
    )
    touched.add(st.put(m))
    return touched


def _receipt_refused(st: State, fact: f.ReceiptRefused) -> set[Key]:
    t = st.turns.get(fact.turn)
    if t is None:
        return set()
    move("turn", t.id, t.state, "ReceiptRefused")
    return {st.put(_r(t, refused=(*t.refused, f"fence {fact.fence}: {fact.reason}")))}


def _card_opened(st: State, fact: f.CardOpened) -> set[Key]:
    meta = st.meta
    n = int(fact.card.lstrip("c")) if fact.card.lstrip("c").isdigit() else meta.cards + 1
    touched = {st.put(_r(meta, cards=max(meta.cards, n)))}
    touched.add(
        st.put(
            Card(
                id=fact.card,
                key=fact.key,
                matter=fact.matter,
                kind_=fact.kind,
                state=move(
                    card_table(fact.kind), fact.card, _now(st.cards, fact.card), "CardOpened"
                ),
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
    return touched | _attach(st, fact.turn, "CardOpened", cards=fact.card)


def _card_updated(st: State, fact: f.CardUpdated) -> set[Key]:
    c = _need(st.cards, fact.card, "card")
    move(card_table(c.kind_), c.id, c.state, "CardUpdated")
    touched = {
        st.put(
            _r(
                c,
                title=fact.title,
                text=fact.text,
                options=fact.options,
                version=c.version + 1,
                turn=fact.turn or c.turn,
            )
        )
    }
    return touched | _attach(st, fact.turn, "CardUpdated", cards=fact.card)


def _card_answered(st: State, fact: f.CardAnswered) -> set[Key]:
    c = _need(st.cards, fact.card, "card")
    return {
        st.put(
            _r(
                c,
                state=move(card_table(c.kind_), c.id, c.state, "CardAnswered"),
                choice=fact.choice,
                answered_by=fact.by,
                answered_via=fact.via,
                version=c.version + 1,
            )
        )
    }


def _card_resolved(st: State, fact: f.CardResolved) -> set[Key]:
    c = _need(st.cards, fact.card, "card")
    state = move(card_table(c.kind_), c.id, c.state, "CardResolved")
    return {st.put(_r(c, state=state, version=c.version + 1))}


def _card_delivered(st: State, fact: f.CardDelivered) -> set[Key]:
    c = _need(st.cards, fact.card, "card")
    move(card_table(c.kind_), c.id, c.state, "CardDelivered")
    delivered = dict(c.delivered)
    delivered[fact.channel] = {"version": fact.version, "ref": fact.ref}
    return {st.put(_r(c, delivered=delivered))}


def _timer_armed(st: State, fact: f.TimerArmed) -> set[Key]:
    move("timer", fact.timer, _now(st.timers, fact.timer), "TimerArmed")
    timer = Timer(
        id=fact.timer,
        matter=fact.matter,
        due=fact.due,
        why=fact.why,
        hops=fact.hops,
        turn=fact.turn,
        chain=fact.chain,
    )
    return {st.put(timer)} | _attach(st, fact.turn, "TimerArmed", timers=fact.timer)


def _timer_fired(st: State, fact: f.TimerFired) -> set[Key]:
    tm = _need(st.timers, fact.timer, "timer")
    move("timer", tm.id, "fired" if tm.fired else "armed", "TimerFired")
    return {st.put(_r(tm, fired=True))}


def _schedule_ticked(st: State, fact: f.ScheduleTicked) -> set[Key]:
    ticks = dict(st.meta.ticks)
    ticks[fact.rule] = fact.at
    return {st.put(_r(st.meta, ticks=ticks))}


def _action_requested(st: State, fact: f.ActionRequested) -> set[Key]:
    action = Action(
        id=fact.action,
        matter=fact.matter,
        turn=fact.turn,
        do=fact.do,
        params=fact.params,
        status=move(
            "action", fact.action, _now(st.actions, fact.action), f"ActionRequested:{fact.status}"
        ),
        card=fact.card,
        error=fact.error,
    )
    return {st.put(action)} | _attach(st, fact.turn, "ActionRequested", actions=fact.action)


def _action_decided(st: State, fact: f.ActionDecided) -> set[Key]:
    a = _need(st.actions, fact.action, "action")
    label = "ActionDecided:approved" if fact.approved else "ActionDecided:declined"
    return {st.put(_r(a, status=move("action", a.id, a.status, label)))}


def _action_attempted(st: State, fact: f.ActionAttempted) -> set[Key]:
    a = _need(st.actions, fact.action, "action")
    move("action", a.id, a.status, "ActionAttempted")
    if fact.error:  # a failed attempt: the error is recorded and the claim released
        a = _r(a, attempts=a.attempts + 1, error=fact.error, claimed_by="", claim_until="")
    else:
        a = _r(a, attempts=a.attempts + 1, claimed_by=fact.by, claim_until=fact.until)
    return {st.put(a)}


def _action_completed(st: State, fact: f.ActionCompleted) -> set[Key]:
    a = _need(st.actions, fact.action, "action")
    label = "ActionCompleted:ok" if fact.ok else "ActionCompleted:failed"
    return {
        st.put(
            _r(
                a,
                status=move("action", a.id, a.status, label),
                result=fact.result,
                error=fact.error,
                claimed_by="",
                claim_until="",
            )
        )
    }


# ------------------------------------------------------------------------ the table

Fold = Callable[[State, Any], set[Key]]
FactT = TypeVar("FactT")


def _row(fact: type[FactT], fold: Callable[[State, FactT], set[Key]]) -> tuple[type[Any], Fold]:
    """One row of :data:`FOLD`; mypy checks that ``fold`` takes facts of type ``fact``."""
    return fact, fold


FOLD: Mapping[type[Any], Fold] = dict(
    (
        _row(f.EventRecorded, _event_recorded),
        _row(f.TurnStarted, _turn_started),
        _row(f.LeaseRenewed, _lease_renewed),
        _row(f.TurnFinished, _turn_finished),
        _row(f.ReceiptRefused, _receipt_refused),
        _row(f.CardOpened, _card_opened),
        _row(f.CardUpdated, _card_updated),
        _row(f.CardAnswered, _card_answered),
        _row(f.CardResolved, _card_resolved),
        _row(f.CardDelivered, _card_delivered),
        _row(f.TimerArmed, _timer_armed),
        _row(f.TimerFired, _timer_fired),
        _row(f.ScheduleTicked, _schedule_ticked),
        _row(f.ActionRequested, _action_requested),
        _row(f.ActionDecided, _action_decided),
        _row(f.ActionAttempted, _action_attempted),
        _row(f.ActionCompleted, _action_completed),
        _row(f.PipelineAdvanced, pipeline_advanced),
        _row(f.PipelineWoken, pipeline_woken),
    )
)


def apply(state: State, fact: f.Fact) -> set[Key]:
    """Fold one fact into ``state`` (in place); return the keys of records it changed.

    Raises a :class:`~kernel.errors.KernelBug` for a fact that breaks a lifecycle table,
    names a record that is not loaded, or has no fold function."""
    fold = FOLD.get(type(fact))
    if fold is None:
        raise NoFold(type(fact).__name__)
    return fold(state, fact)


def replay(facts: Iterable[f.Fact]) -> State:
    state = State()
    for fact in facts:
        apply(state, fact)
    return state
